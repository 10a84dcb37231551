// What the test kit (durable/testing.hpp) costs in wall time, beside a floor measured in the same
// run: the same workflow's steps on the harness with no waits at all.
//
//   BM_kit_floor               (floor) a workflow of 10 steps run to its end on a harness
//   BM_kit_month_and_backoff   the same 10 steps, then a 30-day sleep and a step that fails for
//                              an hour of exponential backoff (1 min .. 32 min, 7 attempts)
//                              before it succeeds: virtual time, so its ratio to the floor is
//                              what the "in under a second of wall time" is about
//   BM_kit_check_crashes       check_crashes of the 10-step workflow: 1 + 10 * 3 runs
//
// No database. main() prints the medians and the ratios.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <durable/testing.hpp>

#include "bench_common.hpp"

using namespace std::chrono_literals;

namespace {

asio::awaitable<int> ten_steps(durable::context& ctx, bool wait) {
  int sum = 0;
  for (int i = 0; i < 10; ++i) sum += co_await ctx.step("s" + std::to_string(i), [i] { return i; });
  if (wait) {
    co_await ctx.sleep_for(30 * 24h);
    durable::retry r;
    r.max_attempts = 8;
    r.initial = 1min;
    r.max = 2h;
    sum += co_await ctx.step(
        "flaky",
        [](const durable::step_info& i) {
          if (i.attempt < 7) throw std::runtime_error("503");
          return i.attempt;
        },
        r);
  }
  co_return sum;
}

asio::awaitable<int> quick(durable::context& ctx) { co_return co_await ten_steps(ctx, false); }
asio::awaitable<int> waits(durable::context& ctx) { co_return co_await ten_steps(ctx, true); }

void run_one(benchmark::State& state, const char* name) {
  int n = 0;
  for (auto _ : state) {
    durable::testing::harness h;
    h.register_workflow("quick", quick);
    h.register_workflow("waits", waits);
    h.start(name, "w");
    h.run();
    if (h.status("w") != "succeeded") state.SkipWithError("the workflow did not succeed");
    benchmark::DoNotOptimize(++n);
  }
}

void BM_kit_floor(benchmark::State& state) { run_one(state, "quick"); }
void BM_kit_month_and_backoff(benchmark::State& state) { run_one(state, "waits"); }

void BM_kit_check_crashes(benchmark::State& state) {
  for (auto _ : state) {
    durable::testing::harness h;
    h.register_workflow("quick", quick);
    const auto r = durable::testing::check_crashes(h, "quick");
    if (!r.ok()) state.SkipWithError("check_crashes failed");
  }
}

}  // namespace

BENCHMARK(BM_kit_floor)->Unit(benchmark::kMicrosecond)->Repetitions(5);
BENCHMARK(BM_kit_month_and_backoff)->Unit(benchmark::kMicrosecond)->Repetitions(5);
BENCHMARK(BM_kit_check_crashes)->Unit(benchmark::kMillisecond)->Repetitions(5);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  bench::collecting_reporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::Shutdown();
  const auto floor = rep.median("BM_kit_floor");
  const auto month = rep.median("BM_kit_month_and_backoff");
  const auto crashes = rep.median("BM_kit_check_crashes");
  if (!floor || !month || !crashes) return 0;  // filtered out
  std::printf("\nsummary (medians of 5 repetitions, wall time):\n");
  std::printf("  10 steps on the harness (floor)            %10.1f us\n", *floor * 1e6);
  std::printf("  + 30-day sleep + hour of backoff           %10.1f us  = %.2fx the floor\n",
              *month * 1e6, *month / *floor);
  std::printf("  check_crashes of the 10 steps (31 runs)    %10.1f us  = %.1fx the floor\n",
              *crashes * 1e6, *crashes / *floor);
  return 0;
}
