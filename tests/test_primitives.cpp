// The durable primitives of issue 10 against the real server: messages (send from outside, from
// a workflow and in the application's own transaction; recv with a timeout, unloaded while it
// waits), events, child workflows (reattached after the parent's process is killed, cancelled
// with their parent), fan-out and fan-in (all, any, a bounded map of 10 000 items), and real
// SIGKILLs between a send and its recv and in the middle of a fan-out. The journal limit and
// continue_as_new: test_continue.cpp. Workflows and helpers: support/primitives.hpp.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include "support/primitives.hpp"

// In the namespace of the shared cases (not a using-directive at file scope): the files of one
// executable compile as one translation unit in scripts/test (docs/development.md, "Unity builds").
namespace primitive_cases {

TEST_CASE("recv returns a message sent before or during the wait, and nothing at its timeout",
          "[messages]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("msgs");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // Sent before the workflow waits: taken at once.
    auto early = co_await eng.start("waiter", "w-early", 5000);
    const bool sent = co_await eng.send("w-early", "go", std::string("first"));
    CHECK(sent);
    // Sent while it waits in its run: the notification wakes it.
    auto late = co_await eng.start("waiter", "w-late", 20000);
    co_await test::wait_rows(eng, "w-late", 2);  // "before" and the recv's deadline
    (void)co_await eng.send("w-late", "go", std::string("second"));
    // Never sent: the timeout.
    auto none = co_await eng.start("waiter", "w-none", 200);
    const std::string a = co_await early.result<std::string>();
    const std::string b = co_await late.result<std::string>();
    const std::string c = co_await none.result<std::string>();
    CHECK(a == "first");
    CHECK(b == "second");
    CHECK(c == "(timeout)");
    // The recv's step consumed the message: one row, stamped with the step.
    const auto consumed = co_await scalar(
        eng,
        "SELECT count(*)::text || '/' || min(consumed_seq)::text FROM " + q(schema) +
            ".messages WHERE workflow_id = $1 AND consumed_at IS NOT NULL",
        std::string("w-late"));
    CHECK(consumed == "1/2");
    const auto journal = co_await journal_of(eng, "w-late");
    CHECK(journal == "0:before/step,1:go/deadline,2:go/recv,3:after/step");
    // A replay (a fork from the end) consumes nothing more and returns the same.
    auto f = co_await eng.fork("w-late", 4, "w-late-replayed");
    const std::string again = co_await f.result<std::string>();
    CHECK(again == "second");
  });
  CHECK(probe.calls["after"] == 3);
}

TEST_CASE("messages: oldest first, sent once per key, refused for an unknown id", "[messages]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("msgorder");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("ponger", "w-pong", std::string("nobody"),
                                0);  // exists, receives nothing
    (void)co_await h.result<int>();
    const bool one = co_await eng.send("w-pong", "t", 1, "key-1");
    const bool dup = co_await eng.send("w-pong", "t", 99, "key-1");
    CHECK(one);
    CHECK_FALSE(dup);
    bool refused = false;
    std::string why;
    try {
      (void)co_await eng.send("no-such-workflow", "t", 1);
    } catch (const durable::error& e) {
      refused = true;
      why = e.what();
    }
    CHECK(refused);
    CHECK(why.find("no-such-workflow") != std::string::npos);
    const auto n = co_await scalar(
        eng, "SELECT count(*)::text FROM " + q(schema) + ".messages WHERE workflow_id = $1",
        std::string("w-pong"));
    CHECK(n == "1");
    // Sent inside the application's own transaction: exists only if it commits.
    {
      auto c = co_await eng.pool().acquire();
      {
        auto tx = c->begin();
        co_await tx.run(eng.send_statement("w-pong", "t", 2));
        // rolled back: tx goes out of scope without commit
      }
      auto tx = c->begin();
      co_await tx.run(eng.send_statement("w-pong", "t", 3));
      co_await tx.commit();
    }
    const auto payloads =
        co_await scalar(eng,
                        "SELECT string_agg(payload::text, ',' ORDER BY id) FROM " + q(schema) +
                            ".messages WHERE workflow_id = $1",
                        std::string("w-pong"));
    CHECK(payloads == "1,3");
    // A workflow that sends to nobody fails for good, with the reason.
    auto bad = co_await eng.start("send-nowhere", "w-bad");
    std::string error;
    try {
      co_await bad.result<void>();
    } catch (const workflow_failed& e) {
      error = e.what();
    }
    CHECK(error.find("nobody-here") != std::string::npos);
  });
}

TEST_CASE("two workflows exchange messages, and a long recv unloads until a send",
          "[messages][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("pingpong");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto pong = co_await eng.start("ponger", "w-ponger", std::string("w-pinger"), 20);
        auto ping = co_await eng.start("pinger", "w-pinger", std::string("w-ponger"), 20);
        const int last = co_await ping.result<int>();
        const int sum = co_await pong.result<int>();
        CHECK(last == 190);
        CHECK(sum == 190);
        const auto unconsumed =
            co_await scalar(eng,
                            "SELECT count(*)::text FROM " + q(schema) +
                                ".messages WHERE consumed_at IS NULL AND workflow_id LIKE $1",
                            std::string("w-p%"));
        CHECK(unconsumed == "0");
        // A recv that waits past unload_after unloads: no frame, status sleeping, what it
        // waits for recorded; the send wakes it at once (the recheck is an hour away).
        auto w = co_await eng.start("waiter", "w-unloaded", 3600 * 1000);
        (void)co_await wait_status(eng, "w-unloaded", "sleeping");
        co_await test::wait_idle(eng);
        const auto waits =
            co_await scalar(eng, "SELECT wait_for FROM " + q(schema) + ".workflows WHERE id = $1",
                            std::string("w-unloaded"));
        CHECK(waits == "msg:go");
        (void)co_await eng.send("w-unloaded", "go", std::string("wake up"));
        const std::string got = co_await w.result<std::string>();
        CHECK(got == "wake up");
      },
      [](engine_options& o) {
        o.unload_after = 200ms;
        o.wait_recheck = 1h;
      });
}

TEST_CASE("a kill between a send and its recv: the message is consumed once",
          "[messages][crash][process]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("msgkill");
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "setup"));
    (void)co_await eng.migrate();
  }());
  // A process starts the workflow, which waits for "go" in its run; it is killed while it waits.
  executor_process first;
  spawn_executor(first, schema, "exec-dies", [](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("waiter", "w-killed", 60000);
  });
  wait_until("SELECT count(*) = 2 FROM " + q(schema) + ".steps WHERE workflow_id = $1", "w-killed");
  first.kill();
  // The message is sent while no process runs the workflow; another executor takes it over.
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.send("w-killed", "go", std::string("after the kill"));
        (void)co_await eng.send("w-killed", "go", std::string("a second one"));
        const std::string got = co_await eng.handle("w-killed").result<std::string>();
        CHECK(got == "after the kill");
        const auto state = co_await scalar(
            eng,
            "SELECT string_agg(payload::text || ':' || (consumed_at IS NOT NULL), ',' ORDER BY id) "
            "FROM " +
                q(schema) + ".messages WHERE workflow_id = $1",
            std::string("w-killed"));
        CHECK(state == "\"after the kill\":true,\"a second one\":false");
        const auto recvs = co_await scalar(eng,
                                           "SELECT count(*)::text FROM " + q(schema) +
                                               ".steps WHERE workflow_id = $1 AND kind = 'recv'",
                                           std::string("w-killed"));
        CHECK(recvs == "1");
        const auto owner = co_await row_of(eng, "w-killed");
        CHECK(owner.status == "succeeded");
      },
      [](engine_options& o) { o.lease_timeout = 300ms; }, "exec-taker");
  CHECK(probe.calls["before"] == 0);  // it ran in the killed process, never again here
  CHECK(probe.calls["after"] == 1);
}

TEST_CASE("events: the latest value wins, read from outside and from another workflow",
          "[events]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("events");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const auto missing = co_await eng.get_event<std::string>("w-pub", "stage", 50ms);
    CHECK_FALSE(missing.has_value());
    auto reader =
        co_await eng.start("reader", "w-reader", std::string("w-pub"));  // waits for the event
    auto pub = co_await eng.start("publisher", "w-pub");
    const auto first = co_await eng.get_event<std::string>("w-pub", "stage", 10s);
    CHECK(first.value_or("") == "started");
    const std::string read = co_await reader.result<std::string>();
    CHECK(read == "started/none");
    (void)co_await eng.send("w-pub", "go", 7);
    const int v = co_await pub.result<int>();
    CHECK(v == 7);
    const auto last = co_await eng.get_event<std::string>("w-pub", "stage", 0ms);
    CHECK(last.value_or("") == "done");
    const auto journal = co_await journal_of(eng, "w-reader");
    CHECK(journal ==
          "0:w-pub:stage/deadline,1:w-pub:stage/get_event,2:w-pub:never/deadline,3:w-pub:never/"
          "get_event");
  });
}

TEST_CASE("a child workflow is started once, its result journaled, and the tree is in SQL",
          "[children]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("children");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto p = co_await eng.start("parent", "w-parent", 21);
    const int v = co_await p.result<int>();
    CHECK(v == 42);
    const auto tree = co_await scalar(
        eng,
        "SELECT string_agg(id || '<' || coalesce(parent_id, '-') || ':' || status, ',' ORDER BY "
        "id) FROM " +
            q(schema) + ".workflows WHERE id = $1 OR parent_id = $1",
        std::string("w-parent"));
    CHECK(tree == "w-parent<-:succeeded,w-parent/1<w-parent:succeeded");
    const auto journal = co_await journal_of(eng, "w-parent");
    CHECK(journal == "0:before/step,1:child/child,2:w-parent/1/child-result,3:after/step");
    // A child that fails for good: the parent sees step_failed, journaled.
    auto bad = co_await eng.start("parent", "w-parent-bad", -1);
    const int b = co_await bad.result<int>();
    CHECK(b == -1);
    const auto failed_row =
        co_await scalar(eng,
                        "SELECT status || ':' || (error->>'message') FROM " + q(schema) +
                            ".steps WHERE workflow_id = $1 AND kind = 'child-result'",
                        std::string("w-parent-bad"));
    CHECK(failed_row.find("failed:child workflow 'w-parent-bad/1' (child) failed") == 0);
  });
  CHECK(probe.calls["child-work"] == 2);
}

TEST_CASE("a waiting parent unloads, its child wakes it, and cancel cascades",
          "[children][unload][cancel]") {
  probe.reset();
  k = {};
  k.a_ms = 3600 * 1000;  // the child waits for "release"
  const auto schema = test::fresh_schema("childwait");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto p = co_await eng.start("parent", "w-p", 5);
        (void)co_await wait_status(eng, "w-p", "sleeping");
        const auto waits =
            co_await scalar(eng, "SELECT wait_for FROM " + q(schema) + ".workflows WHERE id = $1",
                            std::string("w-p"));
        CHECK(waits == "child:w-p/1");
        (void)co_await eng.send("w-p/1", "release", 1);
        const int v = co_await p.result<int>();
        CHECK(v == 11);
        // Cancelling a parent cancels its unfinished child.
        auto p2 = co_await eng.start("parent", "w-p2", 5);
        (void)co_await wait_status(eng, "w-p2", "sleeping");  // waits for its child
        const bool cancelled = co_await eng.cancel("w-p2");
        CHECK(cancelled);
        const auto child = co_await row_of(eng, "w-p2/1");
        CHECK(child.status == "cancelled");
        CHECK(child.reason.find("its parent workflow 'w-p2' was cancelled") != std::string::npos);
      },
      [](engine_options& o) {
        o.unload_after = 200ms;
        o.wait_recheck = 1h;
      });
}

TEST_CASE("a parent killed after starting its child reattaches to the same child on replay",
          "[children][crash][process]") {
  probe.reset();
  k = {};
  k.a_ms = 60000;  // the child waits for "release" (in its run)
  const auto schema = test::fresh_schema("childkill");
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "setup"));
    (void)co_await eng.migrate();
  }());
  executor_process first;
  spawn_executor(first, schema, "exec-dies", [](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("parent", "w-orphan", 4);
  });
  // The child ran its step in the killed process and waits there.
  wait_until("SELECT count(*) >= 1 FROM " + q(schema) + ".steps WHERE workflow_id = $1",
             "w-orphan/1");
  first.kill();
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        co_await test::sleep_ms(400);  // the lease runs out; both are taken over
        (void)co_await eng.send("w-orphan/1", "release", 100);
        const int v = co_await eng.handle("w-orphan").result<int>();
        CHECK(v == 108);
        const auto children = co_await scalar(
            eng, "SELECT count(*)::text FROM " + q(schema) + ".workflows WHERE parent_id = $1",
            std::string("w-orphan"));
        CHECK(children == "1");
        const auto child_steps =
            co_await scalar(eng,
                            "SELECT count(*)::text FROM " + q(schema) +
                                ".steps WHERE workflow_id = $1 AND name = 'work'",
                            std::string("w-orphan/1"));
        CHECK(child_steps == "1");
      },
      [](engine_options& o) { o.lease_timeout = 300ms; }, "exec-taker");
  CHECK(probe.calls["child-work"] == 0);  // ran once, in the killed process
  CHECK(probe.calls["parent-after"] == 1);
}

TEST_CASE("ctx.all numbers branches by position, a failure cancels the rest", "[fanout]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("all");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        k.a_after_steps = 1;  // "a" starts once "b" has committed its row: "a" finishes last
        auto h = co_await eng.start("fan", "w-all");
        const int v = co_await h.result<int>();
        CHECK(v == 112);
        const auto journal = co_await journal_of(eng, "w-all");
        CHECK(journal == "0:a/step,1:b/step,2:c/step");
        const auto order =
            co_await scalar(eng,
                            "SELECT string_agg(name, ',' ORDER BY completed_at) FROM " + q(schema) +
                                ".steps WHERE workflow_id = $1 AND seq < 2",
                            std::string("w-all"));
        CHECK(order == "b,a");
        // "b" fails for good: "a" (slow) is cancelled, its attempt not recorded as a failure.
        k.a_after_steps = 0;
        k.a_ms = 5000;
        k.b_fails = true;
        auto bad = co_await eng.start("fan", "w-all-bad");
        std::string error;
        try {
          (void)co_await bad.result<int>();
        } catch (const workflow_dead_letter& e) {
          error = e.what();
        }
        CHECK(error.find("b cannot") != std::string::npos);
        const auto attempts =
            co_await scalar(eng,
                            "SELECT string_agg(name || ':' || outcome, ',' ORDER BY id) FROM " +
                                q(schema) + ".step_attempts WHERE workflow_id = $1",
                            std::string("w-all-bad"));
        CHECK(attempts == "b:failed");
      },
      &journal_counter);
}

TEST_CASE("any journals the winner and a replay returns it whatever finishes first", "[fanout]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("any");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    k.a_ms = 2000;  // "b" wins
    auto h = co_await eng.start("race", "w-race");
    const int v = co_await h.result<int>();
    CHECK(v == 1102);
    const auto journal = co_await journal_of(eng, "w-race");
    CHECK(journal == "1:b/step,2:any/any,3:after/step");
    // Replayed with "a" now the faster: the journaled winner is returned, nothing runs.
    k.a_ms = 0;
    k.b_ms = 2000;
    auto f = co_await eng.fork("w-race", 4, "w-race-replayed");
    const int again = co_await f.result<int>();
    CHECK(again == 1102);
  });
  CHECK(probe.calls["a"] == 1);  // the loser, cancelled, in the first run only
  CHECK(probe.calls["b"] == 1);
}

TEST_CASE("a fan-out killed midway replays identically in another order",
          "[fanout][crash][process]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("fankill");
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "setup"));
    (void)co_await eng.migrate();
  }());
  // First process: "b" is fast and journals; "a" is slow; the process is killed meanwhile.
  k.a_ms = 60000;
  executor_process first;
  spawn_executor(first, schema, "exec-dies", [](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("fan", "w-fan");
  });
  wait_until("SELECT count(*) = 1 FROM " + q(schema) + ".steps WHERE workflow_id = $1 AND seq = 1",
             "w-fan");
  first.kill();
  // Second process: now "a" is the fast one and "b" would be slow; "b" is not run again.
  k.a_ms = 0;
  k.b_ms = 60000;
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int v = co_await eng.handle("w-fan").result<int>();
        CHECK(v == 112);
        const auto journal = co_await journal_of(eng, "w-fan");
        CHECK(journal == "0:a/step,1:b/step,2:c/step");
        // And the same workflow run in one go gives the same answer and the same journal.
        k.b_ms = 0;
        auto h = co_await eng.start("fan", "w-fan-whole");
        const int whole = co_await h.result<int>();
        CHECK(whole == v);
        const auto whole_journal = co_await journal_of(eng, "w-fan-whole");
        CHECK(whole_journal == journal);
      },
      [](engine_options& o) { o.lease_timeout = 300ms; }, "exec-taker");
  CHECK(probe.calls["b"] == 1);  // only w-fan-whole's: w-fan's ran in the killed process
  CHECK(probe.calls["a"] == 2);
}

TEST_CASE("a bounded map runs 10 000 items with at most 100 in flight, and a replay runs none",
          "[fanout][map]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("map");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("map", "w-map", 10000, 100);
    const long sum = co_await h.result<long>();
    long expected = 0;
    for (long i = 0; i < 10000; ++i) expected += i * i;
    CHECK(sum == expected);
    const auto rows =
        co_await scalar(eng,
                        "SELECT count(*)::text || ':' || min(seq) || ':' || max(seq) || ':' || "
                        "bool_and(name = 'sq[' || seq || ']') FROM " +
                            q(schema) + ".steps WHERE workflow_id = $1",
                        std::string("w-map"));
    CHECK(rows == "10000:0:9999:true");
    auto f = co_await eng.fork("w-map", 10000, "w-map-replayed");
    const long again = co_await f.result<long>();
    CHECK(again == expected);
  });
  CHECK(probe.calls["sq"] == 10000);
  CHECK(k.in_flight_max <= 100);
  CHECK(k.in_flight_max > 1);
}

TEST_CASE("wake-ups of a waiting workflow do not count as claims without progress (I9)",
          "[messages][unload][i9]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("waiti9");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // Woken at every recheck (150 ms) for 3 s, and unloaded again each time: far more
        // claims than max_claims_without_progress, none of them a failure.
        auto h = co_await eng.start("waiter", "w-patient", 3000);
        const std::string got = co_await h.result<std::string>();
        CHECK(got == "(timeout)");
        const auto row = co_await row_of(eng, "w-patient");
        CHECK(row.status == "succeeded");
        const auto claims = co_await scalar(
            eng, "SELECT (attempts > 3)::text FROM " + q(schema) + ".workflows WHERE id = $1",
            std::string("w-patient"));
        CHECK(claims == "true");
      },
      [](engine_options& o) {
        o.unload_after = 100ms;
        o.wait_recheck = 150ms;
        o.max_claims_without_progress = 2;
      });
}

TEST_CASE("a workflow waiting long for an event unloads and the event wakes it",
          "[events][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("eventwait");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto reader = co_await eng.start("reader", "w-reader2", std::string("w-pub2"));
        (void)co_await wait_status(eng, "w-reader2", "sleeping");
        const auto waits =
            co_await scalar(eng, "SELECT wait_for FROM " + q(schema) + ".workflows WHERE id = $1",
                            std::string("w-reader2"));
        CHECK(waits == "event:6:w-pub2:stage");  // the publisher id's length, then id and key
        (void)co_await eng.start("publisher", "w-pub2");
        const std::string read = co_await reader.result<std::string>();
        CHECK(read == "started/none");
      },
      [](engine_options& o) {
        o.unload_after = 100ms;
        o.wait_recheck = 1h;
      });
}

TEST_CASE("a recv as a branch of ctx.any is refused before it consumes anything",
          "[fanout][misuse]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("anyrecv");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("any-recv", "w-any-recv");
    (void)co_await eng.send("w-any-recv", "approve", std::string("A"));
    (void)co_await eng.send("w-any-recv", "reject", std::string("B"));
    const auto row = co_await wait_status(eng, "w-any-recv", "parked");
    CHECK(row.reason.find("is a branch of ctx.any") != std::string::npos);
    const auto consumed =
        co_await scalar(eng,
                        "SELECT count(*)::text FROM " + q(schema) +
                            ".messages WHERE workflow_id = $1 AND consumed_at IS NOT NULL",
                        std::string("w-any-recv"));
    CHECK(consumed == "0");
  });
}

TEST_CASE("a retry backoff inside ctx.all waits in the run and never re-runs a sibling",
          "[fanout][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("allretry");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("all-retry", "w-all-retry");
        const int v = co_await h.result<int>();
        CHECK(v == 3);
        const auto claims = co_await scalar(
            eng, "SELECT attempts::text FROM " + q(schema) + ".workflows WHERE id = $1",
            std::string("w-all-retry"));
        CHECK(claims == "1");
      },
      [](engine_options& o) { o.unload_after = 200ms; });
  CHECK(probe.calls["slow"] == 1);
  CHECK(probe.calls["flaky"] == 3);
}

TEST_CASE("a map item that fails for good dead-letters the workflow in one claim",
          "[fanout][map]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("mapfail");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("map-fail", "w-map-fail", 2000);
    std::string error;
    try {
      (void)co_await h.result<long>();
    } catch (const workflow_dead_letter& e) {
      error = e.what();
    }
    CHECK(error.find("item 300 cannot") != std::string::npos);
    const auto claims =
        co_await scalar(eng, "SELECT attempts::text FROM " + q(schema) + ".workflows WHERE id = $1",
                        std::string("w-map-fail"));
    CHECK(claims == "1");
  });
}

TEST_CASE("an event wait matches its workflow and key exactly, even with ':' in them",
          "[events][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("colons");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // Workflow "a:b" publishes key "c": not what "a"/"b:c" waits for.
        auto p = co_await eng.start("colon-publisher", "a:b", std::string("c"));
        co_await p.result<void>();
        auto h = co_await eng.start("colon-reader", "w-colon");
        (void)co_await wait_status(eng, "w-colon", "sleeping");
        co_await test::sleep_ms(1000);
        const auto claims = co_await scalar(
            eng, "SELECT attempts::text FROM " + q(schema) + ".workflows WHERE id = $1",
            std::string("w-colon"));
        CHECK(claims == "1");  // unloaded once, not woken by the other event
        auto a = co_await eng.start("colon-publisher", "a", std::string("b:c"));
        co_await a.result<void>();
        const std::string v = co_await h.result<std::string>();
        CHECK(v == "b:c");
      },
      [](engine_options& o) {
        o.unload_after = 200ms;
        o.wait_recheck = 1h;
      });
}

/// No poll, heartbeat or unload looks again for an hour: a wait ends only when it is poked.
void only_notified_looks(engine_options& o) {
  o.heartbeat_interval = std::chrono::hours(1);
  o.poll_interval = std::chrono::hours(1);
  o.unload_after = std::chrono::hours(1);
}

/// Waits until this engine's listener listens on the schema's wait channel.
asio::awaitable<void> wait_listening(engine& eng) {
  const std::string channel = durable::store::channel_for(eng.schema_name(), "durable.wait:");
  for (;;) {
    const auto listeners = co_await scalar(eng,
                                           "SELECT count(*)::text FROM pg_stat_activity "
                                           "WHERE query = 'LISTEN ' || quote_ident($1)",
                                           channel);
    if (listeners != "0") co_return;
    co_await test::sleep_ms(5);
  }
}

// A receive whose topic the last take left empty waits without looking first: the listener
// hears every send to the workflow. So a message costs its send and its take, 2 round trips
// (issue 39), where it cost 4 (a look, a look once registered, the take). Polls are an hour
// apart: a wake-up lost by skipping a look would hang the exchange past its limit.
TEST_CASE("a message between two waiting workflows costs 2 round trips: its send and its take",
          "[messages][round-trips]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("msgTrips");
  constexpr int rounds = 20;
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        co_await wait_listening(eng);  // until it listens, every receive looks
        // One exchange first: the listener's connect has been handled once a message went
        // through it (it pokes every waiter and wakes the dispatcher, whose looks count).
        auto warm_pong =
            co_await eng.start("patient_ponger", "w-pong-0", std::string("w-ping-0"), 1);
        auto warm_ping =
            co_await eng.start("patient_pinger", "w-ping-0", std::string("w-pong-0"), 1);
        (void)co_await warm_ping.result<int>(std::chrono::seconds(60));
        (void)co_await warm_pong.result<int>(std::chrono::seconds(60));
        const auto before = eng.stats().round_trips;
        auto pong = co_await eng.start("patient_ponger", "w-pong", std::string("w-ping"), rounds);
        auto ping = co_await eng.start("patient_pinger", "w-ping", std::string("w-pong"), rounds);
        const int last = co_await ping.result<int>(std::chrono::seconds(60));
        const int sum = co_await pong.result<int>(std::chrono::seconds(60));
        const auto trips = eng.stats().round_trips - before;
        CHECK(last == (rounds - 1) * 10);
        CHECK(sum == rounds * (rounds - 1) / 2);
        // 2 per message, plus each workflow's start and end (4), a first look per topic (2) and
        // a look again after a message taken before its notification came (a few); the old
        // receive took 4 per message (164 here).
        const std::uint64_t messages = 2 * rounds;
        INFO("round trips: " << trips);
        CHECK(trips <= 2 * messages + 16);
        CHECK(trips >= 2 * messages);
      },
      only_notified_looks);
}

// The race that skipping a look must not lose: a send commits while the receiver's take is in
// flight, after the take's snapshot (so the take says no other message is left). Staged: a
// transaction holds the receiver's row, so that its take of the first message waits in the
// journal write; the second message is sent then, and its notification is heard (a witness
// workflow's message, sent after it on the same channel, has been received); then the row goes.
// The receiver's next receive must look, not wait for a notification that already came: polls
// are an hour apart. (The witness proves the notification heard only if its first look, right
// after its start, came before its message: the staging above takes milliseconds at least.)
TEST_CASE("a send that commits while the receiver's take is in flight is not waited for again",
          "[messages][round-trips]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("msgRace");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        co_await wait_listening(eng);
        auto h = co_await eng.start("collector", "w-col", 2);
        auto witness = co_await eng.start("collector", "w-witness", 1);
        auto c = co_await eng.pool().acquire();
        auto tx = c->begin();
        const std::string lock_row =
            "SELECT 1 FROM " + q(schema) + ".workflows WHERE id = $1 FOR NO KEY UPDATE";
        const std::string col = "w-col";
        (void)co_await tx.exec(lock_row, col);
        (void)co_await eng.send("w-col", "n", 1);
        // Its take waits for the row (append_step's FOR SHARE), past its snapshot.
        co_await test::wait_lock_waiter(eng, q(schema) + ".messages");
        (void)co_await eng.send("w-col", "n", 2);
        // Notifications come in commit order: once the witness has its message, the listener
        // has heard the second message to w-col.
        (void)co_await eng.send("w-witness", "n", 7);
        const int seen = co_await witness.result<int>(std::chrono::seconds(30));
        CHECK(seen == 7);
        co_await tx.rollback();
        const int sum = co_await h.result<int>(std::chrono::seconds(30));
        CHECK(sum == 3);
      },
      only_notified_looks);
}

// A receive that will not wait (no timeout), or whose timeout passes before anything pokes it,
// takes what is there even when the last take left the topic empty and the listener has not
// heard the new send yet.
TEST_CASE("a receive with no or a short timeout takes a message its listener has not heard of",
          "[messages][round-trips]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("msgNoWait");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        co_await wait_listening(eng);
        auto h = co_await eng.start("self_sender", "w-self");
        const std::string got = co_await h.result<std::string>(std::chrono::seconds(30));
        CHECK(got == "-1 5 6");
      },
      only_notified_looks);
}

TEST_CASE("a recipient does not unload while a send to it is uncommitted, and gets it at once",
          "[messages][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("lateSend");
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("waiter", "w-late-send", 3600 * 1000);
        co_await test::wait_rows(eng, "w-late-send", 2);  // waits in its run
        auto c = co_await eng.pool().acquire();
        {
          auto tx = c->begin();
          co_await tx.run(eng.send_statement("w-late-send", "go", std::string("hi")));
          // Past unload_after: the waiter tries to unload, finds a send in flight (its lock),
          // and stays in its run rather than miss it.
          co_await test::sleep_ms(800);
          const auto row = co_await row_of(eng, "w-late-send");
          CHECK(row.status == "running");
          co_await tx.commit();
        }
        const std::string got = co_await h.result<std::string>();  // the recheck is an hour away
        CHECK(got == "hi");
      },
      [](engine_options& o) {
        o.unload_after = 300ms;
        o.wait_recheck = 1h;
      });
}

TEST_CASE("a 90-day timer is journaled and indexed, and fires after an outage that spans it",
          "[sleep][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("quarter");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("quarter", "w-quarter");
    (void)co_await wait_status(eng, "w-quarter", "sleeping");
    co_await test::wait_idle(eng);
    const auto due = co_await scalar(
        eng,
        "SELECT (wake_at BETWEEN now() + interval '89 days' AND now() + interval '91 days')::text "
        "FROM " +
            q(schema) + ".workflows WHERE id = $1",
        std::string("w-quarter"));
    CHECK(due == "true");
    // Ninety days pass while no executor runs (the journaled wake-up and wake_at are moved
    // into the past, as the clock would have): the next executor wakes it.
    co_await eng.shutdown(0ms);
  });
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    co_await c->exec("UPDATE " + q(schema) +
                         ".steps SET output = to_jsonb((extract(epoch FROM now() - interval '1 "
                         "day') * 1e6)::bigint) WHERE workflow_id = $1 AND kind = 'sleep'",
                     std::string("w-quarter"));
    co_await c->exec(
        "UPDATE " + q(schema) + ".workflows SET wake_at = now() - interval '1 day' WHERE id = $1",
        std::string("w-quarter"));
  }());
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int v = co_await eng.handle("w-quarter").result<int>();
        CHECK(v == 90);
      },
      [](engine_options&) {}, "exec-later");
  CHECK(probe.calls["after-quarter"] == 1);
}

TEST_CASE("operator views: recent failures, stuck workflows, slow steps, retries, queue depth",
          "[views]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("views");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // A failure, a slow step, retried attempts, and a queued workflow nobody serves.
    auto bad = co_await eng.start("send-nowhere", "w-v-bad");
    try {
      co_await bad.result<void>();
    } catch (const workflow_failed&) {
    }
    k.a_ms = 150;
    auto fan = co_await eng.start("fan", "w-v-fan");
    (void)co_await fan.result<int>();
    auto flaky = co_await eng.start("all-retry", "w-v-flaky");
    (void)co_await flaky.result<int>();
    (void)co_await eng.enqueue({.queue = "q-nobody"}, "fan", "w-v-queued");
    // Two workflows that do not move: owned by an executor that never existed, and due for
    // two minutes with no executor that runs their name.
    {
      auto c = co_await eng.pool().acquire();
      co_await c->exec("INSERT INTO " + q(schema) +
                           ".workflows (id, name, status, inputs, executor_id, epoch) VALUES "
                           "($1, 'fan', 'running', '[]', 'ghost', 1)",
                       std::string("w-v-ghost"));
      co_await c->exec("INSERT INTO " + q(schema) +
                           ".workflows (id, name, status, inputs, wake_at) VALUES "
                           "($1, 'unknown-name', 'sleeping', '[]', now() - interval '2 minutes')",
                       std::string("w-v-due"));
    }
    const auto failed =
        co_await scalar(eng,
                        "SELECT status || ':' || (error_message LIKE '%nobody-here%') FROM " +
                            q(schema) + ".recent_failures WHERE id = $1",
                        std::string("w-v-bad"));
    CHECK(failed == "failed:true");
    // Each with why, in the words of the view waiting: the queued one waits for an executor
    // that serves 'q-nobody', which none does, so it is stuck too.
    const auto stuck = co_await scalar(
        eng,
        "SELECT string_agg(id || ':' || (CASE id "
        "WHEN 'w-v-due' THEN reason LIKE '%but not woken: no live executor runs the workflow "
        "''unknown-name''' "
        "WHEN 'w-v-ghost' THEN reason LIKE 'running on executor ''ghost'', which is not "
        "registered: the next live executor takes it over' "
        "WHEN 'w-v-queued' THEN reason LIKE '%no live executor serves queue ''q-nobody''%' END)"
        "::text, ',' ORDER BY id) FROM " +
            q(schema) + ".stuck WHERE id LIKE $1",
        std::string("w-v-%"));
    CHECK(stuck == "w-v-due:true,w-v-ghost:true,w-v-queued:true");
    const auto slow = co_await scalar(eng,
                                      "SELECT (p95_ms >= 140)::text FROM " + q(schema) +
                                          ".slowest_steps WHERE workflow = 'fan' AND step = $1",
                                      std::string("a"));
    CHECK(slow == "true");
    const auto retries =
        co_await scalar(eng,
                        "SELECT failed_attempts || ':' || workflows || ':' || error_type FROM " +
                            q(schema) + ".retry_hot_spots WHERE step = $1",
                        std::string("flaky"));
    CHECK(retries == "2:1:std::runtime_error");
    const auto depth =
        co_await scalar(eng,
                        "SELECT waiting::text FROM " + q(schema) +
                            ".queue_depth WHERE queue = $1 ORDER BY bucket DESC LIMIT 1",
                        std::string("q-nobody"));
    CHECK(depth == "1");
  });
}

TEST_CASE("retention deletes finished workflows under load and loses no unfinished one",
          "[retention]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("retention");
  constexpr int n = 300;
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // A dead letter is never deleted, whatever its age.
        auto c = co_await eng.pool().acquire();
        co_await c->exec("INSERT INTO " + q(schema) +
                             ".workflows (id, name, status, inputs, completed_at) VALUES "
                             "($1, 'counter', 'dead_letter', '[3]', now() - interval '1 day')",
                         std::string("w-r-keep"));
        // Workflows start while retention deletes the ones that finished (every 50 ms tick).
        for (int i = 0; i < n; ++i) {
          const std::string id = "w-r-" + std::to_string(i);
          (void)co_await eng.start("counter", id, 3);
          if (i % 25 == 0) co_await test::sleep_ms(20);
        }
        for (int i = 0; i < 500 && probe.calls["s2"] < n; ++i) co_await test::sleep_ms(10);
        for (int i = 0; i < 500; ++i) {
          auto r =
              co_await c->exec("SELECT count(*) FROM " + q(schema) + ".workflows WHERE id LIKE $1",
                               std::string("w-r-%"));
          if (r[0].get<long>(0) == 1) break;
          co_await test::sleep_ms(20);
        }
        const auto left = co_await scalar(eng,
                                          "SELECT string_agg(id || ':' || status, ',') FROM " +
                                              q(schema) + ".workflows WHERE id LIKE $1",
                                          std::string("w-r-%"));
        CHECK(left == "w-r-keep:dead_letter");
        const auto rows = co_await scalar(
            eng,
            "SELECT (SELECT count(*) FROM " + q(schema) + ".steps WHERE workflow_id LIKE $1)::text",
            std::string("w-r-%"));
        CHECK(rows == "0");
      },
      [](engine_options& o) {
        o.retention = 1ms;
        o.retention_batch = 40;
        o.heartbeat_interval = 50ms;
      });
  // Every workflow ran each of its steps exactly once: none was deleted before it finished.
  CHECK(probe.calls["s0"] == n);
  CHECK(probe.calls["s1"] == n);
  CHECK(probe.calls["s2"] == n);
}

}  // namespace primitive_cases
