// Executors against the real server: executor ids held by another process, application
// versions, a heartbeat that must not wait behind claims and is withheld while writes hang,
// bounded work, a database that disappears during shutdown, the event hook and the supervisor,
// two threads on one io_context, backends killed for seconds, a zombie cut off past its lease,
// and shutdown during every kind of wait. Workflows and helpers: support/failures.hpp.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include "support/failures.hpp"
// The supervisor's functions are inline (header-only and separately compiled builds alike); a
// case that starts a supervised part of its own includes them, as impl/engine.ipp does.
#include "durable/detail/runtime/supervisor.ipp"

using namespace failure_cases;

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
  fx.with_engine(schema, [](engine&) -> asio::awaitable<void> { co_return; });  // migrate
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    ::close(ready[0]);
    try {
      fx.with_engine(
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
    fx.with_engine(
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
  fx.with_engine(
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
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.start("hang", "w-v1", 3);
        co_await test::wait_rows(eng, "w-v1", 1);
      },
      version("v1"));
  probe.hang_before.clear();
  // Same executor id, version 2: it must not resume the version 1 workflow.
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        co_await test::sleep_ms(100);
        CHECK(eng.running() == 0);
        const bool recovered = co_await eng.recover("w-v1");
        CHECK(!recovered);
      },
      version("v2"));
  CHECK(probe.calls["s1"] == 0);
  fx.with_engine(
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
  fx.with_engine(
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
  // Two rows each, written while all of them ran: a workflow's rows lie apart in the table, and
  // the claim's load returns them in no order, interleaved with the other workflows' rows.
  probe.hang_before = "s2";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    for (int i = 0; i < n; ++i) {
      const std::string id = "m" + std::to_string(i);
      (void)co_await eng.start("hang", id, 3);
    }
    for (int i = 0; i < n; ++i) {
      const std::string id = "m" + std::to_string(i);
      co_await test::wait_rows(eng, id, 2);
    }
  });
  probe.hang_before.clear();
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // open() resumed every one with three claim statements (100 per statement).
        CHECK(eng.stats().journal_loads == 3);
        co_await test::wait_idle(eng);
        // Each row was placed at its step: every run replayed two steps, ran the third, and
        // returned 0 + 1 + 2.
        CHECK(eng.stats().steps_replayed == 2 * n);
        CHECK(eng.stats().steps_executed == n);
        auto c = co_await eng.pool().acquire();
        auto r = co_await c->exec("SELECT count(*) FROM " + q(schema) +
                                  ".workflows WHERE status = 'succeeded' AND output = '3'::jsonb");
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
  fx.with_engine(
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
  fx.with_engine(schema, [](engine&) -> asio::awaitable<void> { co_return; });  // migrate
  test::tcp_proxy proxy(test::conninfo());
  asio::io_context io;
  bool shut = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto o = fx.options(schema);
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
  fx.with_engine(schema, [&](engine&) -> asio::awaitable<void> {
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
    auto o = fx.options(test::fresh_schema("sup"));
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
    engine eng(co_await asio::this_coro::executor, fx.options(schema));
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
        auto o = fx.options(schema);
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
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto lock = co_await lock_journal(schema);
        auto h = co_await eng.start("simple", "w-hung");
        auto watch = co_await watch_heartbeat(eng);
        // Until the lease keeper has seen its lease run out (a tick after lease_timeout without
        // a heartbeat: on a loaded machine its ticks can come late, so the heartbeat's age alone
        // does not say it has).
        double worst = 0;
        for (int i = 0; i < 3000 && (worst < 1500 || events.count("could not be renewed") == 0);
             ++i) {
          co_await test::sleep_ms(10);
          worst = std::max(worst, co_await watch.age());
        }
        // The write hangs, so the lease is left to run out: another executor could take over.
        CHECK(worst >= 1500);
        CHECK(events.count("could not be renewed") == 1);
        co_await lock->release();
        const int v = co_await h.result<int>();
        CHECK(v == 1);
        // Heartbeats resume once the writes go through, and the engine says so: the renewed
        // heartbeat is committed (and seen here) a moment before the lease keeper reads its
        // answer and reports it, so wait for the report too, or shutdown would come between.
        double fresh = 1e9;
        for (int i = 0; i < 3000 && (fresh > 500 || events.count("lease renewed") == 0); ++i) {
          co_await test::sleep_ms(10);
          fresh = co_await watch.age();
        }
        CHECK(fresh <= 500);
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
  constexpr int workflows = 20, steps = 150;  // 4.5 s of steps, held during the storm
  int sum = 0;
  test::run([&]() -> asio::awaitable<void> {
    auto o = fx.options(schema);
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
    // (300 ms) that lets the lease keeper cut it short, however slow the machine is. A
    // transaction of another application holds the workflows table meanwhile (EXCLUSIVE: reads
    // go on, row locks and updates wait; one table lock, so no deadlock with a batch locking
    // several rows), so that every step's row and every claim waits until the next kill ends
    // it: none slips in between two kills (which would start its run's pauses from 50 ms
    // again, and could let every run finish before any pause grew that long).
    auto holder = co_await pg::connection::connect(test::conninfo());
    auto hold = holder->begin();
    (void)co_await hold.exec("LOCK TABLE " + q(schema) + ".workflows IN EXCLUSIVE MODE");
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
    (void)co_await hold.commit();
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
  fx.with_engine(schema, [](engine&) -> asio::awaitable<void> { co_return; });  // migrate
  test::tcp_proxy proxy(test::conninfo());  // holds the bytes while blackholed
  constexpr int steps = 100;
  int result = 0;
  std::size_t zombie_runs = 1;
  std::uint64_t taken_over = 0;
  std::vector<std::string> before, after;
  long rows = 0;
  test::run([&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto oa = fx.options(schema, "exec-zombie");
    oa.conninfo = proxy.conninfo(test::conninfo());
    auto ob = fx.options(schema, "exec-taker");
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
    auto o = fx.options(schema);
    o.poll_interval = std::chrono::hours(1);  // only the notification can wake the dispatcher
    engine eng(co_await asio::this_coro::executor, o);
    register_all(eng);
    (void)co_await eng.open();
    co_await test::sleep_ms(100);  // the listener is up
    // Enqueued by another engine, so that only the NOTIFY on the schema's channel can wake
    // this one's dispatcher.
    engine producer(co_await asio::this_coro::executor, fx.options(schema, "producer"));
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

TEST_CASE("a workflow that catches the shutdown's refusal still ends without a final state",
          "[failure][shutdown]") {
  probe.reset();
  const auto schema = test::fresh_schema("released");
  probe.hang_before = "b";
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, fx.options(schema));
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  auto o = fx.options(schema, "exec-sd-a");
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
  auto o2 = fx.options(schema, "exec-sd-b");
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
