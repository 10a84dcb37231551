// Failure paths of the runtime, each injected against the real server: journal rows the
// server refuses, transient errors (lock and statement timeouts), messages that are not
// UTF-8, nested steps, unusable journal rows, executor ids held by another process,
// application versions, a heartbeat that must not wait behind claims, bounded work, a
// database that disappears during shutdown, the event hook and the supervisor.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <mutex>
#include <thread>

#include "support/conninfo.hpp"
#include "support/proxy.hpp"
#include "support/workflows.hpp"
// The supervisor's functions are inline (header-only and separately compiled builds alike); the
// case that starts a supervised part of its own includes them, as impl/engine.ipp does.
#include "durable/detail/runtime/supervisor.ipp"

using namespace durable;
using namespace std::chrono_literals;
using test::probe;

namespace {

using test::q;  // tests/support/workflows.hpp

/// Events the engine reported, for assertions.
struct event_log {
  std::vector<std::string> lines;  // "level component workflow: message"
  void add(const event& e) {
    lines.push_back(std::string(to_string(e.level)) + " " + std::string(e.component) + " " +
                    std::string(e.workflow_id) + ": " + std::string(e.message));
  }
  [[nodiscard]] int count(const std::string& needle) const {
    int n = 0;
    for (const auto& l : lines) n += l.find(needle) != std::string::npos;
    return n;
  }
};
event_log events;

engine_options options(const std::string& schema, const std::string& id = "exec-f") {
  auto o = test::options(schema, id);
  o.io_retry_delay = 10ms;
  o.min_severity = severity::debug;
  o.on_event = [](const event& e) { events.add(e); };
  return o;
}

using test::row_of;
using test::wait_status;

// ---- workflows under test -------------------------------------------------------------------

asio::awaitable<int> bad_name_wf(context& ctx) {
  std::string name = "step-\xff\xfe";
  co_return co_await ctx.step(name, [] {
    ++probe.calls["bad_name"];
    return 1;
  });
}

struct with_nul {
  std::string text;
  NLOHMANN_DEFINE_TYPE_INTRUSIVE(with_nul, text)
};

asio::awaitable<int> nul_value_wf(context& ctx) {
  auto v = co_await ctx.step("nul", [] {
    ++probe.calls["nul"];
    return with_nul{std::string("a\0b", 3)};
  });
  co_return int(v.text.size());
}

asio::awaitable<std::size_t> huge_value_wf(context& ctx) {
  // Over jsonb's limit of 256 MB for one value.
  auto v = co_await ctx.step("huge", [] {
    ++probe.calls["huge"];
    return std::vector<std::string>(300, std::string(1 << 20, 'x'));
  });
  co_return v.size();
}

/// `bytes` letters and digits from a fixed seed: a value that compresses little (TOAST). Made
/// once per size, so that a test can make it before its engine runs (making 48 MiB takes long
/// enough to stall the event loop that the step function runs on).
const std::string& letters(std::size_t bytes) {
  static std::map<std::size_t, std::string> made;
  auto& s = made[bytes];
  if (s.size() == bytes) return s;
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  s.assign(bytes, ' ');
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& c : s) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = alphabet[x % 62];
  }
  return s;
}

asio::awaitable<std::size_t> big_value_wf(context& ctx, std::size_t bytes) {
  auto v = co_await ctx.step("big", [&] {
    ++probe.calls["big"];
    return letters(bytes);
  });
  co_return v.size();
}

asio::awaitable<std::size_t> length_wf(context&, std::string text) { co_return text.size(); }

asio::awaitable<std::size_t> catches_big_value_wf(context& ctx, std::size_t bytes) {
  try {
    co_await ctx.step("big", [&] {
      ++probe.calls["big"];
      return letters(bytes);
    });
  } catch (const value_too_large&) {
    probe.seen.push_back("caught");
  }
  // The run is parked: no later step runs, whatever the code does.
  co_return co_await ctx.step("after", [] {
    ++probe.calls["after"];
    return std::size_t(1);
  });
}

/// `n` steps with 30 ms between them (outside the steps): a run that keeps writing.
asio::awaitable<int> paced_wf(context& ctx, int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) {
    co_await test::sleep_ms(30);
    const std::string name = "p" + std::to_string(i);
    sum += co_await ctx.step(name, [i] { return i; });
  }
  co_return sum;
}

asio::awaitable<int> simple_wf(context& ctx) {
  co_return co_await ctx.step("one", [] {
    ++probe.calls["one"];
    return 1;
  });
}

asio::awaitable<int> tx_counter_wf(context& ctx, std::string table) {
  co_return co_await ctx.transaction("insert", [&](pg::transaction& tx) -> asio::awaitable<int> {
    ++probe.calls["insert"];
    co_await tx.exec("INSERT INTO " + table + " (v) VALUES (1)");
    co_return 1;
  });
}

asio::awaitable<int> throws_bad_utf8_wf(context&) {
  throw std::runtime_error("bad \xff\xfe bytes");
  co_return 0;
}

asio::awaitable<std::string> step_throws_bad_utf8_wf(context& ctx) {
  try {
    co_await ctx.step("bad", []() -> int { throw std::runtime_error("step \xc3\x28 bytes"); });
  } catch (const step_failed& e) {
    co_return e.error_message();
  }
  co_return "";
}

asio::awaitable<int> nested_sync_wf(context& ctx) {
  co_return co_await ctx.step("outer", [&ctx] {
    ++probe.calls["outer"];
    (void)ctx.step("inner", [] { return 2; });
    return 1;
  });
}

asio::awaitable<int> nested_async_wf(context& ctx) {
  co_return co_await ctx.step("outer", [&ctx]() -> asio::awaitable<int> {
    ++probe.calls["outer"];
    co_return co_await ctx.step("inner", [] { return 2; });
  });
}

/// A step that waits long and records whether it saw cancellation.
asio::awaitable<int> long_step_wf(context& ctx) {
  co_return co_await ctx.step("long", []() -> asio::awaitable<int> {
    ++probe.calls["long"];
    try {
      co_await test::sleep_ms(60000);
    } catch (const std::system_error& e) {
      if (e.code() == asio::error::operation_aborted) probe.seen.push_back("cancelled");
      throw;
    }
    co_return 1;
  });
}

/// A step that takes a while, to keep runs in flight.
asio::awaitable<int> busy_wf(context& ctx) {
  co_return co_await ctx.step("busy", []() -> asio::awaitable<int> {
    ++probe.calls["busy"];
    co_await test::sleep_ms(20);
    co_return 1;
  });
}

/// A transactional step whose SQL fails once with the SQLSTATE in probe.seen[0] (raised by the
/// server), then succeeds.
asio::awaitable<int> tx_raises_once_wf(context& ctx, std::string raise_fn) {
  co_return co_await ctx.transaction("raise-once",
                                     [&](pg::transaction& tx) -> asio::awaitable<int> {
                                       if (probe.calls["raise-once"]++ == 0) {
                                         const std::string code = probe.seen.at(0);
                                         co_await tx.exec("SELECT " + raise_fn + "($1)", code);
                                       }
                                       co_return 7;
                                     });
}

/// Returns a value the server cannot store as the workflow's output.
asio::awaitable<with_nul> bad_output_wf(context& ctx) {
  co_await ctx.step("fine", [] { return 1; });
  co_return with_nul{std::string("x\0y", 3)};
}

/// Catches every exception of its second step and returns a fallback: a released run must
/// still end without a final state.
asio::awaitable<int> catches_all_wf(context& ctx) {
  co_await ctx.step("a", [] { return 1; });
  co_await test::maybe_hang("b");
  try {
    co_return co_await ctx.step("b", [] {
      ++probe.calls["b"];
      return 2;
    });
  } catch (const std::exception&) {
    co_return -1;
  }
}

/// Throws the nondeterminism_error of another workflow (as a handle's result() may): the
/// cursor never raised it, and the workflow must still be parked, not left running.
asio::awaitable<int> throws_nondeterminism_wf(context& ctx) {
  co_await ctx.step("one", [] { return 1; });
  throw nondeterminism_error("w-other", 3, "'a'", "'b'", "nondeterminism in workflow 'w-other'");
}

void register_all(engine& e) {
  e.register_workflow("throws_nondeterminism", &throws_nondeterminism_wf);
  e.register_workflow("catches_all", &catches_all_wf);
  e.register_workflow("tx_raises_once", &tx_raises_once_wf);
  e.register_workflow("bad_output", &bad_output_wf);
  e.register_workflow("bad_name", &bad_name_wf);
  e.register_workflow("nul_value", &nul_value_wf);
  e.register_workflow("huge_value", &huge_value_wf);
  e.register_workflow("big_value", &big_value_wf);
  e.register_workflow("catches_big_value", &catches_big_value_wf);
  e.register_workflow("length", &length_wf);
  e.register_workflow("simple", &simple_wf);
  e.register_workflow("tx_counter", &tx_counter_wf);
  e.register_workflow("throws_bad_utf8", &throws_bad_utf8_wf);
  e.register_workflow("step_throws_bad_utf8", &step_throws_bad_utf8_wf);
  e.register_workflow("nested_sync", &nested_sync_wf);
  e.register_workflow("nested_async", &nested_async_wf);
  e.register_workflow("hang", &test::counter_wf);
  e.register_workflow("paced", &paced_wf);
  e.register_workflow("long_step", &long_step_wf);
  e.register_workflow("busy", &busy_wf);
}

/// Runs `body(engine)` with a fresh engine (options from `tweak`) on a fresh io_context;
/// afterwards the io_context is abandoned, like a process that died.
template <class Body, class Tweak>
void with_engine(const std::string& schema, Body body, Tweak tweak) {
  auto o = options(schema);
  tweak(o);
  test::with_open_engine(o, &register_all, body);
}
template <class Body>
void with_engine(const std::string& schema, Body body) {
  with_engine(schema, body, [](engine_options&) {});
}

/// Another session's lock on the journal table: every journal write waits until release().
struct journal_lock {
  std::unique_ptr<pg::connection> conn;
  std::optional<pg::transaction> tx;
  asio::awaitable<void> release() { co_await tx->rollback(); }
};

asio::awaitable<std::unique_ptr<journal_lock>> lock_journal(std::string_view schema_view) {
  const std::string schema(schema_view);
  auto lock = std::make_unique<journal_lock>();
  lock->conn = co_await pg::connection::connect(test::conninfo());
  lock->tx.emplace(lock->conn->begin());
  co_await lock->tx->exec("LOCK TABLE " + q(schema) + ".steps IN EXCLUSIVE MODE");
  co_return lock;
}

/// Watches an executor's heartbeat from a connection of the test's own.
struct heartbeat_watch {
  std::unique_ptr<pg::connection> conn;
  std::string sql;
  std::string executor_id;
  /// Milliseconds since the executor's last heartbeat.
  asio::awaitable<double> age() {
    auto r = co_await conn->exec(sql, executor_id);
    co_return r[0].get<double>(0);
  }
};

asio::awaitable<heartbeat_watch> watch_heartbeat(engine& eng) {
  heartbeat_watch w;
  w.conn = co_await pg::connection::connect(test::conninfo());
  w.sql = "SELECT extract(epoch FROM now() - heartbeat_at) * 1000 FROM " + q(eng.schema_name()) +
          ".executors WHERE id = $1";
  w.executor_id = eng.executor_id();
  co_return w;
}

/// Runs one workflow that the server refuses to journal; it must be parked with the
/// server's SQLSTATE, and its step must have run once.
void expect_refused(const std::string& workflow, const std::string& step,
                    const std::string& sqlstate) {
  probe.reset();
  events = {};
  const auto schema = test::fresh_schema("refuse");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const std::string id = "w-" + workflow;
    auto h = co_await eng.start(workflow, id);
    auto row = co_await wait_status(eng, h.id(), "parked");
    CHECK_THAT(row.reason, Catch::Contains("SQLSTATE " + sqlstate) && Catch::Contains("step 0 '") &&
                               Catch::Contains("refused by the server"));
    auto err = co_await test::error_of<workflow_parked>(h.result<int>());
    CHECK(err);
    // Give a retry loop time to show itself: it would run the step again.
    co_await test::sleep_ms(200);
    CHECK(eng.running() == 0);
    CHECK(co_await test::journal_rows(eng, h.id()) == 0);
  });
  CHECK(probe.calls[step] == 1);
  CHECK(events.count("parked") >= 1);
}

}  // namespace

TEST_CASE("a journal row the server refuses parks the workflow and the step runs once",
          "[failure][refused]") {
  SECTION("a step name that is not UTF-8") { expect_refused("bad_name", "bad_name", "22021"); }
  SECTION("a value holding a NUL character") { expect_refused("nul_value", "nul", "22P05"); }
}

TEST_CASE("a value over jsonb's size limit parks the workflow", "[failure][refused][large][slow]") {
  probe.reset();
  const auto schema = test::fresh_schema("huge");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("huge_value", "w-huge");
        // Encoding 300 MB takes a minute in a sanitized -O0 build (off the loop, which polls on).
        auto row = co_await wait_status(eng, h.id(), "parked", 40000);
        CHECK_THAT(row.reason, Catch::Contains("SQLSTATE 54000") && Catch::Contains("'huge'"));
        co_await test::sleep_ms(200);
      },
      [](engine_options& o) { o.max_value_bytes = 0; });  // the server's own limit
  CHECK(probe.calls["huge"] == 1);
}

TEST_CASE("a value over max_value_bytes parks the workflow until the limit is raised",
          "[failure][large]") {
  probe.reset();
  events = {};
  const auto schema = test::fresh_schema("big");
  const std::size_t bytes = 300000;
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("big_value", "w-big", bytes);
        auto row = co_await wait_status(eng, h.id(), "parked");
        CHECK_THAT(row.reason, Catch::Contains("step 0 'big'") &&
                                   Catch::Contains("engine_options::max_value_bytes (100000)") &&
                                   Catch::Contains(std::to_string(bytes + 2) + " bytes"));
        CHECK_THAT(row.error, Catch::Contains("durable::value_too_large"));
        auto err = co_await test::error_of<workflow_parked>(h.result<std::size_t>());
        CHECK(err);
        auto c = co_await eng.pool().acquire();
        auto steps = co_await c->exec(
            "SELECT count(*) FROM " + q(eng.schema_name()) + ".steps WHERE workflow_id = $1",
            std::string("w-big"));
        CHECK(steps[0].get<std::int64_t>(0) == 0);  // nothing was journaled
        // Refused before anything is written: inputs over the limit.
        const std::string big_inputs = letters(200000);
        auto refused = co_await test::error_of<durable::error>(
            eng.start("length", "w-big-inputs", big_inputs));
        REQUIRE(refused);
        CHECK_THAT(*refused, Catch::Contains("start('length', 'w-big-inputs')") &&
                                 Catch::Contains("max_value_bytes"));
        auto none = co_await c->exec(
            "SELECT count(*) FROM " + q(eng.schema_name()) + ".workflows WHERE id = $1",
            std::string("w-big-inputs"));
        CHECK(none[0].get<std::int64_t>(0) == 0);
        // A workflow that catches the refusal stays parked and runs no further step.
        auto caught = co_await eng.start("catches_big_value", "w-big-caught", bytes);
        auto caught_row = co_await wait_status(eng, caught.id(), "parked");
        CHECK_THAT(caught_row.error, Catch::Contains("durable::value_too_large"));
        co_await test::sleep_ms(100);
      },
      [](engine_options& o) { o.max_value_bytes = 100000; });
  CHECK(probe.calls["big"] == 2);
  CHECK(probe.calls["after"] == 0);
  CHECK(probe.seen == std::vector<std::string>{"caught"});
  // Raised, and resumed: the step runs again and the workflow finishes.
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    co_await eng.resume("w-big");
    auto h = eng.handle("w-big");
    const std::size_t n = co_await h.result<std::size_t>();
    CHECK(n == bytes);
  });
  CHECK(probe.calls["big"] == 3);
}

// [slow]: under ASan at -O0 on two cores the heartbeat's worst age here is 600-820 ms against a
// 300 ms lease (measured 2026-12-02, also with schedule firing cut to once a second), so a run
// under ASan fails on the machine's speed, not on the engine; the GCC run keeps the check.
TEST_CASE("a large value that takes longer than the lease to write keeps the heartbeat going",
          "[failure][large][lease][slow][serial]") {
  // Run alone ([serial]): the case measures how the event loop and the server keep up while
  // 48 MB travel, and a neighbour's load would only blur that.
  probe.reset();
  events = {};
  const auto schema = test::fresh_schema("bigbeat");
  const std::size_t bytes = std::size_t(48) << 20;
  const auto lease = 1000ms, beat = 100ms;
  (void)letters(bytes);  // made before the engine runs
  double worst = 0, took_ms = 0, lag = 0;
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto watch = co_await watch_heartbeat(eng);
        const auto t0 = std::chrono::steady_clock::now();
        auto h = co_await eng.start("big_value", "w-bigbeat", bytes);
        bool done = false;
        auto last = std::chrono::steady_clock::now();
        for (int i = 0; i < 6000 && !done; ++i) {
          co_await test::sleep_ms(20);
          const auto now = std::chrono::steady_clock::now();
          lag = std::max(lag, std::chrono::duration<double, std::milli>(now - last).count());
          worst = std::max(worst, co_await watch.age());
          last = std::chrono::steady_clock::now();
          done = (co_await row_of(eng, h.id())).status == "succeeded";
        }
        took_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                      .count();
        const std::size_t n = co_await h.result<std::size_t>();
        CHECK(n == bytes);
      },
      [&](engine_options& o) {
        o.heartbeat_interval = beat;
        o.lease_timeout = lease;
        o.max_value_bytes = 0;
      });
  // The heartbeat is late by what stalls the event loop (encoding the value as JSON: about
  // 40 MB/s), but never withheld: the write is given the time its size needs.
  const double lease_ms = std::chrono::duration<double, std::milli>(lease).count();
  const double allowance_ms =
      1000.0 * double(bytes) / detail::group_committer::write_allowance_bytes_per_second;
  INFO("the workflow took " << took_ms << " ms (the write's allowance is " << allowance_ms
                            << " ms); the worst heartbeat age was " << worst
                            << " ms; the longest stall of the event loop seen " << lag << " ms");
  // A write slower than the allowance counts as hanging, and then withholding the heartbeat is
  // what the engine must do; on a machine that wrote within it, nothing may be withheld.
  if (took_ms < allowance_ms) CHECK(events.count("the heartbeat is withheld") == 0);
  // A lease can lapse only when the event loop itself stalled for longer than the lease (a
  // machine busy enough to encode the value that slowly cannot send a heartbeat meanwhile,
  // whatever the engine does); with no such stall it must never lapse.
  if (lag < lease_ms && took_ms < allowance_ms) CHECK(events.count("could not be renewed") == 0);
  CHECK(probe.calls["big"] == 1);
}

TEST_CASE("journal writes without EXECUTE permission park the workflow",
          "[failure][refused][permission]") {
  probe.reset();
  const auto schema = test::fresh_schema("perm");
  const std::string role = "durable_norights_" + std::to_string(::getpid());
  // The schema is created by a privileged engine first; then a role that may use the tables
  // but not the journal functions runs the workflow.
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto c = co_await eng.pool().acquire();
    co_await c->exec("DROP ROLE IF EXISTS " + role);
    co_await c->exec("CREATE ROLE " + role + " LOGIN PASSWORD 'pw-norights'");
    co_await c->exec("GRANT USAGE ON SCHEMA " + q(schema) + " TO " + role);
    co_await c->exec("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + q(schema) +
                     " TO " + role);
    co_await c->exec("REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA " + q(schema) + " FROM PUBLIC");
  });
  auto limited = test::with_option(test::with_option(test::conninfo(), "user", role), "password",
                                   "pw-norights");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("simple", "w-perm");
        auto row = co_await wait_status(eng, h.id(), "parked");
        CHECK_THAT(row.reason, Catch::Contains("SQLSTATE 42501"));
        co_await test::sleep_ms(200);
      },
      [&](engine_options& o) {
        o.conninfo = limited;
        o.migrate = false;
        o.listen = false;
      });
  CHECK(probe.calls["one"] == 1);
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto c = co_await eng.pool().acquire();
    co_await c->exec("DROP OWNED BY " + role);
    co_await c->exec("DROP ROLE " + role);
  });
}

TEST_CASE("lock and statement timeouts are retried, never journaled as the step's failure",
          "[failure][transient]") {
  probe.reset();
  events = {};
  const auto schema = test::fresh_schema("lockto");
  constexpr int n = 20;
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        {
          auto c = co_await eng.pool().acquire();
          co_await c->exec("CREATE TABLE " + q(schema) + ".effects (v int)");
        }
        // Another session holds the journal table for a while: every journal write times out.
        auto lock = co_await lock_journal(schema);
        std::vector<workflow_handle> hs;
        const std::string table = q(schema) + ".effects";
        for (int i = 0; i < n; ++i) {
          const std::string id = "w" + std::to_string(i);
          hs.push_back(co_await eng.start("tx_counter", id, table));
        }
        co_await test::sleep_ms(800);
        co_await lock->release();
        for (auto& h : hs) {
          const int v = co_await h.result<int>();
          CHECK(v == 1);
        }
        auto c = co_await eng.pool().acquire();
        auto failed = co_await c->exec("SELECT count(*) FROM " + q(schema) +
                                       ".steps WHERE status = 'failed'");
        CHECK(failed[0].get<long>(0) == 0);
        auto effects = co_await c->exec("SELECT count(*) FROM " + table);
        CHECK(effects[0].get<long>(0) == n);  // committed with the journal row: exactly once
      },
      [&](engine_options& o) {
        o.conninfo = test::with_option(test::conninfo(), "options", "-c statement_timeout=150");
        o.io_retry_delay = 50ms;
        o.io_retry_max_delay = 200ms;
        o.max_claims_without_progress = 1000;  // this test is about retrying, not I9
      });
  CHECK(probe.calls["insert"] > n);  // retried, in fresh transactions
  CHECK(events.count("SQLSTATE 57014") >= 1);
}

TEST_CASE("a workflow whose runs keep failing is parked after its claims without progress (I9)",
          "[failure][i9]") {
  probe.reset();
  events = {};
  const auto schema = test::fresh_schema("i9");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto lock = co_await lock_journal(schema);
        auto h = co_await eng.start("simple", "w-i9");
        auto row = co_await wait_status(eng, h.id(), "parked");
        CHECK_THAT(row.reason, Catch::Contains("without journaling a step") &&
                                   Catch::Contains("max_claims_without_progress = 3") &&
                                   Catch::Contains("57014"));
        co_await lock->release();
        co_await test::sleep_ms(200);
        CHECK(eng.running() == 0);
      },
      [&](engine_options& o) {
        o.conninfo = test::with_option(test::conninfo(), "options", "-c statement_timeout=100");
        o.max_claims_without_progress = 3;
      });
  // The first run and three claims, each running the step once: bounded.
  CHECK(probe.calls["one"] == 4);
  CHECK(events.count("parked by its claim") == 1);
}

TEST_CASE("messages that are not UTF-8 are journaled with the bad bytes replaced",
          "[failure][utf8]") {
  probe.reset();
  const auto schema = test::fresh_schema("utf8");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("throws_bad_utf8", "w-wf");
    auto err = co_await test::error_of<workflow_failed>(h.result<int>());
    REQUIRE(err);
    CHECK_THAT(*err, Catch::Contains("bad \xEF\xBF\xBD\xEF\xBF\xBD bytes"));
    auto h2 = co_await eng.start("step_throws_bad_utf8", "w-step");
    const auto msg = co_await h2.result<std::string>();
    CHECK(msg == "step \xEF\xBF\xBD( bytes");
    co_await test::wait_idle(eng);
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT outcome, error->>'message' FROM " + q(schema) +
                              ".step_attempts WHERE workflow_id = 'w-step'");
    REQUIRE(r.rows() == 1);
    CHECK(r[0].get<std::string>(0) == "failed");
    CHECK(r[0].get<std::string>(1) == "step \xEF\xBF\xBD( bytes");
  });
  CHECK(detail::valid_utf8("ok \xe2\x82\xac") == "ok \xe2\x82\xac");
  CHECK(detail::valid_utf8(std::string("a\0b", 3)) ==
        "a\xEF\xBF\xBD"
        "b");
  CHECK(detail::valid_utf8("\xed\xa0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  CHECK(detail::valid_utf8("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");
  CHECK(detail::valid_utf8("\xc0\xaf") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
}

TEST_CASE("a step issued inside another step's function is rejected and the workflow parked",
          "[failure][nested]") {
  probe.reset();
  const auto schema = test::fresh_schema("nested");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    for (std::string wf : {"nested_sync", "nested_async"}) {
      const std::string id = "w-" + wf;
      auto h = co_await eng.start(wf, id);
      auto row = co_await wait_status(eng, h.id(), "parked");
      CHECK_THAT(row.reason, Catch::Contains("step 'inner' was issued while the function of step "
                                             "'outer' is running"));
      CHECK(co_await test::journal_rows(eng, h.id()) == 0);
    }
  });
  CHECK(probe.calls["outer"] == 2);
}

TEST_CASE("a journal row with an absurd step number parks that workflow, not the engine",
          "[failure][journal]") {
  probe.reset();
  const auto schema = test::fresh_schema("absurd");
  probe.hang_before = "s1";
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("hang", "w-absurd", 3);
    co_await test::wait_rows(eng, "w-absurd", 1);
    auto c = co_await eng.pool().acquire();
    co_await c->exec("INSERT INTO " + q(schema) +
                     ".steps (workflow_id, seq, name, kind, status, output, epoch) "
                     "VALUES ('w-absurd', 2147483647, 'x', 'step', 'succeeded', '1', 1)");
  });
  probe.hang_before.clear();
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto row = co_await wait_status(eng, "w-absurd", "parked");
    CHECK_THAT(row.reason, Catch::Contains("step number 2147483647"));
    // The engine works on.
    auto h = co_await eng.start("simple", "w-after");
    const int v = co_await h.result<int>();
    CHECK(v == 1);
  });
}

TEST_CASE("a second live process with a held executor id is refused", "[failure][executor-id]") {
  const auto schema = test::fresh_schema("heldid");
  auto tweak = [](engine_options& o) {
    o.executor_id = "shared-id";
    o.lease_timeout = 1000ms;
    o.heartbeat_interval = 100ms;
  };
  // The default id is unique per process and engine.
  const engine_options defaults;
  test::run([&]() -> asio::awaitable<void> {
    engine a(co_await asio::this_coro::executor, defaults);
    engine b(co_await asio::this_coro::executor, defaults);
    CHECK(a.executor_id() != b.executor_id());
    CHECK_THAT(a.executor_id(), Catch::Contains(":" + std::to_string(::getpid()) + ":"));
  }());
  with_engine(schema, [](engine&) -> asio::awaitable<void> { co_return; });  // migrate
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    ::close(ready[0]);
    try {
      with_engine(
          schema,
          [&](engine&) -> asio::awaitable<void> {
            (void)!::write(ready[1], "r", 1);
            co_await test::sleep_ms(600000);
          },
          tweak);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "holder: %s\n", e.what());
    }
    ::_exit(1);
  }
  ::close(ready[1]);
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  ::close(ready[0]);
  std::string refused;
  try {
    with_engine(
        schema, [](engine&) -> asio::awaitable<void> { co_return; }, tweak);
  } catch (const durable::error& e) {
    refused = e.what();
  }
  CHECK_THAT(refused, Catch::Contains("executor id 'shared-id' is held by a live process") &&
                          Catch::Contains("pid " + std::to_string(holder)));
  ::kill(holder, SIGKILL);
  int status = 0;
  ::waitpid(holder, &status, 0);
  // Its process is gone: the id is taken at once, without waiting for the lease.
  bool opened = false;
  with_engine(
      schema,
      [&](engine&) -> asio::awaitable<void> {
        opened = true;
        co_return;
      },
      tweak);
  CHECK(opened);
}

TEST_CASE("run_versions applies to the workflows an executor id already owns",
          "[failure][versions]") {
  probe.reset();
  const auto schema = test::fresh_schema("ownver");
  probe.hang_before = "s1";
  auto version = [](std::string v) {
    return [v](engine_options& o) {
      o.app_version = v;
      o.run_versions = {v};
    };
  };
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.start("hang", "w-v1", 3);
        co_await test::wait_rows(eng, "w-v1", 1);
      },
      version("v1"));
  probe.hang_before.clear();
  // Same executor id, version 2: it must not resume the version 1 workflow.
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        co_await test::sleep_ms(100);
        CHECK(eng.running() == 0);
        const bool recovered = co_await eng.recover("w-v1");
        CHECK(!recovered);
      },
      version("v2"));
  CHECK(probe.calls["s1"] == 0);
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = eng.handle("w-v1");
        const int sum = co_await h.result<int>();
        CHECK(sum == 3);
      },
      version("v1"));
  CHECK(probe.calls["s1"] == 1);
}

TEST_CASE("the heartbeat has its own connection and never waits behind claims",
          "[failure][lease]") {
  const auto schema = test::fresh_schema("beat");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // Hold the engine's only pooled connection: claims, journal writes and the dispatcher
        // all wait, but the lease must stay fresh.
        auto held = co_await eng.pool().acquire();
        auto watch = co_await watch_heartbeat(eng);
        double worst = 0;
        for (int i = 0; i < 30; ++i) {
          co_await test::sleep_ms(50);
          worst = std::max(worst, co_await watch.age());
        }
        CHECK(worst < 1000);  // the lease (1 s) never ran out while the pool was exhausted
      },
      [](engine_options& o) {
        o.pool_size = 1;
        o.heartbeat_interval = 100ms;
        o.lease_timeout = 1000ms;
      });
}

TEST_CASE("open() claims many workflows per statement and resumes them together",
          "[failure][bounded]") {
  probe.reset();
  const auto schema = test::fresh_schema("many");
  constexpr int n = 250;
  probe.hang_before = "s1";
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    for (int i = 0; i < n; ++i) {
      const std::string id = "m" + std::to_string(i);
      (void)co_await eng.start("hang", id, 2);
    }
    for (int i = 0; i < n; ++i) {
      const std::string id = "m" + std::to_string(i);
      co_await test::wait_rows(eng, id, 1);
    }
  });
  probe.hang_before.clear();
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // open() resumed every one with three claim statements (100 per statement).
        CHECK(eng.stats().journal_loads == 3);
        co_await test::wait_idle(eng);
        auto c = co_await eng.pool().acquire();
        auto r = co_await c->exec("SELECT count(*) FROM " + q(schema) +
                                  ".workflows WHERE status = 'succeeded'");
        CHECK(r[0].get<long>(0) == n);
      },
      [](engine_options& o) {
        o.queues.clear();
        o.listen = false;
      });
  CHECK(probe.calls["s1"] == n);
}

TEST_CASE("an executor runs at most max_running workflows", "[failure][bounded]") {
  probe.reset();
  const auto schema = test::fresh_schema("cap");
  constexpr int n = 40;
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        std::vector<workflow_handle> hs;
        for (int i = 0; i < n; ++i) {
          const std::string id = "c" + std::to_string(i);
          hs.push_back(co_await eng.enqueue({}, "busy", id));
        }
        std::size_t most = 0;
        int finished = 0;
        while (finished < n) {
          most = std::max(most, eng.running());
          auto c = co_await eng.pool().acquire();
          auto r = co_await c->exec("SELECT count(*) FROM " + q(schema) +
                                    ".workflows WHERE status = 'succeeded'");
          finished = int(r[0].get<long>(0));
          co_await test::sleep_ms(2);
        }
        CHECK(most <= 4);
        CHECK(most >= 1);
      },
      [](engine_options& o) {
        o.max_running = 4;
        o.poll_interval = 20ms;
      });
  CHECK(probe.calls["busy"] == n);
}

TEST_CASE("shutdown ends within its bounds while the database is unreachable",
          "[failure][shutdown]") {
  probe.reset();
  events = {};
  const auto schema = test::fresh_schema("down");
  with_engine(schema, [](engine&) -> asio::awaitable<void> { co_return; });  // migrate
  test::tcp_proxy proxy(test::conninfo());
  asio::io_context io;
  bool shut = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto o = options(schema);
        o.conninfo = proxy.conninfo(test::conninfo());
        o.shutdown_timeout = 1000ms;
        o.heartbeat_interval = 100ms;
        engine eng(co_await asio::this_coro::executor, o);
        register_all(eng);
        (void)co_await eng.open();
        (void)co_await eng.start("long_step", "w-long");
        while (probe.calls["long"] == 0) co_await test::sleep_ms(2);
        proxy.blackhole();  // the network to the database goes dead
        co_await eng.shutdown(300ms);
        shut = true;
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  // io.run() returns once nothing is left: every part of the engine ended. (A generous
  // limit; without bounded shutdown it would never return.)
  io.run_for(std::chrono::seconds(60));
  CHECK(io.stopped());
  CHECK(shut);
  CHECK(probe.seen == std::vector<std::string>{"cancelled"});  // the step saw cancellation
  CHECK(events.count("could not be released") == 1);
}

TEST_CASE("the event hook reports a background failure and its recovery", "[failure][hook]") {
  events = {};
  const auto schema = test::fresh_schema("hook");
  with_engine(schema, [&](engine&) -> asio::awaitable<void> {
    // Cut the LISTEN connection from the server side.
    auto killer = co_await pg::connection::connect(test::conninfo());
    for (int i = 0; i < 500; ++i) {
      auto r = co_await killer->exec(
          "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
          "WHERE query LIKE 'LISTEN %' AND position($1 in query) > 0 AND pid <> pg_backend_pid()",
          schema);
      if (r[0].get<long>(0) > 0) break;
      co_await test::sleep_ms(5);
    }
    for (int i = 0; i < 1000 && events.count("listener : works again") == 0; ++i)
      co_await test::sleep_ms(5);
  });
  CHECK(events.count("warning listener : LISTEN connection failed") == 1);
  CHECK(events.count("info listener : works again") == 1);
}

TEST_CASE("the supervisor restarts a background part that fails, and reports it",
          "[failure][supervisor]") {
  events = {};
  static int runs = 0;
  runs = 0;
  test::run([&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto o = options(test::fresh_schema("sup"));
    auto s = std::make_shared<detail::engine_state>(ex, o, "token");
    detail::supervise(s, "test-part",
                      [](std::shared_ptr<detail::engine_state>) -> asio::awaitable<void> {
                        if (++runs == 1) throw std::runtime_error("first run fails");
                        co_return;
                      });
    for (int i = 0; i < 2000 && runs < 2; ++i) co_await test::sleep_ms(2);
  }());
  CHECK(runs == 2);
  CHECK(events.count("error supervisor : test-part stopped with an error: first run fails; "
                     "restarting it in 1000 ms") == 1);
}

TEST_CASE("register_workflow takes lambdas with captures and member functions", "[api][register]") {
  struct billing {
    int rate = 3;
    asio::awaitable<int> charge(context& ctx, int units) {
      co_return co_await ctx.step("charge", [&] { return units * rate; });
    }
  };
  billing service;
  const auto schema = test::fresh_schema("callables");
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, options(schema));
    int offset = 100;
    eng.register_workflow("lambda", [&offset](context& ctx, std::string s) -> asio::awaitable<int> {
      co_return co_await ctx.step("len", [&] { return int(s.size()); }) + offset;
    });
    eng.register_workflow("member", &billing::charge, &service);
    (void)co_await eng.open();
    auto h1 = co_await eng.start("lambda", "l1", std::string("abcd"));
    auto h2 = co_await eng.start("member", "m1", 5);
    const int a = co_await h1.result<int>();
    const int b = co_await h2.result<int>();
    CHECK(a == 104);
    CHECK(b == 15);
    try {
      eng.register_workflow("late", &simple_wf);
      FAIL("registered after open()");
    } catch (const durable::error& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("before open()"));
    }
  }());
}

namespace {
std::atomic<int> mt_steps{0};
asio::awaitable<int> three_steps_wf(context& ctx, int k) {
  int sum = 0;
  for (int i = 0; i < 3; ++i) {
    std::string name = "s" + std::to_string(i);
    sum += co_await ctx.step(name, [k, i] {
      ++mt_steps;
      return k * 10 + i;
    });
  }
  co_return sum;
}
}  // namespace

TEST_CASE("an engine on an io_context run by two threads", "[failure][threads]") {
  const auto schema = test::fresh_schema("mt");
  mt_steps = 0;
  constexpr int callers = 8, per_caller = 25;
  asio::io_context io;
  std::atomic<int> ok{0}, wrong{0};
  std::atomic<bool> done{false};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto o = options(schema);
        o.on_event = {};
        o.min_severity = severity::error;
        engine eng(co_await asio::this_coro::executor, o);
        eng.register_workflow("three", &three_steps_wf);
        (void)co_await eng.open();
        // Callers on the io_context's own executor, not the engine's strand: they start and
        // await concurrently from both threads.
        auto ex = co_await asio::this_coro::executor;
        auto state = test::spawn_all(ex, callers, [&](int c) -> asio::awaitable<void> {
          for (int i = 0; i < per_caller; ++i) {
            const int k = c * per_caller + i;
            const std::string id = "mt-" + std::to_string(k);
            auto h = co_await eng.start("three", id, k);
            auto again = co_await eng.start("three", id, k);  // the same workflow, not a new one
            const int v = co_await again.result<int>();
            (v == k * 30 + 3 ? ok : wrong)++;
            (void)h;
          }
        });
        co_await test::wait_all(state);
        co_await eng.shutdown(std::chrono::milliseconds(100));
        done = true;
      },
      [&](std::exception_ptr e) {
        std::lock_guard lock(failure_mutex);
        if (e) failure = e;
      });
  std::thread second([&] { io.run_for(std::chrono::seconds(120)); });
  io.run_for(std::chrono::seconds(120));
  second.join();
  if (failure) std::rethrow_exception(failure);
  CHECK(done);
  CHECK(ok == callers * per_caller);
  CHECK(wrong == 0);
  CHECK(mt_steps == 3 * callers * per_caller);  // every step ran exactly once
}

TEST_CASE("the heartbeat is withheld while journal writes hang past the lease",
          "[failure][lease]") {
  probe.reset();
  events = {};
  const auto schema = test::fresh_schema("hung");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto lock = co_await lock_journal(schema);
        auto h = co_await eng.start("simple", "w-hung");
        auto watch = co_await watch_heartbeat(eng);
        double worst = 0;
        for (int i = 0; i < 300 && worst < 1500; ++i) {
          co_await test::sleep_ms(10);
          worst = std::max(worst, co_await watch.age());
        }
        // The write hangs, so the lease is left to run out: another executor could take over.
        CHECK(worst >= 1500);
        co_await lock->release();
        const int v = co_await h.result<int>();
        CHECK(v == 1);
        double fresh = 1e9;
        for (int i = 0; i < 300 && fresh > 500; ++i) {
          co_await test::sleep_ms(10);
          fresh = co_await watch.age();
        }
        CHECK(fresh <= 500);  // heartbeats resume once the writes go through
      },
      [](engine_options& o) {
        o.heartbeat_interval = 100ms;
        o.lease_timeout = 1000ms;
      });
  CHECK(events.count("the heartbeat is withheld") >= 1);
  CHECK(events.count("lease renewed") == 1);
  CHECK(probe.calls["one"] == 1);
}

TEST_CASE("after backends are killed for seconds, runs waiting to claim again resume soon after",
          "[failure][io][kill][slow]") {
  probe.reset();
  events = {};
  const auto schema = test::fresh_schema("storm");
  const std::string app = "durable-storm-" + std::to_string(::getpid());
  constexpr int workflows = 20, steps = 150;  // 4.5 s of steps, about 3 s of them in the storm
  int sum = 0;
  test::run([&]() -> asio::awaitable<void> {
    auto o = options(schema);
    o.conninfo = test::with_option(test::conninfo(), "application_name", app);
    o.heartbeat_interval = 100ms;
    o.lease_timeout = 60000ms;  // the lease outlives the storm: only retries are at stake
    o.io_retry_delay = 50ms;
    o.io_retry_max_delay = 60000ms;
    engine eng(co_await asio::this_coro::executor, o);
    register_all(eng);
    (void)co_await eng.open();
    std::vector<workflow_handle> handles;
    for (int i = 0; i < workflows; ++i) {
      const std::string id = "storm-" + std::to_string(i);
      handles.push_back(co_await eng.start("paced", id, steps));
    }
    // Every backend of the engine is terminated every 20 ms: claims fail too, and the runs'
    // pauses double (50 ms, 100 ms, ...). The storm lasts until some run has begun a pause of
    // 2 s or more (about 3 s in), which then outlasts the quiet spell of three heartbeats
    // (300 ms) that lets the lease keeper cut it short, however slow the machine is.
    auto killer = co_await pg::connection::connect(test::conninfo());
    const auto longest_pause = [] {
      long longest = 0;
      const std::string mark = "claiming the workflow again in ";
      for (const auto& l : events.lines)
        if (auto at = l.find(mark); at != std::string::npos)
          longest = std::max(longest, std::stol(l.substr(at + mark.size())));
      return longest;
    };
    const auto storm_limit = std::chrono::steady_clock::now() + 60s;
    while (longest_pause() < 2000 && std::chrono::steady_clock::now() < storm_limit) {
      co_await killer->exec(
          "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
          "WHERE application_name = $1 AND pid <> pg_backend_pid()",
          app);
      co_await test::sleep_ms(20);
    }
    CHECK(longest_pause() >= 2000);
    for (auto& h : handles) sum += co_await h.result<int>();
    auto r = co_await killer->exec("SELECT count(*), count(DISTINCT (workflow_id, seq)) FROM " +
                                   q(schema) + ".steps");
    CHECK(r[0].get<long>(0) == workflows * steps);
    CHECK(r[0].get<long>(1) == workflows * steps);
  }());
  CHECK(sum == workflows * (steps * (steps - 1) / 2));
  // No statement waited for its deadline (60 s) on a connection whose backend was gone: a
  // lost connection gives up its descriptor at once (pg::connection::forget_closed_socket).
  CHECK(events.count("had no complete answer within its deadline") == 0);
  // Once the database answered again, the pauses that had grown were cut down.
  CHECK(events.count("runs waiting to claim their workflow again after an I/O error do so "
                     "within io_retry_delay") >= 1);
}

TEST_CASE("a zombie cut off past its lease stops, is taken over, and writes nothing later",
          "[failure][partition][I3]") {
  probe.reset();
  events = {};
  const auto schema = test::fresh_schema("zombie");
  with_engine(schema, [](engine&) -> asio::awaitable<void> { co_return; });  // migrate
  test::tcp_proxy proxy(test::conninfo());  // holds the bytes while blackholed
  constexpr int steps = 100;
  int result = 0;
  std::size_t zombie_runs = 1;
  std::uint64_t taken_over = 0;
  std::vector<std::string> before, after;
  long rows = 0;
  test::run([&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto oa = options(schema, "exec-zombie");
    oa.conninfo = proxy.conninfo(test::conninfo());
    auto ob = options(schema, "exec-taker");
    for (auto* o : {&oa, &ob}) {
      o->heartbeat_interval = 100ms;
      o->lease_timeout = 1000ms;
    }
    engine a(ex, oa);
    engine b(ex, ob);
    register_all(a);
    register_all(b);
    (void)co_await a.open();
    (void)co_await b.open();
    auto h = co_await a.start("paced", "w-zombie", steps);
    auto watch = co_await pg::connection::connect(test::conninfo());
    const std::string count_sql =
        "SELECT count(*) FROM " + q(schema) + ".steps WHERE workflow_id = 'w-zombie'";
    const std::string row_sql =
        "SELECT status, coalesce(executor_id, ''), epoch::text, "
        "coalesce(output::text, ''), coalesce(last_error, ''), "
        "updated_at::text FROM " +
        q(schema) + ".workflows WHERE id = 'w-zombie'";
    for (int i = 0; i < 3000; ++i) {
      auto r = co_await watch->exec(count_sql);
      if (r[0].get<long>(0) >= 10) break;
      co_await test::sleep_ms(5);
    }
    proxy.blackhole();  // the executor of the run is cut off mid-write
    std::string status;
    for (int i = 0; i < 6000 && status != "succeeded"; ++i) {
      co_await test::sleep_ms(10);
      auto r = co_await watch->exec(row_sql);
      status = r[0].get<std::string>(0);
    }
    auto snapshot = [&](const pg::result& r) {
      std::vector<std::string> v;
      for (int c = 0; c < 6; ++c) v.push_back(r[0].get<std::string>(c));
      return v;
    };
    auto r1 = co_await watch->exec(row_sql);
    before = snapshot(r1);
    proxy.forward();  // the cut ends: what the zombie held back reaches the server now
    for (int i = 0; i < 3000 && a.running() > 0; ++i) co_await test::sleep_ms(10);
    co_await test::sleep_ms(500);
    zombie_runs = a.running();
    auto r2 = co_await watch->exec(row_sql);
    after = snapshot(r2);
    auto c = co_await watch->exec(count_sql);
    rows = c[0].get<long>(0);
    auto taken = b.handle("w-zombie");
    result = co_await taken.result<int>();
    taken_over = b.metrics().workflows_taken_over;
    (void)h;
  }());
  REQUIRE(before.size() == 6);
  CHECK(before[0] == "succeeded");
  CHECK(taken_over >= 1);   // the other executor took it over and finished it
  CHECK(after == before);   // the zombie wrote nothing over it
  CHECK(zombie_runs == 0);  // and its run stopped
  CHECK(rows == steps);
  CHECK(result == steps * (steps - 1) / 2);
  CHECK(events.count("could not be renewed") >= 1);  // the zombie's lease ran out in the cut
}

TEST_CASE("an engine in a 63-byte schema whose name holds $fn$ and a quote", "[failure][schema]") {
  probe.reset();
  std::string schema = "t_$fn$\"q_" + std::to_string(::getpid()) + "_";
  schema += std::string(63 - schema.size(), 'x');
  REQUIRE(schema.size() == 63);
  events = {};
  bool shut = false;
  test::run([&]() -> asio::awaitable<void> {
    auto o = options(schema);
    o.poll_interval = std::chrono::hours(1);  // only the notification can wake the dispatcher
    engine eng(co_await asio::this_coro::executor, o);
    register_all(eng);
    (void)co_await eng.open();
    co_await test::sleep_ms(100);  // the listener is up
    // Enqueued by another engine, so that only the NOTIFY on the schema's channel can wake
    // this one's dispatcher.
    engine producer(co_await asio::this_coro::executor, options(schema, "producer"));
    register_all(producer);
    auto h = co_await producer.enqueue({}, "simple", "w-long-schema");
    const int v = co_await h.result<int>();
    CHECK(v == 1);
    co_await eng.shutdown(std::chrono::milliseconds(100));
    shut = true;
  }());
  CHECK(shut);
  CHECK(events.count("could not be released") == 0);
}

TEST_CASE("SQLSTATEs are classified transient or permanent as the failure model says",
          "[failure][classify]") {
  for (const char* transient : {"08000", "08006", "08P01", "40001", "40P01", "40003", "57014",
                                "55P03", "53300", "53200", "57P01", "57P02", "57P03", "58030"})
    CHECK(detail::is_transient_sqlstate(transient));
  for (const char* permanent : {"22021", "22P05", "54000", "42501", "42883", "42P01", "23505",
                                "23514", "P0001", "XX000", "", "DU001"})
    CHECK_FALSE(detail::is_transient_sqlstate(permanent));
}

TEST_CASE("transient SQL errors in a transactional step rerun it, never journaled as failed",
          "[failure][transient]") {
  for (const std::string code : {"40001", "40P01", "55P03", "57014"}) {
    probe.reset();
    events = {};
    probe.seen.push_back(code);
    const auto schema = test::fresh_schema("txstate");
    with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
      const std::string fn = q(schema) + ".raise_state";
      {
        auto c = co_await eng.pool().acquire();
        co_await c->exec("CREATE FUNCTION " + fn +
                         "(code text) RETURNS void LANGUAGE plpgsql AS "
                         "$$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = code; END $$");
      }
      auto h = co_await eng.start("tx_raises_once", "w-tx", fn);
      const int v = co_await h.result<int>();
      CHECK(v == 7);
      auto c = co_await eng.pool().acquire();
      auto r = co_await c->exec("SELECT status FROM " + q(schema) + ".steps");
      REQUIRE(r.rows() == 1);
      CHECK(r[0].get<std::string>(0) == "succeeded");
    });
    INFO("SQLSTATE " << code);
    CHECK(probe.calls["raise-once"] == 2);
    if (code == "40001" || code == "40P01")  // lost a race: run again at once, in the run
      CHECK(events.count("SQLSTATE " + code) == 0);
    else  // the run is retried, and the hook hears of it
      CHECK(events.count("SQLSTATE " + code) >= 1);
  }
}

TEST_CASE("a final state the server refuses parks the workflow instead", "[failure][refused]") {
  probe.reset();
  const auto schema = test::fresh_schema("badout");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("bad_output", "w-out");
    auto row = co_await wait_status(eng, h.id(), "parked");
    CHECK_THAT(row.reason,
               Catch::Contains("its final state could not be written") && Catch::Contains("22P05"));
    co_await test::sleep_ms(100);
    CHECK(eng.running() == 0);
  });
}

TEST_CASE("a journal function that does not exist parks the workflow", "[failure][refused]") {
  probe.reset();
  const auto schema = test::fresh_schema("nofn");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    {
      auto c = co_await eng.pool().acquire();
      co_await c->exec("DROP FUNCTION " + q(schema) + ".append_step");
    }
    auto h = co_await eng.start("simple", "w-nofn");
    auto row = co_await wait_status(eng, h.id(), "parked");
    CHECK_THAT(row.reason, Catch::Contains("SQLSTATE 42883"));
    co_await test::sleep_ms(100);
  });
  CHECK(probe.calls["one"] == 1);
}

TEST_CASE("a workflow that catches the shutdown's refusal still ends without a final state",
          "[failure][shutdown]") {
  probe.reset();
  const auto schema = test::fresh_schema("released");
  probe.hang_before = "b";
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, options(schema));
    register_all(eng);
    (void)co_await eng.open();
    (void)co_await eng.start("catches_all", "w-rel");
    co_await test::wait_rows(eng, "w-rel", 1);
    auto ex = co_await asio::this_coro::executor;
    auto stop = test::spawn_all(ex, 1, [&](int) { return eng.shutdown(std::chrono::seconds(5)); });
    co_await test::sleep_ms(50);  // the engine is stopping now
    probe.hang_before.clear();    // the workflow goes on to step "b", which is refused
    co_await test::wait_all(stop);
    auto row = co_await row_of(eng, "w-rel");
    CHECK(row.status == "running");  // not "succeeded" with the fallback -1
    CHECK(co_await test::journal_rows(eng, "w-rel") == 1);
  }());
  CHECK(probe.calls["b"] == 0);
  // Another engine resumes it and step "b" runs.
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = eng.handle("w-rel");
    const int v = co_await h.result<int>();
    CHECK(v == 2);
  });
}

// ---- shutdown during every kind of wait -----------------------------------------------------

namespace {

/// What waiter_wf waits in after its first step, and how the second engine lets it finish.
enum class wait_kind { sleep, recv, event, child, all_sleep, all_recv, all_child, any_sleep, map };

const char* to_string(wait_kind k) {
  static constexpr const char* names[] = {
      "sleep", "recv", "event", "child", "all_sleep", "all_recv", "all_child", "any_sleep", "map"};
  return names[int(k)];
}

asio::awaitable<int> slow_item(int v) {
  co_await test::sleep_ms(400);
  co_return v;
}

/// A child that waits for a message "go" and returns it plus one.
asio::awaitable<int> go_child_wf(context& ctx) {
  const auto v = co_await ctx.recv<int>("go", 60s);
  co_return v.value_or(-100) + 1;
}

/// Publishes the event "k" = 5.
asio::awaitable<int> publisher_wf(context& ctx) {
  co_await ctx.set_event("k", 5);
  co_return 0;
}

/// Journals a step, then waits in the way `kind` says; every kind returns 10 + 5 = 15 once it
/// has what it waits for (a message "go" of 5, the event "k" of workflow "w-pub" = 5, a child
/// sent "go" = 4 that returns 5, or a sleep of 1.5 s worth 5).
asio::awaitable<int> waiter_wf(context& ctx, int kind) {
  const int base = co_await ctx.step("begin", [] { return 10; });
  switch (wait_kind(kind)) {
    case wait_kind::sleep:
      co_await ctx.sleep_for(1500ms);
      co_return base + 5;
    case wait_kind::recv:
      co_return base + (co_await ctx.recv<int>("go", 60s)).value_or(-100);
    case wait_kind::event:
      co_return base + (co_await ctx.get_event<int>("w-pub", "k", 60s)).value_or(-100);
    case wait_kind::child: {
      auto child = co_await ctx.start_child("go_child");
      co_return base + co_await child.result<int>();
    }
    case wait_kind::all_sleep: {
      auto a = ctx.sleep_for(1500ms);
      auto b = ctx.step("five", [] { return 5; });
      auto [x, y] = co_await ctx.all(std::move(a), std::move(b));
      co_return base + y;
    }
    case wait_kind::all_recv: {
      auto a = ctx.recv<int>("go", 60s);
      auto b = ctx.sleep_for(200ms);
      auto [x, y] = co_await ctx.all(std::move(a), std::move(b));
      co_return base + x.value_or(-100);
    }
    case wait_kind::all_child: {
      auto child = co_await ctx.start_child("go_child");
      auto a = child.result<int>();
      auto b = ctx.sleep_for(200ms);
      auto [x, y] = co_await ctx.all(std::move(a), std::move(b));
      co_return base + x;
    }
    case wait_kind::any_sleep: {
      auto a = ctx.sleep_for(1500ms);
      auto b = ctx.get_event<int>("w-none", "never", 60s);
      const auto w = co_await ctx.any(std::move(a), std::move(b));
      co_return base + (w.index() == 0 ? 5 : -100);
    }
    case wait_kind::map: {
      std::vector<int> items{2, 3};
      const auto r = co_await ctx.map("slow", std::move(items), 2, &slow_item);
      co_return base + r[0] + r[1];
    }
  }
  co_return -1;
}

void register_waiters(engine& e) {
  e.register_workflow("waiter", &waiter_wf);
  e.register_workflow("go_child", &go_child_wf);
  e.register_workflow("publisher", &publisher_wf);
}

}  // namespace

TEST_CASE("shutdown during any join or wait leaves the workflow resumable, never failed",
          "[failure][shutdown]") {
  const auto k = GENERATE(wait_kind::sleep, wait_kind::recv, wait_kind::event, wait_kind::child,
                          wait_kind::all_sleep, wait_kind::all_recv, wait_kind::all_child,
                          wait_kind::any_sleep, wait_kind::map);
  INFO("wait kind: " << to_string(k));
  const auto schema = test::fresh_schema(std::string("sd_") + to_string(k));
  auto o = options(schema, "exec-sd-a");
  o.unload_after = std::chrono::hours(1);  // every wait stays in its run
  const std::string id = std::string("w-sd-") + to_string(k);
  test::with_open_engine(o, &register_waiters, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("waiter", id, int(k));
    co_await test::wait_rows(eng, id, 1);
    co_await test::sleep_ms(150);  // inside its wait now (a map's items inside their steps)
    co_await eng.shutdown(0ms);    // no grace: the waits receive cancellation
    auto row = co_await row_of(eng, id);
    INFO("status " << row.status << ": " << row.reason << " " << row.error);
    CHECK(row.status == "running");  // released, neither failed nor written
  });
  // Another executor takes it over and finishes it.
  auto o2 = options(schema, "exec-sd-b");
  o2.unload_after = std::chrono::hours(1);
  o2.heartbeat_interval = 100ms;  // its maintenance finds exec-sd-a's workflows released
  o2.poll_interval = 50ms;
  test::with_open_engine(o2, &register_waiters, [&](engine& eng) -> asio::awaitable<void> {
    if (k == wait_kind::recv || k == wait_kind::all_recv) (void)co_await eng.send(id, "go", 5);
    if (k == wait_kind::event) (void)co_await eng.start("publisher", "w-pub");
    if (k == wait_kind::child || k == wait_kind::all_child) {
      const std::string child = id + "/1";
      co_await test::wait_rows(eng, id, 2);  // the child's start is journaled
      (void)co_await eng.send(child, "go", 4);
    }
    auto h = eng.handle(id);
    CHECK(co_await h.result<int>() == 15);
  });
}

TEST_CASE("a nondeterminism_error the replay did not raise still parks the workflow",
          "[failure][I5]") {
  const auto schema = test::fresh_schema("foreign_nd");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("throws_nondeterminism", "w-nd");
    auto row = co_await wait_status(eng, "w-nd", "parked");
    CHECK_THAT(row.reason, Catch::Contains("w-other"));
    CHECK_THAT(row.error, Catch::Contains("durable::nondeterminism_error"));
  });
}
