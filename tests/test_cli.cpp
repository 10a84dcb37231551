// The `durable` command-line program (issue 11), run as a real process against the real server:
// every verb's table output, --json, exit status, bad arguments and unknown ids, and the on-call
// story of docs/operations.md (find a failed workflow, see why, fix, retry) with the program alone.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include <durable/store.hpp>

#include "support/prometheus.hpp"
#include "support/workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::wait_status;
using json = nlohmann::json;

namespace {

struct cli_result {
  int status = -1;
  std::string out, err;
  [[nodiscard]] json parsed() const {
    try {
      return json::parse(out);
    } catch (const std::exception& e) {
      FAIL("stdout is not JSON (" << e.what() << "):\n" << out << "\nstderr:\n" << err);
      return {};
    }
  }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Runs the program `argv_s[0]` with `argv_s` (and DURABLE_DATABASE_URL from this process),
/// `input` (when given) written to its standard input through a pipe, waits for it, and
/// returns its exit status, stdout and stderr.
cli_result run_program(const std::vector<std::string>& argv_in, const std::string* input) {
  char out_path[] = "/tmp/durable-cli-out-XXXXXX";
  char err_path[] = "/tmp/durable-cli-err-XXXXXX";
  const int out_fd = ::mkstemp(out_path);
  const int err_fd = ::mkstemp(err_path);
  REQUIRE(out_fd >= 0);
  REQUIRE(err_fd >= 0);
  std::vector<std::string> argv_s = argv_in;
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  int in_pipe[2] = {-1, -1};
  if (input) REQUIRE(::pipe(in_pipe) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (input) {
      ::dup2(in_pipe[0], 0);
      ::close(in_pipe[0]);
      ::close(in_pipe[1]);
    }
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  if (input) {
    // The program may refuse before it reads everything: no SIGPIPE for this process then.
    const auto previous = ::signal(SIGPIPE, SIG_IGN);
    ::close(in_pipe[0]);
    for (std::size_t at = 0; at < input->size();) {
      const ssize_t n = ::write(in_pipe[1], input->data() + at, input->size() - at);
      if (n <= 0) break;
      at += std::size_t(n);
    }
    ::close(in_pipe[1]);
    ::signal(SIGPIPE, previous);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(out_fd);
  ::close(err_fd);
  cli_result r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  ::unlink(out_path);
  ::unlink(err_path);
  INFO("durable " <<
       [&] {
         std::string all;
         for (const auto& a : argv_in) all += a + " ";
         return all;
       }() << "\nstdout:\n"
                  << r.out.substr(0, 4000) << "\nstderr:\n"
                  << r.err);
  // Never a crash, a stack trace or an uncaught exception, whatever the outcome.
  CHECK(r.status < 128);
  CHECK(r.err.find("terminate called") == std::string::npos);
  CHECK(r.err.find("what()") == std::string::npos);
  return r;
}

/// Runs build/bin/durable with `args`; `input` (when given) is its standard input.
cli_result cli(const std::vector<std::string>& args, const std::string* input = nullptr) {
  std::vector<std::string> argv_s{DURABLE_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  return run_program(argv_s, input);
}

/// cli() with --schema first.
cli_result cli_in(const std::string& schema, std::initializer_list<std::string> args) {
  std::vector<std::string> all{"--schema", schema};
  all.insert(all.end(), args.begin(), args.end());
  return cli(all);
}

/// cli_in() with `input` as the program's standard input.
cli_result cli_in_with(const std::string& schema, std::initializer_list<std::string> args,
                       const std::string& input) {
  std::vector<std::string> all{"--schema", schema};
  all.insert(all.end(), args.begin(), args.end());
  return cli(all, &input);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- workflows under test

struct cli_knobs {
  bool charge_fixed = false;  // the "charge" step fails for good until an operator fixes it
};
cli_knobs ck;

asio::awaitable<std::string> order_wf(context& ctx, std::string order) {
  co_await ctx.step("reserve", [] { return 1; });
  const retry twice{.max_attempts = 2, .initial = 10ms};
  const std::string paid = co_await ctx.step(
      "charge",
      [] {
        if (!ck.charge_fixed) throw std::runtime_error("card declined: gateway said \"no\"");
        return std::string("paid");
      },
      twice);
  co_return order + ":" + paid;
}

asio::awaitable<std::string> inbox_wf(context& ctx) {
  co_await ctx.step("first", [] { return 1; });
  const auto m = co_await ctx.recv<json>("go", 60s);
  co_await ctx.step("last", [] { return 2; });
  co_return m ? m->dump() : std::string("timeout");
}

void register_cli(engine& eng) {
  eng.register_workflow("order", &order_wf);
  eng.register_workflow("inbox", &inbox_wf);
}

template <class Body>
void with_cli_engine(const std::string& schema, Body body) {
  auto o = test::options(schema, "exec-cli");
  o.heartbeat_interval = 100ms;
  o.poll_interval = 100ms;
  test::with_open_engine(o, &register_cli, body);
}

asio::awaitable<void> migrated(std::string_view schema_view) {
  const std::string schema(schema_view);
  auto o = test::options(schema);
  engine eng(co_await asio::this_coro::executor, o);
  (void)co_await eng.migrate();
}

}  // namespace

TEST_CASE("cli: a dead-lettered workflow is found, explained, fixed and retried with the CLI alone",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_story");
  ck = {};
  const std::string id = "order 17 \"rush\"";
  with_cli_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("order", id, std::string("o17"));
    co_await wait_status(eng, id, "dead_letter");

    // Find it.
    auto found = cli_in(schema, {"list", "--status", "dead_letter,failed"});
    CHECK(found.status == 0);
    CHECK(contains(found.out, "ID"));
    CHECK(contains(found.out, id));
    CHECK(contains(found.out, "dead_letter"));
    auto found_json = cli_in(schema, {"list", "--status", "dead_letter", "--json"}).parsed();
    REQUIRE(found_json["workflows"].size() == 1);
    CHECK(found_json["workflows"][0]["id"] == id);
    CHECK(found_json["workflows"][0]["name"] == "order");
    CHECK(found_json["next_offset"].is_null());

    // See why.
    auto shown = cli_in(schema, {"show", id});
    CHECK(shown.status == 0);
    CHECK(contains(shown.out, "dead_letter"));
    CHECK(contains(shown.out, "card declined"));
    CHECK(contains(shown.out, "charge"));
    CHECK(contains(shown.out, "history"));
    auto detail = cli_in(schema, {"show", id, "--json"}).parsed();
    CHECK(detail["workflow"]["status"] == "dead_letter");
    CHECK(detail["workflow"]["inputs"] == json::array({"o17"}));
    const json steps = detail["steps"];
    REQUIRE(steps.size() == 2);
    CHECK(steps[0]["name"] == "reserve");
    CHECK(steps[0]["status"] == "succeeded");
    CHECK(steps[0]["duration_ms"].is_number());
    CHECK(steps[1]["name"] == "charge");
    CHECK(steps[1]["status"] == "failed");
    CHECK(steps[1]["attempts"] == 2);
    CHECK(contains(steps[1]["last_error"].get<std::string>(), "card declined"));
    const json history = detail["history"];
    REQUIRE(history.size() >= 2);
    CHECK(history.back()["status"] == "dead_letter");

    // Retry before the fix: it fails again, for good, with a fresh count of attempts.
    // Then fix and retry: it succeeds.
    ck.charge_fixed = true;
    auto retried = cli_in(schema, {"retry", id});
    CHECK(retried.status == 0);
    CHECK(contains(retried.out, "retrying"));
    const std::string out = co_await h.result<std::string>();
    CHECK(out == "o17:paid");
    auto after = cli_in(schema, {"show", id, "--json"}).parsed();
    CHECK(after["workflow"]["status"] == "succeeded");
    CHECK(after["workflow"]["output"] == "o17:paid");
    CHECK(after["steps"].size() == 2);
    CHECK(after["steps"][1]["status"] == "succeeded");
    bool was_dead_letter = false;
    for (const auto& row : after["history"]) was_dead_letter |= row["status"] == "dead_letter";
    CHECK(was_dead_letter);
    CHECK(after["history"].back()["status"] == "succeeded");

    // A second retry is refused: exit status 1, one line saying why.
    auto again = cli_in(schema, {"retry", id});
    CHECK(again.status == 1);
    CHECK(contains(again.err, "is succeeded"));
    CHECK(again.out.empty());
    // Unknown ids, for every verb that takes one.
    for (const char* verb : {"show", "cancel", "resume", "retry"}) {
      auto unknown = cli_in(schema, {verb, "no-such-workflow"});
      CHECK(unknown.status == 1);
      CHECK(contains(unknown.err, "no workflow has the id 'no-such-workflow'"));
    }
  });
}

TEST_CASE("cli: cancel, resume, send and fork steer a waiting workflow", "[cli]") {
  const std::string schema = test::fresh_schema("cli_steer");
  with_cli_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("inbox", "w1");
    co_await test::wait_rows(eng, "w1", 1);

    auto cancelled = cli_in(schema, {"cancel", "w1", "--json"}).parsed();
    CHECK(cancelled["action"] == "cancel");
    CHECK(cancelled["done"] == true);
    co_await wait_status(eng, "w1", "cancelled");
    auto twice = cli_in(schema, {"cancel", "w1"});
    CHECK(twice.status == 1);
    CHECK(contains(twice.err, "is cancelled"));
    auto no_retry = cli_in(schema, {"retry", "w1"});
    CHECK(no_retry.status == 1);
    CHECK(contains(no_retry.err, "durable resume w1"));

    auto resumed = cli_in(schema, {"resume", "w1"});
    CHECK(resumed.status == 0);
    CHECK(contains(resumed.out, "1 executor is alive now; one that registers 'inbox' claims it"));
    auto not_json = cli_in(schema, {"send", "w1", "go", "{oops"});
    CHECK(not_json.status == 2);
    CHECK(contains(not_json.err, "--text"));
    auto huge = cli_in(schema, {"send", "w1", "go", "1e999"});
    CHECK(huge.status == 2);
    auto nowhere = cli_in(schema, {"send", "nobody", "go", "1"});
    CHECK(nowhere.status == 1);
    CHECK(contains(nowhere.err, "no workflow has the id 'nobody'"));
    auto sent = cli_in(schema, {"send", "w1", "go", R"({"approved":true})", "--key", "k1"});
    CHECK(sent.status == 0);
    CHECK(contains(sent.out, "sent to 'w1'"));
    auto dup = cli_in(schema, {"send", "w1", "go", "2", "--key", "k1", "--json"}).parsed();
    CHECK(dup["sent"] == false);
    const std::string out = co_await h.result<std::string>();
    CHECK(out == R"({"approved":true})");
    auto too_late = cli_in(schema, {"send", "w1", "go", "3"});
    CHECK(too_late.status == 1);
    CHECK(contains(too_late.err, "is succeeded"));

    // Fork the finished workflow from its recv (step 1): the new one waits for a message of its
    // own; --text sends a string as is.
    auto forked =
        cli_in(schema, {"fork", "w1", "--from-step", "1", "--id", "w1-again", "--json"}).parsed();
    CHECK(forked["new_id"] == "w1-again");
    CHECK(forked["from_step"] == 1);
    auto show_fork = cli_in(schema, {"show", "w1-again", "--json"}).parsed();
    CHECK(show_fork["workflow"]["forked_from"] == "w1");
    auto text = cli_in(schema, {"send", "w1-again", "go", "plain words", "--text"});
    CHECK(text.status == 0);
    auto fork_handle = eng.handle("w1-again");
    const std::string fork_out = co_await fork_handle.result<std::string>();
    CHECK(fork_out == R"("plain words")");
    auto taken = cli_in(schema, {"fork", "w1", "--from-step", "1", "--id", "w1-again"});
    CHECK(taken.status == 1);
    CHECK(contains(taken.err, "already taken"));
    auto fork_unknown = cli_in(schema, {"fork", "nope", "--from-step", "0"});
    CHECK(fork_unknown.status == 1);
    CHECK(contains(fork_unknown.err, "no workflow has this id"));
    auto fork_usage = cli_in(schema, {"fork", "w1"});
    CHECK(fork_usage.status == 2);
    CHECK(contains(fork_usage.err, "--from-step"));

    // Each action above left its audit row, through the program as through the console: done
    // or refused (exit status 1), with who ran it; bad usage (exit status 2) none.
    auto audit = cli_in(schema, {"audit", "--json", "--limit", "100"}).parsed();
    std::map<std::string, int> by;
    for (const auto& row : audit) {
      CHECK(row["via"] == "cli");
      CHECK_FALSE(row["actor"].get<std::string>().empty());
      ++by[row["action"].get<std::string>() + " " + row["result"].get<std::string>()];
    }
    CHECK(by == std::map<std::string, int>{{"cancel done", 1},
                                           {"cancel refused", 1},
                                           {"retry refused", 1},
                                           {"resume done", 1},
                                           {"send done", 3},
                                           {"send refused", 2},
                                           {"fork done", 1},
                                           {"fork refused", 2}});
    auto first = cli_in(schema, {"audit", "--json", "--action", "cancel"}).parsed();
    REQUIRE(first.size() == 2);
    CHECK(first[1]["target"]["id"] == "w1");  // newest first: the done one is the older
    CHECK(first[1]["count"] == 1);
    CHECK(first[0]["result"] == "refused");
    CHECK(contains(first[0]["detail"].get<std::string>(), "is cancelled"));
  });
}

TEST_CASE("cli: list filters by status, name, queue, executor and time, and pages", "[cli]") {
  const std::string schema = test::fresh_schema("cli_list");
  with_cli_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // Seven queued workflows nobody serves (queue "cold"), two in "warm", one run here.
    for (int i = 0; i < 7; ++i) {
      const std::string wid = "cold-" + std::to_string(i);
      (void)co_await eng.enqueue({.queue = "cold"}, "order", wid, std::string("x"));
    }
    for (int i = 0; i < 2; ++i) {
      const std::string wid = "warm-" + std::to_string(i);
      (void)co_await eng.enqueue({.queue = "warm"}, "inbox", wid);
    }
    auto h = co_await eng.start("inbox", "here");
    co_await test::wait_rows(eng, "here", 1);

    auto cold = cli_in(schema, {"list", "--queue", "cold", "--json"}).parsed();
    CHECK(cold["workflows"].size() == 7);
    for (const auto& w : cold["workflows"]) CHECK(w["status"] == "pending");
    auto inbox = cli_in(schema, {"list", "--name", "inbox", "--json"}).parsed();
    CHECK(inbox["workflows"].size() == 3);
    auto mine = cli_in(schema, {"list", "--executor", "exec-cli", "--json"}).parsed();
    REQUIRE(mine["workflows"].size() == 1);
    CHECK(mine["workflows"][0]["id"] == "here");
    auto none = cli_in(schema, {"list", "--status", "succeeded"});
    CHECK(none.status == 0);
    CHECK(contains(none.out, "no workflows match"));

    // Pages of 4: disjoint, complete, newest first; the last one has no next page.
    std::vector<std::string> seen;
    std::int64_t offset = 0;
    for (int page = 0; page < 5; ++page) {
      auto p =
          cli_in(schema, {"list", "--limit", "4", "--offset", std::to_string(offset), "--json"})
              .parsed();
      for (const auto& w : p["workflows"]) seen.push_back(w["id"]);
      if (p["next_offset"].is_null()) break;
      offset = p["next_offset"];
    }
    CHECK(seen.size() == 10);
    std::sort(seen.begin(), seen.end());
    CHECK(std::unique(seen.begin(), seen.end()) == seen.end());
    auto table = cli_in(schema, {"list", "--limit", "4"});
    CHECK(contains(table.err, "--after '"));

    // Cursor pages stay disjoint and complete while new workflows arrive between pages (an
    // offset would repeat rows then).
    std::vector<std::string> by_cursor;
    std::string cursor;
    for (int page = 0; page < 5; ++page) {
      std::vector<std::string> args{"--schema", schema, "list", "--limit", "4", "--json"};
      if (!cursor.empty()) args.insert(args.end(), {"--after", cursor});
      auto p = cli(args).parsed();
      for (const auto& w : p["workflows"]) by_cursor.push_back(w["id"]);
      const std::string newcomer = "new-" + std::to_string(page);
      (void)co_await eng.enqueue({.queue = "cold"}, "order", newcomer, std::string("x"));
      if (p["next_cursor"].is_null()) break;
      cursor = p["next_cursor"];
    }
    CHECK(by_cursor.size() == 10);
    std::sort(by_cursor.begin(), by_cursor.end());
    CHECK(std::unique(by_cursor.begin(), by_cursor.end()) == by_cursor.end());
    CHECK(by_cursor == seen);
    auto bad_cursor = cli_in(schema, {"list", "--after", "yesterday"});
    CHECK(bad_cursor.status == 2);

    // Time range: durations and timestamps (13: the 3 newcomers too).
    CHECK(cli_in(schema, {"list", "--since", "1h", "--json"}).parsed()["workflows"].size() == 13);
    CHECK(cli_in(schema, {"list", "--until", "1h", "--json"}).parsed()["workflows"].empty());
    CHECK(cli_in(schema, {"list", "--since", "2000-01-01", "--until", "2999-01-01", "--json"})
              .parsed()["workflows"]
              .size() == 13);
    auto bad_time = cli_in(schema, {"list", "--since", "last tuesday-ish"});
    CHECK(bad_time.status == 2);
    CHECK(contains(bad_time.err, "--since"));
    auto bad_status = cli_in(schema, {"list", "--status", "finished"});
    CHECK(bad_status.status == 2);
    CHECK(contains(bad_status.err,
                   "unknown status 'finished'; one of: pending, running, sleeping, "
                   "succeeded, failed, parked, cancelled, dead_letter"));
    auto bad_limit = cli_in(schema, {"list", "--limit", "0"});
    CHECK(bad_limit.status == 2);

    const json m = json::parse(R"({"done":1})");
    (void)co_await eng.send("here", "go", m);
    (void)co_await h.result<std::string>();
  });
}

TEST_CASE("cli: queues, executors, stats, gc and migrate report and maintain the schema", "[cli]") {
  const std::string schema = test::fresh_schema("cli_ops");
  // migrate: a fresh schema gets every migration, a second run none.
  auto first = cli_in(schema, {"migrate", "--json"}).parsed();
  CHECK(first["version"] == store::latest_version());
  CHECK(first["applied"] == durable::detail::migrations().size());
  auto second = cli_in(schema, {"migrate"});
  CHECK(second.status == 0);
  CHECK(contains(second.out, "0 migrations applied"));

  with_cli_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    co_await eng.configure_queue({.name = "slow", .concurrency = 3, .rate_limit = 10});
    for (int i = 0; i < 4; ++i) {
      const std::string wid = "q-" + std::to_string(i);
      (void)co_await eng.enqueue({.queue = "slow"}, "order", wid, std::string("x"));
    }
    ck.charge_fixed = true;
    for (int i = 0; i < 3; ++i) {
      const std::string wid = "done-" + std::to_string(i);
      auto h = co_await eng.start("order", wid, std::string("d"));
      (void)co_await h.result<std::string>();
    }
    auto w = co_await eng.start("inbox", "waiting");
    co_await test::wait_rows(eng, "waiting", 1);

    auto queues = cli_in(schema, {"queues", "--json"}).parsed();
    json slow;
    for (const auto& q : queues)
      if (q["queue"] == "slow") slow = q;
    REQUIRE(!slow.is_null());
    CHECK(slow["queued"] == 4);
    CHECK(slow["running"] == 0);
    CHECK(slow["concurrency"] == 3);
    CHECK(slow["rate_limit"] == 10);
    auto queue_table = cli_in(schema, {"queues"});
    CHECK(contains(queue_table.out, "QUEUED"));
    CHECK(contains(queue_table.out, "slow"));

    auto executors = cli_in(schema, {"executors", "--json"}).parsed();
    REQUIRE(executors.size() == 1);
    CHECK(executors[0]["id"] == "exec-cli");
    CHECK(executors[0]["state"] == "alive");
    CHECK(executors[0]["owned"] == 1);  // "waiting"
    auto dead = cli_in(schema, {"executors", "--lease", "0s", "--json"}).parsed();
    CHECK(dead[0]["state"] == "dead");
    auto bad_lease = cli_in(schema, {"executors", "--lease", "soon"});
    CHECK(bad_lease.status == 2);

    auto stats = cli_in(schema, {"stats", "--json"}).parsed();
    CHECK(stats["workflows"]["succeeded"] == 3);
    CHECK(stats["workflows"]["pending"] == 4);
    CHECK(stats["queued"] == 4);
    CHECK(stats.contains("journal_rows_estimate"));
    CHECK(stats["executors_alive"] == 1);
    auto stats_table = cli_in(schema, {"stats"});
    CHECK(contains(stats_table.out, "succeeded"));

    // gc: finished ones only, by age and status; a dry run deletes nothing.
    auto young = cli_in(schema, {"gc", "--older-than", "1h", "--json"}).parsed();
    CHECK(young["deleted"] == 0);
    auto dry = cli_in(schema, {"gc", "--older-than", "0s", "--dry-run", "--json"}).parsed();
    CHECK(dry["would_delete"] == 3);
    auto only_failed =
        cli_in(schema, {"gc", "--older-than", "0s", "--status", "failed", "--json"}).parsed();
    CHECK(only_failed["deleted"] == 0);
    auto gone = cli_in(schema, {"gc", "--older-than", "0s", "--batch", "2"});
    CHECK(gone.status == 0);
    CHECK(contains(gone.out, "deleted 3 workflows"));
    auto after = cli_in(schema, {"stats", "--json"}).parsed();
    CHECK(!after["workflows"].contains("succeeded"));
    CHECK(after["workflows"]["pending"] == 4);
    CHECK(cli_in(schema, {"show", "done-0"}).status == 1);
    auto refused = cli_in(schema, {"gc", "--older-than", "0s", "--status", "dead_letter"});
    CHECK(refused.status == 2);
    CHECK(contains(refused.err, "finished workflows only"));
    auto no_age = cli_in(schema, {"gc"});
    CHECK(no_age.status == 2);

    (void)co_await eng.send("waiting", "go", 1);
    (void)co_await w.result<std::string>();
  });
}

TEST_CASE("cli: help, bad arguments and database trouble give an exit status and one line",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_usage");
  test::run(migrated(schema));

  auto help = cli({"--help"});
  CHECK(help.status == 0);
  for (const char* verb : {"list", "show", "cancel", "resume", "retry", "fork", "queues",
                           "executors", "gc", "migrate", "stats", "send", "metrics"}) {
    CHECK(contains(help.out, verb));
    auto verb_help = cli({verb, "--help"});
    CHECK(verb_help.status == 0);
    CHECK(contains(verb_help.out, "Usage"));
  }
  auto nothing = cli({});
  CHECK(nothing.status == 2);
  auto unknown_verb = cli({"frobnicate"});
  CHECK(unknown_verb.status == 2);
  CHECK(contains(unknown_verb.err, "durable --help"));
  auto missing_id = cli_in(schema, {"show"});
  CHECK(missing_id.status == 2);
  auto extra = cli_in(schema, {"cancel", "a", "b"});
  CHECK(extra.status == 2);
  auto bad_schema = cli({"--schema", std::string(70, 'x'), "list"});
  CHECK(bad_schema.status == 2);
  CHECK(contains(bad_schema.err, "63 bytes"));

  // A schema that was never migrated, a server that is not there.
  auto missing = cli_in(schema + "_never", {"list"});
  CHECK(missing.status == 3);
  CHECK(contains(missing.err, "durable migrate"));
  auto unreachable = cli({"--database", "postgresql://nobody@127.0.0.1:1/none", "stats"});
  CHECK(unreachable.status == 3);
  CHECK(contains(unreachable.err, "cannot use the database"));
  // One line each: no stack trace, no multi-line libpq message.
  for (const auto* r : {&missing, &unreachable, &bad_schema, &unknown_verb})
    CHECK(std::count(r->err.begin(), r->err.end(), '\n') <= 2);
}

TEST_CASE("cli: metrics prints and serves the database's gauges, and promtool accepts them",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_metrics");
  const std::string odd_queue = "mail \"EU\"\\\nnight";  // a quote, a backslash, a newline
  with_cli_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    ck.charge_fixed = true;
    for (int i = 0; i < 2; ++i) {
      const std::string wid = "ok-" + std::to_string(i);
      auto h = co_await eng.start("order", wid, std::string("m"));
      (void)co_await h.result<std::string>();
    }
    for (int i = 0; i < 3; ++i) {
      const std::string wid = "queued-" + std::to_string(i);
      (void)co_await eng.enqueue({.queue = odd_queue}, "order", wid, std::string("m"));
    }
  });

  // Printed once.
  auto printed = cli_in(schema, {"metrics"});
  REQUIRE(printed.status == 0);
  test::check_with_promtool(printed.out);
  const std::string s = "schema=\"" + schema + "\"";
  CHECK(test::sample(printed.out, "durable_store_workflows{" + s + ",status=\"succeeded\"}") == 2);
  CHECK(test::sample(printed.out, "durable_store_workflows{" + s + ",status=\"pending\"}") == 3);
  CHECK(test::sample(printed.out, "durable_store_queue_queued{" + s +
                                      ",queue=\"mail \\\"EU\\\"\\\\\\nnight\"}") == 3);
  // The test's engine stopped without a shutdown: alive until its lease runs out, then dead.
  CHECK(
      test::sample(printed.out, "durable_store_executors{" + s + ",state=\"alive\"}").value_or(0) +
          test::sample(printed.out, "durable_store_executors{" + s + ",state=\"dead\"}")
              .value_or(0) ==
      1);

  // Served: start the program in the background on a free port, scrape it, stop it.
  char err_path[] = "/tmp/durable-cli-listen-XXXXXX";
  const int err_fd = ::mkstemp(err_path);
  REQUIRE(err_fd >= 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(err_fd, 2);
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::execl(DURABLE_CLI_PATH, DURABLE_CLI_PATH, "--schema", schema.c_str(), "metrics", "--listen",
            "127.0.0.1:0", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  unsigned short port = 0;
  for (int i = 0; i < 1000 && port == 0; ++i) {
    const std::string said = slurp(err_path);
    const auto at = said.find("http://127.0.0.1:");
    if (at != std::string::npos && said.find("/metrics", at) != std::string::npos)
      port = static_cast<unsigned short>(std::stoi(said.substr(at + 17)));
    else
      ::usleep(10000);
  }
  INFO("stderr: " << slurp(err_path));
  REQUIRE(port != 0);
  const auto ok = test::parse_reply(
      test::run(test::http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")));
  CHECK(ok.status_line == "HTTP/1.1 200 OK");
  CHECK(ok.content_type == "text/plain; version=0.0.4; charset=utf-8");
  test::check_with_promtool(ok.body);
  CHECK(test::sample(ok.body, "durable_store_workflows{" + s + ",status=\"succeeded\"}") == 2);
  const auto missing = test::parse_reply(
      test::run(test::http_exchange(port, "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")));
  CHECK(missing.status_line == "HTTP/1.1 404 Not Found");
  // Idle and slow clients, more than it holds open, do not starve it (issue 18).
  {
    int answered = 0;
    std::string last;
    test::run([&]() -> asio::awaitable<void> {
      test::hostile_clients hostile(co_await asio::this_coro::executor, port);
      hostile.slow(2);
      co_await hostile.idle(40);
      for (int i = 0; i < 6; ++i) {
        const auto r = test::parse_reply(
            co_await test::http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
        if (r.status_line == "HTTP/1.1 200 OK") ++answered;
        last = r.body;
      }
      hostile.close();
      for (int i = 0; i < 500 && hostile.slow_running() > 0; ++i) co_await test::sleep_ms(10);
    }());
    CHECK(answered == 6);
    CHECK(test::sample(last, "durable_metrics_server_connections").value_or(99) <= 16);
    CHECK(test::sample(last, "durable_metrics_server_refused_total{reason=\"evicted\"}")
              .value_or(0) >= 40 - 16);
    test::check_with_promtool(last);
  }
  // The same port again: in use, refused with status 1.
  auto busy = cli_in(schema, {"metrics", "--listen", "127.0.0.1:" + std::to_string(port)});
  CHECK(busy.status == 1);
  CHECK(contains(busy.err, "--listen"));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  ::close(err_fd);
  ::unlink(err_path);

  for (const char* bad : {"9464", "localhost:9464", "127.0.0.1:http", "127.0.0.1:70000"}) {
    auto r = cli_in(schema, {"metrics", "--listen", bad});
    CHECK(r.status == 2);
    CHECK(contains(r.err, "--listen"));
  }
}

namespace {

asio::awaitable<int> kid_wf(context& ctx) {
  co_await ctx.step("work", [] { return 7; });
  co_return 7;
}

asio::awaitable<int> elder_wf(context& ctx) {
  auto kid = co_await ctx.start_child("kid");
  const int got = co_await kid.result<int>();
  const auto go = co_await ctx.recv<int>("go", 60s);
  co_return got + go.value_or(-100);
}

asio::awaitable<long> rows_in(engine& eng, std::string_view table_view, std::string_view id_view) {
  const std::string table(table_view), id(id_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec("SELECT count(*) FROM " + test::q(eng.schema_name()) + "." + table +
                                " WHERE workflow_id = $1",
                            id);
  co_return r[0].get<long>(0);
}

asio::awaitable<void> exec_sql(engine& eng, std::string_view sql_view, std::string_view id_view) {
  const std::string sql(sql_view), id(id_view);
  auto c = co_await eng.pool().acquire();
  (void)co_await c->exec(sql, id);
}

}  // namespace

TEST_CASE("cli: gc keeps a child its unfinished parent needs, deletes the rest", "[cli]") {
  const std::string schema = test::fresh_schema("cli_gc_tree");
  ck = {};
  auto o = test::options(schema, "exec-gc");
  o.poll_interval = 100ms;
  test::with_open_engine(
      o,
      [](engine& eng) {
        register_cli(eng);
        eng.register_workflow("kid", &kid_wf);
        eng.register_workflow("elder", &elder_wf);
      },
      [&](engine& eng) -> asio::awaitable<void> {
        // A dead letter retried to success: journal, attempts and history rows to delete.
        auto h = co_await eng.start("order", "o1", std::string("g"));
        co_await wait_status(eng, "o1", "dead_letter");
        ck.charge_fixed = true;
        const bool retried = co_await eng.retry("o1");
        CHECK(retried);
        (void)co_await h.result<std::string>();
        const long history_rows = co_await rows_in(eng, "workflow_history", "o1");
        CHECK(history_rows >= 2);
        const long attempt_rows = co_await rows_in(eng, "step_attempts", "o1");
        CHECK(attempt_rows >= 2);
        // A parent whose child finished, itself still waiting.
        auto elder = co_await eng.start("elder", "e1");
        co_await test::wait_rows(eng, "e1", 2);  // the child started, and its result
        co_await wait_status(eng, "e1/0", "succeeded");

        auto dry = cli_in(schema, {"gc", "--older-than", "0s", "--dry-run", "--json"}).parsed();
        CHECK(dry["would_delete"] == 1);  // o1 only: the child is needed
        auto gone = cli_in(schema, {"gc", "--older-than", "0s", "--json"}).parsed();
        CHECK(gone["deleted"] == 1);
        CHECK(cli_in(schema, {"show", "e1/0"}).status == 0);
        CHECK(cli_in(schema, {"show", "o1"}).status == 1);
        for (const char* table :
             {"steps", "step_attempts", "workflow_history", "messages", "events"}) {
          const long left = co_await rows_in(eng, table, "o1");
          CHECK(left == 0);
        }

        // Once the parent finished, both go.
        (void)co_await eng.send("e1", "go", 1);
        const int sum = co_await elder.result<int>();
        CHECK(sum == 8);
        auto later = cli_in(schema, {"gc", "--older-than", "0s", "--json"}).parsed();
        CHECK(later["deleted"] == 2);
      });
}

TEST_CASE("cli: the history records what is off the routine, in UTC, ids kept whole", "[cli]") {
  const std::string schema = test::fresh_schema("cli_history");
  ck = {};
  const std::string odd = "2026-11-30T17:00:00-nightly";  // an id that looks like a timestamp
  with_cli_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // The routine path writes no history row: started, succeeded.
    ck.charge_fixed = true;
    auto plain = co_await eng.start("order", odd, std::string("p"));
    (void)co_await plain.result<std::string>();
    const long routine_rows = co_await rows_in(eng, "workflow_history", odd);
    CHECK(routine_rows == 0);
    auto waiting = co_await eng.start("inbox", "h1");
    co_await test::wait_rows(eng, "h1", 1);
    // An owner change (a takeover moves executor_id from one executor to another), a cancel
    // and a resume are recorded.
    const std::string takeover =
        "UPDATE " + test::q(schema) + ".workflows SET executor_id = 'exec-other' WHERE id = $1";
    co_await exec_sql(eng, takeover, "h1");
    const bool cancelled = co_await eng.cancel("h1");
    CHECK(cancelled);
    const bool resumed = co_await eng.resume("h1");
    CHECK(resumed);
    (void)co_await eng.send("h1", "go", 5);
    (void)co_await waiting.result<std::string>();

    // PGTZ set to another zone does not change what the program shows: UTC.
    ::setenv("PGTZ", "America/New_York", 1);
    auto shown = cli_in(schema, {"show", "h1", "--json"}).parsed();
    auto table = cli_in(schema, {"list"});
    ::unsetenv("PGTZ");
    const std::string created = shown["workflow"]["created_at"];
    CHECK(created.ends_with("+00:00"));
    CHECK(contains(table.out, created.substr(0, 10) + " " + created.substr(11, 8)));
    CHECK(contains(table.out, odd));  // not shortened like a timestamp

    std::vector<std::string> path;
    for (const auto& row : shown["history"]) path.push_back(row["status"]);
    const std::vector<std::string> expected{"created",   "started",  "running",
                                            "cancelled", "sleeping", "succeeded"};
    CHECK(path == expected);
    const auto& moved = shown["history"][2];
    CHECK(moved["previous_executor"] == "exec-cli");
    CHECK(moved["executor_id"] == "exec-other");
    CHECK(shown["history"][3]["previous"] == "running");
    CHECK(shown["history"][4]["previous"] == "cancelled");
    auto shown_table = cli_in(schema, {"show", "h1"});
    CHECK(contains(shown_table.out, "PREVIOUS_EXECUTOR"));
    CHECK(contains(shown_table.out, "exec-other"));
  });
}

// ---- issue 18: hostile text, secrets, big messages, what show and list say

namespace {

/// Whether a terminal shown `text` would only show it: no C0 control but the newline, no DEL,
/// no C1 control (U+0080..U+009F), no bidirectional control, only valid UTF-8.
bool terminal_safe(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
    if (c < 0x80) continue;
    const std::size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    if (n == 0 || i + n > text.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) return false;
    const auto b1 = static_cast<unsigned char>(text[i + 1]);
    if (c == 0xc2 && b1 < 0xa0) return false;   // C1
    if (c == 0xd8 && b1 == 0x9c) return false;  // U+061C
    if (n == 3 && c == 0xe2) {
      const auto b2 = static_cast<unsigned char>(text[i + 2]);
      if (b1 == 0x80 && (b2 == 0x8e || b2 == 0x8f || (b2 >= 0xa8 && b2 <= 0xae))) return false;
      if (b1 == 0x81 && b2 >= 0xa6 && b2 <= 0xa9) return false;  // U+2066..U+2069
    }
    i += n - 1;
  }
  return true;
}

asio::awaitable<void> sql_in(std::string_view schema_view, std::string_view sql_view) {
  const std::string schema(schema_view), sql(sql_view);
  engine eng(co_await asio::this_coro::executor, test::options(schema));
  auto c = co_await eng.pool().acquire();
  (void)co_await c->exec(sql);
}

}  // namespace

TEST_CASE("cli: database text reaches the terminal escaped, the list footer cursor pastes back",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_hostile");
  // A title change (OSC ... BEL), a colour (CSI), a C1 CSI, bidi overrides, DEL.
  const std::string title = "t \x1b]0;pwned\x07 \x1b[31mred";
  const std::string bidi =
      "b \xe2\x80\xae"
      "fdp.exe \xc2\x9b"
      "2J \xe2\x81\xa6x";
  const std::string queue = "q\x7f\xe2\x80\x8f";
  const std::string topic = "go\x1b[2J";
  with_cli_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.enqueue({.queue = queue}, "order", title, std::string("x"));
    (void)co_await eng.enqueue({.queue = queue}, "order", bidi, std::string("x"));
    (void)co_await eng.send(title, topic, 1);
  });

  auto table = cli_in(schema, {"list"});
  CHECK(table.status == 0);
  CHECK(terminal_safe(table.out));
  CHECK(contains(table.out, "\\x1b]0;pwned\\x07"));
  CHECK(contains(table.out, "\\u202e"));
  auto as_json = cli_in(schema, {"list", "--json"});
  CHECK(terminal_safe(as_json.out));
  const json listed = as_json.parsed();
  std::vector<std::string> ids;
  for (const auto& w : listed["workflows"]) ids.push_back(w["id"]);
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::string>{bidi, title});  // the JSON values are exact

  // The footer: nothing raw, and the cursor it prints, pasted into a shell, is the next page.
  auto page = cli_in(schema, {"list", "--limit", "1", "--json"}).parsed();
  REQUIRE(page["workflows"].size() == 1);
  const std::string first = page["workflows"][0]["id"];
  auto footer = cli_in(schema, {"list", "--limit", "1"});
  CHECK(footer.status == 0);
  CHECK(terminal_safe(footer.out));
  CHECK(terminal_safe(footer.err));
  const auto at = footer.err.find("--after ");
  REQUIRE(at != std::string::npos);
  std::string word = footer.err.substr(at + 8);
  word = word.substr(0, std::min(word.find("; the id holds"), word.rfind(')')));
  CHECK(word.starts_with("$'"));
  const std::string line =
      "exec \"$0\" --schema " + schema + " list --limit 1 --json --after " + word;
  auto next = run_program({"/bin/bash", "-c", line, DURABLE_CLI_PATH}, nullptr);
  CHECK(next.status == 0);
  const json next_page = next.parsed();
  REQUIRE(next_page["workflows"].size() == 1);
  CHECK(next_page["workflows"][0]["id"] == (first == title ? bidi : title));

  // show: fields, tables (the inbox's topic), --json.
  auto shown = cli_in(schema, {"show", title});
  CHECK(shown.status == 0);
  CHECK(terminal_safe(shown.out));
  CHECK(contains(shown.out, "go\\x1b[2J"));
  auto shown_json = cli_in(schema, {"show", bidi, "--json"});
  CHECK(terminal_safe(shown_json.out));
  CHECK(shown_json.parsed()["workflow"]["id"] == bidi);

  // Messages: an unknown id, a value the server refuses (not UTF-8), CLI11's own errors.
  for (const std::string& bad : {std::string("x\x1b[31m\xc2\x9b"), std::string("\xff\xfe")}) {
    auto r = cli_in(schema, {"show", bad});
    CHECK(r.status != 0);
    CHECK(terminal_safe(r.err));
  }
  auto bad_status = cli_in(schema, {"list", "--status", "\x1b]0;x\x07"});
  CHECK(bad_status.status == 2);
  CHECK(terminal_safe(bad_status.err));
  auto bad_cursor = cli_in(schema, {"list", "--after", bidi});
  CHECK(bad_cursor.status == 2);
  CHECK(terminal_safe(bad_cursor.err));
}

TEST_CASE("cli: no message shows a password, wherever the URL or conninfo is put", "[cli]") {
  struct secret_case {
    std::vector<std::string> args;
    std::string secret;
  };
  const std::vector<secret_case> cases = {
      {{"list", "postgresql://u:hunter2@h/db"}, "hunter2"},
      {{"list", "--limit", "postgresql://u:hunter3@h/db"}, "hunter3"},
      {{"list", "postgres://u:p%40ss@h/db"}, "p%40ss"},
      {{"list", "postgresql://u:se/cret@h/db"}, "se/cret"},
      {{"list", "host=h password=hunter4 dbname=x"}, "hunter4"},
      {{"show", "a", "postgresql://u:hunter5@h/db"}, "hunter5"},
      {{"list", "--after", "postgresql://u:hunter6@h/db"}, "hunter6"},
      {{"--database", "postgresql://u:hunter7@127.0.0.1:1/x", "stats"}, "hunter7"},
      {{"--database", "host=127.0.0.1 port=1 password=hunter8", "stats"}, "hunter8"},
  };
  for (const auto& c : cases) {
    auto r = cli(c.args);
    INFO(c.args.back() << ": " << r.err);
    CHECK(r.status >= 2);
    CHECK(!r.err.empty());
    CHECK(!contains(r.err, c.secret));
    CHECK(!contains(r.out, c.secret));
  }
  // A URL in the place of an argument: the message says where it goes.
  auto misplaced = cli({"list", "postgresql://u:hunter2@h/db"});
  CHECK(contains(misplaced.err, "postgresql://u:***@h/db"));
  CHECK(contains(misplaced.err, "--database"));
  CHECK(!contains(cli({"list", "postgres://u:p%40ss@h/db"}).err, "p@ss"));
}

TEST_CASE("cli: send reads a mebibyte value from standard input or a file", "[cli]") {
  const std::string schema = test::fresh_schema("cli_send_big");
  with_cli_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    std::vector<workflow_handle> waiting;
    const std::vector<std::string> wids{"big-stdin", "big-file", "big-dash"};
    for (const std::string& wid : wids) {
      auto h = co_await eng.start("inbox", wid);
      waiting.push_back(h);
      co_await test::wait_rows(eng, wid, 1);
    }
    // Over the system's argument limit (about 128 KiB for one argument): 1 MiB.
    const std::string big = "\"" + std::string(1 << 20, 'x') + "\"";
    auto piped = cli_in_with(schema, {"send", "big-stdin", "go", "-"}, big);
    CHECK(piped.status == 0);
    CHECK(contains(piped.out, "sent to 'big-stdin'"));

    char path[] = "/tmp/durable-cli-value-XXXXXX";
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::close(fd);
    const std::string object = R"({"blob":")" + std::string(1 << 20, 'y') + "\"}\n";
    std::ofstream(path, std::ios::binary) << object;
    auto from_file = cli_in(schema, {"send", "big-file", "go", "--file", path});
    CHECK(from_file.status == 0);
    const std::string text = "two\nlines";
    auto dash = cli_in_with(schema, {"send", "big-dash", "go", "--file", "-", "--text"}, text);
    CHECK(dash.status == 0);

    // What is not JSON, a file that is not there, both or neither: refused, nothing sent.
    auto not_json = cli_in_with(schema, {"send", "big-dash", "go", "-"}, std::string("{oops"));
    CHECK(not_json.status == 2);
    CHECK(contains(not_json.err, "standard input is not JSON"));
    std::ofstream(path, std::ios::binary) << "[1, 2";
    auto bad_file = cli_in(schema, {"send", "big-dash", "go", "--file", path});
    CHECK(bad_file.status == 2);
    CHECK(contains(bad_file.err, "not JSON"));
    auto missing = cli_in(schema, {"send", "big-dash", "go", "--file", "/nonexistent/value"});
    CHECK(missing.status == 2);
    CHECK(contains(missing.err, "cannot read"));
    auto both = cli_in(schema, {"send", "big-dash", "go", "1", "--file", path});
    CHECK(both.status == 2);
    auto neither = cli_in(schema, {"send", "big-dash", "go"});
    CHECK(neither.status == 2);
    CHECK(contains(neither.err, "--file"));
    ::unlink(path);

    const std::string got_stdin = co_await waiting[0].result<std::string>();
    CHECK(got_stdin == big);
    const std::string got_file = co_await waiting[1].result<std::string>();
    CHECK(json::parse(got_file) == json::parse(object));
    const std::string got_dash = co_await waiting[2].result<std::string>();
    CHECK(json::parse(got_dash) == text);
  });
}

TEST_CASE("cli: show and list count steps alike, name a reset step, keep a past error aside",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_retry_view");
  ck = {};
  const std::string id = "o-retried";
  with_cli_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("order", id, std::string("r"));
    co_await wait_status(eng, id, "dead_letter");
  });
  // One journal row (reserve) and one step failed for good (charge): two steps, both ways.
  auto listed = cli_in(schema, {"list", "--json"}).parsed();
  REQUIRE(listed["workflows"].size() == 1);
  CHECK(listed["workflows"][0]["steps"] == 2);
  auto shown = cli_in(schema, {"show", id});
  CHECK(contains(shown.out, "steps (2: 1 journaled, 1 with attempts but no journal row yet)"));
  auto detail = cli_in(schema, {"show", id, "--json"}).parsed();
  REQUIRE(detail["steps"].size() == 2);
  CHECK(detail["steps"][0]["journaled"] == true);
  CHECK(detail["steps"][1]["journaled"] == false);

  // No executor alive (the one above is gone: its heartbeat made old): retry says nothing runs.
  test::run(sql_in(schema, "UPDATE " + test::q(schema) +
                               ".executors SET heartbeat_at = now() - interval '1 hour'"));
  auto retried = cli_in(schema, {"retry", id});
  CHECK(retried.status == 0);
  CHECK(contains(retried.out,
                 "no executor is alive now, so nothing runs until one that "
                 "registers 'order' starts"));
  auto resume_unknown = cli_in(schema, {"resume", "nobody"});
  CHECK(resume_unknown.status == 1);
  auto after_retry = cli_in(schema, {"show", id, "--json"}).parsed();
  REQUIRE(after_retry["steps"].size() == 2);
  CHECK(after_retry["steps"][1]["status"] == "reset");
  auto after_table = cli_in(schema, {"show", id});
  CHECK(contains(after_table.out, "reset"));
  CHECK(!contains(after_table.out, " due "));

  // An executor registering 'order' runs it; it succeeds. The old error is no longer "last".
  ck.charge_fixed = true;
  auto o = test::options(schema, "exec-cli-2");
  o.poll_interval = 100ms;
  test::with_open_engine(o, &register_cli, [&](engine& eng) -> asio::awaitable<void> {
    co_await wait_status(eng, id, "succeeded");
  });
  auto done_table = cli_in(schema, {"show", id});
  CHECK(done_table.status == 0);
  CHECK(!contains(done_table.out, "\nlast error"));
  CHECK(contains(done_table.out, "\nearlier error"));
  CHECK(contains(done_table.out, "not current: the workflow is succeeded"));
  auto done_list = cli_in(schema, {"list", "--json"}).parsed();
  CHECK(done_list["workflows"][0]["reason"].is_null());
  CHECK(done_list["workflows"][0]["steps"] == 2);
  CHECK(contains(cli_in(schema, {"show", id}).out, "steps (2)"));
}

TEST_CASE("cli: schedules are listed, shown, paused, resumed, triggered, backfilled and deleted",
          "[cli][schedule]") {
  const std::string schema = test::fresh_schema("cli_sched");
  auto o = test::options(schema, "exec-cli");
  o.fire_schedules = false;  // the slots below are the CLI's doing only
  test::with_open_engine(o, &register_cli, [&](engine& eng) -> asio::awaitable<void> {
    schedule_options s;
    s.id = "nightly";
    s.cron = "0 3 * * *";
    s.time_zone = "Europe/Berlin";
    s.workflow = "order";
    const std::string argument = "night";  // named: GCC 12
    co_await eng.schedule(s, argument);
  });
  CHECK(contains(cli_in(schema, {"schedules"}).out, "nightly"));
  auto listed = cli_in(schema, {"schedules", "--json"}).parsed();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["cron"] == "0 3 * * *");
  CHECK(listed[0]["time_zone"] == "Europe/Berlin");
  CHECK(listed[0]["paused"] == false);
  // 03:00 in Berlin is 01:00 or 02:00 UTC.
  const std::string next = listed[0]["next_fire_at"].get<std::string>();
  CHECK((contains(next, " 02:00:00") || contains(next, " 01:00:00")));

  auto show = cli_in(schema, {"schedule", "show", "nightly"});
  CHECK(show.status == 0);
  CHECK(contains(show.out, "workflow_name"));
  CHECK(contains(show.out, "[\"night\"]"));

  CHECK(cli_in(schema, {"schedule", "pause", "nightly"}).status == 0);
  CHECK(cli_in(schema, {"schedule", "show", "nightly", "--json"}).parsed()["paused"] == true);
  auto resumed = cli_in(schema, {"schedule", "resume", "nightly", "--json"}).parsed();
  CHECK(resumed["done"] == true);
  CHECK(cli_in(schema, {"schedule", "show", "nightly", "--json"}).parsed()["paused"] == false);

  auto triggered = cli_in(schema, {"schedule", "trigger", "nightly", "--json"}).parsed();
  CHECK(triggered["workflow_id"].get<std::string>().starts_with("nightly@trigger:"));

  // Three nights of November, twice: three workflows.
  auto filled = cli_in(schema, {"schedule", "backfill", "nightly", "--from", "2026-11-01", "--to",
                                "2026-11-03T23:00:00+01:00", "--json"})
                    .parsed();
  CHECK(filled["started"] == 3);
  CHECK(cli_in(schema, {"schedule", "backfill", "nightly", "--from", "2026-11-01", "--to",
                        "2026-11-03T23:00:00+01:00", "--json"})
            .parsed()["started"] == 0);
  auto shown = cli_in(schema, {"show", "nightly@2026-11-02T03:00:00+01:00", "--json"});
  CHECK(shown.status == 0);
  // A schedule's runs, by id prefix (a plain prefix: '_' and '%' are no wildcards).
  CHECK(
      cli_in(schema, {"list", "--id-prefix", "nightly@", "--json"}).parsed()["workflows"].size() ==
      4);
  auto one_night = cli_in(schema, {"list", "--id-prefix", "nightly@2026-11-02", "--json"}).parsed();
  REQUIRE(one_night["workflows"].size() == 1);
  CHECK(one_night["workflows"][0]["id"] == "nightly@2026-11-02T03:00:00+01:00");
  CHECK(cli_in(schema, {"list", "--id-prefix", "night_", "--json"}).parsed()["workflows"].empty());
  auto refused = cli_in(schema, {"schedule", "backfill", "nightly", "--from", "2026-01-01", "--to",
                                 "2026-12-31", "--limit", "10"});
  CHECK(refused.status != 0);
  CHECK(contains(refused.err, "more than 10 slots"));
  auto bad_time = cli_in(
      schema, {"schedule", "backfill", "nightly", "--from", "yesterday", "--to", "2026-12-31"});
  CHECK(bad_time.status == 2);
  CHECK(contains(bad_time.err, "--from"));

  auto unknown = cli_in(schema, {"schedule", "pause", "nope"});
  CHECK(unknown.status == 1);
  CHECK(contains(unknown.err, "no schedule has the id 'nope'"));
  CHECK(cli_in(schema, {"schedule", "frobnicate", "nightly"}).status == 2);

  CHECK(cli_in(schema, {"schedule", "delete", "nightly"}).status == 0);
  CHECK(contains(cli_in(schema, {"schedules"}).out, "no schedules"));
  CHECK(cli_in(schema, {"list", "--json"}).parsed()["workflows"].size() == 4);  // they stay
}

namespace {

using list_filter = durable::store::list_filter;

// admin_list's rows for `f` (JSON objects, the last maybe {"scanned_to"}), as the console reads
// them.
asio::awaitable<std::vector<json>> listed(engine& eng, list_filter f) {
  auto c = co_await eng.pool().acquire();
  auto q = detail::store_of(eng).admin_list(f);
  auto rows = co_await durable::store::fetch(*c, std::move(q));
  std::vector<json> out;
  for (auto& r : rows) out.push_back(json::parse(r.json));
  co_return out;
}

asio::awaitable<std::vector<std::string>> ids_of(engine& eng, std::string_view sql_view) {
  const std::string sql(sql_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec(sql);
  std::vector<std::string> out;
  for (int i = 0; i < r.rows(); ++i) out.push_back(r[i].get<std::string>(0));
  co_return out;
}

}  // namespace

TEST_CASE("console statements: a sparse filter read a few rows at a time finds every match once",
          "[cli]") {
  const std::string schema = test::fresh_schema("list_scan");
  test::run(migrated(schema));
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema));
    const auto t = test::q(schema) + ".workflows";
    // 60 workflows, one a second; every 7th is a 'refund' (the sparse name), in three statuses;
    // two refunds share a created_at, so that the id breaks the tie.
    auto setup = "INSERT INTO " + t +
                 " (id, name, status, inputs, created_at) SELECT 'w-' || lpad(g::text, 3, '0'), "
                 "CASE WHEN g % 7 = 0 THEN 'refund' ELSE 'charge' END, "
                 "(ARRAY['succeeded', 'failed', 'pending'])[1 + g % 3], '[]', "
                 "timestamptz '2026-12-01 00:00:00+00' + make_interval(secs => "
                 "CASE WHEN g = 14 THEN 21 ELSE g END) FROM generate_series(1, 60) g";
    co_await sql_in(schema, setup);
    const auto truth =
        "SELECT id FROM " + t + " WHERE name = 'refund' ORDER BY created_at DESC, id DESC";
    const auto want = co_await ids_of(eng, truth);
    CHECK(want.size() == 8);

    // Pages of 2 rows with at most 3 rows read of each status, followed as the console does
    // (console_detail::list_page): after the last row of a full page, or from the edge.
    list_filter f;
    f.name = "refund";
    f.scan = 3;
    std::vector<std::string> seen;
    int edges = 0, requests = 0;
    for (; requests < 100; ++requests) {
      f.limit = 3;  // 2 shown, one more to know there is a next page
      const auto got = co_await listed(eng, f);
      std::vector<json> shown(got.begin(), got.end());
      json edge;
      if (!shown.empty() && shown.back().contains("scanned_to")) {
        edge = shown.back()["scanned_to"];
        shown.pop_back();
        ++edges;
      }
      // Rows arriving meanwhile, newer than every page: they never show up in later pages.
      auto arrive = "INSERT INTO " + t + " (id, name, status, inputs, created_at) VALUES ('new-" +
                    std::to_string(requests) +
                    "', 'refund', 'failed', '[]', '2026-12-03 00:00:00+00')";
      co_await sql_in(schema, arrive);
      const json* next = nullptr;
      if (shown.size() > 2) {
        shown.resize(2);
        next = &shown.back();
      } else if (!edge.is_null()) {
        next = &edge;
      }
      for (const auto& r : shown) seen.push_back(r["id"].get<std::string>());
      if (!next) break;
      f.after_created_at = (*next)["created_at"].get<std::string>();
      f.after_id = (*next)["id"].get<std::string>();
    }
    CHECK(seen == want);
    CHECK(edges > 0);

    // Unbounded (the CLI): the same rows in one request, no edge.
    list_filter all;
    all.name = "refund";
    all.until_at = "2026-12-02T00:00:00Z";
    all.limit = 100;
    const auto whole = co_await listed(eng, all);
    std::vector<std::string> whole_ids;
    for (const auto& r : whole) {
      CHECK_FALSE(r.contains("scanned_to"));
      whole_ids.push_back(r.value("id", ""));
    }
    CHECK(whole_ids == want);

    // A status filter is read from the index of its status alone: of the 20 failed workflows
    // (58, 55, 52, 49, ...) 4 are read, and 49 is a refund.
    list_filter failed;
    failed.statuses = {"failed", "failed"};  // named twice, read once
    failed.name = "refund";
    failed.until_at = "2026-12-02T00:00:00Z";
    failed.scan = 4;
    const auto some = co_await listed(eng, failed);
    const auto failed_want = co_await ids_of(
        eng, "SELECT id FROM " + t +
                 " WHERE name = 'refund' AND status = 'failed' AND created_at < '2026-12-02' "
                 "ORDER BY created_at DESC, id DESC");
    const bool stopped = !some.empty() && some.back().contains("scanned_to");
    CHECK(stopped);  // 20 failed workflows, 3 read
    std::vector<std::string> some_ids;
    for (const auto& r : some)
      if (r.contains("id")) some_ids.push_back(r["id"].get<std::string>());
    // What it returns is the newest part of the answer, and nothing older than the edge.
    CHECK(some_ids == std::vector<std::string>{"w-049"});
    CHECK(failed_want.size() == 3);  // 49, 28, 7: the other two are past the edge

    // A status of exactly `scan` rows is read whole: no edge (one more row is read to tell).
    list_filter exact;
    exact.statuses = {"failed"};
    exact.until_at = "2026-12-02T00:00:00Z";
    exact.scan = 20;
    const auto whole_status = co_await listed(eng, exact);
    const bool no_edge = whole_status.empty() || !whole_status.back().contains("scanned_to");
    CHECK(no_edge);

    // The bulk set: whole with a large enough bound (by id), refused (an edge first) without.
    list_filter bulk;
    bulk.name = "refund";
    bulk.until_at = "2026-12-02T00:00:00Z";
    bulk.limit = 10001;
    bulk.scan = 1000;
    auto c = co_await eng.pool().acquire();
    auto whole_q = detail::store_of(eng).admin_ids(bulk);
    const auto set = co_await durable::store::fetch(*c, std::move(whole_q));
    std::vector<std::string> set_ids;
    bool any_edge = false;
    for (const auto& r : set) {
      set_ids.push_back(r.id);
      any_edge = any_edge || r.edge;
    }
    auto sorted = want;
    std::sort(sorted.begin(), sorted.end());
    CHECK(set_ids == sorted);
    CHECK_FALSE(any_edge);
    bulk.scan.reset();  // unbounded: the same set, no edge
    auto all_q = detail::store_of(eng).admin_ids(bulk);
    const auto unbounded = co_await durable::store::fetch(*c, std::move(all_q));
    CHECK(unbounded.size() == set.size());
    bulk.scan = 3;
    auto cut_q = detail::store_of(eng).admin_ids(bulk);
    const auto cut = co_await durable::store::fetch(*c, std::move(cut_q));
    const bool cut_first = !cut.empty() && cut.front().edge;
    CHECK(cut_first);
  }());
}
