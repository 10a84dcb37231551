// Durable primitives: what unloading a sleeping workflow costs, what waking it costs, what a
// process holding many sleeping workflows keeps in memory, how fast two workflows exchange
// messages, and what a bounded map saves over sequential steps, each beside a floor measured in
// the same run.
//
//   BM_raw_commit_latency        the floor: one INSERT-and-commit round trip, blocking libpq
//   BM_raw_commits_8_clients     the floor for batches: 8 threads, each on its own blocking libpq
//                                connection, 250 INSERT-and-commits each (2000 commits)
//   BM_unload_one                start() of `nap` (its first action is sleep_for(1 h)) until its
//                                frame is destroyed and its run has ended here: the workflow row,
//                                the journaled wake-up and the unloading write have committed
//   BM_unload_many/1000          the same for 1000 workflows started at once; per workflow
//   BM_resume_one                an unloaded `nap` is made due: one raw transaction moves its
//                                journaled wake-up time and wake_at to now() and sends the
//                                notification resume() and fork() send. From its commit until
//                                the workflow has finished here (wake, claim, replay of the
//                                sleep, one new step, the final write)
//   BM_resume_many/1000          the same for 1000 unloaded workflows made due at once
//   BM_wake_overshoot            the path without help: unload_after 1 s, `nap` sleeps 1.2 s and
//                                unloads; the time from its journaled wake-up time until it has
//                                finished (the executor's own wake-up timer, then as above)
//   BM_sleeping_memory/N         N = 1000, 10 000, 100 000 workflows started that each sleep a
//                                day: this process's resident memory and malloc's bytes in use
//                                once all are unloaded, against a baseline taken before
//   BM_held_memory/10000         the comparison: unload_after 1 h, so 10 000 workflows sleeping
//                                10 minutes keep their frames in this process
//   BM_messages/R/T              two workflows, `ponger` and `pinger`, exchange R round trips
//                                (pinger: send "ping", recv "pong"; ponger: recv "ping", send
//                                "pong"), 2 messages each; T = 1: every recv has a timeout (30 s,
//                                so a recv that has to wait journals its deadline), T = 0: none.
//                                From ponger's start() until both results are read
//   BM_raw_messages/R            the floor of BM_messages, with nothing of durable in it: two
//                                threads, each with a connection that writes and one that
//                                LISTENs on its own channel, exchange R round trips. A message
//                                is an INSERT that pg_notify()s its recipient's channel (one
//                                commit), read by the recipient's listener, then a take that
//                                consumes it and writes a journal row in one statement (one
//                                commit): BM_messages' two round trips and one notification
//   BM_sequential_steps/N        one workflow runs N trivial steps one after the other
//                                ("sq[i]", returns i * i), start() to its result
//   BM_map/N/K                   one workflow runs ctx.map over N items with K in flight, the
//                                same trivial function: N steps "sq[i]", start() to its result
//   BM_continue_as_new/K/G       a poller: K trivial steps, then ctx.continue_as_new, G
//                                generations; start() to its result, reported per generation
//
// main() prints a summary. Database: $DURABLE_DATABASE_URL, else libpq's PG* variables. Drops and
// recreates the schema bench_primitives and the table bench_primitives_floor.

#include <malloc.h>
#include <unistd.h>

#include <benchmark/benchmark.h>
#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <durable.hpp>
#include <durable/store.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_common.hpp"

namespace {

using namespace std::chrono_literals;

const std::string schema = "bench_primitives";
constexpr int batch_workflows = 1000;  // BM_unload_many, BM_resume_many
constexpr int max_in_flight = 1000;    // start() calls awaited at once
constexpr int raw_clients = 8;
constexpr int raw_commits = 2000;  // BM_raw_commits_8_clients, per iteration
constexpr std::int64_t hour_ms = 3600 * 1000;
constexpr std::int64_t day_ms = 24 * hour_ms;
constexpr auto overshoot_unload_after = 1000ms;  // BM_wake_overshoot
constexpr std::int64_t overshoot_sleep_ms = 1200;
constexpr int held_workflows = 10000;
constexpr std::int64_t held_sleep_ms = 10 * 60 * 1000;
constexpr int message_rounds = 250;              // BM_messages: round trips per iteration
constexpr std::int64_t recv_timeout_ms = 30000;  // BM_messages/R/1
constexpr int map_items = 1000;                  // BM_map, BM_sequential_steps
constexpr int map_in_flight = 100;

// ---- the workflow -------------------------------------------------------------------------

// Counted when a run of `nap` leaves the workflow function: its frame is destroyed.
std::int64_t frames_unloaded = 0;  // left at the sleep (unloaded, or cut short)
std::int64_t frames_finished = 0;  // left after its last step
// The timer a waiter sleeps on (see wait_for_frames): the end of a frame wakes it.
asio::steady_timer* frame_signal = nullptr;

struct frame_probe {
  bool finished = false;
  frame_probe() = default;
  frame_probe(const frame_probe&) = delete;
  frame_probe& operator=(const frame_probe&) = delete;
  ~frame_probe() {
    if (finished)
      ++frames_finished;
    else
      ++frames_unloaded;
    if (frame_signal) frame_signal->cancel();
  }
};

/// Sleeps `sleep_ms`, then runs one step.
asio::awaitable<std::int64_t> nap(durable::context& ctx, std::int64_t sleep_ms) {
  frame_probe probe;
  co_await ctx.sleep_for(std::chrono::milliseconds(sleep_ms));
  const std::string step_name = "after";
  auto step = ctx.step(step_name, [] { return std::int64_t(1); });
  const std::int64_t v = co_await std::move(step);
  probe.finished = true;
  co_return v;
}

// Where `pinger` puts the time of each round trip, from its send until its recv returned (not
// journaled: a measurement of this run only).
std::vector<double>* round_trip_samples = nullptr;

/// Sends "ping" to `peer` and receives "pong", `rounds` times; returns the last pong.
asio::awaitable<int> pinger(durable::context& ctx, std::string peer, int rounds,
                            std::int64_t timeout_ms) {
  const std::string ping = "ping", pong = "pong";
  const auto timeout = timeout_ms > 0 ? std::chrono::milliseconds(timeout_ms) : durable::forever;
  int last = -1;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto sent = ctx.send(peer, ping, i);
    co_await std::move(sent);
    auto received = ctx.recv<int>(pong, timeout);
    const std::optional<int> r = co_await std::move(received);
    last = r.value_or(-1);
    if (round_trip_samples) round_trip_samples->push_back(bench::seconds_since(t0));
  }
  co_return last;
}

/// Receives "ping" and answers "pong" (ten times the ping), `rounds` times; returns the sum of
/// the pings.
asio::awaitable<int> ponger(durable::context& ctx, std::string peer, int rounds,
                            std::int64_t timeout_ms) {
  const std::string ping = "ping", pong = "pong";
  const auto timeout = timeout_ms > 0 ? std::chrono::milliseconds(timeout_ms) : durable::forever;
  int sum = 0;
  for (int i = 0; i < rounds; ++i) {
    auto received = ctx.recv<int>(ping, timeout);
    const std::optional<int> v = co_await std::move(received);
    sum += v.value_or(-1000000);
    auto sent = ctx.send(peer, pong, v.value_or(-1) * 10);
    co_await std::move(sent);
  }
  co_return sum;
}

/// `n` steps "sq[i]" one after the other, each returning i * i; returns their sum.
asio::awaitable<std::int64_t> sequential(durable::context& ctx, int n) {
  std::int64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    const std::string name = "sq[" + std::to_string(i) + "]";
    const std::int64_t v = i;
    auto step = ctx.step(name, [v] { return v * v; });
    sum += co_await std::move(step);
  }
  co_return sum;
}

/// The same `n` steps as ctx.map items, `in_flight` at once; returns their sum.
asio::awaitable<std::int64_t> mapped(durable::context& ctx, int n, int in_flight) {
  std::vector<std::int64_t> items(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) items[std::size_t(i)] = i;
  const std::string name = "sq";
  auto op = ctx.map(name, std::move(items), std::size_t(in_flight),
                    [](const std::int64_t& v) { return v * v; });
  const std::vector<std::int64_t> squares = co_await std::move(op);
  std::int64_t sum = 0;
  for (const std::int64_t v : squares) sum += v;
  co_return sum;
}

/// A poller: `k` steps "s[i]" (trivial), then continue as new, until `rounds` generations ran;
/// returns the last generation's number.
asio::awaitable<std::int64_t> cycling(durable::context& ctx, int round, int rounds, int k) {
  for (int i = 0; i < k; ++i) {
    const std::string name = "s[" + std::to_string(i) + "]";
    auto step = ctx.step(name, [] { return 1; });
    co_await std::move(step);
  }
  if (round + 1 >= rounds) co_return std::int64_t(ctx.generation());
  co_return co_await ctx.continue_as_new<&cycling>(round + 1, rounds, k);
}

// ---- memory -------------------------------------------------------------------------------

struct memory_use {
  double rss = 0;   // bytes resident (statm)
  double heap = 0;  // bytes malloc has handed out and not got back (mallinfo2)
};

/// This process's memory, after malloc has returned what it can to the system (so that freed
/// memory of earlier work does not count as resident).
memory_use read_memory() {
  ::malloc_trim(0);
  memory_use m;
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  m.rss = double(resident) * double(::sysconf(_SC_PAGESIZE));
  m.heap = double(::mallinfo2().uordblks);
  return m;
}

// ---- the fixture --------------------------------------------------------------------------

struct fixture {
  asio::io_context io;
  std::unique_ptr<bench::raw_connection> db;
  std::unique_ptr<durable::engine> eng;
  std::string channel;
  int engines = 0;

  fixture() {
    db = std::make_unique<bench::raw_connection>(bench::conninfo());
    db->exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
    db->exec("DROP TABLE IF EXISTS bench_primitives_floor");
    db->exec(
        "CREATE TABLE bench_primitives_floor (id bigint PRIMARY KEY, name text, output jsonb)");
    channel = durable::store::channel_for(schema);
    open_engine(2000ms);
  }

  /// Replaces the engine by a new one (a new executor id) with `unload_after`. shutdown() ends
  /// whatever the old one still held: runs, and the wake-up timers of workflows it unloaded.
  void open_engine(std::chrono::milliseconds unload_after) {
    if (eng) {
      bench::run_on(io, eng->shutdown(1s));
      eng.reset();
      // The handlers that shutdown cancelled run now, while the io_context is ours.
      io.restart();
      io.poll();
    }
    durable::engine_options o;
    o.conninfo = bench::conninfo();
    o.schema = schema;
    o.executor_id = "bench-primitives-" + std::to_string(++engines);
    o.unload_after = unload_after;
    // This process runs the io_context only inside a benchmark: a short lease could run out
    // between two of them (as in bench_replay). Nobody else would take over anyway.
    o.lease_timeout = 3600s;
    o.pool_size = 8;
    o.group_commit_send_alone = bench::send_alone();
    eng = std::make_unique<durable::engine>(io.get_executor(), o);
    eng->register_workflow("nap", &nap);
    eng->register_workflow("pinger", &pinger);
    eng->register_workflow("ponger", &ponger);
    eng->register_workflow("sequential", &sequential);
    eng->register_workflow("mapped", &mapped);
    eng->register_workflow("cycling", &cycling);
    (void)bench::run_on(io, eng->open());
  }

  void clear() {
    db->exec("TRUNCATE " + schema + ".workflows, " + schema + ".steps, " + schema +
             ".step_attempts, " + schema + ".messages, " + schema + ".events CASCADE");
    db->exec("DELETE FROM " + schema + ".executors WHERE id <> '" + eng->executor_id() + "'");
    frames_unloaded = 0;
    frames_finished = 0;
  }

  long count(const std::string& sql) {
    PGresult* r = PQexec(db->get(), sql.c_str());
    const bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    const long n = ok ? std::atol(PQgetvalue(r, 0, 0)) : -1;
    PQclear(r);
    if (!ok) throw std::runtime_error("query failed: " + sql);
    return n;
  }

  long workflows(const std::string& where) {
    return count("SELECT count(*) FROM " + schema + ".workflows WHERE " + where);
  }

  /// Makes the sleeping workflows matching `where` (on workflows w) due now, as if their
  /// sleeps had asked for now: the wake-up time journaled by each sleep (which a replay obeys)
  /// and wake_at (which the executors look for) move to now(), and the empty notification
  /// that resume() and fork() send announces it. One transaction.
  void make_due(const std::string& where) {
    db->exec("UPDATE " + schema + ".steps s SET output = to_jsonb((extract(epoch FROM now()) * " +
             "1000000)::bigint) FROM " + schema + ".workflows w WHERE w.id = s.workflow_id AND " +
             "s.kind = 'sleep' AND w.status = 'sleeping' AND " + where + "; UPDATE " + schema +
             ".workflows w SET wake_at = now() WHERE w.status = 'sleeping' AND " + where +
             "; SELECT pg_notify('" + channel + "', '')");
  }
};

fixture& fx() {
  static fixture f;
  return f;
}

/// Waits until `counter` (frames_unloaded or frames_finished) reaches `target` and no run is
/// left here: the frames have ended, and so has what a run does after its frame (the final
/// write, or nothing after an unload). Woken by each frame's end; once the last frame has
/// ended, polls every 50 µs for the rest. Throws after `limit`.
asio::awaitable<void> wait_for_frames(durable::engine& eng, const std::int64_t& counter,
                                      std::int64_t target, std::chrono::seconds limit,
                                      const char* what) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer t(ex);
  struct signal_scope {
    explicit signal_scope(asio::steady_timer& t) { frame_signal = &t; }
    signal_scope(const signal_scope&) = delete;
    signal_scope& operator=(const signal_scope&) = delete;
    ~signal_scope() { frame_signal = nullptr; }
  } scope(t);
  const auto t0 = std::chrono::steady_clock::now();
  while (counter < target || eng.running() > 0) {
    if (std::chrono::steady_clock::now() - t0 > limit)
      throw std::runtime_error(std::string("timed out waiting until ") + what);
    t.expires_after(counter < target ? std::chrono::microseconds(100ms) : 50us);
    asio::error_code ec;
    co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

/// Starts `n` workflows `nap(sleep_ms)` with ids prefix0.., at most max_in_flight start() calls
/// awaited at once.
asio::awaitable<void> start_many(durable::engine& eng, std::string prefix, int n,
                                 std::int64_t sleep_ms) {
  auto ex = co_await asio::this_coro::executor;
  int next = 0;
  const int workers = std::min(n, max_in_flight);
  int pending = workers;
  std::exception_ptr failed;
  asio::steady_timer all_done(ex, asio::steady_timer::time_point::max());
  for (int w = 0; w < workers; ++w)
    asio::co_spawn(
        ex,
        [&]() -> asio::awaitable<void> {
          const std::string name = "nap";
          while (next < n && !failed) {
            const std::string id = prefix + std::to_string(next++);
            auto op = eng.start(name, id, sleep_ms);
            (void)co_await std::move(op);
          }
        },
        [&](std::exception_ptr e) {
          if (e && !failed) failed = e;
          if (--pending == 0) all_done.cancel();
        });
  asio::error_code ec;
  co_await all_done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (failed) std::rethrow_exception(failed);
}

/// Starts `n` naps of `sleep_ms` (ids prefix0..) and waits until all have unloaded: their frames
/// destroyed and no run left here.
asio::awaitable<void> start_and_unload(durable::engine& eng, std::string prefix, int n,
                                       std::int64_t sleep_ms) {
  const std::int64_t target = frames_unloaded + n;
  auto started = start_many(eng, prefix, n, sleep_ms);
  co_await std::move(started);
  co_await wait_for_frames(eng, frames_unloaded, target, 300s, "the workflows unloaded");
}

/// Waits until runs of nap have finished here, `target` in all (frames_finished).
asio::awaitable<void> wait_finished(durable::engine& eng, std::int64_t target) {
  co_await wait_for_frames(eng, frames_finished, target, 120s, "the workflows finished");
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

std::vector<double> unload_samples;                   // seconds, BM_unload_one
std::vector<double> unload_after_start_samples;       // the part after start() returned
std::vector<double> resume_samples;                   // seconds, BM_resume_one
std::vector<double> overshoot_samples;                // seconds, BM_wake_overshoot
std::vector<double> message_samples[2];               // seconds per iteration, BM_messages/R/T
std::vector<double> round_trips[2];                   // seconds per round trip, BM_messages/R/T
std::vector<double> sequential_samples;               // seconds per iteration, BM_sequential_steps
std::vector<double> map_samples;                      // seconds per iteration, BM_map
std::map<int, std::vector<double>> continue_samples;  // K: seconds per generation

using bench::percentile;

/// The engine's round trips per iteration since `before` (pool statistics).
void report_round_trips(benchmark::State& state, fixture& f, const durable::engine_stats& before) {
  const double n = double(std::max<std::int64_t>(1, state.iterations()));
  state.counters["round_trips"] = double(f.eng->stats().round_trips - before.round_trips) / n;
}

// ---- floors -------------------------------------------------------------------------------

void BM_raw_commit_latency(benchmark::State& state) {
  bench::raw_commit_latency(state, *fx().db, "bench_primitives_floor");
}

void BM_raw_commits_8_clients(benchmark::State& state) {
  auto& f = fx();
  auto conns = bench::floor_clients("bench_primitives_floor", raw_clients);
  std::int64_t next = 0;
  try {
    for (auto _ : state) bench::floor_round(conns, raw_commits / raw_clients, next);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  f.db->exec("TRUNCATE bench_primitives_floor");
  state.counters["commits/s"] =
      benchmark::Counter(double(raw_commits), benchmark::Counter::kIsIterationInvariantRate);
}

// ---- unload and resume --------------------------------------------------------------------

void BM_unload_one(benchmark::State& state) {
  auto& f = fx();
  f.clear();
  int i = 0;
  const auto before = f.eng->stats();
  try {
    for (auto _ : state) {
      const std::string id = "one-" + std::to_string(i++);
      double elapsed = 0, started = 0;
      bench::run_on(f.io, [&]() -> asio::awaitable<void> {
        const std::int64_t target = frames_unloaded + 1;
        const auto t0 = std::chrono::steady_clock::now();
        const std::string name = "nap";
        auto op = f.eng->start(name, id, hour_ms);
        (void)co_await std::move(op);
        started = bench::seconds_since(t0);
        co_await wait_for_frames(*f.eng, frames_unloaded, target, 10s, "the workflow unloaded");
        elapsed = bench::seconds_since(t0);
      }());
      unload_samples.push_back(elapsed);
      unload_after_start_samples.push_back(elapsed - started);
      state.SetIterationTime(elapsed);
    }
    check(f.workflows("status = 'sleeping' AND wake_at > now() + interval '50 minutes'") == i,
          "not every workflow was unloaded with its wake-up an hour away");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  report_round_trips(state, f, before);
  f.clear();
}

void BM_unload_many(benchmark::State& state) {
  auto& f = fx();
  const int n = int(state.range(0));
  int round = 0;
  try {
    for (auto _ : state) {
      state.PauseTiming();
      f.clear();
      const std::string prefix = "many-" + std::to_string(round++) + "-";
      state.ResumeTiming();
      bench::run_on(f.io, start_and_unload(*f.eng, prefix, n, hour_ms));
      state.PauseTiming();
      check(f.workflows("status = 'sleeping'") == n, "not every workflow was unloaded");
      state.ResumeTiming();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  f.clear();
  state.counters["workflows/s"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_resume_one(benchmark::State& state) {
  auto& f = fx();
  f.clear();
  int i = 0;
  double round_trips = 0;
  try {
    for (auto _ : state) {
      const std::string id = "r-" + std::to_string(i++);
      bench::run_on(f.io, start_and_unload(*f.eng, id, 1, hour_ms));
      const std::uint64_t rt = f.eng->stats().round_trips;
      const std::string where = "w.id = '" + id + "0'";
      const std::int64_t target = frames_finished + 1;
      f.make_due(where);  // blocking; the engine reads the notification once run_on runs
      const auto t0 = std::chrono::steady_clock::now();
      bench::run_on(f.io, wait_finished(*f.eng, target));
      const double elapsed = bench::seconds_since(t0);
      round_trips += double(f.eng->stats().round_trips - rt);
      resume_samples.push_back(elapsed);
      state.SetIterationTime(elapsed);
    }
    check(f.workflows("status = 'succeeded'") == i, "not every workflow succeeded");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  state.counters["round_trips"] = round_trips / double(std::max(i, 1));
  f.clear();
}

void BM_resume_many(benchmark::State& state) {
  auto& f = fx();
  const int n = int(state.range(0));
  int round = 0;
  try {
    for (auto _ : state) {
      state.PauseTiming();
      f.clear();
      const std::string prefix = "rm-" + std::to_string(round++) + "-";
      bench::run_on(f.io, start_and_unload(*f.eng, prefix, n, hour_ms));
      check(f.workflows("status = 'sleeping'") == n, "not every workflow was unloaded");
      const std::int64_t target = frames_finished + n;
      f.make_due("true");
      state.ResumeTiming();
      bench::run_on(f.io, wait_finished(*f.eng, target));
      state.PauseTiming();
      check(f.workflows("status = 'succeeded'") == n, "not every workflow succeeded");
      state.ResumeTiming();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  f.clear();
  state.counters["workflows/s"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_wake_overshoot(benchmark::State& state) {
  auto& f = fx();
  int i = 0;
  try {
    f.open_engine(overshoot_unload_after);
    f.clear();
    for (auto _ : state) {
      const std::string id = "w-" + std::to_string(i++);
      const std::int64_t target = frames_finished + 1;
      bench::run_on(f.io, start_and_unload(*f.eng, id, 1, overshoot_sleep_ms));
      bench::run_on(f.io, wait_finished(*f.eng, target));
      const double finished_at = durable::detail::unix_seconds();
      // The wake-up time the sleep journaled (microseconds, this host's system clock).
      const double wake_at =
          double(f.count("SELECT output::bigint FROM " + schema + ".steps WHERE workflow_id = '" +
                         id + "0' AND seq = 0")) /
          1e6;
      const double overshoot = finished_at - wake_at;
      overshoot_samples.push_back(overshoot);
      state.SetIterationTime(std::max(overshoot, 1e-9));
    }
    check(f.workflows("status = 'succeeded'") == i, "not every workflow succeeded");
    check(frames_unloaded == i, "not every workflow was unloaded during its sleep");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  f.clear();
  f.open_engine(2000ms);
}

// ---- messages and fan-out -----------------------------------------------------------------

void BM_messages(benchmark::State& state) {
  auto& f = fx();
  const int rounds = int(state.range(0));
  const std::int64_t timeout_ms = state.range(1) ? recv_timeout_ms : 0;
  int round = 0;
  const auto before = f.eng->stats();
  try {
    f.clear();
    for (auto _ : state) {
      const std::string n = std::to_string(round++);
      const std::string ping_id = "pinger-" + n, pong_id = "ponger-" + n;
      double elapsed = 0;
      int last = 0, sum = 0;
      round_trip_samples = &round_trips[timeout_ms ? 1 : 0];
      bench::run_on(f.io, [&]() -> asio::awaitable<void> {
        const auto t0 = std::chrono::steady_clock::now();
        const std::string pong_name = "ponger", ping_name = "pinger";
        // The ponger first: a send to a workflow that does not exist fails for good.
        auto start_pong = f.eng->start(pong_name, pong_id, ping_id, rounds, timeout_ms);
        const durable::workflow_handle pong = co_await std::move(start_pong);
        auto start_ping = f.eng->start(ping_name, ping_id, pong_id, rounds, timeout_ms);
        const durable::workflow_handle ping = co_await std::move(start_ping);
        auto ping_result = ping.result<int>();
        last = co_await std::move(ping_result);
        auto pong_result = pong.result<int>();
        sum = co_await std::move(pong_result);
        elapsed = bench::seconds_since(t0);
      }());
      message_samples[timeout_ms ? 1 : 0].push_back(elapsed);
      round_trip_samples = nullptr;
      state.SetIterationTime(elapsed);
      check(last == (rounds - 1) * 10 && sum == rounds * (rounds - 1) / 2,
            "the workflows did not exchange every message");
    }
    check(f.count("SELECT count(*) FROM " + schema + ".messages WHERE consumed_at IS NULL") == 0,
          "a message was left unconsumed");
  } catch (const std::exception& e) {
    round_trip_samples = nullptr;
    state.SkipWithError(e.what());
  }
  const double messages = 2.0 * rounds;
  const double iterations = double(std::max<std::int64_t>(1, state.iterations()));
  state.counters["round_trips/msg"] =
      double(f.eng->stats().round_trips - before.round_trips) / iterations / messages;
  state.counters["messages/s"] =
      benchmark::Counter(messages, benchmark::Counter::kIsIterationInvariantRate);
  f.clear();
}

std::vector<double> raw_message_samples;  // seconds per iteration, BM_raw_messages

/// One side of BM_raw_messages: its writing connection, and its listening one.
struct raw_side {
  std::string me, peer;
  bench::raw_connection writer{bench::conninfo()}, listener{bench::conninfo()};

  raw_side(std::string self, std::string other) : me(std::move(self)), peer(std::move(other)) {
    writer.prepare("send",
                   "WITH m AS (INSERT INTO bench_primitives_raw_messages (recipient, payload) "
                   "VALUES ($1, $2::integer)) SELECT pg_notify('bench_raw_msg_' || $1, '')");
    writer.prepare("take",
                   "WITH m AS (SELECT id FROM bench_primitives_raw_messages WHERE recipient = $1 "
                   "AND NOT consumed ORDER BY id LIMIT 1 FOR UPDATE), "
                   "t AS (UPDATE bench_primitives_raw_messages g SET consumed = true FROM m "
                   "WHERE g.id = m.id RETURNING g.payload) "
                   "INSERT INTO bench_primitives_raw_journal SELECT $1, $2::integer, payload "
                   "FROM t RETURNING payload");
    listener.exec("LISTEN bench_raw_msg_" + me);
  }
  void send(int value) {
    const std::string v = std::to_string(value);
    const char* values[] = {peer.c_str(), v.c_str()};
    bench::exec_prepared(writer.get(), "send", 2, values, PGRES_TUPLES_OK);
  }
  /// Blocks until a notification for this side arrives (the socket's wait, as an engine's).
  void wait_notification() { (void)bench::next_notification(listener.get()); }
  /// The take of the message just announced, journaled as step `seq`; returns its payload.
  int take(int seq) {
    const std::string s = std::to_string(seq);
    const char* values[] = {me.c_str(), s.c_str()};
    PGresult* r = PQexecPrepared(writer.get(), "take", 2, values, nullptr, nullptr, 0);
    const bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    const int v = ok ? std::atoi(PQgetvalue(r, 0, 0)) : -1;
    PQclear(r);
    if (!ok) throw std::runtime_error("a raw take found no message after its notification");
    return v;
  }
};

void BM_raw_messages(benchmark::State& state) {
  auto& f = fx();
  const int rounds = int(state.range(0));
  try {
    f.db->exec(
        "DROP TABLE IF EXISTS bench_primitives_raw_messages, bench_primitives_raw_journal; "
        "CREATE TABLE bench_primitives_raw_messages (id bigserial PRIMARY KEY, recipient text "
        "NOT NULL, payload integer, consumed boolean NOT NULL DEFAULT false); "
        "CREATE INDEX ON bench_primitives_raw_messages (recipient, id) WHERE NOT consumed; "
        "CREATE TABLE bench_primitives_raw_journal (recipient text, seq integer, payload "
        "integer, PRIMARY KEY (recipient, seq))");
    raw_side ping("ping", "pong"), pong("pong", "ping");
    int iteration = 0;
    for (auto _ : state) {
      f.db->exec("TRUNCATE bench_primitives_raw_journal");
      const int base = rounds * iteration++;
      int last = 0, sum = 0;
      const auto t0 = std::chrono::steady_clock::now();
      std::exception_ptr pong_failed, ping_failed;
      std::thread ponger([&] {
        try {
          for (int i = 0; i < rounds; ++i) {
            pong.wait_notification();
            const int v = pong.take(i);
            sum += v - base;
            pong.send(v * 10);
          }
        } catch (...) {
          pong_failed = std::current_exception();
        }
      });
      try {
        for (int i = 0; i < rounds; ++i) {
          ping.send(base + i);
          ping.wait_notification();
          last = ping.take(i);
        }
      } catch (...) {
        ping_failed = std::current_exception();
        f.db->exec("NOTIFY bench_raw_msg_pong");  // the ponger's take then fails: it ends
      }
      ponger.join();
      if (ping_failed) std::rethrow_exception(ping_failed);
      if (pong_failed) std::rethrow_exception(pong_failed);
      const double elapsed = bench::seconds_since(t0);
      raw_message_samples.push_back(elapsed);
      state.SetIterationTime(elapsed);
      check(last == (base + rounds - 1) * 10 && sum == rounds * (rounds - 1) / 2,
            "the raw exchange lost a message");
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  state.counters["messages/s"] =
      benchmark::Counter(2.0 * rounds, benchmark::Counter::kIsIterationInvariantRate);
  f.db->exec("DROP TABLE IF EXISTS bench_primitives_raw_messages, bench_primitives_raw_journal");
}

/// BM_sequential_steps and BM_map: start() of workflow `name` until its result.
template <class... Args>
void run_fan_out(benchmark::State& state, std::vector<double>& samples, const std::string& name,
                 int n, const Args&... args) {
  auto& f = fx();
  int round = 0;
  const auto before = f.eng->stats();
  std::int64_t want = 0;
  for (std::int64_t i = 0; i < n; ++i) want += i * i;
  try {
    f.clear();
    for (auto _ : state) {
      const std::string id = name + "-" + std::to_string(round++);
      double elapsed = 0;
      std::int64_t sum = 0;
      bench::run_on(f.io, [&]() -> asio::awaitable<void> {
        const auto t0 = std::chrono::steady_clock::now();
        auto started = f.eng->start(name, id, args...);
        const durable::workflow_handle h = co_await std::move(started);
        auto result = h.result<std::int64_t>();
        sum = co_await std::move(result);
        elapsed = bench::seconds_since(t0);
      }());
      samples.push_back(elapsed);
      state.SetIterationTime(elapsed);
      check(sum == want, "wrong result");
    }
    check(
        f.count("SELECT count(*) FROM " + schema + ".steps WHERE kind = 'step'") == long(n) * round,
        "not every step was journaled");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  report_round_trips(state, f, before);
  state.counters["steps/s"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
  f.clear();
}

void BM_sequential_steps(benchmark::State& state) {
  const int n = int(state.range(0));
  run_fan_out(state, sequential_samples, "sequential", n, n);
}

void BM_map(benchmark::State& state) {
  const int n = int(state.range(0)), in_flight = int(state.range(1));
  run_fan_out(state, map_samples, "mapped", n, n, in_flight);
}

/// BM_continue_as_new/K/G: start() of `cycling` (K steps per generation, G generations) until
/// its result; a sample is the time per generation.
void BM_continue_as_new(benchmark::State& state) {
  auto& f = fx();
  const int k = int(state.range(0)), g = int(state.range(1));
  int round = 0;
  const auto before = f.eng->stats();
  try {
    f.clear();
    for (auto _ : state) {
      const std::string id = "cycling-" + std::to_string(round++);
      double elapsed = 0;
      std::int64_t last = -1;
      bench::run_on(f.io, [&]() -> asio::awaitable<void> {
        const auto t0 = std::chrono::steady_clock::now();
        auto started = f.eng->start("cycling", id, 0, g, k);
        const durable::workflow_handle h = co_await std::move(started);
        auto result = h.result<std::int64_t>();
        last = co_await std::move(result);
        elapsed = bench::seconds_since(t0);
      }());
      continue_samples[k].push_back(elapsed / g);
      state.SetIterationTime(elapsed);
      check(last == g - 1, "wrong generation");
    }
    check(f.count("SELECT count(*) FROM " + schema + ".steps") == long(k) * round,
          "a journal holds more than its last generation");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  const double n = double(std::max<std::int64_t>(1, state.iterations()));
  state.counters["round_trips/gen"] =
      double(f.eng->stats().round_trips - before.round_trips) / n / g;
  state.counters["generations/s"] =
      benchmark::Counter(double(g), benchmark::Counter::kIsIterationInvariantRate);
  f.clear();
}

// ---- memory -------------------------------------------------------------------------------

struct memory_result {
  long n = 0;
  memory_use before, after, after_shutdown;
  double seconds = 0;
};
std::vector<std::pair<std::string, memory_result>> memory_results;  // in the order run

void report_memory(benchmark::State& state, const std::string& key, const memory_result& m) {
  const double n = double(m.n);
  state.counters["rss_MiB"] = m.after.rss / 1048576.0;
  state.counters["rss_B/wf"] = (m.after.rss - m.before.rss) / n;
  state.counters["heap_B/wf"] = (m.after.heap - m.before.heap) / n;
  state.counters["workflows/s"] = n / m.seconds;
  memory_results.emplace_back(key, m);
}

void BM_sleeping_memory(benchmark::State& state) {
  auto& f = fx();
  const int n = int(state.range(0));
  memory_result m;
  m.n = n;
  try {
    f.open_engine(2000ms);  // nothing left from earlier benchmarks
    f.clear();
    for (auto _ : state) {
      state.PauseTiming();
      m.before = read_memory();
      state.ResumeTiming();
      const auto t0 = std::chrono::steady_clock::now();
      bench::run_on(f.io, start_and_unload(*f.eng, "m-", n, day_ms));
      m.seconds = bench::seconds_since(t0);
      state.PauseTiming();
      check(f.workflows("status = 'sleeping'") == n, "not every workflow was unloaded");
      check(frames_unloaded == n, "not every frame was destroyed");
      m.after = read_memory();
      // What the engine itself held for them: gone with it.
      f.open_engine(2000ms);
      m.after_shutdown = read_memory();
      state.ResumeTiming();
    }
    report_memory(state, "sleeping/" + std::to_string(n), m);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  f.clear();
}

void BM_held_memory(benchmark::State& state) {
  auto& f = fx();
  const int n = int(state.range(0));
  memory_result m;
  m.n = n;
  try {
    f.open_engine(std::chrono::milliseconds(hour_ms));  // the sleeps stay in their runs
    f.clear();
    for (auto _ : state) {
      state.PauseTiming();
      m.before = read_memory();
      state.ResumeTiming();
      const auto t0 = std::chrono::steady_clock::now();
      bench::run_on(f.io, [&]() -> asio::awaitable<void> {
        const std::string prefix = "h-";
        auto started = start_many(*f.eng, prefix, n, held_sleep_ms);
        co_await std::move(started);
        // Every run is inside its sleep once its wake-up is journaled.
        auto ex = co_await asio::this_coro::executor;
        asio::steady_timer t(ex);
        const std::string sql = "SELECT count(*) FROM " + schema + ".steps WHERE kind = 'sleep'";
        while (f.count(sql) < n) {
          if (bench::seconds_since(t0) > 120) throw std::runtime_error("the sleeps never began");
          t.expires_after(5ms);
          co_await t.async_wait(asio::use_awaitable);
        }
      }());
      m.seconds = bench::seconds_since(t0);
      state.PauseTiming();
      check(f.eng->running() == std::size_t(n), "not every workflow is running here");
      check(frames_unloaded == 0, "a workflow was unloaded");
      m.after = read_memory();
      f.open_engine(2000ms);  // shutdown() cuts the sleeps short
      m.after_shutdown = read_memory();
      state.ResumeTiming();
    }
    report_memory(state, "held/" + std::to_string(n), m);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  f.clear();
}

}  // namespace

BENCHMARK(BM_raw_commit_latency)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_raw_commits_8_clients)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);
BENCHMARK(BM_unload_one)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(200);
BENCHMARK(BM_unload_many)
    ->Arg(batch_workflows)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(5);
BENCHMARK(BM_resume_one)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(200);
BENCHMARK(BM_resume_many)
    ->Arg(batch_workflows)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
BENCHMARK(BM_wake_overshoot)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(10);
BENCHMARK(BM_raw_messages)
    ->Arg(message_rounds)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(5);
BENCHMARK(BM_messages)
    ->Args({message_rounds, 0})
    ->Args({message_rounds, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(5);
BENCHMARK(BM_sequential_steps)
    ->Arg(map_items)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(5);
BENCHMARK(BM_map)
    ->Args({map_items, map_in_flight})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(5);
BENCHMARK(BM_continue_as_new)
    ->Args({0, 200})
    ->Args({5, 100})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(5);
BENCHMARK(BM_sleeping_memory)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);
BENCHMARK(BM_held_memory)
    ->Arg(held_workflows)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  bench::collecting_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::printf("\nsummary (this run's floors beside each):\n");
  const auto commit = reporter.median("BM_raw_commit_latency");
  if (commit) std::printf("  raw commit round trip:          %8.3f ms\n", *commit * 1e3);
  const auto raw8 = reporter.median("BM_raw_commits_8_clients");
  const double per_commit_8 = raw8 ? *raw8 / raw_commits : 0;  // seconds per commit, 8 clients
  if (raw8)
    std::printf("  raw commits, 8 clients:         %8.0f commits/s (%.1f us per commit)\n",
                1 / per_commit_8, per_commit_8 * 1e6);
  auto in_commits = [&](double seconds) { return commit ? seconds / *commit : 0.0; };
  if (!unload_samples.empty()) {
    const double med = percentile(unload_samples, 0.5);
    const double rest = percentile(unload_after_start_samples, 0.5);
    std::printf(
        "  unload, one workflow:           median %.3f ms (%.2f commits), p99 %.3f ms; after "
        "start() returned: median %.3f ms (%.2f commits)\n",
        med * 1e3, in_commits(med), percentile(unload_samples, 0.99) * 1e3, rest * 1e3,
        in_commits(rest));
  }
  if (!resume_samples.empty()) {
    const double med = percentile(resume_samples, 0.5);
    std::printf("  resume, one workflow:           median %.3f ms (%.2f commits), p99 %.3f ms\n",
                med * 1e3, in_commits(med), percentile(resume_samples, 0.99) * 1e3);
  }
  for (const char* what : {"unload", "resume"}) {
    const std::string name = std::string("BM_") + what + "_many/" + std::to_string(batch_workflows);
    const auto t = reporter.median(name);
    if (!t) continue;
    const double per = *t / batch_workflows;
    std::printf("  %s, %d at once:           %8.1f us per workflow, %6.0f workflows/s", what,
                batch_workflows, per * 1e6, 1 / per);
    if (raw8) std::printf("  (%.2f 8-client raw commits)", per / per_commit_8);
    std::printf("\n");
  }
  if (!overshoot_samples.empty()) {
    // The executor's wake-up timer fires 50 ms after the due time (runner.hpp), on purpose; a
    // maintenance tick (every heartbeat_interval) may wake the workflow sooner.
    const double med = percentile(overshoot_samples, 0.5);
    std::printf(
        "  wake-up time to finish, own timer: median %.1f ms (min %.1f, max %.1f); beyond the "
        "timer's 50 ms: %.2f ms (%.2f commits)\n",
        med * 1e3, percentile(overshoot_samples, 0.0) * 1e3,
        percentile(overshoot_samples, 1.0) * 1e3, (med - 0.05) * 1e3, in_commits(med - 0.05));
  }
  std::optional<double> raw_rate;
  if (!raw_message_samples.empty()) {
    const double per = percentile(raw_message_samples, 0.5) / (2.0 * message_rounds);
    raw_rate = 1 / per;
    std::printf(
        "  raw messages (no durable: INSERT+NOTIFY, LISTEN, take), %d round trips: %.0f "
        "messages/s, %.1f us per message (%.2f commits)\n",
        message_rounds, *raw_rate, per * 1e6, in_commits(per));
  }
  for (int t = 0; t < 2; ++t) {
    if (message_samples[t].empty()) continue;
    const double med = percentile(message_samples[t], 0.5);
    const double per = med / (2.0 * message_rounds);
    std::printf(
        "  messages, %d round trips, recv %s: median %.1f ms; %.0f messages/s, %.1f us per "
        "message (%.2f commits)\n",
        message_rounds, t ? "timeout 30 s" : "no timeout", med * 1e3, 1 / per, per * 1e6,
        in_commits(per));
    if (raw_rate) std::printf("    %.2fx the raw messages' rate\n", (1 / per) / *raw_rate);
    const std::vector<double>& rt = round_trips[t];
    const auto slow = std::count_if(rt.begin(), rt.end(), [](double s) { return s > 0.1; });
    // A round trip over 100 ms waited for the poll (engine_options::poll_interval, 500 ms): its
    // notification came before the recv was listening.
    std::printf(
        "    one round trip (2 messages): median %.3f ms (%.2f commits), p99 %.1f ms, max %.1f "
        "ms; over 100 ms: %ld of %zu\n",
        percentile(rt, 0.5) * 1e3, in_commits(percentile(rt, 0.5)), percentile(rt, 0.99) * 1e3,
        percentile(rt, 1.0) * 1e3, long(slow), rt.size());
  }
  std::optional<double> seq_per;
  if (!sequential_samples.empty()) {
    const double med = percentile(sequential_samples, 0.5);
    seq_per = med / map_items;
    std::printf(
        "  %d sequential steps:            median %.1f ms (%.0f commits); %.1f us per step (%.2f "
        "commits)\n",
        map_items, med * 1e3, in_commits(med), *seq_per * 1e6, in_commits(*seq_per));
  }
  if (!map_samples.empty()) {
    const double med = percentile(map_samples, 0.5);
    const double per = med / map_items;
    std::printf(
        "  map of %d items, %d in flight: median %.1f ms (%.0f commits); %.1f us per item (%.2f "
        "commits",
        map_items, map_in_flight, med * 1e3, in_commits(med), per * 1e6, in_commits(per));
    if (raw8) std::printf(", %.2f 8-client raw commits", per / per_commit_8);
    std::printf(")");
    if (seq_per)
      std::printf("; map / sequential: %.3f (%.1fx faster)", per / *seq_per, *seq_per / per);
    std::printf("\n");
  }
  for (const auto& [k, samples] : continue_samples) {
    // One generation: k steps, the continue_as_new statement, the next generation's start.
    const double med = percentile(samples, 0.5);
    std::printf(
        "  continue_as_new, %d steps per generation: median %.1f us per generation (%.2f "
        "commits)",
        k, med * 1e6, in_commits(med));
    if (k > 0 && seq_per) {
      const double cont = med - k * *seq_per;
      std::printf("; minus %d sequential steps: %.1f us for the continue (%.2f commits)", k,
                  cont * 1e6, in_commits(cont));
    }
    std::printf("\n");
  }
  if (!memory_results.empty()) {
    std::printf(
        "  memory of this process (RSS after malloc_trim; heap = malloc's bytes in use; deltas "
        "from a baseline taken before starting; 'left' = heap still above it once the engine "
        "that holds them is shut down):\n");
    std::printf("    %-9s %7s %10s %10s %10s %11s %11s %10s\n", "workflows", "N", "RSS base", "RSS",
                "RSS B/wf", "heap delta", "heap B/wf", "left B/wf");
    for (const auto& [key, m] : memory_results) {
      const double n = double(m.n);
      const std::string kind = key.substr(0, key.find('/'));
      std::printf("    %-9s %7ld %6.1f MiB %6.1f MiB %10.0f %7.1f MiB %11.0f %10.1f\n",
                  kind.c_str(), m.n, m.before.rss / 1048576.0, m.after.rss / 1048576.0,
                  (m.after.rss - m.before.rss) / n, (m.after.heap - m.before.heap) / 1048576.0,
                  (m.after.heap - m.before.heap) / n, (m.after_shutdown.heap - m.before.heap) / n);
    }
  }
  return 0;
}
