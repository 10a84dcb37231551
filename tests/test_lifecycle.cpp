// A workflow's life beyond its steps, against the real server: cancel() from another engine (a
// step blocked on a socket), resume(), fork(), a queued workflow's deadline, durable sleeps
// (journaled, unloaded when long, taken over when their process dies), and patched code side by
// side with unpatched. Workflows: support/recovery.hpp.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include "support/recovery.hpp"

// In the namespace of the shared cases (not a using-directive at file scope): the files of one
// executable compile as one translation unit in scripts/test (docs/development.md, "Unity builds").
namespace recovery_cases {

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

      auto runner_options = fx.options(schema, "exec-runs");
      runner_options.listen = listen;
      runner_options.heartbeat_interval = 100ms;  // the polling fallback
      engine runner(ex, runner_options);
      register_all(runner);
      (void)co_await runner.open();
      engine other(ex, fx.options(schema, "exec-cancels"));
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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

TEST_CASE("an argument with a NUL character is refused before anything is done", "[cancel][text]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("nul_text");
  probe.hang_before = "s2";
  // Each would act on "ship-1" (the text before the NUL) if it were sent.
  const std::string nul("ship-1\0x", 8);
  std::vector<std::string> refused;  // the field each refusal names
  std::string message;
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("counter", "ship-1", 4);
    co_await test::wait_rows(eng, "ship-1", 2);
    try {
      (void)co_await eng.cancel(nul);
    } catch (const durable::invalid_text& e) {
      refused.push_back(e.field());
      message = e.what();
    }
    try {
      (void)co_await eng.resume(nul);
    } catch (const durable::invalid_text& e) {
      refused.push_back(e.field());
    }
    try {
      (void)co_await eng.fork("ship-1", 0, nul);
    } catch (const durable::invalid_text& e) {
      refused.push_back(e.field());
    }
    try {
      (void)co_await eng.send("ship-1", nul, 1);
    } catch (const durable::invalid_text& e) {
      refused.push_back(e.field());
    }
    try {
      co_await eng.pause_queue(nul);
    } catch (const durable::invalid_text& e) {
      refused.push_back(e.field());
    }
    try {
      (void)co_await eng.start("counter", nul, 4);
    } catch (const durable::invalid_text& e) {
      refused.push_back(e.field());
    }
    try {
      (void)co_await eng.trigger_schedule(nul);
    } catch (const durable::invalid_text& e) {
      refused.push_back(e.field());
    }
    // With a completion token other than the default, the refusal is the operation's error.
    std::string by_callback;
    eng.cancel(nul, [&](std::exception_ptr e, bool) {
      try {
        if (e) std::rethrow_exception(e);
        by_callback = "no error";
      } catch (const durable::invalid_text& x) {
        by_callback = x.field();
      } catch (const std::exception& x) {
        by_callback = x.what();
      }
    });
    for (int i = 0; i < 1000 && by_callback.empty(); ++i) co_await test::sleep_ms(10);
    CHECK(by_callback == "workflow id");
    // Nothing happened to ship-1, or anywhere else.
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT status FROM " + test::q(schema) +
                              ".workflows WHERE id = 'ship-1'");
    CHECK(r[0].get<std::string>(0) == "running");
    r = co_await c->exec("SELECT (SELECT count(*) FROM " + test::q(schema) +
                         ".workflows) + (SELECT count(*) FROM " + test::q(schema) +
                         ".messages) + (SELECT count(*) FROM " + test::q(schema) + ".queues)");
    CHECK(r[0].get<long>(0) == 1);
    // Cancelled while its step still hangs (so that it cannot have ended meanwhile): by this
    // call, not by any of the refused ones.
    const bool cancelled = co_await eng.cancel("ship-1");
    CHECK(cancelled);
    probe.hang_before.clear();
  });
  CHECK(refused == std::vector<std::string>{"workflow id", "workflow id", "new workflow id",
                                            "topic", "queue name", "workflow id", "schedule id"});
  CHECK_THAT(message, Catch::Contains("cancel(): the workflow id 'ship-1\\x00x' holds a NUL "
                                      "character (at byte 6)") &&
                          Catch::Contains("nothing was done"));
}

TEST_CASE("fork copies the journal before a step and runs the rest with today's code", "[fork]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("fork");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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

TEST_CASE("a queued workflow keeps its deadline, dispatched or still waiting",
          "[deadline][queues]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("qdeadline");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // Dispatched: the run enforces the deadline it was claimed with. The deadline leaves the
        // run time to be claimed and reach its second step on a loaded machine (under the
        // sanitizers, 300 ms once ran out between the two steps); the nap would take 30 s.
        auto h = co_await eng.enqueue({.timeout = 2s}, "nap", "w-queued", 30000);
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
  CHECK(probe.calls["nap"] == 1);    // not run again after the deadline cancelled it
}

TEST_CASE("a durable sleep journals its wake-up time and sleeps in the run when short", "[sleep]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("sleep");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.start("sleeper", "w-long", 1500);
        (void)co_await wait_status(eng, "w-long", "sleeping");
        co_await test::wait_idle(eng);  // no coroutine frame, no slot
        co_await eng.shutdown(0ms);
      },
      [](engine_options& o) { o.unload_after = 100ms; });
  fx.with_engine(
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
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.start("sleeper", "w-dies", 1500);
        co_await test::wait_rows(eng, "w-dies", 2);  // "before" and the sleep's row
      },
      [](engine_options& o) { o.unload_after = 1h; });
  fx.with_engine(
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("versioned", "w-old");
    co_await test::wait_rows(eng, "w-old", 2);
  });
  // New code: w-old (resumed by open()) keeps the old path, a new workflow takes the new one.
  probe.version = 2;
  probe.hang_before.clear();
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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

}  // namespace recovery_cases
