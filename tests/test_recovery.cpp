// Failure handling a person can trust, against the real server: journaled retry policies
// (attempts recorded, counts that survive a crash and a database restart, long backoffs that
// unload the workflow), permanent errors, the dead-letter status and retry(), per-step timeouts
// and abandoned attempts, workflow deadlines, and transactions that lose a serialization race.
// cancel, resume, fork, sleeps and patches: test_lifecycle.cpp. Workflows: support/recovery.hpp.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include "support/recovery.hpp"

// In the namespace of the shared cases (not a using-directive at file scope): the files of one
// executable compile as one translation unit in scripts/test (docs/development.md, "Unity builds").
namespace recovery_cases {

TEST_CASE("every failed attempt is recorded before the next one, with its error and due time",
          "[retry]") {
  probe.reset();
  k = {};
  k.fail = 2;
  const auto schema = test::fresh_schema("attempts");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("flaky", "w-count", 6, 400);
    co_await test::wait_rows(eng, "w-count", 1, "step_attempts");
  });
  CHECK(probe.seen == std::vector<std::string>{"1"});
  fx.with_engine(
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("picky", "w-range");
    const int v = co_await h.result<int>();
    CHECK(v == 7);
  });
  CHECK(probe.calls["call"] == 3);
  probe.reset();
  k = {};
  k.logic = true;
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(
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
  fx.with_engine(
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
  fx.with_engine(
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start(start_options{.timeout = 500ms}, "counter", "w-late", 3);
    co_await test::wait_rows(eng, "w-late", 1);
  });
  probe.hang_before.clear();
  test::run([]() -> asio::awaitable<void> { co_await test::sleep_ms(600); }());
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const auto row = co_await wait_status(eng, "w-late", "cancelled");
    CHECK_THAT(row.reason, Catch::Contains("deadline"));
    CHECK(co_await test::journal_rows(eng, "w-late") == 1);
  });
  CHECK(probe.calls["s1"] == 0);
}

TEST_CASE("a transaction that loses a serialization race runs again in a fresh transaction",
          "[transaction][contention]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("serial");
  const auto table = schema + "_counter";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(
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

TEST_CASE("a workflow that catches the unload of a long backoff still stops there",
          "[retry][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("catcher");
  fx.with_engine(
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(
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
  fx.with_engine(
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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

}  // namespace recovery_cases
