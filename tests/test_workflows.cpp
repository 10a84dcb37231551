// Workflows as coroutines: journaling, one-query replay, determinism checks, errors, codec
// values through the journal, transactional steps, fencing, idempotent start.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that), and
// prvalue class arguments are never passed straight to a coroutine inside co_await.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/experimental/awaitable_operators.hpp>
#include <catch2/catch.hpp>
#include <durable/store.hpp>

#include "support/conninfo.hpp"
#include "support/processes.hpp"
#include "support/workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::probe;

namespace {

using test::q;  // tests/support/workflows.hpp

// ---- workflows under test -------------------------------------------------------------------

asio::awaitable<std::string> shape_wf(context& ctx) {
  std::vector<std::string> names;
  switch (probe.version) {
    case 1:
      names = {"a", "b", "c"};
      break;
    case 2:
      names = {"a", "x", "c"};
      break;  // b renamed
    case 3:
      names = {"a", "new", "b", "c"};
      break;  // a step inserted
    case 4:
      names = {"a", "c"};
      break;  // b removed
    case 5:
      names = {"a"};
      break;  // b and c removed
  }
  std::string out;
  for (const auto& n : names) {
    co_await test::maybe_hang(n);
    out += co_await ctx.step(n, [&n] {
      ++probe.calls[n];
      return n;
    });
  }
  co_return out;
}

asio::awaitable<std::string> failing_wf(context& ctx) {
  std::string msg;
  try {
    co_await ctx.step("charge", []() -> int {
      ++probe.calls["charge"];
      throw std::runtime_error("card declined");
    });
  } catch (const step_failed& e) {
    msg = e.what();
    probe.seen.push_back(msg);
    probe.seen.push_back(e.error_type() + "|" + e.error_message() + "|" + std::to_string(e.seq()));
  }
  co_await test::maybe_hang("after");
  co_return co_await ctx.step("after", [&msg] {
    ++probe.calls["after"];
    return msg;
  });
}

asio::awaitable<int> propagating_wf(context& ctx) {
  co_return co_await ctx.step("boom", []() -> int { throw std::invalid_argument("bad input 42"); });
}

asio::awaitable<void> void_wf(context& ctx, std::string tag) {
  co_await ctx.step("nothing", [] { ++probe.calls["nothing"]; });
  auto t = co_await ctx.step("tag", [&tag] { return tag; });
  probe.seen.push_back(t);
}

struct order {
  std::string id;
  int qty = 0;
  double price = 0;
  NLOHMANN_DEFINE_TYPE_INTRUSIVE(order, id, qty, price)
};
enum class color { red = 1, green = 7 };

asio::awaitable<order> codec_wf(context& ctx) {
  using nested_t = std::vector<std::map<std::string, std::optional<int>>>;
  auto nested = co_await ctx.step("nested", [] {
    ++probe.calls["nested"];
    return nested_t{{{"x", 1}, {"y", std::nullopt}}, {}};
  });
  auto tup = co_await ctx.step("tuple", [] {
    ++probe.calls["tuple"];
    return std::tuple<int, double, bool, std::string>{-5, 0.1, true, "\xc3\xbc"};
  });
  auto c = co_await ctx.step("enum", [] { return color::green; });
  auto big = co_await ctx.step("big", [] {
    ++probe.calls["big"];
    std::string s(1 << 20, 'z');
    s[12345] = 'a';
    return s;
  });
  auto o = co_await ctx.step("order", [] { return order{"o-1", 3, 9.99}; });
  probe.seen.push_back(encode(nested).dump() + encode(tup).dump() + encode(c).dump() +
                       std::to_string(big.size()) + big.substr(12340, 10) + encode(o).dump());
  co_await test::maybe_hang("end");
  co_return o;
}

asio::awaitable<int> typed_wf(context& ctx) {
  if (probe.version == 1) {
    auto v = co_await ctx.step("val", [] { return std::string("abc"); });
    co_await test::maybe_hang("end");
    co_return int(v.size());
  }
  co_return co_await ctx.step("val", [] { return 5; });
}

asio::awaitable<std::string> inputs_wf(context& ctx) {
  auto t = co_await ctx.now();
  auto r = co_await ctx.random();
  auto u = co_await ctx.uuid();
  std::string s = std::to_string(t.time_since_epoch().count()) + "/" + std::to_string(r) + "/" + u;
  probe.seen.push_back(s);
  co_await test::maybe_hang("end");
  co_return s;
}

asio::awaitable<std::string> retry_wf(context& ctx) {
  auto v = co_await ctx.step(
      "flaky",
      [&ctx](const step_info& info) {
        probe.seen.push_back(info.idempotency_key + "#" + std::to_string(info.attempt) + "#" +
                             ctx.idempotency_key());
        if (info.attempt < 3) throw std::runtime_error("transient");
        return info.idempotency_key;
      },
      retry{.max_attempts = 3, .initial = 1ms, .factor = 2, .max = 10ms});
  co_await test::maybe_hang("end");
  co_return v;
}

asio::awaitable<int> tx_wf(context& ctx, std::string table) {
  int n = co_await ctx.transaction("insert", [&](pg::transaction& tx) -> asio::awaitable<int> {
    ++probe.calls["insert"];
    co_await tx.exec("INSERT INTO " + table + " (v) VALUES ($1)", 1);
    co_return 1;
  });
  try {
    co_await ctx.transaction("doomed", [&](pg::transaction& tx) -> asio::awaitable<void> {
      ++probe.calls["doomed"];
      co_await tx.exec("INSERT INTO " + table + " (v) VALUES ($1)", 2);
      throw std::runtime_error("abort after insert");
    });
  } catch (const step_failed& e) {
    probe.seen.push_back(e.error_message());
  }
  co_await test::maybe_hang("end");
  co_return n;
}

// GCC 12 corrupts a *temporary* closure with owning captures inside co_await (so
// check_step_function rejects `ctx.step("x", [s] {...})` there); a named closure is an lvalue, not
// a temporary, and is accepted. The strings are longer than the small-string buffer, so a bytewise
// copy would share, and free twice, a heap block.
asio::awaitable<std::string> named_closure_wf(context& ctx, std::string who) {
  const std::string greeting = "hello " + who + ", from a closure that owns a copy of this string";
  auto greet = [greeting] {
    ++probe.calls["greet"];
    return greeting;
  };
  const std::string said = co_await ctx.step("greet", greet);
  auto echo = [greeting](pg::transaction& tx) -> asio::awaitable<std::string> {
    ++probe.calls["echo"];
    auto r = co_await tx.exec("SELECT $1::text || '!'", greeting);
    co_return r[0].get<std::string>(0);
  };
  const std::string echoed = co_await ctx.transaction("echo", echo);
  co_return said + " / " + echoed;
}

/// The engine parallel_wf runs in, while the I4 case wants "left" to commit after "right".
engine* g_parallel_engine = nullptr;

asio::awaitable<int> parallel_wf(context& ctx) {
  using namespace asio::experimental::awaitable_operators;
  auto left = ctx.step("left", [&ctx]() -> asio::awaitable<int> {
    ++probe.calls["left"];
    // Finishes (and commits) after "right" has committed: waits for its row, however long the
    // machine takes (a fixed pause lost the race under load).
    for (int i = 0; g_parallel_engine && i < 4000; ++i) {
      auto c = co_await g_parallel_engine->pool().acquire();
      auto r = co_await c->exec("SELECT count(*) FROM " + q(g_parallel_engine->schema_name()) +
                                    ".steps WHERE workflow_id = $1 AND name = 'right'",
                                ctx.workflow_id());
      if (r[0].get<long>(0) > 0) break;
      co_await test::sleep_ms(5);
    }
    co_return 1;
  });
  auto right = ctx.step("right", [] {
    ++probe.calls["right"];
    return 2;
  });
  auto both = std::move(left) && std::move(right);
  auto [x, y] = co_await std::move(both);
  co_await test::maybe_hang("end");
  co_return x * 10 + y;
}

// A pool apart from the engine's: it sees only rows other sessions committed.
pg::pool* observer = nullptr;

/// After each step, a second step counts (through `observer`) the journal rows committed so
/// far; returns how many of those counts included every row written before it.
asio::awaitable<int> visible_wf(context& ctx, int n) {
  const std::string* id = &ctx.workflow_id();
  const std::string* schema = &probe.seen.front();
  int complete = 0;
  for (int i = 0; i < n; ++i) {
    (void)co_await ctx.step("work", [i] { return i; });
    const long seen = co_await ctx.step("look", [id, schema]() -> asio::awaitable<long> {
      auto c = co_await observer->acquire();
      auto r = co_await c->exec("SELECT count(*) FROM " + *schema + ".steps WHERE workflow_id = $1",
                                *id);
      co_return r[0].get<long>(0);
    });
    if (seen >= 2 * i + 1) ++complete;
  }
  co_return complete;
}

/// Three steps; the middle one ("slow") is the one a test's trigger delays on the server.
asio::awaitable<int> slow_middle_wf(context& ctx, int x) {
  int sum = x;
  for (const char* name : {"before", "slow", "after"})
    sum += co_await ctx.step(name, [name] {
      ++probe.calls[name];
      return 1;
    });
  co_return sum;
}

/// Opened by the test: until then a "hold" transaction keeps its connection.
bool gate_open = false;

asio::awaitable<int> held_wf(context& ctx) {
  co_await test::maybe_hang("hold");
  co_return co_await ctx.transaction("hold", [](pg::transaction& tx) -> asio::awaitable<int> {
    while (!gate_open) co_await test::sleep_ms(5);
    co_await tx.exec("SELECT 1");
    co_return 1;
  });
}

void register_all(engine& e) {
  e.register_workflow("held", &held_wf);
  e.register_workflow("visible", &visible_wf);
  e.register_workflow("slow_middle", &slow_middle_wf);
  e.register_workflow("counter", &test::counter_wf);
  e.register_workflow("shape", &shape_wf);
  e.register_workflow("failing", &failing_wf);
  e.register_workflow("propagating", &propagating_wf);
  e.register_workflow("void", &void_wf);
  e.register_workflow("codec", &codec_wf);
  e.register_workflow("typed", &typed_wf);
  e.register_workflow("inputs", &inputs_wf);
  e.register_workflow("retry", &retry_wf);
  e.register_workflow("tx", &tx_wf);
  e.register_workflow("parallel", &parallel_wf);
  e.register_workflow("named_closure", &named_closure_wf);
}

/// Runs `body(engine)` with a fresh engine on a fresh io_context; when it returns, the
/// io_context is abandoned with whatever still runs there, like a process that died.
template <class Body>
void with_engine(const std::string& schema, Body body, const std::string& executor = "exec-a",
                 bool dispatch = true) {
  auto o = test::options(schema, executor);
  if (!dispatch) {  // no queue dispatcher: its round trips would blur exact counts
    o.queues.clear();
    o.listen = false;
  }
  test::with_open_engine(o, &register_all, body);
}

struct workflow_row {
  std::string status;
  std::optional<std::string> reason, output, error;
  long epoch = 0;
};

asio::awaitable<workflow_row> row_of(engine& eng, const std::string& id) {
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec("SELECT status, status_reason, output::text, error::text, epoch FROM " +
                                q(eng.schema_name()) + ".workflows WHERE id = $1",
                            id);
  co_return workflow_row{r[0].get<std::string>(0), r[0].get<std::optional<std::string>>(1),
                         r[0].get<std::optional<std::string>>(2),
                         r[0].get<std::optional<std::string>>(3), r[0].get<long>(4)};
}

}  // namespace

TEST_CASE("a workflow journals each step and its outcome, visible in SQL", "[workflow]") {
  probe.reset();
  const auto schema = test::fresh_schema("wf");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("counter", "w1", 5);
    const int sum = co_await h.result<int>();
    CHECK(sum == 10);
    auto row = co_await row_of(eng, "w1");
    CHECK(row.status == "succeeded");  // I8: only with its output committed
    CHECK(row.output == "10");
    auto c = co_await eng.pool().acquire();
    auto steps = co_await c->exec("SELECT seq, name, kind, status, output::text FROM " + q(schema) +
                                      ".steps WHERE workflow_id = $1 ORDER BY seq",
                                  std::string("w1"));
    REQUIRE(steps.rows() == 5);
    for (int i = 0; i < 5; ++i) {
      CHECK(steps[i].get<int>(0) == i);
      CHECK(steps[i].get<std::string>(1) == "s" + std::to_string(i));
      CHECK(steps[i].get<std::string>(2) == "step");
      CHECK(steps[i].get<std::string>(3) == "succeeded");
      CHECK(steps[i].get<std::string>(4) == std::to_string(i));
    }
    auto st = co_await h.status();
    CHECK(st.status == "succeeded");
  });
  CHECK(probe.calls["s0"] == 1);
  CHECK(probe.calls["s4"] == 1);
}

TEST_CASE("a new step costs one round trip, resuming loads the journal in one query (I1, I2)",
          "[workflow][replay]") {
  probe.reset();
  const auto schema = test::fresh_schema("io");
  const int n = 8, done_before_crash = 5;
  probe.hang_before = "s" + std::to_string(done_before_crash);
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const auto before = eng.stats();
    (void)co_await eng.start("counter", "w-io", n);
    co_await test::wait_rows(eng, "w-io", done_before_crash);
    const auto after = eng.stats();
    // One insert of the workflow row, then exactly one round trip per executed step. (The
    // test's own row count queries go through the same pool: subtract them.)
    CHECK(after.steps_executed - before.steps_executed == done_before_crash);
    CHECK(after.statements - before.statements >= 1 + done_before_crash);
  });
  probe.hang_before.clear();
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // open() already resumed it; wait for it to finish without touching the database.
        co_await test::wait_idle(eng);
        const auto s = eng.stats();
        CHECK(s.journal_loads == 1);
        CHECK(s.steps_replayed == done_before_crash);
        CHECK(s.steps_executed == n - done_before_crash);
        // Round trips of this engine: migrate (4), executor row (3: the id's holder, the
        // abandoned engine of this process, still looks alive, so the row is refused, its
        // holder looked up and found to be this process, and the id taken), list owned
        // workflows (1), claim + journal load (1, I1), one per new step (I2), the final
        // status (1).
        CHECK(s.round_trips == 4 + 3 + 1 + 1 + (n - done_before_crash) + 1);
        auto h = eng.handle("w-io");
        const int sum = co_await h.result<int>();
        CHECK(sum == 28);
      },
      "exec-a", false);
  for (int i = 0; i < n; ++i) CHECK(probe.calls["s" + std::to_string(i)] == 1);
}

TEST_CASE("open() claims every workflow it resumes before their runs take the pool",
          "[workflow][recovery]") {
  probe.reset();
  gate_open = false;
  const auto schema = test::fresh_schema("openmany");
  const int n = 250;  // three claim statements of 100
  probe.hang_before = "hold";
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        for (int i = 0; i < n; ++i) {
          const std::string id = "h" + std::to_string(i);
          (void)co_await eng.start("held", id);
        }
      },
      "exec-open");  // then abandoned, like a process that died
  probe.hang_before.clear();
  bool returned_first = false;
  std::size_t resumed = 0;
  int finished = 0;
  test::run([&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    engine eng(ex, test::options(schema, "exec-open"));  // 4 connections
    register_all(eng);
    // Every resumed run takes a connection and keeps it until the gate opens. Should open()
    // wait for its own runs (a later claim behind them in the pool's queue), only this
    // watchdog would let it return.
    asio::steady_timer watchdog(ex, std::chrono::seconds(30));
    watchdog.async_wait([](asio::error_code ec) {
      if (!ec) gate_open = true;
    });
    resumed = co_await eng.open();
    returned_first = !gate_open;
    gate_open = true;
    watchdog.cancel();
    for (int i = 0; i < n; ++i) {
      auto h = eng.handle("h" + std::to_string(i));
      finished += co_await h.result<int>();
    }
  }());
  CHECK(returned_first);
  CHECK(resumed == std::size_t(n));
  CHECK(finished == n);
}

TEST_CASE("concurrent runs share commits, and no step resumes before its row is committed",
          "[workflow][group-commit]") {
  probe.reset();
  const auto schema = test::fresh_schema("gc");
  probe.seen.push_back(q(schema));
  constexpr int workflows = 100, steps = 3;
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    pg::pool watcher(co_await asio::this_coro::executor, test::conninfo(), 4);
    observer = &watcher;
    const auto before = eng.stats();
    int complete = 0;
    auto all = test::spawn_all(  // all started at once
        co_await asio::this_coro::executor, workflows,
        [&eng, &complete, steps](int i) -> asio::awaitable<void> {
          auto h = co_await eng.start("visible", "v" + std::to_string(i), steps);
          complete += co_await h.result<int>();
        });
    co_await test::wait_all(all);
    // Every "look" step saw the row of the step before it: each step resumed only after
    // its row was committed, although rows were committed many at a time.
    CHECK(complete == workflows * steps);
    const auto after = eng.stats();
    const auto statements = workflows * (1 + 2 * steps + 1);  // start, rows, finish
    CHECK(after.steps_executed - before.steps_executed == std::uint64_t(workflows * 2 * steps));
    CHECK(after.group_commits - before.group_commits < std::uint64_t(statements / 2));
    CHECK(after.largest_group_commit >= 10);
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT count(*), count(DISTINCT workflow_id) FROM " + q(schema) +
                              ".steps");
    CHECK(r[0].get<long>(0) == workflows * 2 * steps);
    CHECK(r[0].get<long>(1) == workflows);
    observer = nullptr;
  });
}

TEST_CASE("journal rows of a batch share one statement, a fenced or faulty row fails alone",
          "[workflow][group-commit][fencing]") {
  const auto schema = test::fresh_schema("rows");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    {
      auto c = co_await eng.pool().acquire();
      co_await c->exec("INSERT INTO " + q(schema) +
                       ".workflows (id, name, status, inputs, epoch) SELECT id, 'counter', "
                       "'running', '[]', CASE id WHEN 'b' THEN 2 ELSE 1 END "
                       "FROM unnest(ARRAY['a', 'b', 'c']) AS id");
      co_await c->exec("INSERT INTO " + q(schema) +
                       ".steps (workflow_id, seq, name, kind, status, epoch) "
                       "VALUES ('c', 1, 'x', 'step', 'succeeded', 1)");
    }
    detail::group_committer committer(ex, eng.pool(), {.max_batch = 64, .max_in_flight = 1},
                                      &durable::detail::store_of(eng));
    // Submits rows (id, epoch, seq) from concurrent coroutines in one turn of the event loop;
    // returns "ok", "fenced" or the SQLSTATE of each.
    auto submit = [&](std::vector<std::tuple<std::string, int, int>> rows)
        -> asio::awaitable<std::vector<std::string>> {
      std::vector<std::string> out(rows.size());
      auto all = test::spawn_all(ex, int(rows.size()), [&](int i) -> asio::awaitable<void> {
        const auto& [id, epoch, seq] = rows[std::size_t(i)];
        detail::group_committer::journal_row r;
        r.workflow_id = id;
        r.epoch = epoch;
        r.seq = seq;
        r.name = "s";
        r.kind = "step";
        r.status = "succeeded";
        r.output = "\"x\\\"y\"";  // a JSON string with a quote and a backslash
        try {
          const fence_verdict v = co_await committer.append(std::move(r));
          out[std::size_t(i)] = v.written() ? "ok" : "fenced";
        } catch (const pg::sql_error& e) {
          out[std::size_t(i)] = e.sqlstate();
        }
      });
      co_await test::wait_all(all);
      co_return out;
    };
    // b is owned under epoch 2 now: its row is fenced out, the others are written, all in
    // one round trip.
    std::vector<std::tuple<std::string, int, int>> first = {
        {"a", 1, 0}, {"b", 1, 0}, {"c", 1, 0}, {"a", 1, 1}};
    auto outcomes = co_await submit(first);
    CHECK(outcomes == std::vector<std::string>{"ok", "fenced", "ok", "ok"});
    CHECK(committer.stats().batches == 1);
    // c's step 1 exists: that row fails with a unique violation, its neighbours are written.
    std::vector<std::tuple<std::string, int, int>> second = {{"a", 1, 2}, {"c", 1, 1}, {"a", 1, 3}};
    outcomes = co_await submit(second);
    CHECK(outcomes == std::vector<std::string>{"ok", "23505", "ok"});
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT workflow_id || seq, output::text FROM " + q(schema) +
                              ".steps WHERE name = 's' ORDER BY 1");
    std::vector<std::string> written;
    for (const pg::row row : r) written.push_back(row.get<std::string>(0));
    CHECK(written == std::vector<std::string>{"a0", "a1", "a2", "a3", "c0"});
    CHECK(r[0].get<std::string>(1) == "\"x\\\"y\"");
  });
}

TEST_CASE("an engine ticking every millisecond never runs its own workflow twice",
          "[workflow][executors]") {
  // The maintenance tick claims this executor's unfinished workflows that run nowhere in the
  // process. A workflow whose start (or dispatch) has committed but whose launch is a moment
  // away must not count as one: claiming it would run its steps twice.
  probe.reset();
  const auto schema = test::fresh_schema("tick");
  constexpr int workflows = 200, steps = 3;
  test::run([&]() -> asio::awaitable<void> {
    auto o = test::options(schema);
    o.heartbeat_interval = 1ms;
    engine eng(co_await asio::this_coro::executor, o);
    register_all(eng);
    (void)co_await eng.open();
    std::vector<std::shared_ptr<test::spawned>> chunks;
    for (int chunk = 0; chunk < workflows / 20; ++chunk) {
      chunks.push_back(test::spawn_all(
          co_await asio::this_coro::executor, 20,
          [&eng, chunk, steps](int i) -> asio::awaitable<void> {
            auto h = co_await eng.start("counter", "t" + std::to_string(chunk * 20 + i), steps);
            (void)co_await h.result<int>();
          }));
      co_await test::sleep_ms(2);  // let ticks fall between the starts
    }
    for (auto& chunk : chunks) co_await test::wait_all(chunk);
    CHECK(eng.stats().ownership_lost == 0);
    CHECK(eng.stats().journal_loads == 0);  // nothing was claimed a second time
  }());
  for (int i = 0; i < steps; ++i) CHECK(probe.calls["s" + std::to_string(i)] == workflows);
}

TEST_CASE("runs whose group commit lost its connection are claimed again and finish once",
          "[workflow][group-commit][failure]") {
  // A trigger holds every batch carrying a "slow" row on the server for 100 ms; the test
  // terminates the backend running the first such batch, so its outcome is unknown to every
  // run in it.
  probe.reset();
  const auto schema = test::fresh_schema("gclost");
  const std::string app = "durable-gclost-" + std::to_string(::getpid());
  constexpr int workflows = 20;
  test::run([&]() -> asio::awaitable<void> {
    auto o = test::options(schema);
    o.conninfo = test::with_option(test::conninfo(), "application_name", app);
    o.io_retry_delay = 20ms;
    engine eng(co_await asio::this_coro::executor, o);
    register_all(eng);
    (void)co_await eng.open();
    auto killer = co_await pg::connection::connect(test::conninfo());
    co_await killer->exec("CREATE FUNCTION " + q(schema) + R"(.hold_slow() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.name = 'slow' AND current_setting('durable_test.held', true) IS DISTINCT FROM 'yes' THEN
    PERFORM set_config('durable_test.held', 'yes', true);
    PERFORM pg_sleep(0.1);
  END IF;
  RETURN NEW;
END $$)");
    co_await killer->exec("CREATE TRIGGER hold_slow BEFORE INSERT ON " + q(schema) +
                          ".steps FOR EACH ROW EXECUTE FUNCTION " + q(schema) + ".hold_slow()");
    auto all = test::spawn_all(
        co_await asio::this_coro::executor, workflows, [&eng](int i) -> asio::awaitable<void> {
          auto h = co_await eng.start("slow_middle", "l" + std::to_string(i), i);
          const int sum = co_await h.result<int>();
          CHECK(sum == i + 3);
        });
    long killed = 0;
    for (int i = 0; i < 5000 && killed == 0; ++i) {
      auto r = co_await killer->exec(
          "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
          "WHERE application_name = $1 AND wait_event = 'PgSleep'",
          app);
      killed = r[0].get<long>(0);
      if (killed == 0) co_await test::sleep_ms(1);
    }
    // Each transaction holds its first "slow" row, so with two batches in flight two backends
    // may be asleep at the moment of the kill: one or two batches are lost.
    CHECK(killed >= 1);
    co_await test::wait_all(all);
    // The runs of the lost batch were claimed again (a new epoch) and replayed.
    CHECK(eng.stats().journal_loads >= 1);
    auto r = co_await killer->exec("SELECT count(*), count(DISTINCT (workflow_id, seq)) FROM " +
                                   q(schema) + ".steps");
    CHECK(r[0].get<long>(0) == workflows * 3);
    CHECK(r[0].get<long>(1) == workflows * 3);
    auto done = co_await killer->exec("SELECT count(*) FROM " + q(schema) +
                                      ".workflows WHERE status = 'succeeded'");
    CHECK(done[0].get<long>(0) == workflows);
  }());
  // Every step ran at least once per workflow; one whose row was in the lost batch ran again.
  for (const char* name : {"before", "slow", "after"}) CHECK(probe.calls[name] >= workflows);
}

TEST_CASE("starting an existing id returns it and never runs it twice", "[workflow][start]") {
  probe.reset();
  const auto schema = test::fresh_schema("idem");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h1 = co_await eng.start("counter", "same", 3);
    auto h2 = co_await eng.start("counter", "same", 3);
    const int r1 = co_await h1.result<int>();
    auto h3 = co_await eng.start("counter", "same", 3);  // after completion, too
    const int r2 = co_await h2.result<int>();
    const int r3 = co_await h3.result<int>();
    CHECK((r1 == 3 && r2 == 3 && r3 == 3));

    auto other_inputs = co_await test::error_of<workflow_conflict>(eng.start("counter", "same", 4));
    REQUIRE(other_inputs);
    CHECK_THAT(*other_inputs, Catch::Contains("'same'") && Catch::Contains("other inputs"));
    auto other_name =
        co_await test::error_of<workflow_conflict>(eng.start("void", "same", std::string("x")));
    REQUIRE(other_name);
    CHECK_THAT(*other_name, Catch::Contains("named 'counter'"));
    auto bad_args =
        co_await test::error_of<durable::error>(eng.start("counter", "w-bad", std::string("x")));
    REQUIRE(bad_args);
    CHECK_THAT(*bad_args, Catch::Contains("takes (int)"));
    auto unknown = co_await test::error_of<durable::error>(eng.start("nope", "w-nope"));
    REQUIRE(unknown);
    CHECK_THAT(*unknown, Catch::Contains("no workflow named 'nope'"));
  });
  CHECK(probe.calls["s0"] == 1);
  CHECK(probe.calls["s2"] == 1);
}

TEST_CASE("two processes starting one id at once run it once", "[workflow][start][process]") {
  const auto schema = test::fresh_schema("race");
  // Create the schema first so the children race on the start, not the migration.
  with_engine(schema, [](engine&) -> asio::awaitable<void> { co_return; });
  const auto codes = test::run_together(2, [&](int i, test::start_gate gate) {
    int code = 1;
    probe.reset();
    with_engine(
        schema,
        [&](engine& eng) -> asio::awaitable<void> {
          if (!gate.wait()) co_return;  // both engines are open; start at once
          auto h = co_await eng.start("counter", "contested", 4);
          const int r = co_await h.result<int>();
          code = r == 6 ? 0 : 3;
        },
        "exec-" + std::to_string(i));
    return code;
  });
  CHECK(codes == std::vector<int>{0, 0});
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT count(*), count(DISTINCT seq), max(epoch) FROM " + q(schema) +
                              ".steps WHERE workflow_id = 'contested'");
    CHECK(r[0].get<int>(0) == 4);  // each step journaled once
    CHECK(r[0].get<int>(1) == 4);
    CHECK(r[0].get<int>(2) == 1);  // by the first and only owner
  });
}

TEST_CASE("a failing step is recorded and re-raised identically on replay", "[workflow][errors]") {
  probe.reset();
  const auto schema = test::fresh_schema("err");
  probe.hang_before = "after";
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const auto out = co_await eng.handle("w-err").result<std::string>();
    CHECK(out == first[0]);
  });
  CHECK(probe.seen == first);         // the same exception, the same text
  CHECK(probe.calls["charge"] == 1);  // and the step did not run again

  // A step failure the workflow does not handle dead-letters it, with the step, the type and
  // the message, for a person to retry.
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
      with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.start("shape", "w-nd");
        co_await test::wait_rows(eng, "w-nd", 2);
      });
      probe.hang_before.clear();
      probe.version = ch.version;
      with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
      with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("typed", "w-dec");
    co_await test::wait_rows(eng, "w-dec", 1);
  });
  probe.hang_before.clear();
  probe.version = 2;
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("inputs", "w-now");
    co_await test::wait_rows(eng, "w-now", 3);
    // The third row is visible before the run has read its commit: wait for the run itself
    // (abandoning the loop earlier would leave the first run without its value).
    for (int i = 0; i < 2000 && probe.seen.empty(); ++i) co_await test::sleep_ms(5);
  });
  REQUIRE(probe.seen.size() == 1);
  probe.hang_before.clear();
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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

TEST_CASE("concurrent steps are numbered in program order and replay identically (I4)",
          "[workflow][replay]") {
  probe.reset();
  const auto schema = test::fresh_schema("par");
  probe.hang_before = "end";
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const int v = co_await eng.handle("w-par").result<int>();
    CHECK(v == 12);
  });
  CHECK(probe.calls["left"] == 1);
  CHECK(probe.calls["right"] == 1);
}

// ---- queues, transactional start -------------------------------------------------------------

TEST_CASE("a rolled-back transactional start leaves nothing, a committed one runs",
          "[queues][transaction]") {
  probe.reset();
  const auto schema = test::fresh_schema("txstart");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto c = co_await eng.pool().acquire();
    {
      auto tx = c->begin();
      (void)co_await eng.start(tx, "counter", "w-rolled-back", 3);
      co_await tx.rollback();
    }
    {
      auto tx = c->begin();
      (void)co_await eng.start(tx, "counter", "w-committed", 3);
      (void)co_await tx.commit();
    }
    auto r = co_await c->exec("SELECT id FROM " + q(schema) + ".workflows ORDER BY id");
    REQUIRE(r.rows() == 1);
    CHECK(r[0].get<std::string>(0) == "w-committed");
    const int sum = co_await eng.handle("w-committed").result<int>();
    CHECK(sum == 3);

    // The same with a transaction the application runs on its own blocking PGconn*.
    PGconn* raw = PQconnectdb(test::conninfo().c_str());
    REQUIRE(PQstatus(raw) == CONNECTION_OK);
    const auto st = eng.enqueue_statement({}, "counter", "w-raw", 4);
    PQclear(PQexec(raw, "BEGIN"));
    auto created = pg::exec_blocking(raw, st);
    CHECK(created[0].get<bool>(0));
    PQclear(PQexec(raw, "ROLLBACK"));
    PQclear(PQexec(raw, "BEGIN"));
    (void)pg::exec_blocking(raw, eng.enqueue_statement({}, "counter", "w-raw", 4));
    PQclear(PQexec(raw, "COMMIT"));
    PQfinish(raw);
    const int raw_sum = co_await eng.handle("w-raw").result<int>();
    CHECK(raw_sum == 6);
    auto all = co_await c->exec("SELECT count(*) FROM " + q(schema) + ".workflows");
    CHECK(all[0].get<int>(0) == 2);
  });
}

TEST_CASE("deduplication keys, priorities and delayed starts", "[queues]") {
  probe.reset();
  const auto schema = test::fresh_schema("dedup");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // Nobody serves "held": the workflows stay queued while the test looks at them.
    enqueue_options held;
    held.queue = "held";
    held.dedup_key = "invoice-7";
    auto first = co_await eng.enqueue(held, "counter", "d1", 1);
    auto second = co_await eng.enqueue(held, "counter", "d2", 1);
    CHECK(first.id() == "d1");
    CHECK(second.id() == "d1");  // the unfinished holder of the key
    held.duplicate = on_duplicate::fail;
    try {
      (void)co_await eng.enqueue(held, "counter", "d3", 1);
      FAIL("a duplicate was accepted");
    } catch (const duplicate_workflow& e) {
      CHECK(e.existing_id() == "d1");
      CHECK_THAT(std::string(e.what()), Catch::Contains("invoice-7"));
    }
    auto st = co_await first.status();
    CHECK(st.status == "pending");

    // Delayed start: not before its time, then promptly.
    enqueue_options later;
    later.delay = std::chrono::milliseconds(300);
    auto h = co_await eng.enqueue(later, "counter", "w-later", 2);
    auto early = co_await h.status();
    CHECK(early.status == "pending");
    const int sum = co_await h.result<int>();
    CHECK(sum == 1);
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT extract(epoch FROM started_at - created_at) FROM " +
                              q(schema) + ".workflows WHERE id = 'w-later'");
    CHECK(r[0].get<double>(0) >= 0.3);

    try {  // checked before anything is sent
      (void)eng.enqueue({}, "counter", "w-bad", std::string("x"));
      FAIL("arguments of the wrong type were queued");
    } catch (const durable::error& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("takes (int)"));
    }
  });
}

TEST_CASE("executors run only the application versions they declare", "[queues][versions]") {
  probe.reset();
  const auto schema = test::fresh_schema("ver");
  test::run([&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto make = [&](const std::string& id, const std::string& version) {
      auto o = test::options(schema, id);
      o.app_version = version;
      o.run_versions = {version};
      o.poll_interval = std::chrono::milliseconds(20);
      auto e = std::make_unique<engine>(ex, o);
      register_all(*e);
      return e;
    };
    auto v1 = make("exec-v1", "v1");
    auto v2 = make("exec-v2", "v2");
    auto v3_producer = make("producer-v3", "v3");  // enqueues only; never opened
    (void)co_await v1->open();
    (void)co_await v2->open();
    auto h1 = co_await v1->enqueue({}, "counter", "w-v1", 2);
    auto h2 = co_await v2->enqueue({}, "counter", "w-v2", 3);
    auto h3 = co_await v3_producer->enqueue({}, "counter", "w-v3", 4);
    const int r1 = co_await h1.result<int>();
    const int r2 = co_await h2.result<int>();
    CHECK(r1 == 1);
    CHECK(r2 == 3);
    auto s1 = co_await h1.status();
    auto s2 = co_await h2.status();
    CHECK(s1.executor_id == "exec-v1");
    CHECK(s2.executor_id == "exec-v2");
    auto s3 = co_await h3.status();
    CHECK(s3.status == "pending");
    auto c = co_await v1->pool().acquire();
    auto r = co_await c->exec("SELECT reason FROM " + q(schema) + ".queued WHERE id = 'w-v3'");
    REQUIRE(r.rows() == 1);
    CHECK_THAT(r[0].get<std::string>(0),
               Catch::Contains("no live executor runs application version 'v3'"));
  }());
}
