// The test kit given a real database (durable::testing::harness_options::database): example 01's
// workflow crashed at every step, its transactional step committed on the server, and the
// exactly-once claim of a transactional step checked by a unique key that a second commit
// would violate.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "01_classify_document.hpp"
#include "durable.hpp"
#include "durable/testing.hpp"
#include "support/db.hpp"
#include "support/workflows.hpp"

using namespace durable;
namespace dt = durable::testing;

namespace {

/// The classification service of example 01, faked: it counts the calls per key.
class counting_classifier final : public classify_example::classifier {
public:
  std::map<std::string, int> calls;
  asio::awaitable<std::string> classify(std::string key, std::string text) override {
    ++calls[key];
    co_return text.starts_with("Invoice") ? "invoice" : "other";
  }
};

/// Runs each statement of `sql` on the test server.
void exec(const std::vector<std::string>& sql) {
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    for (const auto& s : sql) co_await c->exec(s);
  }());
}

long count(const std::string& sql) {
  return test::run([&]() -> asio::awaitable<long> {
    auto c = co_await pg::connection::connect(test::conninfo());
    auto r = co_await c->exec(sql);
    co_return r[0].get<long>(0);
  }());
}

}  // namespace

TEST_CASE("kit: example 01's workflow survives a crash at every step, its SQL on a real server",
          "[kit][examples]") {
  exec({"CREATE SCHEMA IF NOT EXISTS demo",
        "CREATE TABLE IF NOT EXISTS demo.classifications (doc_id text, rule_version text, "
        "label text, UNIQUE (doc_id, rule_version))",
        "DELETE FROM demo.classifications WHERE doc_id = 'doc-42'"});
  counting_classifier service;
  classify_example::service = &service;
  dt::harness_options o;
  o.database = test::conninfo();
  dt::harness h(o);
  h.register_workflow("classify_document", classify_example::classify_document);
  dt::crash_options co;
  co.id = "doc-42";
  const dt::crash_report r = dt::check_crashes(h, co, "classify_document", std::string("doc-42"));
  INFO(r.summary());
  CHECK(r.ok());
  CHECK(r.outcome == "\"invoice\"");
  // 3 rows, two interruptions each, a backoff case for the one step that retries (classify;
  // read has no retry policy, store is a transaction) and the end of the workflow.
  CHECK(r.cases.size() == 3 * 2 + 1 + 1);
  // The classifier was asked again only where its reply was lost or its attempt failed.
  for (const auto& s : r.steps)
    if (s.step == "classify") CHECK(s.most == 2);
  CHECK(count("SELECT count(*) FROM demo.classifications WHERE doc_id = 'doc-42'") == 1);
  classify_example::service = nullptr;
}

TEST_CASE("kit: a transactional step commits exactly once however the process dies around it",
          "[kit]") {
  const std::string schema = test::fresh_schema("kit");
  exec({"CREATE SCHEMA " + schema,
        "CREATE TABLE " + schema + ".ledger (run int, entry text, UNIQUE (run, entry))"});
  static int run_no = 0;
  dt::harness_options o;
  o.database = test::conninfo();
  dt::harness h(o);
  const std::string table = schema + ".ledger";
  h.register_workflow("pay", [table](context& ctx, int run) -> asio::awaitable<int> {
    co_await ctx.step("quote", [] { return 12; });
    // A second commit of this INSERT for one run would violate the unique key and fail the
    // step: the case's result would then differ from the uninterrupted run's.
    co_await ctx.transaction("book", [&](pg::transaction& tx) -> asio::awaitable<void> {
      co_await tx.exec("INSERT INTO " + table + " (run, entry) VALUES ($1, 'book')", run);
    });
    co_return co_await ctx.step("receipt", [] { return 7; });
  });
  dt::crash_options co;
  // Every case gets a run number of its own (the workflow is started once per case).
  struct numbered {
    static void start(dt::harness& x, const std::string& id) { x.start("pay", id, ++run_no); }
  };
  const dt::crash_report r = dt::check_crashes_with(h, co, "pay", numbered::start);
  INFO(r.summary());
  CHECK(r.ok());
  CHECK(r.cases.size() == 3 * 2 + 1);  // no step retries: no backoff case; the end
  // One committed booking per case and one for the uninterrupted run: none twice, none lost.
  CHECK(count("SELECT count(*) FROM " + table) == long(r.cases.size()) + 1);
  CHECK(count("SELECT count(DISTINCT run) FROM " + table) == long(r.cases.size()) + 1);
}

// ---- durable export, durable import, durable::testing::replay --------------------------------

#if defined(DURABLE_CLI_PATH)

namespace {

int steps_run = 0;  // how often pipeline's "fetch" function ran

/// The workflow under test, as deployed (v1), and a later version that renamed step 5 (v2).
asio::awaitable<std::string> pipeline(context& ctx, const std::string& doc, bool renamed) {
  const int n = co_await ctx.step("fetch", [&] {
    ++steps_run;
    return int(doc.size());
  });
  auto child = co_await ctx.start_child("part", n);
  const int part = co_await child.result<int>();
  const auto approved = co_await ctx.recv<std::string>("approval");
  co_await ctx.step(renamed ? "summarise" : "summarize", [] { return 1; });
  co_return doc + ":" + std::to_string(part) + ":" + approved.value_or("none");
}
asio::awaitable<std::string> pipeline_v1(context& ctx, std::string doc) {
  co_return co_await pipeline(ctx, doc, false);
}
asio::awaitable<std::string> pipeline_v2(context& ctx, std::string doc) {
  co_return co_await pipeline(ctx, doc, true);
}

asio::awaitable<int> part(context& ctx, int n) {
  co_return co_await ctx.step("double", [n] { return 2 * n; });
}

void register_v1(engine& e) {
  e.register_workflow("pipeline", pipeline_v1);
  e.register_workflow("part", part);
}

/// Runs the `durable` program with `args` (the database from DURABLE_DATABASE_URL); its exit
/// status.
int durable_cli(const std::string& args) {
  const std::string command =
      std::string(DURABLE_CLI_PATH) + " " + args + " > /tmp/kit-cli.out 2>&1";
  const int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("kit: an exported journal replays clean, and names the step a later version renamed",
          "[kit][export]") {
  const std::string schema = test::fresh_schema("export");
  const std::string file = "/tmp/" + schema + ".json";
  test::with_open_engine(test::options(schema), register_v1,
                         [](engine& eng) -> asio::awaitable<void> {
                           auto h = co_await eng.start("pipeline", "p-1", std::string("doc"));
                           (void)co_await eng.send("p-1", "approval", std::string("ok"));
                           (void)co_await h.result<std::string>();
                         });
  REQUIRE(durable_cli("--schema " + schema + " export p-1 --children -o " + file) == 0);
  const auto doc = nlohmann::json::parse(slurp(file));
  CHECK(doc["format"] == "durable.journal");
  CHECK(doc["version"] == 1);
  REQUIRE(doc["workflows"].size() == 2);  // the pipeline and its part, parent first
  CHECK(doc["workflows"][0]["id"] == "p-1");
  CHECK(doc["workflows"][0]["steps"].size() == 5);

  dt::harness same;
  same.register_workflow("pipeline", pipeline_v1);
  same.register_workflow("part", part);
  const dt::replay_report ok = dt::replay(file, same);
  INFO(ok.summary());
  CHECK(ok.ok());
  CHECK(ok.workflows.size() == 2);

  dt::harness later;
  later.register_workflow("pipeline", pipeline_v2);
  later.register_workflow("part", part);
  const dt::replay_report bad = dt::replay(file, later);
  INFO(bad.summary());
  REQUIRE_FALSE(bad.ok());
  const dt::replay_result* m = bad.mismatch();
  REQUIRE(m);
  CHECK(m->workflow_id == "p-1");
  CHECK(m->seq == 5);  // fetch 0, child 1, its result 2, recv 3 and 4, summarize 5
  CHECK(m->journaled == "'summarize'");
  CHECK(m->requested == "'summarise'");
  CHECK_THAT(m->message, Catch::Contains("ctx.patched") && Catch::Contains("--from-step 5"));
  CHECK_THROWS_WITH(dt::replay("/nonexistent.json", same), Catch::Contains("cannot open"));
}

TEST_CASE("kit: durable import loads a journal into another schema, and resume finishes it",
          "[kit][export]") {
  const std::string from = test::fresh_schema("from");
  const std::string to = test::fresh_schema("to");
  const std::string file = "/tmp/" + from + ".json";
  steps_run = 0;
  // In the first schema the pipeline stops at its recv, its first three steps journaled.
  test::with_open_engine(
      test::options(from), register_v1, [](engine& eng) -> asio::awaitable<void> {
        // In a trace, which the import keeps (the child's too).
        const start_options so{
            .timeout = {},
            .traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            .tracestate = "rojo=1"};
        (void)co_await eng.start(so, "pipeline", "p-2", std::string("text"));
        co_await test::wait_rows(eng, "p-2", 3);
      });
  REQUIRE(steps_run == 1);
  REQUIRE(durable_cli("--schema " + from + " export p-2 --children -o " + file) == 0);
  REQUIRE(durable_cli("--schema " + to + " migrate") == 0);
  REQUIRE(durable_cli("--schema " + to + " import " + file + " --id staged") == 0);
  CHECK_THAT(slurp("/tmp/kit-cli.out"), Catch::Contains("parked"));
  // Importing it again is refused, and changes nothing.
  CHECK(durable_cli("--schema " + to + " import " + file + " --id staged") == 1);
  CHECK_THAT(slurp("/tmp/kit-cli.out"), Catch::Contains("exists already"));
  CHECK(durable_cli("--schema " + to + " import /dev/null") == 2);
  // Each import is in the audit (what was loaded, how many workflows), the refused one too; a
  // file that is no export leaves no row.
  REQUIRE(durable_cli("--schema " + to + " --json audit --action import") == 0);
  const auto audit = nlohmann::json::parse(slurp("/tmp/kit-cli.out"));
  REQUIRE(audit.size() == 2);
  CHECK(audit[1]["result"] == "done");  // newest first
  CHECK(audit[1]["target"]["root"] == "p-2");
  CHECK(audit[1]["target"]["new_id"] == "staged");
  CHECK(audit[1]["count"] == 2);  // the pipeline and its child
  CHECK(audit[0]["result"] == "refused");
  REQUIRE(durable_cli("--schema " + to + " resume staged") == 0);
  test::with_open_engine(test::options(to), register_v1, [](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.send("staged", "approval", std::string("yes"));
    (void)co_await test::wait_status(eng, "staged", "succeeded");
  });
  // The journaled steps were replayed from the import, not run again; the child's id moved
  // with its parent.
  CHECK(steps_run == 1);
  REQUIRE(durable_cli("--schema " + to + " --json show staged") == 0);
  const auto shown = nlohmann::json::parse(slurp("/tmp/kit-cli.out"));
  CHECK(shown["workflow"]["output"] == "text:8:yes");
  REQUIRE(shown["children"].size() == 1);
  CHECK(shown["children"][0]["id"].get<std::string>().rfind("staged/", 0) == 0);
  CHECK(shown["workflow"]["traceparent"] ==
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  CHECK(shown["workflow"]["tracestate"] == "rojo=1");
  REQUIRE(durable_cli("--schema " + to + " --json show " +
                      shown["children"][0]["id"].get<std::string>()) == 0);
  const auto child = nlohmann::json::parse(slurp("/tmp/kit-cli.out"));
  CHECK(child["workflow"]["traceparent"].get<std::string>().rfind(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-", 0) == 0);
}

#endif
