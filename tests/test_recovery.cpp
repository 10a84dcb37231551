// Failure handling a person can trust, against the real server: journaled retry policies
// (attempts recorded, counts that survive a crash, long backoffs that unload the workflow),
// permanent errors, the dead-letter status and retry(), per-step timeouts, workflow deadlines,
// cancel() from another engine (a step blocked on a socket), resume(), fork(), and
// transactions that lose a serialization race.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <thread>

#include "support/workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::probe;
using test::row_of;
using test::wait_status;

namespace {

using test::q;  // tests/support/workflows.hpp

// What the workflows under test do, set by each test.
struct knobs {
  int fail = 0;            // attempts that throw std::runtime_error before one succeeds
  bool permanent = false;  // throw durable::permanent_error instead
  bool logic = false;      // throw std::logic_error (not in retry_on's list)
  bool slow_first = true;  // only the first attempt of "slow" is slow
  int serial_reads = 0;    // transactions of "serial" that have read the counter
};
knobs k;

asio::awaitable<int> flaky_wf(context& ctx, int max_attempts, int initial_ms) {
  const retry policy{.max_attempts = max_attempts,
                     .initial = std::chrono::milliseconds(initial_ms)};
  const int v = co_await ctx.step(
      "call",
      [](const step_info& info) {
        ++probe.calls["call"];
        probe.seen.push_back(std::to_string(info.attempt));
        if (k.permanent) throw permanent_error("HTTP 400: the document is empty");
        if (k.fail > 0) {
          --k.fail;
          throw std::runtime_error("HTTP 503 on attempt " + std::to_string(info.attempt));
        }
        return 40 + info.attempt;
      },
      policy);
  const int w = co_await ctx.step("after", [] { return 1; });
  co_return v + w;
}

asio::awaitable<int> picky_wf(context& ctx) {
  const retry policy{.max_attempts = 5,
                     .initial = 5ms,
                     .retry_if = &retry_on<std::range_error, std::length_error>};
  co_return co_await ctx.step(
      "call",
      [] {
        ++probe.calls["call"];
        if (k.logic) throw std::logic_error("a bug, not an outage");
        if (k.fail > 0) {
          --k.fail;
          throw std::range_error("out of range, for now");
        }
        return 7;
      },
      policy);
}

asio::awaitable<int> handles_wf(context& ctx) {
  int v = 0;
  try {
    v = co_await ctx.step("call", []() -> int {
      ++probe.calls["call"];
      throw permanent_error("no such customer");
    });
  } catch (const step_failed& e) {
    probe.seen.push_back(e.error_type() + "|" + e.error_message());
    v = -1;
  }
  const int after = co_await ctx.step("after", [] { return 100; });
  co_return v + after;
}

/// Its first attempt sleeps 30 s, or ignores cancellation for 400 ms when `ignore`.
asio::awaitable<int> slow_wf(context& ctx, int timeout_ms, int max_attempts, bool ignore) {
  const retry policy{.max_attempts = max_attempts,
                     .initial = 5ms,
                     .timeout = std::chrono::milliseconds(timeout_ms)};
  co_return co_await ctx.step(
      "slow",
      [ignore](const step_info& info) -> asio::awaitable<int> {
        ++probe.calls["slow"];
        if (ignore) probe.seen.push_back("attempt " + std::to_string(info.attempt));
        if (info.attempt == 1 || !k.slow_first) {
          if (ignore) {
            co_await asio::this_coro::reset_cancellation_state(
                [](asio::cancellation_type) { return asio::cancellation_type::none; });
            co_await test::sleep_ms(400);
            ++probe.calls["slow-finished-anyway"];
            probe.seen.push_back("abandoned ended");
            co_return -1;
          }
          co_await test::sleep_ms(30000);
        }
        co_return info.attempt;
      },
      policy);
}

/// A step that waits `ms` (cancellable), after a first step.
asio::awaitable<int> nap_wf(context& ctx, int ms) {
  co_await ctx.step("first", [] { ++probe.calls["first"]; });
  co_return co_await ctx.step("nap", [ms]() -> asio::awaitable<int> {
    ++probe.calls["nap"];
    co_await test::sleep_ms(ms);
    co_return 1;
  });
}

/// A step blocked on a socket that never delivers a byte.
asio::awaitable<int> blocked_wf(context& ctx, int port) {
  co_await ctx.step("first", [] { ++probe.calls["first"]; });
  co_return co_await ctx.step("read", [port]() -> asio::awaitable<int> {
    ++probe.calls["read"];
    asio::ip::tcp::socket sock(co_await asio::this_coro::executor);
    const asio::ip::tcp::endpoint to(asio::ip::make_address("127.0.0.1"),
                                     static_cast<unsigned short>(port));
    co_await sock.async_connect(to, asio::use_awaitable);
    char byte = 0;
    try {
      co_await asio::async_read(sock, asio::buffer(&byte, 1), asio::use_awaitable);
    } catch (const std::system_error& e) {
      probe.seen.push_back("read ended: " + e.code().message());
      throw;
    }
    co_return int(byte);
  });
}

/// A read-modify-write of one counter row in a SERIALIZABLE transaction; the two runs of the
/// test both read before either writes, so one of them loses the race (SQLSTATE 40001).
asio::awaitable<int> serial_wf(context& ctx, std::string table) {
  co_return co_await ctx.transaction("bump", [&](pg::transaction& tx) -> asio::awaitable<int> {
    ++probe.calls["bump"];
    co_await tx.exec("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE");
    auto r = co_await tx.exec("SELECT v FROM " + table + " WHERE id = 1");
    const int v = r[0].get<int>(0);
    if (++k.serial_reads <= 2)  // the first two attempts wait for each other (up to 2 s)
      for (int i = 0; i < 400 && k.serial_reads < 2; ++i) co_await test::sleep_ms(5);
    co_await tx.exec("UPDATE " + table + " SET v = $1 WHERE id = 1", v + 1);
    co_return v + 1;
  });
}

/// A synchronous step with a timeout: refused, it cannot be interrupted.
asio::awaitable<int> sync_timeout_wf(context& ctx) {
  co_return co_await ctx.step(
      "sync",
      [] {
        ++probe.calls["sync"];
        return 1;
      },
      retry{.timeout = 100ms});
}

/// Handles a step's final failure by catching the library's base class, which also catches
/// the unload of a long backoff (a run_released): the run must still stop there.
asio::awaitable<int> catcher_wf(context& ctx) {
  int v = 0;
  bool failed = false;
  try {
    v = co_await ctx.step(
        "call",
        [] {
          if (++probe.calls["call"] == 1) throw std::runtime_error("HTTP 503");
          return 1;
        },
        retry{.max_attempts = 3, .initial = 1000ms});
  } catch (const durable::error& e) {
    probe.seen.push_back(std::string("caught: ") + e.what());
    failed = true;
  }
  if (failed)
    v = co_await ctx.step("fallback", [] {
      ++probe.calls["fallback"];
      return -1;
    });
  co_return v;
}

/// The abandoned first attempt ignores cancellation and reads ctx afterwards.
/// Its first attempt ignores cancellation for 600 ms and then writes a local of the workflow;
/// the backoff after it is 300 ms, in the run.
asio::awaitable<int> stubborn_wf(context& ctx) {
  int written_late = 0;
  const int v = co_await ctx.step(
      "stubborn",
      [&written_late](const step_info& info) -> asio::awaitable<int> {
        if (info.attempt == 1) {
          co_await asio::this_coro::reset_cancellation_state(
              [](asio::cancellation_type) { return asio::cancellation_type::none; });
          co_await test::sleep_ms(600);
          written_late = 1;  // the workflow's frame must still be there (ASan checks)
          probe.seen.push_back("abandoned attempt ended");
        }
        co_return info.attempt;
      },
      retry{.max_attempts = 3, .initial = 300ms, .timeout = 100ms});
  co_return v + written_late;
}

/// A step, a durable sleep of `ms`, a step.
asio::awaitable<int> sleeper_wf(context& ctx, int ms) {
  co_await ctx.step("before", [] { ++probe.calls["before"]; });
  co_await ctx.sleep_for(std::chrono::milliseconds(ms));
  co_return co_await ctx.step("after", [] {
    ++probe.calls["after"];
    return 1;
  });
}

/// Version 1: a, b, c. Version 2 changes b into b2 behind patched("b2"). Version 3 keeps only
/// b2 and retires the patch with deprecate_patch. Stalls before c when the probe says so.
asio::awaitable<int> versioned_wf(context& ctx) {
  co_await ctx.step("a", [] { ++probe.calls["a"]; });
  int v = 0;
  bool new_path = false;
  if (probe.version == 2) {
    new_path = co_await ctx.patched("b2");
  } else if (probe.version >= 3) {
    co_await ctx.deprecate_patch("b2");
    new_path = true;
  }
  if (new_path) {
    v = co_await ctx.step("b2", [] {
      ++probe.calls["b2"];
      return 20;
    });
  } else {
    v = co_await ctx.step("b", [] {
      ++probe.calls["b"];
      return 10;
    });
  }
  co_await test::maybe_hang("c");
  co_return v + co_await ctx.step("c", [] {
    ++probe.calls["c"];
    return 1;
  });
}

asio::awaitable<std::string> keys_wf(context& ctx) {
  auto key = co_await ctx.step(
      "charge",
      [&](const step_info& info) -> asio::awaitable<std::string> {
        if (info.attempt == 1) {
          co_await asio::this_coro::reset_cancellation_state(
              [](asio::cancellation_type) { return asio::cancellation_type::none; });
          co_await test::sleep_ms(300);
          probe.seen.push_back("abandoned: " + ctx.workflow_id() + " " + ctx.idempotency_key());
        }
        co_return ctx.idempotency_key();
      },
      retry{.max_attempts = 2, .initial = 5ms, .timeout = 100ms});
  co_await ctx.step("next", [] { return 0; });
  co_return key;
}

int running_now = 0, running_max = 0;
/// Its first step fails once when `flaky` (a backoff that unloads it); the second runs `ms`,
/// counting the runs of the queue at that point.
asio::awaitable<int> queued_wf(context& ctx, std::string tag, bool flaky, int ms) {
  co_await ctx.step(
      "first",
      [&] {
        if (flaky && ++probe.calls["flaky-" + tag] == 1) throw std::runtime_error("503");
      },
      retry{.max_attempts = 2, .initial = 400ms});
  co_await ctx.step("work", [&]() -> asio::awaitable<void> {
    ++running_now;
    running_max = std::max(running_max, running_now);
    co_await test::sleep_ms(ms);
    --running_now;
  });
  co_return 0;
}

void register_all(engine& e) {
  e.register_workflow("catcher", &catcher_wf);
  e.register_workflow("keys", &keys_wf);
  e.register_workflow("versioned", &versioned_wf);
  e.register_workflow("sleeper", &sleeper_wf);
  e.register_workflow("stubborn", &stubborn_wf);
  e.register_workflow("queued", &queued_wf);
  e.register_workflow("sync_timeout", &sync_timeout_wf);
  e.register_workflow("flaky", &flaky_wf);
  e.register_workflow("picky", &picky_wf);
  e.register_workflow("handles", &handles_wf);
  e.register_workflow("slow", &slow_wf);
  e.register_workflow("nap", &nap_wf);
  e.register_workflow("blocked", &blocked_wf);
  e.register_workflow("serial", &serial_wf);
  e.register_workflow("counter", &test::counter_wf);
}

engine_options options(const std::string& schema, const std::string& id = "exec-r") {
  auto o = test::options(schema, id);
  o.io_retry_delay = 10ms;
  o.poll_interval = 50ms;
  o.min_severity = severity::error;
  return o;
}

template <class Body, class Tweak>
void with_engine(const std::string& schema, Body body, Tweak tweak,
                 const std::string& id = "exec-r") {
  auto o = options(schema, id);
  tweak(o);
  test::with_open_engine(o, &register_all, body);
}
template <class Body>
void with_engine(const std::string& schema, Body body) {
  with_engine(schema, body, [](engine_options&) {});
}

/// Whether the step after the sleep of workflow `id` committed at or after the wake-up time the
/// sleep journaled (step 1, kind 'sleep', its output in microseconds since the epoch).
asio::awaitable<bool> woke_on_time(engine& eng, std::string_view id_view) {
  const std::string id(id_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec(
      "SELECT s.kind = 'sleep' AND a.completed_at >= to_timestamp(s.output::text::bigint / 1e6) "
      "FROM " +
          q(eng.schema_name()) + ".steps s JOIN " + q(eng.schema_name()) +
          ".steps a ON a.workflow_id = s.workflow_id AND a.seq = 2 "
          "WHERE s.workflow_id = $1 AND s.seq = 1",
      id);
  co_return r.rows() == 1 && r[0].get<bool>(0);
}

struct attempt_row {
  int seq, attempt;
  std::string outcome, error_type, message;
  bool has_next;  // next_attempt_at is set, and after the attempt ended
};

asio::awaitable<std::vector<attempt_row>> attempts_of(engine& eng, std::string_view id_view) {
  const std::string id(id_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec(
      "SELECT seq, attempt, outcome, coalesce(error->>'type', ''), coalesce(error->>'message', "
      "''), coalesce(next_attempt_at > ended_at, false) FROM " +
          q(eng.schema_name()) + ".step_attempts WHERE workflow_id = $1 ORDER BY id",
      id);
  std::vector<attempt_row> out;
  for (const pg::row row : r)
    out.push_back({row.get<int>(0), row.get<int>(1), row.get<std::string>(2),
                   row.get<std::string>(3), row.get<std::string>(4), row.get<bool>(5)});
  co_return out;
}

/// The query docs/failures.md gives operators: a dead-lettered workflow's reason, attempts,
/// last error and next attempt, in one statement.
struct dead_letter_view {
  std::string status, reason, step, last_error;
  int failed_attempts = 0;
  bool next_attempt_set = false;
};
asio::awaitable<dead_letter_view> dead_letter_query(engine& eng, std::string_view id_view) {
  const std::string id(id_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec(
      "SELECT status, status_reason, step, last_error, failed_attempts, "
      "next_attempt_at IS NOT NULL FROM " +
          q(eng.schema_name()) + ".step_retries WHERE workflow_id = $1",
      id);
  if (r.rows() != 1) throw std::runtime_error("step_retries has no single row for " + id);
  co_return dead_letter_view{r[0].get<std::string>(0), r[0].get<std::string>(1),
                             r[0].get<std::string>(2), r[0].get<std::string>(3),
                             r[0].get<int>(4),         r[0].get<bool>(5)};
}

}  // namespace

TEST_CASE("every failed attempt is recorded before the next one, with its error and due time",
          "[retry]") {
  probe.reset();
  k = {};
  k.fail = 2;
  const auto schema = test::fresh_schema("attempts");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("flaky", "w-flaky", 5, 10);
    const int v = co_await h.result<int>();
    CHECK(v == 44);  // the third attempt's value, plus one
    const auto attempts = co_await attempts_of(eng, "w-flaky");
    REQUIRE(attempts.size() == 2);
    for (int i = 0; i < 2; ++i) {
      CHECK(attempts[i].seq == 0);
      CHECK(attempts[i].attempt == i + 1);
      CHECK(attempts[i].outcome == "retrying");
      CHECK(attempts[i].error_type == "std::runtime_error");
      CHECK(attempts[i].message == "HTTP 503 on attempt " + std::to_string(i + 1));
      CHECK(attempts[i].has_next);
    }
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT attempts FROM " + q(schema) +
                              ".steps WHERE workflow_id = 'w-flaky' AND seq = 0");
    CHECK(r[0].get<int>(0) == 3);
  });
  CHECK(probe.seen == std::vector<std::string>{"1", "2", "3"});
}

TEST_CASE("a crash in the middle of a retry sequence continues the count", "[retry][crash]") {
  probe.reset();
  k = {};
  k.fail = 3;
  const auto schema = test::fresh_schema("count");
  // The first process fails twice, then "crashes" during the backoff before attempt 3.
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("flaky", "w-count", 6, 400);
    co_await test::wait_rows(eng, "w-count", 1, "step_attempts");
  });
  CHECK(probe.seen == std::vector<std::string>{"1"});
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int v = co_await eng.handle("w-count").result<int>();
        CHECK(v == 45);
        const auto attempts = co_await attempts_of(eng, "w-count");
        REQUIRE(attempts.size() == 3);
        for (int i = 0; i < 3; ++i) CHECK(attempts[i].attempt == i + 1);
      },
      [](engine_options& o) { o.unload_after = 1h; });
  // Attempt 2 after the restart, never attempt 1 again.
  CHECK(probe.seen == std::vector<std::string>{"1", "2", "3", "4"});
}

TEST_CASE("a permanent error stops at once and dead-letters the workflow with its reason",
          "[retry][dead-letter]") {
  probe.reset();
  k = {};
  k.permanent = true;
  const auto schema = test::fresh_schema("permanent");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("flaky", "w-400", 5, 10);
    auto err = co_await test::error_of<workflow_dead_letter>(h.result<int>());
    REQUIRE(err);
    CHECK_THAT(*err, Catch::Contains("step 0 'call' failed permanently") &&
                         Catch::Contains("durable::permanent_error: HTTP 400"));
    const auto row = co_await row_of(eng, "w-400");
    CHECK(row.status == "dead_letter");
    const auto j = nlohmann::json::parse(row.error);
    CHECK(j["type"] == "durable::permanent_error");
    CHECK(j["message"] == "HTTP 400: the document is empty");
    CHECK(j["seq"] == 0);
    CHECK(j["step"] == "call");
    CHECK(j["attempts"] == 1);
    const auto v = co_await dead_letter_query(eng, "w-400");
    CHECK(v.status == "dead_letter");
    CHECK(v.step == "call");
    CHECK(v.failed_attempts == 1);
    CHECK(v.last_error == "HTTP 400: the document is empty");
    CHECK_FALSE(v.next_attempt_set);
    // Never retried silently.
    co_await test::sleep_ms(200);
    const auto again = co_await row_of(eng, "w-400");
    CHECK(again.status == "dead_letter");
  });
  CHECK(probe.calls["call"] == 1);
}

TEST_CASE("retry_if chooses the errors worth another attempt", "[retry]") {
  const auto schema = test::fresh_schema("picky");
  probe.reset();
  k = {};
  k.fail = 2;
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("picky", "w-range");
    const int v = co_await h.result<int>();
    CHECK(v == 7);
  });
  CHECK(probe.calls["call"] == 3);
  probe.reset();
  k = {};
  k.logic = true;
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("picky", "w-logic");
    auto err = co_await test::error_of<workflow_dead_letter>(h.result<int>());
    REQUIRE(err);
    CHECK_THAT(*err, Catch::Contains("std::logic_error: a bug, not an outage"));
  });
  CHECK(probe.calls["call"] == 1);
}

TEST_CASE("exhausted attempts dead-letter the workflow and retry runs the step again",
          "[retry][dead-letter]") {
  probe.reset();
  k = {};
  k.fail = 1000;
  const auto schema = test::fresh_schema("exhaust");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("flaky", "w-503", 3, 10);
    auto err = co_await test::error_of<workflow_dead_letter>(h.result<int>());
    REQUIRE(err);
    CHECK_THAT(*err, Catch::Contains("failed after 3 attempts") &&
                         Catch::Contains("HTTP 503 on attempt 3"));
    const auto v = co_await dead_letter_query(eng, "w-503");
    CHECK(v.failed_attempts == 3);
    CHECK(v.last_error == "HTTP 503 on attempt 3");
    CHECK_THAT(v.reason, Catch::Contains("retry"));
    const bool not_dead = co_await eng.retry("no-such-workflow");
    CHECK_FALSE(not_dead);

    k.fail = 0;  // the service recovered
    const bool retried = co_await eng.retry("w-503");
    CHECK(retried);
    const int out = co_await h.result<int>();
    CHECK(out == 45);  // attempt 4: numbers never restart
    const auto attempts = co_await attempts_of(eng, "w-503");
    REQUIRE(attempts.size() == 4);  // the history stays: two retrying, one failed, the reset
    CHECK(attempts[0].outcome == "retrying");
    CHECK(attempts[1].outcome == "retrying");
    CHECK(attempts[2].outcome == "failed");
    CHECK(attempts[3].outcome == "reset");
    const bool again = co_await eng.retry("w-503");
    CHECK_FALSE(again);  // it succeeded: nothing to retry
  });
  CHECK(probe.seen == std::vector<std::string>{"1", "2", "3", "4"});
}

TEST_CASE("a workflow that handles a step's final failure goes on, and replay repeats it",
          "[retry]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("handles");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("handles", "w-handles");
    const int v = co_await h.result<int>();
    CHECK(v == 99);
    // A fork from the end replays both the failure and the next step without running them.
    auto f = co_await eng.fork("w-handles", 2, "w-handles-2");
    const int again = co_await f.result<int>();
    CHECK(again == 99);
  });
  CHECK(probe.calls["call"] == 1);  // the fork replayed the failure without calling the step
  CHECK(probe.seen == std::vector<std::string>{"durable::permanent_error|no such customer",
                                               "durable::permanent_error|no such customer"});
}

TEST_CASE("a long backoff unloads the workflow and another executor claims it when due",
          "[retry][unload]") {
  probe.reset();
  k = {};
  k.fail = 1;
  const auto schema = test::fresh_schema("unload");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.start("flaky", "w-unload", 3, 1000);
        const auto row = co_await wait_status(eng, "w-unload", "sleeping");
        CHECK(row.status == "sleeping");
        co_await test::wait_idle(eng);  // no coroutine, no slot held
        auto c = co_await eng.pool().acquire();
        auto r = co_await c->exec("SELECT executor_id IS NULL, wake_at > now() FROM " + q(schema) +
                                  ".workflows WHERE id = 'w-unload'");
        CHECK(r[0].get<bool>(0));
        CHECK(r[0].get<bool>(1));
        co_await eng.shutdown(0ms);
      },
      [](engine_options& o) { o.unload_after = 100ms; });
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int v = co_await eng.handle("w-unload").result<int>();
        CHECK(v == 43);
        auto st = co_await eng.handle("w-unload").status();
        CHECK(st.executor_id == "exec-other");
      },
      [](engine_options& o) { o.heartbeat_interval = 50ms; }, "exec-other");
  CHECK(probe.seen == std::vector<std::string>{"1", "2"});
}

TEST_CASE("attempts count as progress: a long retry sequence is not parked by I9",
          "[retry][unload]") {
  probe.reset();
  k = {};
  k.fail = 5;
  const auto schema = test::fresh_schema("i9");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("flaky", "w-long", 8, 20);
        const int v = co_await h.result<int>();
        CHECK(v == 47);
      },
      [](engine_options& o) {
        o.unload_after = 1ms;  // every backoff unloads, every attempt is a new claim
        o.max_claims_without_progress = 2;
      });
  CHECK(probe.calls["call"] == 6);
}

TEST_CASE("a step past its timeout receives cancellation and the attempt counts as failed",
          "[timeout]") {
  probe.reset();
  k = {};
  k.slow_first = false;
  const auto schema = test::fresh_schema("timeout");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("slow", "w-slow", 100, 2, false);
    auto err = co_await test::error_of<workflow_dead_letter>(h.result<int>());
    REQUIRE(err);
    CHECK_THAT(*err, Catch::Contains("durable::step_timeout") &&
                         Catch::Contains("took longer than its 100 ms timeout"));
    const auto attempts = co_await attempts_of(eng, "w-slow");
    REQUIRE(attempts.size() == 2);
    CHECK(attempts[0].error_type == "durable::step_timeout");
    CHECK(attempts[1].outcome == "failed");
  });
  CHECK(probe.calls["slow"] == 2);
}

TEST_CASE("a timeout on a step that cannot be interrupted parks the workflow", "[timeout]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("synctimeout");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("sync_timeout", "w-sync");
    const auto row = co_await wait_status(eng, h.id(), "parked");
    CHECK_THAT(row.reason, Catch::Contains("step 0 'sync' has a timeout") &&
                               Catch::Contains("asio::awaitable"));
  });
  CHECK(probe.calls["sync"] == 0);
}

TEST_CASE("a step that ignores cancellation is abandoned at its timeout", "[timeout]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("abandon");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("slow", "w-abandon", 100, 3, true);
    const int v = co_await h.result<int>();
    CHECK(v == 2);  // the second attempt's value: the first one was given up on...
    // ...and the second began without waiting for it, but the step returned to the workflow
    // only once the abandoned attempt had ended (it may refer to the workflow's frame).
    CHECK(probe.seen == std::vector<std::string>{"attempt 1", "attempt 2", "abandoned ended"});
    CHECK(probe.calls["slow-finished-anyway"] == 1);
    const auto attempts = co_await attempts_of(eng, "w-abandon");
    REQUIRE(attempts.size() == 1);
    CHECK(attempts[0].error_type == "durable::step_timeout");
    CHECK(co_await test::journal_rows(eng, "w-abandon") == 1);
  });
}

TEST_CASE("a workflow deadline cancels a running step and survives a restart", "[deadline]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("deadline");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // Running here: the step waiting 30 s receives cancellation when the deadline passes.
    auto h = co_await eng.start(start_options{.timeout = 300ms}, "nap", "w-nap", 30000);
    auto err = co_await test::error_of<workflow_cancelled>(h.result<int>());
    REQUIRE(err);
    CHECK_THAT(*err, Catch::Contains("deadline"));
    CHECK(co_await test::journal_rows(eng, "w-nap") == 1);  // "first" only
    CHECK(co_await test::journal_rows(eng, "w-nap", "step_attempts") == 0);
  });
  // Across a restart: the first process stops between steps; the deadline stored with the
  // workflow is what the next process enforces.
  probe.hang_before = "s1";
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start(start_options{.timeout = 500ms}, "counter", "w-late", 3);
    co_await test::wait_rows(eng, "w-late", 1);
  });
  probe.hang_before.clear();
  test::run([]() -> asio::awaitable<void> { co_await test::sleep_ms(600); }());
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const auto row = co_await wait_status(eng, "w-late", "cancelled");
    CHECK_THAT(row.reason, Catch::Contains("deadline"));
    CHECK(co_await test::journal_rows(eng, "w-late") == 1);
  });
  CHECK(probe.calls["s1"] == 0);
}

TEST_CASE("cancel from another engine stops a step blocked on a socket", "[cancel]") {
  for (const bool listen : {true, false}) {
    INFO("notification: " << listen);
    probe.reset();
    k = {};
    const auto schema = test::fresh_schema("cancel");
    test::run([&]() -> asio::awaitable<void> {
      auto ex = co_await asio::this_coro::executor;
      // A server that accepts and then never says a word.
      asio::ip::tcp::acceptor acceptor(ex, {asio::ip::make_address("127.0.0.1"), 0});
      asio::ip::tcp::socket held(ex);
      acceptor.async_accept(held, [](const asio::error_code&) {});
      const int port = acceptor.local_endpoint().port();

      auto runner_options = options(schema, "exec-runs");
      runner_options.listen = listen;
      runner_options.heartbeat_interval = 100ms;  // the polling fallback
      engine runner(ex, runner_options);
      register_all(runner);
      (void)co_await runner.open();
      engine other(ex, options(schema, "exec-cancels"));
      register_all(other);
      (void)co_await other.open();

      auto h = co_await runner.start("blocked", "w-blocked", port);
      while (probe.calls["read"] == 0) co_await test::sleep_ms(2);
      co_await test::sleep_ms(50);
      const bool cancelled = co_await other.cancel("w-blocked");
      CHECK(cancelled);
      auto err = co_await test::error_of<workflow_cancelled>(h.result<int>());
      REQUIRE(err);
      co_await test::wait_idle(runner);
      REQUIRE(probe.seen.size() == 1);
      CHECK_THAT(probe.seen[0], Catch::Contains("read ended"));
      CHECK(co_await test::journal_rows(runner, "w-blocked") == 1);
      CHECK(co_await test::journal_rows(runner, "w-blocked", "step_attempts") == 0);
      const auto row = co_await row_of(runner, "w-blocked");
      CHECK(row.status == "cancelled");
      const bool twice = co_await other.cancel("w-blocked");
      CHECK_FALSE(twice);  // finished: nothing to cancel
      co_await other.shutdown(0ms);
      co_await runner.shutdown(0ms);
    }());
  }
}

TEST_CASE("resume continues a cancelled workflow from its journal", "[cancel][resume]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("resume");
  probe.hang_before = "s2";
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("counter", "w-resume", 4);
    co_await test::wait_rows(eng, "w-resume", 2);
    const bool cancelled = co_await eng.cancel("w-resume");
    CHECK(cancelled);
    probe.hang_before.clear();
    auto err = co_await test::error_of<workflow_cancelled>(h.result<int>());
    CHECK(err);
    co_await test::wait_idle(eng);
    CHECK(co_await test::journal_rows(eng, "w-resume") == 2);  // stopped at its next step

    const bool not_resumable = co_await eng.resume("no-such-workflow");
    CHECK_FALSE(not_resumable);
    const bool resumed = co_await eng.resume("w-resume");
    CHECK(resumed);
    const int sum = co_await h.result<int>();
    CHECK(sum == 6);
  });
  for (int i = 0; i < 4; ++i) CHECK(probe.calls["s" + std::to_string(i)] == 1);
}

TEST_CASE("fork copies the journal before a step and runs the rest with today's code", "[fork]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("fork");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("counter", "w-orig", 4);
    const int sum = co_await h.result<int>();
    CHECK(sum == 6);
    auto c = co_await eng.pool().acquire();
    const std::string before_sql =
        "SELECT string_agg(seq || name || output::text || epoch, ',' "
        "ORDER BY seq) FROM " +
        q(schema) + ".steps WHERE workflow_id = 'w-orig'";
    auto before = co_await c->exec(before_sql);

    auto f = co_await eng.fork("w-orig", 2, "w-forked");
    CHECK(f.id() == "w-forked");
    const int again = co_await f.result<int>();
    CHECK(again == 6);
    auto after = co_await c->exec(before_sql);
    CHECK(after[0].get<std::string>(0) == before[0].get<std::string>(0));  // untouched
    auto r = co_await c->exec("SELECT forked_from, status FROM " + q(schema) +
                              ".workflows WHERE id = 'w-forked'");
    CHECK(r[0].get<std::string>(0) == "w-orig");
    CHECK(r[0].get<std::string>(1) == "succeeded");
    CHECK(co_await test::journal_rows(eng, "w-forked") == 4);

    auto generated = co_await eng.fork("w-orig", 0);
    CHECK_THAT(generated.id(), Catch::StartsWith("w-orig:fork:"));
    (void)co_await generated.result<int>();

    auto unknown = co_await test::error_of<durable::error>(eng.fork("nope", 1));
    REQUIRE(unknown);
    CHECK_THAT(*unknown, Catch::Contains("no workflow has this id"));
    auto taken = co_await test::error_of<workflow_conflict>(eng.fork("w-orig", 1, "w-forked"));
    CHECK(taken);
    auto negative = co_await test::error_of<durable::error>(eng.fork("w-orig", -1));
    CHECK(negative);
  });
  CHECK(probe.calls["s0"] == 2);  // the original, and the fork from step 0
  CHECK(probe.calls["s1"] == 2);
  CHECK(probe.calls["s2"] == 3);  // the original, the fork from step 2, the fork from step 0
  CHECK(probe.calls["s3"] == 3);
}

TEST_CASE("a transaction that loses a serialization race runs again in a fresh transaction",
          "[transaction][contention]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("serial");
  const auto table = schema + "_counter";
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    {
      auto c = co_await eng.pool().acquire();
      co_await c->exec("CREATE TABLE " + table + " (id int PRIMARY KEY, v int NOT NULL)");
      co_await c->exec("INSERT INTO " + table + " VALUES (1, 0)");
    }
    auto a = co_await eng.start("serial", "w-a", table);
    auto b = co_await eng.start("serial", "w-b", table);
    const int va = co_await a.result<int>();
    const int vb = co_await b.result<int>();
    CHECK(va + vb == 3);  // 1 and 2: both increments landed, one after the other
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT v FROM " + table);
    CHECK(r[0].get<int>(0) == 2);
    CHECK(co_await test::journal_rows(eng, "w-a", "step_attempts") == 0);
    CHECK(co_await test::journal_rows(eng, "w-b", "step_attempts") == 0);
    co_await c->exec("DROP TABLE " + table);
  });
  CHECK(probe.calls["bump"] == 3);  // the loser ran once more
}

TEST_CASE("a database restart during a retry backoff loses nothing",
          "[retry][restart][slow][serial]") {
  const char* restart = std::getenv("DURABLE_TEST_RESTART_CMD");
  if (!restart || !*restart) {
    WARN("DURABLE_TEST_RESTART_CMD is not set (external server): skipping the restart test");
    return;
  }
  probe.reset();
  k = {};
  k.fail = 1;
  const auto schema = test::fresh_schema("restart");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("flaky", "w-restart", 4, 1500);
        co_await test::wait_rows(eng, "w-restart", 1, "step_attempts");
        // The server restarts while the step waits for its second attempt.
        std::atomic<int> code{-1};
        std::thread t([&] { code = std::system(restart); });
        while (code < 0) co_await test::sleep_ms(20);
        t.join();
        REQUIRE(code == 0);
        const int v = co_await h.result<int>();
        CHECK(v == 43);  // attempt 2's value: the count went on across the restart
        const auto attempts = co_await attempts_of(eng, "w-restart");
        REQUIRE(attempts.size() == 1);
        CHECK(attempts[0].attempt == 1);
        CHECK(co_await test::journal_rows(eng, "w-restart") == 2);
      },
      [](engine_options& o) { o.unload_after = 1h; });
  // Attempt 2 ran once, or twice if the restart lost its journal write (at least once).
  CHECK(probe.calls["call"] >= 2);
  CHECK(probe.calls["call"] <= 3);
}

TEST_CASE("a queued workflow keeps its deadline, dispatched or still waiting",
          "[deadline][queues]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("qdeadline");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // Dispatched: the run enforces the deadline it was claimed with.
        auto h = co_await eng.enqueue({.timeout = 300ms}, "nap", "w-queued", 30000);
        auto err = co_await test::error_of<workflow_cancelled>(h.result<int>());
        REQUIRE(err);
        CHECK_THAT(*err, Catch::Contains("deadline"));
        // Still waiting (delayed past its deadline): maintenance cancels it, it never runs.
        auto late = co_await eng.enqueue({.delay = 5s, .timeout = 100ms}, "nap", "w-waiting", 1);
        const auto row = co_await wait_status(eng, late.id(), "cancelled");
        CHECK_THAT(row.reason, Catch::Contains("deadline"));
        CHECK_THAT(row.error, Catch::Contains("durable::deadline_exceeded"));
      },
      [](engine_options& o) { o.heartbeat_interval = 50ms; });
  CHECK(probe.calls["first"] == 1);  // w-queued only
  CHECK(probe.calls["nap"] == 1);
}

TEST_CASE("a workflow that catches the unload of a long backoff still stops there",
          "[retry][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("catcher");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("catcher", "w-catch");
        (void)co_await wait_status(eng, "w-catch", "sleeping");
        co_await test::wait_idle(eng);
        CHECK(co_await test::journal_rows(eng, "w-catch") == 0);  // nothing while unloaded
        CHECK(probe.calls["fallback"] == 0);
        const int v = co_await h.result<int>();
        CHECK(v == 1);  // the second attempt, in a later run
      },
      [](engine_options& o) {
        o.unload_after = 100ms;
        o.heartbeat_interval = 100ms;
      });
  // The workflow did see the unload (it caught durable::error), but its next step refused.
  REQUIRE(probe.seen.size() == 1);
  CHECK_THAT(probe.seen[0], Catch::Contains("unloaded"));
  CHECK(probe.calls["fallback"] == 0);
}

TEST_CASE("an abandoned attempt still sees its own step's key and a live workflow", "[timeout]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("keys");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("keys", "w-keys");
    const std::string key = co_await h.result<std::string>();
    CHECK(key == "w-keys:0");
  });
  CHECK(probe.seen == std::vector<std::string>{"abandoned: w-keys w-keys:0"});
}

TEST_CASE("a workflow woken after an unload waits for room in its queue",
          "[retry][unload][queues]") {
  probe.reset();
  k = {};
  running_now = running_max = 0;
  const auto schema = test::fresh_schema("qwake");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        co_await eng.configure_queue({.name = "default", .concurrency = 1});
        // Three fail against the same outage and come due together; a fourth runs meanwhile.
        std::vector<workflow_handle> hs;
        for (const std::string tag : {"a", "b", "c"}) {
          const std::string id = "w-" + tag;
          hs.push_back(co_await eng.enqueue({}, "queued", id, tag, true, 300));
          (void)co_await wait_status(eng, id, "sleeping");
        }
        const std::string d_tag = "d";
        hs.push_back(co_await eng.enqueue({}, "queued", "w-d", d_tag, false, 600));
        for (auto& h : hs) (void)co_await h.result<int>();
      },
      [](engine_options& o) {
        o.unload_after = 100ms;
        o.heartbeat_interval = 100ms;
      });
  CHECK(running_max == 1);  // the queue's concurrency
}

TEST_CASE("resume makes a step waiting for its next attempt due at once", "[resume][unload]") {
  probe.reset();
  k = {};
  k.fail = 1;
  const auto schema = test::fresh_schema("resumedue");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("flaky", "w-due", 3, 60000);
        (void)co_await wait_status(eng, "w-due", "sleeping");
        co_await test::wait_idle(eng);
        const bool cancelled = co_await eng.cancel("w-due");
        CHECK(cancelled);
        const bool resumed = co_await eng.resume("w-due");
        CHECK(resumed);
        const int v = co_await h.result<int>();  // not a minute later
        CHECK(v == 43);
        const auto attempts = co_await attempts_of(eng, "w-due");
        REQUIRE(attempts.size() == 2);
        CHECK(attempts[0].outcome == "retrying");
        CHECK(attempts[1].outcome == "due");
      },
      [](engine_options& o) { o.unload_after = 100ms; });
  CHECK(probe.seen == std::vector<std::string>{"1", "2"});
}

TEST_CASE("a workflow cancelled while an abandoned attempt runs waits for it, then stops",
          "[timeout][cancel]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("stubborn");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("stubborn", "w-stubborn");
    co_await test::wait_rows(eng, "w-stubborn", 1, "step_attempts");  // attempt 1 timed out
    const bool cancelled = co_await eng.cancel("w-stubborn");         // during the 300 ms backoff
    CHECK(cancelled);
    auto err = co_await test::error_of<workflow_cancelled>(h.result<int>());
    CHECK(err);
    co_await test::wait_idle(eng);
    // The run ended only after the abandoned attempt, which wrote into the workflow's frame.
    CHECK(probe.seen == std::vector<std::string>{"abandoned attempt ended"});
    CHECK(co_await test::journal_rows(eng, "w-stubborn") == 0);
  });
}

TEST_CASE("a durable sleep journals its wake-up time and sleeps in the run when short", "[sleep]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("sleep");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("sleeper", "w-nap", 300);
    const int v = co_await h.result<int>();
    CHECK(v == 1);
    CHECK(co_await woke_on_time(eng, "w-nap"));
    // A replay (a fork from the end) does not sleep again: the wake-up time has passed.
    auto f = co_await eng.fork("w-nap", 3, "w-nap-2");
    (void)co_await f.result<int>();
  });
  CHECK(probe.calls["before"] == 1);
  CHECK(probe.calls["after"] == 1);
}

TEST_CASE("a long durable sleep unloads the workflow and another executor wakes it when due",
          "[sleep][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("longsleep");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.start("sleeper", "w-long", 1500);
        (void)co_await wait_status(eng, "w-long", "sleeping");
        co_await test::wait_idle(eng);  // no coroutine frame, no slot
        co_await eng.shutdown(0ms);
      },
      [](engine_options& o) { o.unload_after = 100ms; });
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int v = co_await eng.handle("w-long").result<int>();
        CHECK(v == 1);
        CHECK(co_await woke_on_time(eng, "w-long"));
        auto st = co_await eng.handle("w-long").status();
        CHECK(st.executor_id == "exec-other");
      },
      [](engine_options& o) { o.heartbeat_interval = 50ms; }, "exec-other");
  CHECK(probe.calls["before"] == 1);
  CHECK(probe.calls["after"] == 1);
}

TEST_CASE("a process that dies during a sleep is taken over and the sleep ends on time",
          "[sleep][crash]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("sleepcrash");
  // The first process sleeps in the run (unload_after is long) and "dies" (its io_context is
  // abandoned) during the sleep.
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.start("sleeper", "w-dies", 1500);
        co_await test::wait_rows(eng, "w-dies", 2);  // "before" and the sleep's row
      },
      [](engine_options& o) { o.unload_after = 1h; });
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int v = co_await eng.handle("w-dies").result<int>();
        CHECK(v == 1);
        CHECK(co_await woke_on_time(eng, "w-dies"));
        auto st = co_await eng.handle("w-dies").status();
        CHECK(st.executor_id == "exec-taker");
      },
      [](engine_options& o) {
        o.heartbeat_interval = 50ms;
        o.lease_timeout = 300ms;
        o.unload_after = 1h;
      },
      "exec-taker");
  CHECK(probe.calls["before"] == 1);
  CHECK(probe.calls["after"] == 1);
}

TEST_CASE("patched and unpatched workflows run side by side, and a patch is retired",
          "[versioning]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("patched");
  // Old code: w-old passes the changed point (step b), then its process stops before c.
  probe.version = 1;
  probe.hang_before = "c";
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("versioned", "w-old");
    co_await test::wait_rows(eng, "w-old", 2);
  });
  // New code: w-old (resumed by open()) keeps the old path, a new workflow takes the new one.
  probe.version = 2;
  probe.hang_before.clear();
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const int old_result = co_await eng.handle("w-old").result<int>();
    CHECK(old_result == 11);
    auto h = co_await eng.start("versioned", "w-new");
    const int new_result = co_await h.result<int>();
    CHECK(new_result == 21);
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT string_agg(name || '/' || kind, ',' ORDER BY seq) FROM " +
                                  q(schema) + ".steps WHERE workflow_id = $1",
                              std::string("w-new"));
    CHECK(r[0].get<std::string>(0) == "a/step,b2/patch,b2/step,c/step");
    auto o = co_await c->exec("SELECT string_agg(name, ',' ORDER BY seq) FROM " + q(schema) +
                                  ".steps WHERE workflow_id = $1",
                              std::string("w-old"));
    CHECK(o[0].get<std::string>(0) == "a,b,c");
  });
  CHECK(probe.calls["b"] == 1);   // w-old's, before the change, never again
  CHECK(probe.calls["b2"] == 1);  // w-new's
  // The patch retired (no workflow like w-old is left): journals with and without the patch's
  // row both replay.
  probe.version = 3;
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto newest = co_await eng.start("versioned", "w-newest");
    const int v = co_await newest.result<int>();
    CHECK(v == 21);
    auto again = co_await eng.fork("w-new", 4, "w-new-replayed");  // a replay of w-new
    const int replayed = co_await again.result<int>();
    CHECK(replayed == 21);
    const auto row = co_await row_of(eng, "w-new-replayed");
    CHECK(row.status == "succeeded");
  });
  CHECK(probe.calls["b2"] == 2);  // w-newest only: the replay ran nothing
  CHECK(probe.calls["c"] == 3);
}
