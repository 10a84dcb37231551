// The engine's own measurements (docs/metrics.md): counters and histograms written on the
// engine's strand only, so each observation is a plain load and store (no locked instruction,
// no allocation), readable from any thread; and the hook call, skipped when no hook is set.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <string_view>

#include "durable/metrics.hpp"
#include "durable/states.hpp"

namespace durable::detail {

/// Hands one observation to the hook, if there is one; never throws.
inline void emit_metric(const metric_hook* hook, std::string_view name, metric_kind kind,
                        double value, std::span<const metric_label> labels = {}) noexcept {
  if (!hook) return;
  try {
    (*hook)(metric_observation{name, kind, value, labels});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[durable] the metric hook threw: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "[durable] the metric hook threw\n");
  }
}

/// A count with a single writer (the engine's strand) and readers anywhere.
class counter_cell {
public:
  void add(std::uint64_t n = 1) noexcept {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }

private:
  std::atomic<std::uint64_t> v_{0};
};

/// A counter: `++c` counts one and tells the hook.
struct metric_counter {
  explicit metric_counter(std::string_view n) noexcept : name(n) {}
  std::string_view name;
  const metric_hook* hook = nullptr;
  counter_cell cell;

  void add(std::uint64_t n = 1) noexcept {
    cell.add(n);
    if (hook) emit_metric(hook, name, metric_kind::counter, double(n));
  }
  void operator++() noexcept { add(1); }
  [[nodiscard]] std::uint64_t get() const noexcept { return cell.get(); }
  operator std::uint64_t() const noexcept { return cell.get(); }  // NOLINT: reads like a number
};

/// A counter with one label whose values are known in advance (`values`, static strings).
template <std::size_t N>
struct labelled_counter {
  labelled_counter(std::string_view n, std::string_view l,
                   const std::array<std::string_view, N>& v) noexcept
      : name(n), label(l), values(&v) {}
  std::string_view name;
  std::string_view label;
  const std::array<std::string_view, N>* values;
  const metric_hook* hook = nullptr;
  std::array<counter_cell, N> cells{};

  void add(std::size_t i, std::uint64_t n = 1) noexcept {
    if (i >= N) i = N - 1;  // the last value is the catch-all
    cells[i].add(n);
    if (hook) {
      const metric_label l{label, (*values)[i]};
      emit_metric(hook, name, metric_kind::counter, double(n),
                  std::span<const metric_label>(&l, 1));
    }
  }
  /// The index of label value `v`, or the last one (the catch-all).
  [[nodiscard]] std::size_t index(std::string_view v) const noexcept {
    for (std::size_t i = 0; i < N; ++i)
      if ((*values)[i] == v) return i;
    return N - 1;
  }
  [[nodiscard]] std::uint64_t get(std::string_view v) const noexcept {
    const std::size_t i = index(v);
    return (*values)[i] == v ? cells[i].get() : 0;
  }
  [[nodiscard]] labelled_counts snapshot() const {
    labelled_counts out;
    out.reserve(N);
    for (std::size_t i = 0; i < N; ++i) out.emplace_back((*values)[i], cells[i].get());
    return out;
  }
};

/// A histogram with fixed buckets (`bounds`, ascending upper bounds; +Inf is implicit).
template <std::size_t N>
struct histogram_cell {
  histogram_cell(std::string_view n, const std::array<double, N>& b) noexcept
      : name(n), bounds(&b) {}
  std::string_view name;
  const std::array<double, N>* bounds;
  const metric_hook* hook = nullptr;
  std::array<counter_cell, N + 1> buckets{};  // not cumulative; the last is +Inf
  std::atomic<double> sum{0};

  void observe(double v) noexcept {
    std::size_t i = 0;
    while (i < N && !(v <= (*bounds)[i])) ++i;
    buckets[i].add();
    sum.store(sum.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    if (hook) emit_metric(hook, name, metric_kind::histogram, v);
  }
  [[nodiscard]] std::uint64_t count() const noexcept {
    std::uint64_t n = 0;
    for (const auto& b : buckets) n += b.get();
    return n;
  }
  [[nodiscard]] histogram_snapshot snapshot() const {
    histogram_snapshot h;
    h.upper_bounds.assign(bounds->begin(), bounds->end());
    h.cumulative.reserve(N + 1);
    std::uint64_t n = 0;
    for (const auto& b : buckets) h.cumulative.push_back(n += b.get());
    h.count = n;
    h.sum = sum.load(std::memory_order_relaxed);
    return h;
  }
};

// Label values and buckets (docs/metrics.md lists them).
inline constexpr std::array<std::string_view, 2> started_via = {"start", "queue"};
inline constexpr std::array<std::string_view, 3> finished_statuses =
    to_strings(finished_workflow_states);
inline constexpr std::array<std::string_view, 9> park_reasons = {
    "nondeterminism", "requested",     "misuse", "journal_refused", "codec", "journal_error",
    "no_progress",    "journal_limit", "other"};
inline constexpr std::array<std::string_view, 8> failing_components = {
    "lease", "maintenance", "dispatcher", "listener", "committer", "metrics", "schedules", "other"};
inline constexpr std::array<double, 16> latency_buckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
inline constexpr std::array<double, 11> batch_buckets = {1,  2,   4,   8,   16,  32,
                                                         64, 128, 256, 512, 1024};

/// The park reason label of an error type the engine parks with.
[[nodiscard]] inline std::string_view park_reason(std::string_view type) noexcept {
  if (type == "durable::nondeterminism_error") return "nondeterminism";
  if (type == "durable::workflow_parked") return "requested";
  if (type == "durable::misuse") return "misuse";
  if (type == "durable::journal_refused") return "journal_refused";
  if (type == "durable::codec_error") return "codec";
  if (type == "durable::journal_error") return "journal_error";
  if (type == "durable::journal_limit_exceeded") return "journal_limit";
  if (type == "durable::value_too_large") return "value_too_large";
  return "other";
}

/// What the engine counts (tests and benchmarks read some of them to prove I/O counts, I1, I2).
struct engine_counters {
  metric_counter journal_loads{"durable_journal_loads_total"};
  metric_counter steps_replayed{"durable_steps_replayed_total"};
  metric_counter steps_executed{"durable_steps_executed_total"};
  metric_counter ownership_lost{"durable_ownership_lost_total"};
  metric_counter workflows_recovered{"durable_workflows_recovered_total"};
  metric_counter workflows_taken_over{"durable_workflows_taken_over_total"};
  metric_counter workflows_dead_lettered{"durable_workflows_dead_lettered_total"};
  metric_counter io_retries{"durable_io_retries_total"};
  metric_counter schedule_slots_fired{"durable_schedule_slots_fired_total"};
  metric_counter schedule_slots_missed{"durable_schedule_slots_missed_total"};
  metric_counter schedule_slots_late{"durable_schedule_slots_late_total"};
  labelled_counter<2> workflows_started{"durable_workflows_started_total", "via", started_via};
  labelled_counter<3> workflows_finished{"durable_workflows_finished_total", "status",
                                         finished_statuses};
  labelled_counter<9> workflows_parked{"durable_workflows_parked_total", "reason", park_reasons};
  labelled_counter<8> background_failures{"durable_background_failures_total", "component",
                                          failing_components};
  histogram_cell<16> journal_write_seconds{"durable_journal_write_seconds", latency_buckets};
  histogram_cell<11> group_commit_batch_size{"durable_group_commit_batch_size", batch_buckets};
  histogram_cell<16> group_commit_seconds{"durable_group_commit_seconds", latency_buckets};
  // Gauges, mirrored here so that engine::metrics() may read them from any thread.
  std::atomic<std::size_t> running{0};
  std::atomic<bool> lease_expired{false};

  /// Every observation from now on also goes to `hook` (null: none).
  void set_hook(const metric_hook* hook) noexcept {
    for (metric_counter* c :
         {&journal_loads, &steps_replayed, &steps_executed, &ownership_lost, &workflows_recovered,
          &workflows_taken_over, &workflows_dead_lettered, &io_retries, &schedule_slots_fired,
          &schedule_slots_missed, &schedule_slots_late})
      c->hook = hook;
    workflows_started.hook = workflows_finished.hook = workflows_parked.hook =
        background_failures.hook = hook;
    journal_write_seconds.hook = group_commit_batch_size.hook = group_commit_seconds.hook = hook;
  }
};

}  // namespace durable::detail
