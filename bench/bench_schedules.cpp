// Schedules (docs/schedules.md), beside floors measured in the same run:
//
//   idle      one executor (firing on, heartbeat 1 s) with 0 and then 10 000 idle schedules
//             (next slot a day away): the transactions per second the server sees while
//             nothing is due, and the executor's resident memory, for each count
//   lag       10 000 schedules whose slot is the same second T: the time from T to each slot's
//             workflow being created (fired) and started (dispatched), median and p99; the
//             floor is 10 000 workflows inserted as due at T in one statement, started by the
//             same executor (dispatch alone)
//
// Plain output, no Google Benchmark loop: each phase runs once. Database: $DURABLE_DATABASE_URL,
// else libpq's PG* variables. Drops and recreates the schema bench_schedules.
#include <benchmark/benchmark.h>
#include <asio/io_context.hpp>
#include <durable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

namespace {

using namespace std::chrono_literals;
const std::string schema = "bench_schedules";
constexpr int count = 10000;

asio::awaitable<int> noop(durable::context&) { co_return 1; }

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

using bench::value;

double transactions(bench::raw_connection& c) {
  return std::stod(value(c,
                         "SELECT xact_commit + xact_rollback FROM pg_stat_database "
                         "WHERE datname = current_database()"));
}

/// Runs the engine's loop for `d` on `io`.
void pump(asio::io_context& io, std::chrono::milliseconds d) {
  io.restart();
  io.run_for(d);
}

/// Transactions per second on the server over `d` while the executor idles.
double idle_rate(asio::io_context& io, bench::raw_connection& c, std::chrono::milliseconds d) {
  PQexec(c.get(), "SELECT pg_stat_clear_snapshot()");
  const double before = transactions(c);
  pump(io, d);
  PQexec(c.get(), "SELECT pg_stat_clear_snapshot()");
  // The two reads of the statistics are transactions of their own.
  return (transactions(c) - before - 2) / (double(d.count()) / 1000.0);
}

struct lag {
  double median_ms = 0, p99_ms = 0, max_ms = 0;
};

lag lag_of(bench::raw_connection& c, const std::string& column, const std::string& where,
           double t) {
  PGresult* r =
      PQexec(c.get(), ("SELECT (extract(epoch FROM " + column + ") - " + std::to_string(t) +
                       ") * 1000 FROM " + schema + ".workflows WHERE " + where + " ORDER BY 1")
                          .c_str());
  std::vector<double> v;
  for (int i = 0; i < PQntuples(r); ++i) v.push_back(std::stod(PQgetvalue(r, i, 0)));
  PQclear(r);
  lag out;
  if (v.empty()) return out;
  out.median_ms = v[v.size() / 2];
  out.p99_ms = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  out.max_ms = v.back();
  return out;
}

/// Waits (running the executor) until `n` workflows matching `where` have started.
void wait_started(asio::io_context& io, bench::raw_connection& c, const std::string& where,
                  long n) {
  for (int i = 0; i < 600; ++i) {
    if (std::stol(value(c, "SELECT count(*) FROM " + schema + ".workflows WHERE " + where +
                               " AND started_at IS NOT NULL")) >= n)
      return;
    pump(io, 100ms);
  }
  throw std::runtime_error("the workflows did not all start within a minute");
}

}  // namespace

int main() {
  bench::raw_connection c(bench::conninfo());
  c.exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
  asio::io_context io;
  durable::engine_options o;
  o.conninfo = bench::conninfo();
  o.schema = schema;
  o.queues = {"bench"};
  o.max_running = 20000;
  o.min_severity = durable::severity::error;
  durable::engine eng(io.get_executor(), o);
  eng.register_workflow("noop", noop);
  (void)bench::run_on(io, eng.open());
  pump(io, 2s);  // settle: pool connections, the first ticks

  // ---- idle: 0 schedules, then 10 000 a day away
  const long rss_0 = rss_kib();
  const double rate_0 = idle_rate(io, c, 10s);
  c.exec("INSERT INTO " + schema +
         ".schedules (id, cron, workflow_name, queue, next_fire_at) "
         "SELECT 'idle-' || i, '0 3 * * *', 'noop', 'bench', now() + interval '1 day' "
         "FROM generate_series(1, " +
         std::to_string(count) + ") i");
  pump(io, 2s);
  const long rss_1 = rss_kib();
  const double rate_1 = idle_rate(io, c, 10s);
  const long rss_2 = rss_kib();
  c.exec("DELETE FROM " + schema + ".schedules");

  // ---- floor: 10 000 workflows due at T, inserted in one statement
  const double t_floor = std::stod(value(c, "SELECT ceil(extract(epoch FROM now())) + 2"));
  c.exec("INSERT INTO " + schema +
         ".workflows (id, name, status, inputs, queue, wake_at, "
         "app_version) SELECT 'floor-' || i, 'noop', 'pending', '[]', 'bench', to_timestamp(" +
         std::to_string(t_floor) + "), '' FROM generate_series(1, " + std::to_string(count) +
         ") i");
  wait_started(io, c, "starts_with(id, 'floor-')", count);
  const lag floor_start = lag_of(c, "started_at", "starts_with(id, 'floor-')", t_floor);

  // ---- lag: 10 000 schedules due at the same second T
  const double t = std::stod(value(c, "SELECT ceil(extract(epoch FROM now())) + 3"));
  c.exec("INSERT INTO " + schema +
         ".schedules (id, cron, workflow_name, queue, next_fire_at) "
         "SELECT 'lag-' || i, '* * * * * *', 'noop', 'bench', to_timestamp(" +
         std::to_string(t) + ") FROM generate_series(1, " + std::to_string(count) + ") i");
  // Fire that one slot only: the schedules end right after it.
  c.exec("UPDATE " + schema + ".schedules SET end_at = to_timestamp(" + std::to_string(t + 1) +
         ")");
  wait_started(io, c, "starts_with(id, 'lag-')", count);
  const lag fired = lag_of(c, "created_at", "starts_with(id, 'lag-')", t);
  const lag started = lag_of(c, "started_at", "starts_with(id, 'lag-')", t);
  const auto m = eng.metrics();

  std::printf("bench_schedules (%d schedules, one executor, heartbeat 1 s)\n", count);
  std::printf("  idle, server transactions/s:  0 schedules %.2f   %d idle schedules %.2f\n", rate_0,
              count, rate_1);
  std::printf(
      "  idle, executor RSS (KiB):     0 schedules %ld   %d idle: %ld after 2 s, %ld after "
      "12 s (%+.1f bytes per schedule)\n",
      rss_0, count, rss_1, rss_2, double(rss_2 - rss_0) * 1024.0 / count);
  std::printf(
      "  floor: %d workflows due at T, T to started:  median %.0f ms  p99 %.0f ms  max "
      "%.0f ms\n",
      count, floor_start.median_ms, floor_start.p99_ms, floor_start.max_ms);
  std::printf(
      "  %d schedules due at T, T to fired (created): median %.0f ms  p99 %.0f ms  max "
      "%.0f ms\n",
      count, fired.median_ms, fired.p99_ms, fired.max_ms);
  std::printf(
      "  %d schedules due at T, T to started:         median %.0f ms  p99 %.0f ms  max "
      "%.0f ms  (%.2fx the floor's median)\n",
      count, started.median_ms, started.p99_ms, started.max_ms,
      floor_start.median_ms > 0 ? started.median_ms / floor_start.median_ms : 0.0);
  std::printf("  slots fired by the executor: %llu, missed %llu\n",
              static_cast<unsigned long long>(m.schedule_slots_fired),
              static_cast<unsigned long long>(m.schedule_slots_missed));
  (void)bench::run_on(io, eng.shutdown());
  return 0;
}
