// What the metrics cost on the hot path (docs/metrics.md), all in the same run:
//
//   BM_step_observations/hook:H   in process, no I/O: what the engine records for one new step
//                                 (steps executed, the journal write's latency with its two
//                                 clock reads, one group-commit batch size and round-trip time
//                                 with theirs), on the engine's own counters, without (H=0) and
//                                 with (H=1) a hook that sums what it receives
//   BM_paired_metrics             blocks of 100-step workflows on two engines of the same
//                                 database, one without a hook and one with that hook, in
//                                 alternating order, each block timed: per-step costs side by
//                                 side, and their ratio
//
// Collection itself cannot be switched off (the counters are always kept); its cost is the
// first benchmark's time, put beside the cost of a new step from the second. Database:
// $DURABLE_DATABASE_URL, else libpq's PG* variables. Drops and recreates the schema
// bench_metrics.

#include <benchmark/benchmark.h>
#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <durable.hpp>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace {

const std::string schema = "bench_metrics";

asio::awaitable<std::int64_t> steps_wf(durable::context& ctx, int n) {
  std::int64_t sum = 0;
  for (int i = 0; i < n; ++i) sum += co_await ctx.step("s", [i] { return std::int64_t(i); });
  co_return sum;
}

// The hook of the measurements: what a forwarding hook does at least (count and sum).
std::atomic<std::uint64_t> g_hook_calls{0};
double g_hook_sum = 0;
void hook(const durable::metric_observation& o) {
  g_hook_calls.fetch_add(1, std::memory_order_relaxed);
  g_hook_sum += o.value;
}
const durable::metric_hook g_hook = &hook;

// ---- in process -----------------------------------------------------------------------------

void BM_step_observations(benchmark::State& state) {
  durable::detail::engine_counters c;
  c.set_hook(state.range(0) ? &g_hook : nullptr);
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto submitted = clock::now();  // group_committer::append
    const auto sent = clock::now();       // group_committer::commit, per batch
    c.group_commit_batch_size.observe(1);
    c.group_commit_seconds.observe(std::chrono::duration<double>(clock::now() - sent).count());
    c.journal_write_seconds.observe(
        std::chrono::duration<double>(clock::now() - submitted).count());
    ++c.steps_executed;  // detail::append
  }
  benchmark::DoNotOptimize(c.steps_executed.get());
}

// ---- end to end, paired ---------------------------------------------------------------------

asio::io_context* g_io = nullptr;
durable::engine* g_engines[2] = {nullptr, nullptr};  // without, with the hook
const char* const paired_names[2] = {"new step, no hook", "new step, hook set"};
std::vector<double> g_paired[2];  // seconds per step, one sample per block
constexpr int paired_block = 100;
std::uint64_t g_ids = 0;

asio::awaitable<void> paired_loop(benchmark::State& state) {
  int rotation = 0;
  for (auto _ : state) {
    for (int k = 0; k < 2; ++k) {
      const int v = (k + rotation) % 2;
      const auto t0 = std::chrono::steady_clock::now();
      const std::string id = "paired-" + std::to_string(v) + "-" + std::to_string(++g_ids);
      auto handle = co_await g_engines[v]->start("steps", id, paired_block);
      const std::int64_t sum = co_await handle.result<std::int64_t>();
      if (sum != std::int64_t(paired_block) * (paired_block - 1) / 2)
        throw std::runtime_error("steps_wf returned a wrong sum");
      g_paired[v].push_back(bench::seconds_since(t0) / paired_block);
    }
    rotation ^= 1;
  }
}

void BM_paired_metrics(benchmark::State& state) {
  bench::run_loop(state, *g_io, paired_loop(state));
}

BENCHMARK(BM_step_observations)->ArgName("hook")->Arg(0)->Arg(1)->Repetitions(5);
BENCHMARK(BM_paired_metrics)->Iterations(40)->UseRealTime()->Unit(benchmark::kMillisecond);

void print_summary(const bench::collecting_reporter& rep) {
  std::printf("\n==== bench_metrics summary: medians, same run ====\n");
  const auto off = rep.median("BM_step_observations/hook:0");
  const auto on = rep.median("BM_step_observations/hook:1");
  const auto plain = bench::median_of(g_paired[0]);
  const auto hooked = bench::median_of(g_paired[1]);
  if (off) std::printf("observations of one new step, no hook:   %8.1f ns\n", *off * 1e9);
  if (on) std::printf("observations of one new step, hook set:  %8.1f ns\n", *on * 1e9);
  if (plain && hooked) {
    std::printf("paired blocks of %d steps (%zu blocks each), medians per step:\n", paired_block,
                g_paired[0].size());
    for (int v = 0; v < 2; ++v)
      std::printf("  %-24s %8.1f us\n", paired_names[v], *(v ? hooked : plain) * 1e6);
    std::printf("  hook set / no hook:      %8.3f\n", *hooked / *plain);
    if (off)
      std::printf("  collection / new step:   %8.5f (%.2f %%)\n", *off / *plain,
                  100 * *off / *plain);
    if (on)
      std::printf("  collection with the hook / new step: %.5f (%.2f %%)\n", *on / *plain,
                  100 * *on / *plain);
  }
  std::printf("hook calls: %llu\n", static_cast<unsigned long long>(g_hook_calls.load()));
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::initialize(argc, argv)) return 1;
  asio::io_context io;
  durable::engine_options options;
  options.conninfo = bench::conninfo();
  options.schema = schema;
  options.pool_size = 4;
  options.lease_timeout = std::chrono::hours(1);
  options.executor_id = "bench-metrics-plain";
  durable::engine plain(io.get_executor(), options);
  options.executor_id = "bench-metrics-hooked";
  options.on_metric = &hook;
  durable::engine hooked(io.get_executor(), options);
  for (durable::engine* e : {&plain, &hooked}) e->register_workflow("steps", &steps_wf);
  try {
    bench::raw_connection raw(options.conninfo);
    raw.exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
    (void)bench::run_on(io, plain.open());
    (void)bench::run_on(io, hooked.open());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_metrics: setup failed: %s\n", e.what());
    return 1;
  }
  g_io = &io;
  g_engines[0] = &plain;
  g_engines[1] = &hooked;
  bench::collecting_reporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::Shutdown();
  print_summary(rep);
  try {
    bench::run_on(io, plain.shutdown(std::chrono::seconds(1)));
    bench::run_on(io, hooked.shutdown(std::chrono::seconds(1)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_metrics: engine shutdown failed: %s\n", e.what());
  }
  return 0;
}
