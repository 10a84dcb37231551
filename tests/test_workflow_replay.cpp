// Workflows replayed against the real server: failing steps re-raised identically, changed code
// detected (I5), codec values, void results, time/random/uuid journaled (I6), idempotency keys,
// transactional steps, fencing (I3), concurrent steps in program order (I4). Workflows:
// support/workflow_cases.hpp.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that), and
// prvalue class arguments are never passed straight to a coroutine inside co_await.
#include <catch2/catch.hpp>

#include "support/workflow_cases.hpp"

using namespace workflow_cases;

TEST_CASE("a failing step is recorded and re-raised identically on replay", "[workflow][errors]") {
  probe.reset();
  const auto schema = test::fresh_schema("err");
  probe.hang_before = "after";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("failing", "w-err");
    co_await test::wait_rows(eng, "w-err", 1, "step_attempts");
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT outcome, error->>'type', error->>'message' FROM " +
                              q(schema) + ".step_attempts WHERE workflow_id = 'w-err' AND seq = 0");
    CHECK(co_await test::journal_rows(eng, "w-err") == 0);  // no outcome: a final failure
    CHECK(r[0].get<std::string>(0) == "failed");
    CHECK(r[0].get<std::string>(1) == "std::runtime_error");
    CHECK(r[0].get<std::string>(2) == "card declined");
  });
  REQUIRE(probe.seen.size() == 2);
  const auto first = probe.seen;
  CHECK_THAT(first[0], Catch::Contains("w-err") && Catch::Contains("step 0 'charge'") &&
                           Catch::Contains("std::runtime_error: card declined"));
  CHECK(first[1] == "std::runtime_error|card declined|0");
  probe.seen.clear();
  probe.hang_before.clear();
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const auto out = co_await eng.handle("w-err").result<std::string>();
    CHECK(out == first[0]);
  });
  CHECK(probe.seen == first);         // the same exception, the same text
  CHECK(probe.calls["charge"] == 1);  // and the step did not run again

  // A step failure the workflow does not handle dead-letters it, with the step, the type and
  // the message, for a person to retry.
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("propagating", "w-prop");
    auto err = co_await test::error_of<workflow_dead_letter>(h.result<int>());
    REQUIRE(err);
    CHECK_THAT(*err, Catch::Contains("dead-lettered") && Catch::Contains("step 0 'boom'") &&
                         Catch::Contains("std::invalid_argument") &&
                         Catch::Contains("bad input 42"));
    auto row = co_await row_of(eng, "w-prop");
    CHECK(row.status == "dead_letter");
  });
}

TEST_CASE("changed code is detected on replay and the workflow is parked (I5)",
          "[workflow][determinism]") {
  struct change {
    int version;
    const char* what;
    int seq;
    const char* journaled;
    const char* requested;
  };
  const change changes[] = {
      {2, "renamed", 1, "'b'", "'x'"},
      {3, "inserted", 1, "'b'", "'new'"},
      {4, "removed", 1, "'b'", "'c'"},
      {5, "removed at the end", 1, "'b'", ""},
  };
  for (const change& ch : changes) {
    DYNAMIC_SECTION(ch.what) {
      probe.reset();
      const auto schema = test::fresh_schema("nd");
      probe.hang_before = "c";
      fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.start("shape", "w-nd");
        co_await test::wait_rows(eng, "w-nd", 2);
      });
      probe.hang_before.clear();
      probe.version = ch.version;
      fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
        auto h = eng.handle("w-nd");
        try {
          (void)co_await h.result<std::string>();
          FAIL("a changed workflow completed");
        } catch (const nondeterminism_error& e) {
          CHECK(e.workflow_id() == "w-nd");
          CHECK(e.seq() == ch.seq);
          CHECK(e.journaled() == ch.journaled);
          CHECK(e.requested() == ch.requested);
          CHECK_THAT(std::string(e.what()), Catch::Contains("w-nd") && Catch::Contains("parked"));
        }
        auto row = co_await row_of(eng, "w-nd");
        CHECK(row.status == "parked");
        REQUIRE(row.reason);
        CHECK_THAT(*row.reason, Catch::Contains("step 1") && Catch::Contains("'b'"));
      });
      // Parked means parked: a new engine does not pick it up again.
      fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
        CHECK(eng.running() == 0);
        const bool resumed = co_await eng.recover("w-nd");
        CHECK(!resumed);
        auto row = co_await row_of(eng, "w-nd");
        CHECK(row.status == "parked");
      });
      CHECK(probe.calls["a"] == 1);
      CHECK(probe.calls["b"] == 1);
    }
  }
}

TEST_CASE("values of every codec type come back identically on replay", "[workflow][codec]") {
  probe.reset();
  const auto schema = test::fresh_schema("codec");
  probe.hang_before = "end";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("codec", "w-codec");
    co_await test::wait_rows(eng, "w-codec", 5);
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT output::text, length(output::text) FROM " + q(schema) +
                              ".steps WHERE workflow_id = 'w-codec' ORDER BY seq");
    CHECK(r[0].get<std::string>(0) == R"([{"x": 1, "y": null}, {}])");  // readable in psql
    CHECK(r[3].get<int>(1) > (1 << 20));                                // the 1 MiB value
  });
  REQUIRE(probe.seen.size() == 1);
  probe.hang_before.clear();
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const order o = co_await eng.handle("w-codec").result<order>();
    CHECK((o.id == "o-1" && o.qty == 3 && o.price == 9.99));
  });
  REQUIRE(probe.seen.size() == 2);
  CHECK(probe.seen[1] == probe.seen[0]);
  CHECK(probe.calls["nested"] == 1);
  CHECK(probe.calls["big"] == 1);
}

TEST_CASE("a journaled value that no longer decodes parks the workflow with a clear reason",
          "[workflow][codec]") {
  probe.reset();
  const auto schema = test::fresh_schema("dec");
  probe.hang_before = "end";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("typed", "w-dec");
    co_await test::wait_rows(eng, "w-dec", 1);
  });
  probe.hang_before.clear();
  probe.version = 2;
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto err = co_await test::error_of<workflow_parked>(eng.handle("w-dec").result<int>());
    REQUIRE(err);
    CHECK_THAT(*err, Catch::Contains("w-dec") && Catch::Contains("step 0 'val'") &&
                         Catch::Contains("as int"));
    auto row = co_await row_of(eng, "w-dec");
    CHECK(row.status == "parked");
  });
}

TEST_CASE("a workflow returning void", "[workflow]") {
  probe.reset();
  const auto schema = test::fresh_schema("void");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("void", "w-void", std::string("tagged"));
    co_await h.result<void>();
    auto row = co_await row_of(eng, "w-void");
    CHECK(row.status == "succeeded");
    CHECK(row.output == "null");
  });
  CHECK(probe.seen == std::vector<std::string>{"tagged"});
  CHECK(probe.calls["nothing"] == 1);
}

TEST_CASE("time, random numbers and uuids are journaled (I6)", "[workflow][replay]") {
  probe.reset();
  const auto schema = test::fresh_schema("now");
  probe.hang_before = "end";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("inputs", "w-now");
    co_await test::wait_rows(eng, "w-now", 3);
    // The third row is visible before the run has read its commit: wait for the run itself
    // (abandoning the loop earlier would leave the first run without its value).
    for (int i = 0; i < 2000 && probe.seen.empty(); ++i) co_await test::sleep_ms(5);
  });
  REQUIRE(probe.seen.size() == 1);
  probe.hang_before.clear();
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const auto s = co_await eng.handle("w-now").result<std::string>();
    CHECK(s == probe.seen.at(0));
  });
  REQUIRE(probe.seen.size() == 2);
  CHECK(probe.seen[0] == probe.seen[1]);
  CHECK(probe.seen[0].size() > 40);
}

TEST_CASE("idempotency keys are stable across retries and replays", "[workflow][retry]") {
  probe.reset();
  const auto schema = test::fresh_schema("key");
  probe.hang_before = "end";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("retry", "w-key");
    co_await test::wait_rows(eng, "w-key", 1);
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT attempts, status FROM " + q(schema) +
                              ".steps WHERE workflow_id = 'w-key'");
    CHECK(r[0].get<int>(0) == 3);
    CHECK(r[0].get<std::string>(1) == "succeeded");
  });
  CHECK(probe.seen ==
        std::vector<std::string>{"w-key:0#1#w-key:0", "w-key:0#2#w-key:0", "w-key:0#3#w-key:0"});
  probe.hang_before.clear();
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const auto key = co_await eng.handle("w-key").result<std::string>();
    CHECK(key == "w-key:0");
  });
  CHECK(probe.seen.size() == 3);  // replay did not call the step again
}

TEST_CASE("a transactional step commits with its journal row, or not at all",
          "[workflow][transaction]") {
  probe.reset();
  const auto schema = test::fresh_schema("txs");
  const auto table = schema + "_rows";
  probe.hang_before = "end";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    {
      auto c = co_await eng.pool().acquire();
      co_await c->exec("CREATE TABLE " + table + " (v int)");
    }
    (void)co_await eng.start("tx", "w-tx", table);
    co_await test::wait_rows(eng, "w-tx", 1, "step_attempts");
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT array_agg(v ORDER BY v)::text FROM " + table);
    CHECK(r[0].get<std::string>(0) == "{1}");  // the doomed insert rolled back
    auto s = co_await c->exec("SELECT name, kind, status FROM " + q(schema) +
                              ".steps WHERE workflow_id = 'w-tx' ORDER BY seq");
    REQUIRE(s.rows() == 1);
    CHECK(s[0].get<std::string>(1) == "transaction");
    CHECK(s[0].get<std::string>(2) == "succeeded");
    auto a = co_await c->exec("SELECT seq, kind, outcome FROM " + q(schema) +
                              ".step_attempts WHERE workflow_id = 'w-tx'");
    REQUIRE(a.rows() == 1);
    CHECK(a[0].get<int>(0) == 1);
    CHECK(a[0].get<std::string>(1) == "transaction");
    CHECK(a[0].get<std::string>(2) == "failed");
  });
  CHECK(probe.seen == std::vector<std::string>{"abort after insert"});
  probe.hang_before.clear();
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const int n = co_await eng.handle("w-tx").result<int>();
    CHECK(n == 1);
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT count(*) FROM " + table);
    CHECK(r[0].get<int>(0) == 1);
    co_await c->exec("DROP TABLE " + table);
  });
  CHECK(probe.calls["insert"] == 1);
  CHECK(probe.calls["doomed"] == 1);
  CHECK(probe.seen == std::vector<std::string>{"abort after insert", "abort after insert"});
}

TEST_CASE("a named step function may capture a string by value, also with GCC 12",
          "[workflow][transaction]") {
  probe.reset();
  const auto schema = test::fresh_schema("named");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const std::string who = "named-closure-test";
    auto h = co_await eng.start("named_closure", "w-named", who);
    const std::string out = co_await h.result<std::string>();
    const std::string greeting =
        "hello named-closure-test, from a closure that owns a copy of this string";
    CHECK(out == greeting + " / " + greeting + "!");
    auto c = co_await eng.pool().acquire();
    auto steps = co_await c->exec("SELECT name, kind, output #>> '{}' FROM " + q(schema) +
                                  ".steps WHERE workflow_id = 'w-named' ORDER BY seq");
    REQUIRE(steps.rows() == 2);
    CHECK(steps[0].get<std::string>(0) == "greet");
    CHECK(steps[0].get<std::string>(1) == "step");
    CHECK(steps[0].get<std::string>(2) == greeting);
    CHECK(steps[1].get<std::string>(0) == "echo");
    CHECK(steps[1].get<std::string>(1) == "transaction");
    CHECK(steps[1].get<std::string>(2) == greeting + "!");
  });
  CHECK(probe.calls["greet"] == 1);
  CHECK(probe.calls["echo"] == 1);
}

TEST_CASE("a writer whose ownership moved on is fenced out (I3)", "[workflow][fencing]") {
  probe.reset();
  const auto schema = test::fresh_schema("fence");
  probe.hang_before = "s2";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("counter", "w-fence", 4);
    co_await test::wait_rows(eng, "w-fence", 2);
    {  // another executor takes the workflow over while this one is paused
      auto c = co_await eng.pool().acquire();
      co_await c->exec("UPDATE " + q(schema) +
                       ".workflows SET epoch = epoch + 1, executor_id = 'exec-b' "
                       "WHERE id = 'w-fence'");
    }
    probe.hang_before.clear();  // the paused executor wakes up and runs step 2
    co_await test::wait_idle(eng);
    auto row = co_await row_of(eng, "w-fence");
    CHECK(row.status == "running");  // not finished by the fenced-out writer
    CHECK(row.epoch == 2);
    const long rows = co_await test::journal_rows(eng, "w-fence");
    CHECK(rows == 2);  // its step 2 was rejected
  });
  CHECK(probe.calls["s2"] == 1);  // it ran, but its result never reached the journal
  CHECK(probe.calls["s3"] == 0);  // and the coroutine stopped there
}

// Starts counter(4) as `id` and lets it stall before step 2; then holds step 2's key in an
// uncommitted row (under `epoch`, with `output`) and lets the workflow go on: its write of step
// 2 passes its fence and waits for the key. The row is the transaction's, until it ends.
struct held_key {
  explicit held_key(pg::pool::lease c) : conn(std::move(c)), tx(conn->begin()) {}
  pg::pool::lease conn;
  pg::transaction tx;
};

asio::awaitable<std::unique_ptr<held_key>> run_into_held_key(engine& eng, std::string id,
                                                             long epoch, std::string output) {
  probe.hang_before = "s2";
  (void)co_await eng.start("counter", id, 4);
  co_await test::wait_stalled("s2");
  co_await test::wait_rows(eng, id, 2);
  auto held = std::make_unique<held_key>(co_await eng.pool().acquire());
  (void)co_await held->tx.exec("INSERT INTO " + q(eng.schema_name()) +
                                   ".steps (workflow_id, seq, name, kind, status, output, epoch) "
                                   "VALUES ($1, 2, 's2', 'step', 'succeeded', $2::jsonb, $3)",
                               id, output, epoch);
  probe.stalled_at.clear();
  probe.hang_before.clear();  // the workflow runs step 2; its write waits for the key
  co_await test::wait_lock_waiter(eng, q(eng.schema_name()) + ".steps", "INSERT");
  co_return held;
}

// A plain step's journal write (step_write) takes only a key share lock: a takeover does not
// wait for the old owner's write in flight, and that write, past its fence before the takeover
// committed, may still insert its row after the taker has loaded the journal. Staged here: a
// transaction holds the key of step 2 so that the old owner's INSERT waits after its fence saw
// epoch 1; engine B takes the workflow over (a key share lock does not hold it back) and loads
// steps 0 and 1; the old owner's row then lands. B runs step 2 again, its row meets the old one's
// key (23505), and B claims the workflow again and replays that row instead of parking or
// overwriting it (I3, I7).
TEST_CASE("a takeover between two writes of the old owner replays its late row (I3)",
          "[workflow][fencing]") {
  probe.reset();
  const auto schema = test::fresh_schema("race");
  const std::string id = "w-race";
  std::vector<std::string> warnings_b;
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto held = co_await run_into_held_key(eng, id, 1, "-1");
    probe.hang_before = "s2";  // engine B replays steps 0 and 1, then waits before step 2
    auto ob = fx.options(schema, "exec-b");
    ob.io_retry_delay = 10ms;
    ob.on_event = [&](const event& e) {
      if (e.level == severity::warning) warnings_b.emplace_back(e.message);
    };
    engine b(co_await asio::this_coro::executor, ob);
    register_all(b);
    co_await b.open();
    CHECK(co_await b.recover(id));  // the takeover does not wait for the old owner's write
    co_await test::wait_stalled("s2");
    co_await held->tx.rollback();  // the old owner's row of step 2 lands, under epoch 1
    co_await test::wait_rows(eng, id, 3);
    probe.hang_before.clear();  // B runs step 2 again: its row meets the old owner's
    const int sum = co_await b.handle(id).result<int>();
    CHECK(sum == 0 + 1 + 2 + 3);
    co_await test::wait_idle(eng);  // the old owner's run has stopped at its fenced step 3
    auto c = co_await eng.pool().acquire();
    auto rows = co_await c->exec("SELECT seq, epoch, output::text FROM " + q(schema) +
                                     ".steps WHERE workflow_id = $1 ORDER BY seq",
                                 id);
    REQUIRE(rows.rows() == 4);
    CHECK(rows[2].get<long>(1) == 1);  // the old owner's row, kept
    CHECK(rows[2].get<std::string>(2) == "2");
    CHECK(rows[3].get<long>(1) > 2);  // written after B claimed the workflow again
    auto wf = co_await row_of(eng, id);
    CHECK(wf.status == "succeeded");
    co_await b.shutdown(std::chrono::seconds(5));
  });
  CHECK(probe.calls["s2"] == 2);  // the old owner's run and B's
  CHECK(probe.calls["s3"] == 2);  // the old owner's (fenced out: no row) and B's replay's
  bool told = false;
  for (const auto& w : warnings_b)
    told = told || w.find("already has a journal row") != std::string::npos;
  CHECK(told);
}

// The other order of the same race: the old owner's write passed its fence, then met a row of
// that step committed under the new owner (staged: a transaction holds the key, the epoch moves
// on, the transaction commits). The old owner must see that it lost and stop, not claim the
// workflow back from its owner as a run that only needs to replay would.
TEST_CASE("a run whose late row meets the new owner's row stops instead of claiming it back (I3)",
          "[workflow][fencing]") {
  probe.reset();
  const auto schema = test::fresh_schema("race_lost");
  const std::string id = "w-race-lost";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto held = co_await run_into_held_key(eng, id, 2, "2");
    {  // another executor owns the workflow now (its claim is not held up by the write)
      auto c = co_await eng.pool().acquire();
      co_await c->exec(
          "UPDATE " + q(schema) + ".workflows SET epoch = 2, executor_id = 'exec-b' WHERE id = $1",
          id);
    }
    (void)co_await held->tx.commit();  // "exec-b"'s row of step 2: the old owner's insert meets it
    co_await test::wait_idle(eng);
    CHECK(eng.stats().ownership_lost == 1);
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec(
        "SELECT epoch, executor_id FROM " + q(schema) + ".workflows WHERE id = $1", id);
    CHECK(r[0].get<long>(0) == 2);
    CHECK(r[0].get<std::string>(1) == "exec-b");
    CHECK(co_await test::journal_rows(eng, id) == 3);
  });
  CHECK(probe.calls["s2"] == 1);
  CHECK(probe.calls["s3"] == 0);
}

TEST_CASE("concurrent steps are numbered in program order and replay identically (I4)",
          "[workflow][replay]") {
  probe.reset();
  const auto schema = test::fresh_schema("par");
  probe.hang_before = "end";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    g_parallel_engine = &eng;
    (void)co_await eng.start("parallel", "w-par");
    co_await test::wait_rows(eng, "w-par", 2);
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT seq, name FROM " + q(schema) +
                              ".steps WHERE workflow_id = 'w-par' ORDER BY completed_at");
    // "right" committed first, but "left" was issued first and has step number 0.
    CHECK(r[0].get<std::string>(1) == "right");
    CHECK(r[0].get<int>(0) == 1);
    CHECK(r[1].get<std::string>(1) == "left");
    CHECK(r[1].get<int>(0) == 0);
    g_parallel_engine = nullptr;
  });
  probe.hang_before.clear();
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const int v = co_await eng.handle("w-par").result<int>();
    CHECK(v == 12);
  });
  CHECK(probe.calls["left"] == 1);
  CHECK(probe.calls["right"] == 1);
}
