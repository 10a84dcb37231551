// Crash tests: a child process runs 20-step workflows whose steps record a side effect, and is
// killed with SIGKILL at random points (between steps and inside them), at least 50 times;
// each time a new process resumes. Afterwards every workflow has the right output, every
// side effect happened once (plus at most one re-execution per workflow per kill that found it
// in flight), and no journal row was ever updated or deleted.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <set>

#include "support/processes.hpp"
#include "support/workflows.hpp"

using namespace durable;

namespace {

constexpr int steps_per_workflow = 20;
constexpr int workflows_per_round = 8;
constexpr int min_kills = 50;

engine* g_engine = nullptr;
std::string g_effects;  // quoted table name

asio::awaitable<long> crash_wf(context& ctx, int k) {
  long sum = 0;
  for (int i = 0; i < steps_per_workflow; ++i) {
    sum += co_await ctx.step("step-" + std::to_string(i), [&ctx, i, k]() -> asio::awaitable<long> {
      {  // the external side effect, committed on its own before the journal row
        auto c = co_await g_engine->pool().acquire();
        co_await c->exec(
            "INSERT INTO " + g_effects + " (workflow_id, seq, pid) VALUES ($1, $2, $3)",
            ctx.workflow_id(), i, int(::getpid()));
      }
      // Linger inside the step now and then, so that kills land between effect and journal.
      thread_local std::minstd_rand rng{std::random_device{}()};
      if (const int ms = int(rng() % 4); ms > 0) co_await test::sleep_ms(ms);
      co_return long(i) * k;
    });
  }
  co_return sum;
}

std::string wid(int round, int w) {
  return "crash-" + std::to_string(round) + "-" + std::to_string(w);
}

/// The child: resume whatever the previous process left, start this round's workflows
/// (idempotent), wait for all of them; it writes a byte to `opened` once its engine is open.
/// Never returns.
[[noreturn]] void child(const std::string& schema, int round, int opened) {
  int code = 1;
  try {
    test::run([&]() -> asio::awaitable<void> {
      auto o = test::options(schema, "crash-exec");
      // Kills land every few milliseconds, often before a resumed run journals anything (more
      // so in the sanitizer build): by I9's count those are claims without progress, and the
      // default limit would park a workflow here. This test is about surviving the kills; I9
      // has its own tests (tests/test_failures.cpp).
      o.max_claims_without_progress = 1000000;
      engine eng(co_await asio::this_coro::executor, o);
      g_engine = &eng;
      eng.register_workflow("crash", &crash_wf);
      (void)co_await eng.open();
      // The parent may have stopped listening (it closes its end once it chose the delay).
      ::signal(SIGPIPE, SIG_IGN);
      (void)!::write(opened, "o", 1);
      std::vector<workflow_handle> hs;
      for (int w = 0; w < workflows_per_round; ++w)
        hs.push_back(co_await eng.start("crash", wid(round, w), w + 1));
      for (auto& h : hs) (void)co_await h.result<long>();
      code = 0;
    }());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crash child: %s\n", e.what());
  }
  ::_exit(code);
}

}  // namespace

TEST_CASE("workflows survive 50+ SIGKILLs with every effect once and no journal row rewritten",
          "[crash][process][slow]") {
  const std::string schema = test::fresh_schema("crash");
  g_effects = test::q(schema) + ".effects";
  const std::string steps = test::q(schema) + ".steps";
  const std::string audit = test::q(schema) + ".journal_audit";

  // Schema, the effects table, and a trigger that records any UPDATE or DELETE of a journal row.
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "setup"));
    co_await eng.migrate();
    auto c = co_await eng.pool().acquire();
    co_await c->exec("CREATE TABLE " + g_effects + " (workflow_id text, seq int, pid int)");
    co_await c->exec("CREATE TABLE " + audit + " (op text, workflow_id text, seq int)");
    co_await c->exec("CREATE FUNCTION " + test::q(schema) +
                     ".audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                     "INSERT INTO " +
                     audit + " VALUES (TG_OP, OLD.workflow_id, OLD.seq); RETURN NULL; END $$");
    co_await c->exec("CREATE TRIGGER journal_audit AFTER UPDATE OR DELETE ON " + steps +
                     " FOR EACH ROW EXECUTE FUNCTION " + test::q(schema) + ".audit()");
  }());

  std::minstd_rand rng(std::random_device{}());
  int kills = 0, kills_with_progress = 0, rounds = 0;
  std::map<std::string, int> kills_in_flight;  // per workflow: kills that found it unfinished
  for (int round = 0; kills < min_kills; ++round, ++rounds) {
    REQUIRE(round < 200);
    for (int attempt = 0;; ++attempt) {
      REQUIRE(attempt < 500);
      int opened[2];
      REQUIRE(::pipe(opened) == 0);
      const pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        ::close(opened[0]);
        child(schema, round, opened[1]);
      }
      ::close(opened[1]);
      // Kill after a random delay counted from the moment the child's engine is open (on a
      // loaded machine a process can take longer than any fixed delay to get that far, and
      // every kill would land before it did any work); a child that finishes first ends the
      // round. One kill in four does not wait for the open: it lands during recovery.
      if (rng() % 4 != 0) {
        pollfd p{opened[0], POLLIN, 0};
        for (int waited = 0; waited < 600 && ::poll(&p, 1, 100) == 0; ++waited) {
        }
      }
      ::close(opened[0]);
      const int delay_ms = 3 + int(rng() % 70);
      int status = 0;
      bool exited = false;
      for (int waited = 0; waited < delay_ms * 10; ++waited) {
        if (::waitpid(pid, &status, WNOHANG) == pid) {
          exited = true;
          break;
        }
        ::usleep(100);
      }
      if (exited) {
        REQUIRE(WIFEXITED(status));
        REQUIRE(WEXITSTATUS(status) == 0);
        break;
      }
      ::kill(pid, SIGKILL);
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      if (WIFEXITED(status)) {  // it finished just before the signal
        REQUIRE(WEXITSTATUS(status) == 0);
        break;
      }
      REQUIRE(WIFSIGNALED(status));
      ++kills;
      // Which workflows were in flight at this kill (started, not finished)?
      test::run([&]() -> asio::awaitable<void> {
        auto c = co_await pg::connection::connect(test::conninfo());
        auto r = co_await c->exec("SELECT id, (SELECT count(*) FROM " + steps +
                                  " s WHERE s.workflow_id = w.id) FROM " + test::q(schema) +
                                  ".workflows w WHERE status <> 'succeeded'");
        bool progress = false;
        for (const pg::row row : r) {
          ++kills_in_flight[row.get<std::string>(0)];
          progress = progress || row.get<long>(1) > 0;
        }
        if (progress) ++kills_with_progress;
      }());
    }
  }
  INFO("kills: " << kills << " (" << kills_with_progress
                 << " with journal progress), rounds: " << rounds);
  CHECK(kills >= min_kills);
  CHECK(kills_with_progress >= min_kills / 2);

  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    const std::string wf = test::q(schema) + ".workflows";
    // Every workflow finished with the right output.
    auto r = co_await c->exec("SELECT id, status, output::text FROM " + wf + " ORDER BY id");
    CHECK(r.rows() == rounds * workflows_per_round);
    for (const pg::row row : r) {
      const std::string id = row.get<std::string>(0);
      const int k = std::stoi(id.substr(id.rfind('-') + 1)) + 1;
      INFO("workflow " << id);
      CHECK(row.get<std::string>(1) == "succeeded");
      CHECK(row.get<std::string>(2) == std::to_string(190L * k));
    }
    // Exactly one journal row per step, each with the right output.
    auto j = co_await c->exec(
        "SELECT workflow_id, count(*), count(DISTINCT seq), min(seq), max(seq), "
        "bool_and(output::text = (seq * (split_part(workflow_id, '-', 3)::int + 1))::text) "
        "FROM " +
        steps + " GROUP BY workflow_id");
    CHECK(j.rows() == rounds * workflows_per_round);
    for (const pg::row row : j) {
      INFO("workflow " << row.get<std::string>(0));
      CHECK(row.get<int>(1) == steps_per_workflow);
      CHECK(row.get<int>(2) == steps_per_workflow);
      CHECK(row.get<int>(3) == 0);
      CHECK(row.get<int>(4) == steps_per_workflow - 1);
      CHECK(row.get<bool>(5));
    }
    // No journal row was ever updated or deleted.
    auto a = co_await c->exec("SELECT count(*) FROM " + audit);
    CHECK(a[0].get<int>(0) == 0);
    // Every step's effect happened; repeats only from a new process, and per workflow no more
    // than the kills that caught it in flight.
    auto e = co_await c->exec("SELECT workflow_id, seq, count(*), count(DISTINCT pid) FROM " +
                              g_effects + " GROUP BY workflow_id, seq");
    CHECK(e.rows() == rounds * workflows_per_round * steps_per_workflow);
    std::map<std::string, int> repeats;
    int total_repeats = 0;
    for (const pg::row row : e) {
      const auto id = row.get<std::string>(0);
      const int n = row.get<int>(2);
      CHECK(n == row.get<int>(3));  // never twice in one process
      repeats[id] += n - 1;
      total_repeats += n - 1;
    }
    for (const auto& [id, n] : repeats) {
      INFO("workflow " << id << " repeated " << n << " effects, in flight at "
                       << kills_in_flight[id] << " kills");
      CHECK(n <= kills_in_flight[id]);
    }
    WARN("crash test: " << kills << " kills (" << kills_with_progress << " with progress), "
                        << rounds << " rounds, " << total_repeats << " re-executed steps");
  }());
}

// ---- many executors, one database: leases, takeover, fencing, graceful hand-over -----------

namespace {

asio::awaitable<long> slow_wf(context& ctx, int n, int step_ms) {
  long sum = 0;
  for (int i = 0; i < n; ++i)
    sum += co_await ctx.step("slow-" + std::to_string(i), [i, step_ms]() -> asio::awaitable<long> {
      co_await test::sleep_ms(step_ms);
      co_return i;
    });
  co_return sum;
}

/// Forks an executor process that opens an engine and runs `body(engine) -> exit code`.
template <class Body>
pid_t spawn_executor(const std::string& schema, const std::string& executor,
                     std::chrono::milliseconds lease, Body body, const std::string& queue = "",
                     std::size_t max_running = 1000) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int code = 1;
  try {
    test::run([&]() -> asio::awaitable<void> {
      auto o = test::options(schema, executor);
      o.lease_timeout = lease;
      o.heartbeat_interval = std::chrono::milliseconds(100);
      o.poll_interval = std::chrono::milliseconds(50);
      if (!queue.empty()) o.queues.push_back(queue);
      o.max_running = max_running;
      engine eng(co_await asio::this_coro::executor, o);
      eng.register_workflow("slow", &slow_wf);
      (void)co_await eng.open();
      code = co_await body(eng);
    }());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "executor %s: %s\n", executor.c_str(), e.what());
  }
  ::_exit(code);
}

/// Polls until the workflow has `n` journal rows.
void wait_rows(const std::string& schema, const std::string& id, long n) {
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    for (int i = 0; i < 3000; ++i) {
      auto r = co_await c->exec(
          "SELECT count(*) FROM " + test::q(schema) + ".steps WHERE workflow_id = $1", id);
      if (r[0].get<long>(0) >= n) co_return;
      co_await test::sleep_ms(10);
    }
    throw std::runtime_error("workflow " + id + " made no progress");
  }());
}

struct final_state {
  std::string status, output, executor;
  long epoch = 0, rows = 0, seqs = 0, rewritten = 0;
};

final_state final_of(const std::string& schema, const std::string& id) {
  return test::run([&]() -> asio::awaitable<final_state> {
    auto c = co_await pg::connection::connect(test::conninfo());
    const auto s = test::q(schema);
    auto r = co_await c->exec(
        "SELECT w.status, coalesce(w.output::text, ''), w.executor_id, w.epoch, "
        "(SELECT count(*) FROM " +
            s +
            ".steps t WHERE t.workflow_id = w.id), "
            "(SELECT count(DISTINCT seq) FROM " +
            s +
            ".steps t WHERE t.workflow_id = w.id), "
            "(SELECT count(*) FROM " +
            s + ".journal_audit) FROM " + s + ".workflows w WHERE w.id = $1",
        id);
    co_return final_state{r[0].get<std::string>(0), r[0].get<std::string>(1),
                          r[0].get<std::string>(2), r[0].get<long>(3),
                          r[0].get<long>(4),        r[0].get<long>(5),
                          r[0].get<long>(6)};
  }());
}

/// A schema with an audit trigger that records every UPDATE or DELETE of a journal row.
std::string audited_schema(const std::string& tag) {
  const std::string schema = test::fresh_schema(tag);
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "setup"));
    (void)co_await eng.migrate();
    auto c = co_await eng.pool().acquire();
    const auto s = test::q(schema);
    co_await c->exec("CREATE TABLE " + s + ".journal_audit (op text, workflow_id text, seq int)");
    co_await c->exec(
        "CREATE FUNCTION " + s +
        ".audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO " + s +
        ".journal_audit VALUES (TG_OP, OLD.workflow_id, OLD.seq); RETURN NULL; END $$");
    co_await c->exec("CREATE TRIGGER journal_audit AFTER UPDATE OR DELETE ON " + s +
                     ".steps FOR EACH ROW EXECUTE FUNCTION " + s + ".audit()");
  }());
  return schema;
}

asio::awaitable<int> await_slow(engine& eng, std::string id) {
  for (int i = 0; i < 3000; ++i) {  // the workflow may not exist yet
    try {
      const long sum = co_await eng.handle(id).result<long>();
      co_return sum == 45 ? 0 : 3;
    } catch (const workflow_failed&) {
      co_return 4;
    } catch (const durable::error&) {
    } catch (const pg::error&) {  // the database errors are not durable::error
    }
    co_await test::sleep_ms(10);
  }
  co_return 5;
}

}  // namespace

TEST_CASE("a killed executor's workflow is taken over after its lease and finished once",
          "[executors][process]") {
  const auto schema = audited_schema("take");
  using namespace std::chrono_literals;
  const pid_t a = spawn_executor(schema, "exec-a", 1000ms, [](engine& eng) -> asio::awaitable<int> {
    (void)co_await eng.start("slow", "w-take", 10, 100);
    co_await test::sleep_ms(60000);
    co_return 0;
  });
  wait_rows(schema, "w-take", 3);
  ::kill(a, SIGKILL);
  CHECK(test::wait_exit(a, 10) == 128 + SIGKILL);
  const pid_t b = spawn_executor(schema, "exec-b", 1000ms,
                                 [](engine& eng) { return await_slow(eng, "w-take"); });
  CHECK(test::wait_exit(b, 60) == 0);
  const auto f = final_of(schema, "w-take");
  CHECK(f.status == "succeeded");
  CHECK(f.output == "45");
  CHECK(f.executor == "exec-b");
  CHECK(f.epoch >= 2);
  CHECK(f.rows == 10);
  CHECK(f.seqs == 10);
  CHECK(f.rewritten == 0);
}

TEST_CASE("a database restart in the middle of a takeover leaves nothing stranded",
          "[executors][process][restart][slow][serial]") {
  const char* restart = std::getenv("DURABLE_TEST_RESTART_CMD");
  if (!restart || !*restart) {
    WARN("DURABLE_TEST_RESTART_CMD is not set (external server): skipping the restart test");
    return;
  }
  const auto schema = audited_schema("midtake");
  using namespace std::chrono_literals;
  constexpr int n = 30;
  auto id = [](int i) { return "w-mid-" + std::to_string(i); };
  const pid_t a =
      spawn_executor(schema, "exec-a", 1000ms, [&](engine& eng) -> asio::awaitable<int> {
        for (int i = 0; i < n; ++i) (void)co_await eng.start("slow", id(i), 10, 50);
        co_await test::sleep_ms(60000);
        co_return 0;
      });
  wait_rows(schema, id(n - 1), 1);
  ::kill(a, SIGKILL);
  CHECK(test::wait_exit(a, 10) == 128 + SIGKILL);
  // exec-b runs four at a time, so that its takeover of the thirty spans many ticks.
  const pid_t b = spawn_executor(
      schema, "exec-b", 1000ms,
      [&](engine& eng) -> asio::awaitable<int> {
        int bad = 0;
        for (int i = 0; i < n; ++i) bad += (co_await await_slow(eng, id(i))) != 0;
        co_return bad;
      },
      "", 4);
  long finished = 0, left_to_a = 0, halfway = 0;
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    const auto s = test::q(schema);
    for (int i = 0; i < 6000 && !(finished >= 4 && left_to_a >= 8); ++i) {
      co_await test::sleep_ms(5);
      auto r = co_await c->exec(
          "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
          "count(*) FILTER (WHERE executor_id = 'exec-a' AND status = 'running') FROM " +
          s + ".workflows");
      finished = r[0].get<long>(0);
      left_to_a = r[0].get<long>(1);
    }
    // The first half of a takeover, as a restart between its two statements leaves it: five
    // of exec-a's workflows name exec-b as their owner, their epoch not bumped by a claim.
    auto h = co_await c->exec(
        "UPDATE " + s + ".workflows SET executor_id = 'exec-b' WHERE id IN (SELECT id FROM " + s +
        ".workflows WHERE executor_id = 'exec-a' AND status = 'running' ORDER BY created_at "
        "DESC LIMIT 5) RETURNING id");
    halfway = long(h.rows());
  }());
  INFO(finished << " finished and " << left_to_a << " still exec-a's when the server restarted; "
                << halfway << " half taken over");
  CHECK(finished >= 4);
  CHECK(left_to_a >= 8);
  CHECK(halfway == 5);
  REQUIRE(std::system(restart) == 0);
  CHECK(test::wait_exit(b, 180) == 0);
  for (int i = 0; i < n; ++i) {
    INFO("workflow " << id(i));
    const auto f = final_of(schema, id(i));
    CHECK(f.status == "succeeded");
    CHECK(f.output == "45");
    CHECK(f.executor == "exec-b");
    CHECK(f.epoch >= 2);  // claimed by exec-b, whichever way it came
    CHECK(f.rows == 10);
    CHECK(f.seqs == 10);
    CHECK(f.rewritten == 0);
  }
}

TEST_CASE("an executor paused past its lease is fenced out when it comes back (I3)",
          "[executors][process][fencing]") {
  const auto schema = audited_schema("stop");
  using namespace std::chrono_literals;
  // exec-a exits 0 only if it saw its ownership lost (and the workflow finish elsewhere).
  const pid_t a = spawn_executor(schema, "exec-a", 1000ms, [](engine& eng) -> asio::awaitable<int> {
    (void)co_await eng.start("slow", "w-stop", 10, 100);
    const int code = co_await await_slow(eng, "w-stop");
    co_await test::wait_idle(eng);
    co_return code == 0 && eng.stats().ownership_lost >= 1 ? 0 : 10 + code;
  });
  wait_rows(schema, "w-stop", 3);
  ::kill(a, SIGSTOP);
  const pid_t b = spawn_executor(schema, "exec-b", 1000ms,
                                 [](engine& eng) { return await_slow(eng, "w-stop"); });
  CHECK(test::wait_exit(b, 60) == 0);
  const auto before = final_of(schema, "w-stop");
  ::kill(a, SIGCONT);
  CHECK(test::wait_exit(a, 60) == 0);
  const auto after = final_of(schema, "w-stop");
  CHECK(before.status == "succeeded");
  CHECK(after.status == "succeeded");
  CHECK(after.output == "45");
  CHECK(after.executor == "exec-b");
  CHECK(after.epoch == before.epoch);
  CHECK(after.rows == 10);  // the paused executor's late step was rejected
  CHECK(after.seqs == 10);
  CHECK(after.rewritten == 0);
}

TEST_CASE("graceful shutdown hands work over without waiting for the lease",
          "[executors][process][shutdown]") {
  const auto schema = audited_schema("grace");
  using namespace std::chrono_literals;
  // With a one-hour lease, only the hand-over can explain exec-b finishing the workflow.
  const pid_t a = spawn_executor(schema, "exec-a", 1h, [&](engine& eng) -> asio::awaitable<int> {
    (void)co_await eng.start("slow", "w-grace", 10, 100);
    while (co_await test::journal_rows(eng, "w-grace") < 3) co_await test::sleep_ms(10);
    co_await eng.shutdown(std::chrono::seconds(5));
    co_return eng.running() == 0 ? 0 : 3;
  });
  const pid_t b =
      spawn_executor(schema, "exec-b", 1h, [](engine& eng) { return await_slow(eng, "w-grace"); });
  CHECK(test::wait_exit(a, 60) == 0);
  CHECK(test::wait_exit(b, 60) == 0);
  const auto f = final_of(schema, "w-grace");
  CHECK(f.status == "succeeded");
  CHECK(f.output == "45");
  CHECK(f.executor == "exec-b");
  CHECK(f.rows == 10);
  CHECK(f.rewritten == 0);
}

// ---- queues across processes ------------------------------------------------------------------

namespace {

/// Waits (polling) until no workflow of `queue` is unfinished; returns 0, or 5 on timeout.
asio::awaitable<int> drain_queue(engine& eng, std::string queue) {
  for (int i = 0; i < 6000; ++i) {
    auto c = co_await eng.pool().acquire();
    auto r = co_await c->exec("SELECT count(*) FROM " + test::q(eng.schema_name()) +
                                  ".workflows WHERE queue = $1 AND status <> 'succeeded'",
                              queue);
    if (r[0].get<long>(0) == 0) co_return 0;
    co_await test::sleep_ms(10);
  }
  co_return 5;
}

/// Every workflow of the schema succeeded with output 3 (three slow steps), each step has
/// exactly one journal row, and no journal row was rewritten.
void check_finished_once(const std::string& schema, int workflows) {
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    const auto s = test::q(schema);
    auto r = co_await c->exec(
        "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded' AND output::text = '3') "
        "FROM " +
        s + ".workflows");
    CHECK(r[0].get<int>(0) == workflows);
    CHECK(r[0].get<int>(1) == workflows);
    auto j = co_await c->exec("SELECT count(*), count(DISTINCT (workflow_id, seq)) FROM " + s +
                              ".steps");
    CHECK(j[0].get<int>(0) == workflows * 3);
    CHECK(j[0].get<int>(1) == workflows * 3);
    auto a = co_await c->exec("SELECT count(*) FROM " + s + ".journal_audit");
    CHECK(a[0].get<int>(0) == 0);
  }());
}

}  // namespace

TEST_CASE("a queue's limits hold across executors", "[queues][process]") {
  const auto schema = audited_schema("queue");
  using namespace std::chrono_literals;
  const int workflows = 24;
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "producer"));
    eng.register_workflow("slow", &slow_wf);
    co_await eng.configure_queue({.name = "limited", .concurrency = 3, .worker_concurrency = 2});
    for (int i = 0; i < workflows; ++i) {
      enqueue_options o{.queue = "limited"};
      (void)co_await eng.enqueue(o, "slow", "q-" + std::to_string(i), 3, 20);
    }
  }());
  std::vector<pid_t> executors;
  for (int i = 0; i < 3; ++i)
    executors.push_back(spawn_executor(
        schema, "exec-" + std::to_string(i), 5000ms,
        [](engine& eng) { return drain_queue(eng, "limited"); }, "limited"));
  // Sample the database while they work: never more than 3 running, 2 per executor.
  long max_total = 0, max_per_executor = 0;
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    const auto wf = test::q(schema) + ".workflows";
    for (int i = 0; i < 20000; ++i) {
      auto r = co_await c->exec(
          "SELECT coalesce(sum(n), 0)::bigint, coalesce(max(n), 0)::bigint FROM (SELECT count(*) "
          "AS n FROM " +
          wf + " WHERE queue = 'limited' AND status = 'running' GROUP BY executor_id) x");
      max_total = std::max(max_total, r[0].get<long>(0));
      max_per_executor = std::max(max_per_executor, r[0].get<long>(1));
      auto left = co_await c->exec("SELECT count(*) FROM " + wf +
                                   " WHERE queue = 'limited' AND status <> 'succeeded'");
      if (left[0].get<long>(0) == 0) co_return;
      co_await test::sleep_ms(2);
    }
  }());
  for (pid_t pid : executors) CHECK(test::wait_exit(pid, 60) == 0);
  INFO("max running: " << max_total << ", per executor: " << max_per_executor);
  CHECK(max_total <= 3);
  CHECK(max_per_executor <= 2);
  CHECK(max_total >= 2);  // the limit was reached, not just respected by idling
  check_finished_once(schema, workflows);
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    auto r = co_await c->exec("SELECT count(DISTINCT executor_id) FROM " + test::q(schema) +
                              ".workflows");
    CHECK(r[0].get<int>(0) >= 2);  // the work was shared
  }());
}

TEST_CASE("a queue's rate limit holds", "[queues][process]") {
  const auto schema = audited_schema("rate");
  using namespace std::chrono_literals;
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "producer"));
    eng.register_workflow("slow", &slow_wf);
    co_await eng.configure_queue({.name = "rated", .rate_limit = 4, .rate_period = 500ms});
    for (int i = 0; i < 10; ++i) {
      enqueue_options o{.queue = "rated"};
      (void)co_await eng.enqueue(o, "slow", "r-" + std::to_string(i), 1, 1);
    }
  }());
  const pid_t a = spawn_executor(
      schema, "exec-a", 5000ms, [](engine& eng) { return drain_queue(eng, "rated"); }, "rated");
  const pid_t b = spawn_executor(
      schema, "exec-b", 5000ms, [](engine& eng) { return drain_queue(eng, "rated"); }, "rated");
  CHECK(test::wait_exit(a, 60) == 0);
  CHECK(test::wait_exit(b, 60) == 0);
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    const auto wf = test::q(schema) + ".workflows";
    // In every window of one period that starts at a start, at most 4 starts.
    auto r = co_await c->exec("SELECT max((SELECT count(*) FROM " + wf +
                              " o WHERE o.queue = 'rated' AND o.started_at >= w.started_at AND "
                              "o.started_at < w.started_at + interval '500 ms')) FROM " +
                              wf + " w WHERE w.queue = 'rated'");
    CHECK(r[0].get<long>(0) <= 4);
    auto n = co_await c->exec("SELECT count(*) FROM " + wf +
                              " WHERE queue = 'rated' AND status = 'succeeded'");
    CHECK(n[0].get<long>(0) == 10);
  }());
}

TEST_CASE("concurrent enqueues with one deduplication key yield one workflow",
          "[queues][process]") {
  const auto schema = audited_schema("dedup");
  const auto codes = test::run_together(4, [&](int i, test::start_gate gate) {
    return test::run([&]() -> asio::awaitable<int> {
      engine eng(co_await asio::this_coro::executor,
                 test::options(schema, "producer-" + std::to_string(i)));
      eng.register_workflow("slow", &slow_wf);
      auto c = co_await eng.pool().acquire();  // connected; now race
      if (!gate.wait()) co_return 2;
      enqueue_options o{.queue = "nobody-serves-this", .dedup_key = "order-42"};
      auto h = co_await eng.enqueue(o, "slow", "dup-" + std::to_string(i), 1, 1);
      co_return h.id().rfind("dup-", 0) == 0 ? 0 : 3;
    }());
  });
  CHECK(codes == std::vector<int>(4, 0));
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    auto r = co_await c->exec("SELECT count(*) FROM " + test::q(schema) +
                              ".workflows WHERE dedup_key = 'order-42'");
    CHECK(r[0].get<long>(0) == 1);
  }());
}

TEST_CASE("four executors run 2000 queued workflows, two are killed, each finishes exactly once",
          "[queues][process][executors]") {
  const auto schema = audited_schema("bulk");
  using namespace std::chrono_literals;
  const int workflows = 2000;
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "producer"));
    eng.register_workflow("slow", &slow_wf);
    co_await eng.migrate();
    // One transaction, so that the executors start on a full queue.
    auto c = co_await eng.pool().acquire();
    auto tx = c->begin();
    for (int i = 0; i < workflows; ++i) {
      enqueue_options o{.queue = "bulk"};
      (void)co_await eng.enqueue(tx, o, "slow", "b-" + std::to_string(i), 3, 0);
    }
    (void)co_await tx.commit();
  }());
  std::vector<pid_t> executors;
  for (int i = 0; i < 4; ++i)
    executors.push_back(spawn_executor(
        schema, "exec-" + std::to_string(i), 1000ms,
        [](engine& eng) { return drain_queue(eng, "bulk"); }, "bulk"));
  // Kill two executors once some of the work is done.
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    for (int i = 0; i < 6000; ++i) {
      auto r = co_await c->exec("SELECT count(*) FROM " + test::q(schema) +
                                ".workflows WHERE status = 'succeeded'");
      if (r[0].get<long>(0) >= workflows / 4) break;
      co_await test::sleep_ms(5);
    }
  }());
  ::kill(executors[0], SIGKILL);
  ::kill(executors[1], SIGKILL);
  CHECK(test::wait_exit(executors[0], 10) == 128 + SIGKILL);
  CHECK(test::wait_exit(executors[1], 10) == 128 + SIGKILL);
  CHECK(test::wait_exit(executors[2], 120) == 0);
  CHECK(test::wait_exit(executors[3], 120) == 0);
  check_finished_once(schema, workflows);
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    const auto s = test::q(schema);
    auto taken = co_await c->exec("SELECT count(*) FROM " + s + ".workflows WHERE epoch > 1");
    WARN("bulk: " << taken[0].get<long>(0)
                  << " workflows were taken over from the killed executors");
  }());
}
