// Many executors on one database: throughput, enqueue-to-start latency and takeover time,
// each beside a raw floor measured in the same run.
//
//   BM_raw_commits_8_clients      the floor: 8 threads, each on its own blocking libpq
//                                 connection, INSERT-and-commit 250 rows each (2000 commits)
//   BM_throughput/P/B/H/A         P executor processes (this executable, started with
//                                 --executor; dispatch_batch B, 0 = the default; H 0: the
//                                 status history's trigger disabled, 1: on; A 1: this process
//                                 awaits every result() as well, so each is marked awaited and
//                                 its end told by NOTIFY, migration 15) serve queue
//                                 "bench"; 2000 concurrent enqueues of a workflow of 3 trivial
//                                 steps, timed until all 2000 succeeded (enqueue included;
//                                 process start-up not: the executors run through all
//                                 iterations). workflows/s, steps/s, executor CPU/workflow
//   BM_raw_commit_latency         floor for latency: one INSERT-and-commit round trip
//   BM_enqueue_to_start           one idle executor process (LISTEN on); the time from the
//                                 enqueue call to the workflow's first step starting in the
//                                 executor (both on this host's clock); median and p99
//   BM_end_to_result/push:P       one executor process runs a workflow that waits for a
//                                 message, then returns this host's monotonic clock as its
//                                 end; this process, waiting in result() (not open()ed: its
//                                 listener starts with the first wait), sends the message: the
//                                 time from that end to result() returning here, beside the
//                                 raw commit round trip; median and p99. P 1: push_results on
//                                 (1 000 workflows), 0: off, result() polls (50)
//   BM_raw_push_latency           the floor of BM_end_to_result's path without durable, in its
//                                 cadence: after 100 ms of quiet, one INSERT-and-commit (the
//                                 message's take), then an INSERT that also pg_notify()s, seen
//                                 by a blocking LISTEN connection in another thread: the time
//                                 from sending it to the notification read there, and that
//                                 commit's own round trip; median and p99
//   BM_many_waiters/waiters:N     N workflows wait for a message in one executor process while
//                                 this process awaits all N results at once (one client, push
//                                 on: one listening connection); the messages go out one after
//                                 another; each end to its result() here is a sample, beside the
//                                 raw commit; median, p99 and the client's listening connections
//   BM_takeover                   executor A runs a workflow that hangs in its second step;
//                                 A is SIGKILLed; executor B (lease timeout 2 s, heartbeat
//                                 250 ms) takes it over and finishes it: kill-to-finish time
//                                 beside the lease timeout
//
// main() prints a summary with the targets. Database: $DURABLE_DATABASE_URL, else
// libpq's PG* variables. Drops and recreates the schema bench_executors and the table
// bench_executors_floor.

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>
#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <durable.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

namespace {

using namespace std::chrono_literals;

const std::string schema = "bench_executors";
constexpr int throughput_workflows = 2000;
constexpr int raw_clients = 8;
constexpr auto takeover_lease = 2000ms;
constexpr auto takeover_heartbeat = 250ms;

// ---- the executor process -----------------------------------------------------------

bool hang_in_second_step = false;  // set in executor A of BM_takeover

asio::awaitable<std::int64_t> three_steps(durable::context& ctx, std::int64_t x) {
  std::int64_t sum = x;
  sum += co_await ctx.step("a", [] { return std::int64_t(1); });
  sum += co_await ctx.step("b", [] { return std::int64_t(2); });
  sum += co_await ctx.step("c", [] { return std::int64_t(3); });
  co_return sum;
}

asio::awaitable<std::int64_t> hangs(durable::context& ctx, std::int64_t x) {
  std::int64_t sum = x;
  sum += co_await ctx.step("first", [] { return std::int64_t(1); });
  sum += co_await ctx.step("second", []() -> asio::awaitable<std::int64_t> {
    if (hang_in_second_step) co_await durable::detail::sleep_for(std::chrono::hours(1));
    co_return 2;
  });
  co_return sum;
}

/// Waits for "go", then ends with the monotonic clock (this host's, the same in every
/// process) read just before it returns: BM_end_to_result's mark.
asio::awaitable<std::int64_t> ends_on_go(durable::context& ctx) {
  co_await ctx.step("ready", [] { return 0; });
  (void)co_await ctx.recv<int>("go", std::chrono::hours(1));
  co_return std::chrono::steady_clock::now().time_since_epoch().count();
}

/// `bench_executors --executor ID QUEUE HANG`: runs an engine until SIGTERM; prints "ready"
/// once open() returned.
int executor_main(const std::string& id, const std::string& queue, bool hang,
                  std::size_t dispatch_batch) {
  hang_in_second_step = hang;
  asio::io_context io;
  durable::engine_options o;
  o.conninfo = bench::conninfo();
  o.schema = schema;
  o.executor_id = id;
  o.queues = {queue};
  if (queue.rfind("takeover", 0) == 0) {  // BM_takeover; the others keep the defaults
    o.heartbeat_interval = takeover_heartbeat;
    o.lease_timeout = takeover_lease;
  }
  o.migrate = false;
  if (dispatch_batch > 0) o.dispatch_batch = dispatch_batch;
  o.group_commit_send_alone = bench::send_alone();
  durable::engine eng(io.get_executor(), o);
  eng.register_workflow("three_steps", &three_steps);
  eng.register_workflow("hangs", &hangs);
  eng.register_workflow("ends_on_go", &ends_on_go);
  int code = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        (void)co_await eng.open();
        std::printf("ready\n");
        std::fflush(stdout);
        asio::signal_set sigs(io, SIGTERM);
        (void)co_await sigs.async_wait(asio::use_awaitable);
        co_await eng.shutdown(1s);
        io.stop();
      },
      [&](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          std::fprintf(stderr, "executor %s: %s\n", id.c_str(), x.what());
        }
        code = 1;
        io.stop();
      });
  io.run();
  return code;
}

// ---- the parent -----------------------------------------------------------------------

/// An executor process started from this executable, stopped (SIGTERM) when destroyed.
class executor_process {
public:
  /// `dispatch_batch` 0 keeps the engine's default.
  executor_process(const std::string& id, const std::string& queue, bool hang,
                   std::size_t dispatch_batch = 0) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      std::string hang_arg = hang ? "1" : "0";
      std::string batch_arg = std::to_string(dispatch_batch);
      char* args[] = {const_cast<char*>("bench_executors"),
                      const_cast<char*>("--executor"),
                      const_cast<char*>(id.c_str()),
                      const_cast<char*>(queue.c_str()),
                      hang_arg.data(),
                      batch_arg.data(),
                      nullptr};
      ::execv("/proc/self/exe", args);
      ::_exit(127);
    }
    ::close(out[1]);
    char line[16] = {};
    const ssize_t n = ::read(out[0], line, sizeof line - 1);
    ::close(out[0]);
    if (n <= 0 || std::string(line).rfind("ready", 0) != 0) {
      stop();
      throw std::runtime_error("executor " + id + " did not start");
    }
  }
  executor_process(const executor_process&) = delete;
  executor_process& operator=(const executor_process&) = delete;
  ~executor_process() { stop(); }

  void kill() {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
    reap();
  }
  void stop() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
    reap();
  }

private:
  void reap() {
    if (pid_ <= 0) return;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  pid_t pid_ = -1;
};

struct fixture {
  asio::io_context io;
  std::unique_ptr<durable::engine> producer;  // enqueues only: never open()ed, runs nothing
  std::unique_ptr<durable::engine> poller;    // the same, with push_results off
  std::unique_ptr<bench::raw_connection> db;

  fixture() {
    db = std::make_unique<bench::raw_connection>(bench::conninfo());
    db->exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
    db->exec("DROP TABLE IF EXISTS bench_executors_floor");
    db->exec("CREATE TABLE bench_executors_floor (id bigint PRIMARY KEY, name text, output jsonb)");
    durable::engine_options o;
    o.conninfo = bench::conninfo();
    o.schema = schema;
    o.executor_id = "producer";
    o.queues = {};
    // Its listener starts with its first result() (BM_throughput's awaited runs,
    // BM_end_to_result): a client that waits for results elsewhere is told of their ends.
    o.listen = true;
    o.push_results = true;
    o.pool_size = 4;
    o.group_commit_send_alone = bench::send_alone();
    producer = std::make_unique<durable::engine>(io.get_executor(), o);
    o.push_results = false;
    o.executor_id = "poller";
    poller = std::make_unique<durable::engine>(io.get_executor(), o);
    (void)bench::run_on(io, producer->migrate());
  }

  /// Empties the tables without TRUNCATE (which would cold-start every backend's caches).
  void empty_tables() {
    db->exec("DELETE FROM " + schema + ".steps");
    db->exec("DELETE FROM " + schema + ".workflows");
    db->exec("DELETE FROM " + schema + ".workflow_history");
    db->exec("VACUUM " + schema + ".steps");
    db->exec("VACUUM " + schema + ".workflows");
    db->exec("VACUUM " + schema + ".workflow_history");
  }

  void clear() {
    db->exec("TRUNCATE " + schema + ".workflows, " + schema + ".steps; DELETE FROM " + schema +
             ".executors");
  }

  long count(const std::string& where) {
    PGresult* r =
        PQexec(db->get(), ("SELECT count(*) FROM " + schema + ".workflows WHERE " + where).c_str());
    long n = PQresultStatus(r) == PGRES_TUPLES_OK ? std::atol(PQgetvalue(r, 0, 0)) : -1;
    PQclear(r);
    if (n < 0) throw std::runtime_error("count failed");
    return n;
  }

  double query_double(const std::string& sql) {
    PGresult* r = PQexec(db->get(), sql.c_str());
    const bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    double v = ok ? std::atof(PQgetvalue(r, 0, 0)) : 0;
    PQclear(r);
    if (!ok) throw std::runtime_error("query failed: " + sql);
    return v;
  }

  /// Polls every 2 ms until no workflow is unfinished, for at most `limit`. (The query stops
  /// at the first unfinished row: polling costs the server little while the others run.)
  void wait_until_all_succeeded(std::chrono::seconds limit) {
    const auto t0 = std::chrono::steady_clock::now();
    while (query_double("SELECT count(*) FROM (SELECT 1 FROM " + schema +
                        ".workflows WHERE status <> 'succeeded' LIMIT 1) AS unfinished") > 0) {
      if (std::chrono::steady_clock::now() - t0 > limit)
        throw std::runtime_error("timed out waiting for the workflows to finish");
      std::this_thread::sleep_for(2ms);
    }
  }

  /// Polls every `every` until `where` matches `n` workflows, for at most `limit`.
  void wait_for(const std::string& where, long n, std::chrono::milliseconds every,
                std::chrono::seconds limit) {
    const auto t0 = std::chrono::steady_clock::now();
    while (count(where) < n) {
      if (std::chrono::steady_clock::now() - t0 > limit)
        throw std::runtime_error("timed out waiting for " + std::to_string(n) + " workflows " +
                                 where);
      std::this_thread::sleep_for(every);
    }
  }
};

fixture& fx() {
  static fixture f;
  return f;
}

asio::awaitable<void> enqueue_many(durable::engine& eng, int n, std::string prefix,
                                   bool await_results = false) {
  auto ex = co_await asio::this_coro::executor;
  int pending = n;
  std::exception_ptr failed;
  asio::steady_timer all_done(ex, asio::steady_timer::time_point::max());
  for (int i = 0; i < n; ++i)
    asio::co_spawn(
        ex,
        [&eng, i, &prefix, await_results]() -> asio::awaitable<void> {
          durable::enqueue_options o{.queue = "bench"};
          auto h =
              co_await eng.enqueue(o, "three_steps", prefix + std::to_string(i), std::int64_t(i));
          if (await_results && co_await h.result<std::int64_t>() != i + 6)
            throw std::runtime_error("a workflow returned another number");
        },
        [&](std::exception_ptr e) {
          if (e && !failed) failed = e;
          if (--pending == 0) all_done.cancel();
        });
  asio::error_code ec;
  co_await all_done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (failed) std::rethrow_exception(failed);
}

void BM_raw_commits_8_clients(benchmark::State& state) {
  auto& f = fx();
  auto conns = bench::floor_clients("bench_executors_floor", raw_clients);
  std::int64_t next = 0;
  try {
    for (auto _ : state) bench::floor_round(conns, throughput_workflows / raw_clients, next);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  f.db->exec("TRUNCATE bench_executors_floor");
  state.counters["commits/s"] = benchmark::Counter(double(throughput_workflows),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

/// User + system CPU of the reaped child processes so far.
double children_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void BM_throughput(benchmark::State& state) {
  auto& f = fx();
  const int processes = int(state.range(0));
  // history 0: the status history's trigger (migration 10) off, to show what they cost.
  const bool history = state.range(2) != 0;
  // awaited 1: every workflow's result() awaited here too (marked, its end told by NOTIFY).
  const bool awaited = state.range(3) != 0;
  const std::string triggers = "ALTER TABLE " + schema + ".workflows " +
                               (history ? "ENABLE" : "DISABLE") + " TRIGGER workflows_history";
  f.db->exec(triggers);
  int round = 0;
  const double cpu_before = children_cpu_seconds();
  try {
    // The executors run through all iterations (steady state: warm connections and caches).
    f.clear();
    std::vector<std::unique_ptr<executor_process>> executors;
    for (int p = 0; p < processes; ++p)
      executors.push_back(std::make_unique<executor_process>("exec-" + std::to_string(p), "bench",
                                                             false, std::size_t(state.range(1))));
    for (auto _ : state) {
      state.PauseTiming();
      f.empty_tables();
      const std::string prefix = "t" + std::to_string(round++) + "-";
      state.ResumeTiming();
      bench::run_on(f.io, enqueue_many(*f.producer, throughput_workflows, prefix, awaited));
      f.wait_until_all_succeeded(120s);
      state.PauseTiming();
      if (f.count("status <> 'succeeded'") != 0)
        throw std::runtime_error("a workflow did not succeed");
      state.ResumeTiming();
    }
    executors.clear();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  // CPU the executor processes used (from start to exit), per workflow.
  state.counters["exec_cpu_us/wf"] = (children_cpu_seconds() - cpu_before) * 1e6 /
                                     double(std::max<std::int64_t>(1, state.iterations())) /
                                     throughput_workflows;
  state.counters["workflows/s"] = benchmark::Counter(double(throughput_workflows),
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["steps/s"] =
      benchmark::Counter(3.0 * throughput_workflows, benchmark::Counter::kIsIterationInvariantRate);
}

// BM_wake_cost/trigger:T/block:K: seconds per round of 2000 workflows nobody awaits, with the
// trigger that tells result() of an end (migration 15) disabled (T 0) or enabled (T 1). The
// blocks alternate off, on, on, off, ... and each starts with an untimed round: the ALTER TABLE
// that switches the trigger invalidates every backend's plans of the table, and the first round
// after it runs several times slower whichever way it switched.
std::vector<double> wake_off_samples, wake_on_samples;

void BM_wake_cost(benchmark::State& state) {
  auto& f = fx();
  const bool on = state.range(0) != 0;
  f.db->exec("ALTER TABLE " + schema + ".workflows ENABLE TRIGGER workflows_history");
  f.db->exec("ALTER TABLE " + schema + ".workflows " + (on ? "ENABLE" : "DISABLE") +
             " TRIGGER workflows_wake_result");
  int round = 0;
  const auto one_round = [&] {
    f.empty_tables();
    const std::string prefix =
        "w" + std::to_string(state.range(1)) + "-" + std::to_string(round++) + "-";
    const auto t0 = std::chrono::steady_clock::now();
    bench::run_on(f.io, enqueue_many(*f.producer, throughput_workflows, prefix));
    f.wait_until_all_succeeded(120s);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  try {
    f.clear();
    executor_process exec("exec-0", "bench", false);
    (void)one_round();  // warm-up, untimed
    for (auto _ : state) {
      state.PauseTiming();
      const double secs = one_round();
      (on ? wake_on_samples : wake_off_samples).push_back(secs);
      state.SetIterationTime(secs);
      state.ResumeTiming();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  f.db->exec("ALTER TABLE " + schema + ".workflows ENABLE TRIGGER workflows_wake_result");
}

void BM_raw_commit_latency(benchmark::State& state) {
  bench::raw_commit_latency(state, *fx().db, "bench_executors_floor");
}

std::vector<double> latency_samples;  // seconds, BM_enqueue_to_start

void BM_enqueue_to_start(benchmark::State& state) {
  auto& f = fx();
  try {
    f.clear();
    executor_process exec("idle", "bench", false);
    int i = 0;
    for (auto _ : state) {
      const std::string id = "l" + std::to_string(i++);
      const auto t0 = std::chrono::steady_clock::now();
      const double enqueued_at = durable::detail::unix_seconds();
      bench::run_on(f.io, [&]() -> asio::awaitable<void> {
        durable::enqueue_options o{.queue = "bench"};
        auto h = co_await f.producer->enqueue(o, "three_steps", id, std::int64_t(1));
        (void)co_await h.result<std::int64_t>();
      }());
      const double started_at =
          f.query_double("SELECT extract(epoch FROM started_at) FROM " + schema +
                         ".steps WHERE seq = 0 AND workflow_id = '" + id + "'");
      const double latency = started_at - enqueued_at;
      latency_samples.push_back(latency);
      state.SetIterationTime(std::max(latency, 1e-9));
      (void)t0;
      // Idle again before the next one (no work in flight when it is enqueued).
      std::this_thread::sleep_for(5ms);
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

std::vector<double> result_samples, polled_samples;  // seconds, BM_end_to_result push 1, 0

void BM_end_to_result(benchmark::State& state) {
  auto& f = fx();
  const bool push = state.range(0) != 0;
  durable::engine& client = push ? *f.producer : *f.poller;
  auto& samples = push ? result_samples : polled_samples;
  try {
    f.db->exec("ALTER TABLE " + schema +
               ".workflows ENABLE TRIGGER workflows_history");  // whatever BM_throughput left
    f.clear();
    executor_process exec("ender", "bench", false);
    int i = 0;
    for (auto _ : state) {
      const std::string id = "r" + std::to_string(i++);
      std::int64_t ended = 0, returned = 0;
      bench::run_on(f.io, [&]() -> asio::awaitable<void> {
        durable::enqueue_options o{.queue = "bench"};
        auto h = co_await client.enqueue(o, "ends_on_go", id);
        // The workflow waits for "go" in the executor (its first step is journaled); result()
        // waits here, in a coroutine of its own, when the message goes out 100 ms later (time
        // for the client's listener, which starts with the wait, to connect and for result()
        // to mark the workflow: the run measures the end's notification, not the start-up).
        for (;;) {
          auto c = co_await client.pool().acquire();
          auto r = co_await c->exec(
              "SELECT count(*) FROM " + schema + ".steps WHERE workflow_id = $1", id);
          if (r[0].get<long>(0) > 0) break;
          co_await durable::detail::sleep_for(1ms);
        }
        bool back = false;
        std::exception_ptr failed;
        asio::co_spawn(
            co_await asio::this_coro::executor,
            [&]() -> asio::awaitable<void> {
              ended = co_await h.result<std::int64_t>();
              returned = std::chrono::steady_clock::now().time_since_epoch().count();
            },
            [&](std::exception_ptr e) {
              failed = e;
              back = true;
            });
        co_await durable::detail::sleep_for(100ms);
        (void)co_await client.send(id, "go", 1);
        while (!back) co_await durable::detail::sleep_for(1ms);
        if (failed) std::rethrow_exception(failed);
      }());
      const double latency =
          std::chrono::duration<double>(std::chrono::steady_clock::duration(returned - ended))
              .count();
      samples.push_back(latency);
      state.SetIterationTime(std::max(latency, 1e-9));
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

std::vector<double> raw_push_samples, raw_quiet_commit_samples;  // seconds, BM_raw_push_latency

/// BM_end_to_result's path with nothing of durable in it: the executor is woken after 100 ms of
/// quiet, takes the message (a commit) and ends the workflow (a commit whose NOTIFY reaches the
/// waiter's listening connection). Here one connection does the two commits, the second with
/// pg_notify(), and a thread blocked on a LISTEN connection (as the client's listener is) reads
/// the notification: sending the second commit -> the notification read is one sample, the
/// second commit's round trip another (a commit in the same cadence as the end's).
void BM_raw_push_latency(benchmark::State& state) {
  auto& f = fx();
  try {
    bench::raw_connection writer(bench::conninfo());
    writer.prepare("take", "INSERT INTO bench_executors_floor VALUES ($1, 'take', '1')");
    writer.prepare("end",
                   "WITH i AS (INSERT INTO bench_executors_floor VALUES ($1, 'end', '1')) "
                   "SELECT pg_notify('bench_raw_push', $1::text)");
    bench::raw_connection listener(bench::conninfo());
    listener.exec("LISTEN bench_raw_push");
    int wake[2];
    if (pipe(wake) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::int64_t> seen;  // steady_clock ticks, one per notification
    std::mutex m;
    std::condition_variable cv;
    std::thread reader([&] {
      try {
        while (bench::next_notification(listener.get(), wake[0])) {
          const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
          std::lock_guard lock(m);
          seen.push_back(t);
          cv.notify_one();
        }
      } catch (const std::exception&) {  // the wait below reports the missing notification
      }
    });
    struct stop_reader {
      int fd;
      std::thread& t;
      ~stop_reader() {
        (void)!write(fd, "q", 1);
        t.join();
      }
    } stop{wake[1], reader};
    std::int64_t next = 0;
    for (auto _ : state) {
      std::this_thread::sleep_for(100ms);
      const std::string take = std::to_string(next++), end = std::to_string(next++);
      const char* tv[] = {take.c_str()};
      bench::exec_prepared(writer.get(), "take", 1, tv, PGRES_COMMAND_OK);
      const char* ev[] = {end.c_str()};
      const auto t0 = std::chrono::steady_clock::now();
      bench::exec_prepared(writer.get(), "end", 1, ev, PGRES_TUPLES_OK);
      const auto acked = std::chrono::steady_clock::now();
      std::unique_lock lock(m);
      if (!cv.wait_for(lock, 10s, [&] { return !seen.empty(); }))
        throw std::runtime_error("the notification did not arrive within 10 s");
      const auto got = std::chrono::steady_clock::duration(seen.front());
      seen.clear();
      const double latency = std::chrono::duration<double>(got - t0.time_since_epoch()).count();
      raw_push_samples.push_back(latency);
      raw_quiet_commit_samples.push_back(std::chrono::duration<double>(acked - t0).count());
      state.SetIterationTime(std::max(latency, 1e-9));
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  f.db->exec("TRUNCATE bench_executors_floor");
}

std::vector<double> many_samples;  // seconds, BM_many_waiters
long many_listeners = -1;          // the client's connections that LISTEN on the result channel

/// The connections of this database that LISTEN on `schema`'s result channel.
long result_listeners(bench::raw_connection& db) {
  const std::string channel = durable::store::channel_for(schema, "durable.result:");
  const std::string sql = "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN ' || " +
                          std::string("quote_ident('") + channel + "')";
  PGresult* r = PQexec(db.get(), sql.c_str());
  const long n = PQresultStatus(r) == PGRES_TUPLES_OK ? std::atol(PQgetvalue(r, 0, 0)) : -1;
  PQclear(r);
  return n;
}

/// 1 000 workflows wait for "go" in the executor process while this process awaits each one's
/// result() (1 000 coroutines, one client never opened); the messages go out one after another,
/// and each workflow's end to its result() returning here is one sample.
void BM_many_waiters(benchmark::State& state) {
  auto& f = fx();
  const int n = int(state.range(0));
  try {
    f.db->exec("ALTER TABLE " + schema + ".workflows ENABLE TRIGGER workflows_history");
    f.clear();
    executor_process exec("ender", "bench", false);
    for (auto _ : state) {
      std::vector<std::int64_t> ended(std::size_t(n), 0), returned(std::size_t(n), 0);
      bench::run_on(f.io, [&]() -> asio::awaitable<void> {
        durable::engine& client = *f.producer;
        std::vector<durable::workflow_handle> handles;
        for (int i = 0; i < n; ++i) {
          durable::enqueue_options o{.queue = "bench"};
          handles.push_back(co_await client.enqueue(o, "ends_on_go", "m" + std::to_string(i)));
        }
        // Every workflow waits for "go" (its first step is journaled) ...
        while (f.query_double("SELECT count(*) FROM " + schema + ".steps") < n)
          co_await durable::detail::sleep_for(5ms);
        int back = 0;
        std::exception_ptr failed;
        for (int i = 0; i < n; ++i)
          asio::co_spawn(
              co_await asio::this_coro::executor,
              [&, i]() -> asio::awaitable<void> {
                ended[std::size_t(i)] = co_await handles[std::size_t(i)].result<std::int64_t>();
                returned[std::size_t(i)] =
                    std::chrono::steady_clock::now().time_since_epoch().count();
              },
              [&](std::exception_ptr e) {
                if (e) failed = e;
                ++back;
              });
        // ... and every result() has marked its workflow awaited, through one listener.
        while (f.count("awaited") < n) co_await durable::detail::sleep_for(5ms);
        many_listeners = result_listeners(*f.db);
        for (int i = 0; i < n; ++i) (void)co_await client.send("m" + std::to_string(i), "go", 1);
        while (back < n) co_await durable::detail::sleep_for(1ms);
        if (failed) std::rethrow_exception(failed);
      }());
      double total = 0;
      for (int i = 0; i < n; ++i) {
        const double latency =
            std::chrono::duration<double>(std::chrono::steady_clock::duration(
                                              returned[std::size_t(i)] - ended[std::size_t(i)]))
                .count();
        many_samples.push_back(latency);
        total += latency;
      }
      state.SetIterationTime(std::max(total / n, 1e-9));
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

std::vector<double> takeover_samples;  // seconds, BM_takeover

void BM_takeover(benchmark::State& state) {
  auto& f = fx();
  int i = 0;
  try {
    for (auto _ : state) {
      f.clear();
      auto a = std::make_unique<executor_process>("A", "takeover-a", true);
      executor_process b("B", "takeover-b", false);
      const std::string id = "k" + std::to_string(i++);
      bench::run_on(f.io, [&]() -> asio::awaitable<void> {
        durable::enqueue_options o{.queue = "takeover-a"};
        (void)co_await f.producer->enqueue(o, "hangs", id, std::int64_t(1));
      }());
      // A has journaled the first step and hangs in the second.
      for (int tries = 0;; ++tries) {
        if (f.query_double("SELECT count(*) FROM " + schema + ".steps WHERE workflow_id = '" + id +
                           "'") >= 1)
          break;
        if (tries > 10000) throw std::runtime_error("executor A never ran the first step");
        std::this_thread::sleep_for(1ms);
      }
      const auto t0 = std::chrono::steady_clock::now();
      a->kill();
      f.wait_for("status = 'succeeded'", 1, 5ms, 60s);
      const double s = bench::seconds_since(t0);
      takeover_samples.push_back(s);
      state.SetIterationTime(s);
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

using bench::percentile;

}  // namespace

BENCHMARK(BM_raw_commits_8_clients)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_throughput)
    ->ArgNames({"processes", "dispatch_batch", "history", "awaited"})
    ->Args({1, 0, 1, 0})
    ->Args({1, 0, 0, 0})
    ->Args({1, 0, 1, 1})
    ->Args({2, 0, 1, 0})
    ->Args({1, 256, 1, 0})
    ->Args({2, 256, 1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
// Off, on, on, off, off, on, on, off: a drift of the machine falls on both.
BENCHMARK(BM_wake_cost)
    ->ArgNames({"trigger", "block"})
    ->Args({0, 0})
    ->Args({1, 1})
    ->Args({1, 2})
    ->Args({0, 3})
    ->Args({0, 4})
    ->Args({1, 5})
    ->Args({1, 6})
    ->Args({0, 7})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(3);
BENCHMARK(BM_raw_commit_latency)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_enqueue_to_start)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(200);
BENCHMARK(BM_raw_push_latency)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(300);
BENCHMARK(BM_end_to_result)
    ->ArgName("push")
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(1000);
BENCHMARK(BM_end_to_result)
    ->ArgName("push")
    ->Arg(0)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(50);
BENCHMARK(BM_many_waiters)
    ->ArgName("waiters")
    ->Arg(1000)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(1);
BENCHMARK(BM_takeover)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(3);

/// One summary line: the median and p99 of `samples` (seconds) as multiples of the raw commit
/// (`commit`, seconds), against the targets (median <= 2x, p99 <= 4x).
void print_against_commit(const std::string& what, const std::vector<double>& samples,
                          std::optional<double> commit) {
  if (samples.empty()) return;
  const double med = percentile(samples, 0.5) * 1e3;
  const double p99 = percentile(samples, 0.99) * 1e3;
  const double floor = commit ? *commit * 1e3 : 0.0;
  std::printf(
      "  %s: median %.2f ms (%.1fx the raw commit; target <= 2x: %s), p99 %.2f ms (%.1fx; "
      "target <= 4x: %s)\n",
      what.c_str(), med, commit ? med / floor : 0.0,
      commit ? bench::verdict(med, 2 * floor) : "no floor", p99, commit ? p99 / floor : 0.0,
      commit ? bench::verdict(p99, 4 * floor) : "no floor");
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--executor") {
    if (argc != 6) {
      std::fprintf(stderr, "usage: %s --executor ID QUEUE HANG(0|1) DISPATCH_BATCH(0=default)\n",
                   argv[0]);
      return 2;
    }
    return executor_main(argv[2], argv[3], std::string(argv[4]) == "1",
                         std::size_t(std::atoi(argv[5])));
  }
  benchmark::Initialize(&argc, argv);
  bench::collecting_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::printf("\nsummary (medians of the iterations above; this run's floor beside each):\n");
  const auto raw = reporter.median("BM_raw_commits_8_clients");
  const double raw_rate = raw ? throughput_workflows / *raw : 0;
  if (raw) std::printf("  raw commits, 8 clients:       %8.0f commits/s\n", raw_rate);
  for (const char* batch : {"0", "256"})
    for (const char* p : {"1", "2"}) {
      const auto t = reporter.median(std::string("BM_throughput/processes:") + p +
                                     "/dispatch_batch:" + batch + "/history:1/awaited:0");
      if (!t) continue;
      const double wps = throughput_workflows / *t;
      std::printf(
          "  throughput, %s executor(s), dispatch_batch %-7s %6.0f workflows/s, %6.0f steps/s  "
          "(%.2fx and %.2fx the raw commits/s; target 3000 workflows/s: %s)\n",
          p, std::string(batch) == "0" ? "default" : batch, wps, 3 * wps,
          raw ? wps / raw_rate : 0.0, raw ? 3 * wps / raw_rate : 0.0,
          wps >= 3000 ? "met" : "MISSED");
    }
  {
    const auto on =
        reporter.median("BM_throughput/processes:1/dispatch_batch:0/history:1/awaited:1");
    const auto off =
        reporter.median("BM_throughput/processes:1/dispatch_batch:0/history:1/awaited:0");
    if (on && off)
      std::printf(
          "  every result() awaited in another process (marked, told by NOTIFY), 1 executor: "
          "%6.0f workflows/s, %6.0f with none awaited (%.2fx)\n",
          throughput_workflows / *on, throughput_workflows / *off, *off / *on);
  }
  if (!wake_on_samples.empty() && !wake_off_samples.empty()) {
    const double on = percentile(wake_on_samples, 0.5), off = percentile(wake_off_samples, 0.5);
    std::printf(
        "  nobody awaiting, 1 executor:  %6.0f workflows/s with the end-telling trigger, %6.0f "
        "without (%.3fx, %zu rounds each in alternating blocks; target >= 0.97: %s)\n",
        throughput_workflows / on, throughput_workflows / off, off / on, wake_on_samples.size(),
        off / on >= 0.97 ? "met" : "MISSED");
  }
  if (const auto c = reporter.median("BM_raw_commit_latency"))
    std::printf("  raw commit round trip:        %8.3f ms\n", *c * 1e3);
  if (!latency_samples.empty()) {
    const double med = percentile(latency_samples, 0.5) * 1e3;
    std::printf(
        "  enqueue to start:             median %.2f ms, p99 %.2f ms  (target median <= 5 "
        "ms: %s)\n",
        med, percentile(latency_samples, 0.99) * 1e3, bench::verdict(med, 5));
  }
  const auto commit = reporter.median("BM_raw_commit_latency");
  print_against_commit(
      "end to result() elsewhere, pushed (" + std::to_string(result_samples.size()) + ")",
      result_samples, commit);
  if (!raw_push_samples.empty() && commit) {
    // The same path without durable, in the same cadence: what a commit that notifies costs
    // to reach a listener in another thread, after the quiet that precedes each end.
    const double push_med = percentile(raw_push_samples, 0.5) * 1e3;
    const double push_p99 = percentile(raw_push_samples, 0.99) * 1e3;
    std::printf(
        "  raw push path, same cadence (%zu): INSERT+pg_notify() -> read by a LISTEN elsewhere: "
        "median %.2f ms (%.1fx the raw commit), p99 %.2f ms (%.1fx); that commit's own round "
        "trip: median %.3f ms\n",
        raw_push_samples.size(), push_med, push_med / (*commit * 1e3), push_p99,
        push_p99 / (*commit * 1e3), percentile(raw_quiet_commit_samples, 0.5) * 1e3);
    if (!result_samples.empty())
      std::printf(
          "  end to result() elsewhere, pushed, against that raw path: median %.2fx, p99 "
          "%.2fx\n",
          percentile(result_samples, 0.5) * 1e3 / push_med,
          percentile(result_samples, 0.99) * 1e3 / push_p99);
  }
  print_against_commit("end to result() elsewhere, " + std::to_string(many_samples.size()) +
                           " waiters in one client on " + std::to_string(many_listeners) +
                           " listening connection(s)",
                       many_samples, commit);
  if (!polled_samples.empty())
    std::printf("  end to result() elsewhere, polled (%zu): median %.2f ms, p99 %.2f ms\n",
                polled_samples.size(), percentile(polled_samples, 0.5) * 1e3,
                percentile(polled_samples, 0.99) * 1e3);
  if (!takeover_samples.empty()) {
    const double med = percentile(takeover_samples, 0.5);
    std::printf(
        "  executor death to finish:     median %.2f s beside a lease timeout of %.2f s "
        "(heartbeat %.2f s): %.2fx the lease\n",
        med, std::chrono::duration<double>(takeover_lease).count(),
        std::chrono::duration<double>(takeover_heartbeat).count(),
        med / std::chrono::duration<double>(takeover_lease).count());
  }
  return 0;
}
