// Durable streams (issue 40): how many values per second a workflow writes while a reader reads
// them, and how long a value takes from the write to a waiting reader (median, p99), each beside
// one raw commit (INSERT + COMMIT, a round trip) measured in the same run. Reader and writer are
// in one process and one engine; the reader is woken by the NOTIFY of each append through the
// engine's listener, the path a reader in another process takes.
//
//   scripts/bench --benchmark_filter=stream     (or build-bench/bench/bench_streams)
#include <benchmark/benchmark.h>
#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <durable.hpp>
#include <durable/store.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace {

using namespace std::chrono_literals;

const std::string schema = "bench_streams";
constexpr int burst_values = 1000;  // BM_stream_values: values per iteration
constexpr int paced_values = 200;   // BM_stream_latency: values per iteration

/// Writes `n` values to "burst" back to back, then closes it.
asio::awaitable<int> burst(durable::context& ctx, int n) {
  for (int i = 0; i < n; ++i) (void)co_await ctx.write_stream("burst", i);
  co_return static_cast<int>(co_await ctx.close_stream("burst"));
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Writes `n` values to "paced", each the steady clock's reading just before its write, and
/// waits for the reader's "ack" after each: one value in flight at a time.
asio::awaitable<int> paced(durable::context& ctx, int n) {
  for (int i = 0; i < n; ++i) {
    const std::int64_t stamp = now_ns();  // a bench: not replay-safe, and need not be
    (void)co_await ctx.write_stream("paced", stamp);
    (void)co_await ctx.recv<int>("ack");
  }
  co_return static_cast<int>(co_await ctx.close_stream("paced"));
}

struct fixture {
  asio::io_context io;
  std::unique_ptr<bench::raw_connection> db;
  std::unique_ptr<durable::engine> eng;

  fixture() {
    db = std::make_unique<bench::raw_connection>(bench::conninfo());
    db->exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
    db->exec("DROP TABLE IF EXISTS bench_streams_floor");
    db->exec("CREATE TABLE bench_streams_floor (id bigint PRIMARY KEY, name text, output jsonb)");
    durable::engine_options o;
    o.conninfo = bench::conninfo();
    o.schema = schema;
    o.executor_id = "bench-streams";
    o.lease_timeout = 3600s;  // the io_context runs only inside a benchmark
    o.pool_size = 8;
    o.group_commit_send_alone = bench::send_alone();
    eng = std::make_unique<durable::engine>(io.get_executor(), o);
    eng->register_workflow("burst", &burst);
    eng->register_workflow("paced", &paced);
    (void)bench::run_on(io, eng->open());
  }
};

fixture& fx() {
  static fixture f;
  return f;
}

std::vector<double> value_rates;  // values per second, one per BM_stream_values iteration
std::vector<double> latencies;    // seconds from a write to its reader, BM_stream_latency

using bench::percentile;

void BM_raw_commit_latency(benchmark::State& state) {
  bench::raw_commit_latency(state, *fx().db, "bench_streams_floor");
}

/// Reads every value of `r` into `got` until the stream ends.
asio::awaitable<void> read_to_end(durable::stream_reader<int> r, int& got) {
  while (auto v = co_await r.next()) {
    if (v->value != got) throw std::runtime_error("a value came out of order");
    ++got;
  }
  if (r.ended() != durable::stream_end::closed) throw std::runtime_error("not closed");
}

std::vector<double> write_rates;  // values per second, BM_stream_values/0 (no reader)

/// range(0) 1: a reader reads every value while it is written; 0: nobody reads (no NOTIFY).
void BM_stream_values(benchmark::State& state) {
  auto& f = fx();
  const bool with_reader = state.range(0) != 0;
  int round = 0;
  bench::run_loop(state, f.io, [&]() -> asio::awaitable<void> {
    for (auto _ : state) {
      const std::string id =
          "burst-" + std::to_string(state.range(0)) + "-" + std::to_string(round++);
      const auto t0 = std::chrono::steady_clock::now();
      auto start = f.eng->start(std::string("burst"), id, burst_values);
      const durable::workflow_handle h = co_await std::move(start);
      int got = burst_values;
      if (with_reader) {
        got = 0;
        auto reading = read_to_end(f.eng->read_stream<int>(id, "burst"), got);
        co_await std::move(reading);
      }
      auto result = h.result<int>();
      const int closed_at = co_await std::move(result);
      const double elapsed = bench::seconds_since(t0);
      if (got != burst_values || closed_at != burst_values)
        throw std::runtime_error("the reader did not see every value");
      (with_reader ? value_rates : write_rates).push_back(burst_values / elapsed);
      state.SetIterationTime(elapsed);
    }
  }());
  state.counters["values/s"] =
      benchmark::Counter(double(burst_values), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_stream_latency(benchmark::State& state) {
  auto& f = fx();
  int round = 0;
  bench::run_loop(state, f.io, [&]() -> asio::awaitable<void> {
    for (auto _ : state) {
      const std::string id = "paced-" + std::to_string(round++);
      const auto t0 = std::chrono::steady_clock::now();
      auto start = f.eng->start(std::string("paced"), id, paced_values);
      const durable::workflow_handle h = co_await std::move(start);
      auto r = f.eng->read_stream<std::int64_t>(id, "paced");
      int got = 0;
      for (;;) {
        auto next = r.next();
        std::optional<durable::stream_value<std::int64_t>> v = co_await std::move(next);
        if (!v) break;
        latencies.push_back(double(now_ns() - v->value) * 1e-9);
        ++got;
        auto ack = f.eng->send(id, std::string("ack"), got);
        (void)co_await std::move(ack);
      }
      auto result = h.result<int>();
      const int closed_at = co_await std::move(result);
      if (got != paced_values || closed_at != paced_values)
        throw std::runtime_error("the reader did not see every value");
      state.SetIterationTime(bench::seconds_since(t0));
    }
  }());
}

}  // namespace

BENCHMARK(BM_raw_commit_latency)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_stream_values)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(5);
BENCHMARK(BM_stream_latency)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(3);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  bench::collecting_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::printf("\nsummary (this run's floor beside each):\n");
  const auto commit = reporter.median("BM_raw_commit_latency");
  if (commit)
    std::printf("  raw commit round trip:     %8.3f ms (%.0f commits/s)\n", *commit * 1e3,
                1 / *commit);
  if (!write_rates.empty()) {
    const double rate = percentile(write_rates, 0.5);
    std::printf("  stream values, nobody reading:        median %.0f values/s", rate);
    if (commit)
      std::printf(" = %.2f x the raw commits/s (%.2f commits a value)", rate * *commit,
                  1 / (rate * *commit));
    std::printf("\n");
  }
  if (!value_rates.empty()) {
    const double rate = percentile(value_rates, 0.5);
    std::printf("  stream values, 1 writer and 1 reader: median %.0f values/s", rate);
    if (commit)
      std::printf(" = %.2f x the raw commits/s (%.2f commits a value)", rate * *commit,
                  1 / (rate * *commit));
    std::printf("\n");
  }
  if (!latencies.empty()) {
    const double med = percentile(latencies, 0.5), p99 = percentile(latencies, 0.99);
    std::printf("  write -> waiting reader:   median %.3f ms, p99 %.3f ms", med * 1e3, p99 * 1e3);
    if (commit) std::printf(" = %.2f and %.2f commits", med / *commit, p99 / *commit);
    std::printf(" (%zu values)\n", latencies.size());
  }
  return 0;
}
