// What the engine measures about its own work (docs/metrics.md): the hook that receives each
// observation as it happens, and the snapshot engine::metrics() returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace durable {

enum class metric_kind { counter, gauge, histogram };

[[nodiscard]] constexpr std::string_view to_string(metric_kind k) noexcept {
  switch (k) {
    case metric_kind::counter:
      return "counter";
    case metric_kind::gauge:
      return "gauge";
    case metric_kind::histogram:
      return "histogram";
  }
  return "untyped";
}

/// One label of a sample: name="value".
struct metric_label {
  std::string_view name;
  std::string_view value;
};

/// One observation, as engine_options::on_metric receives it. Every view is valid only
/// during the call (copy what you keep).
struct metric_observation {
  /// The metric's name, the same as in the Prometheus exposition ("durable_steps_executed_total",
  /// "durable_journal_write_seconds"); see docs/metrics.md for the list.
  std::string_view name;
  /// counter: `value` is the increment (an OpenTelemetry Counter's add()); histogram: `value`
  /// is the observed value (a Histogram's record()). Gauges are not pushed: read them from
  /// engine::metrics() (an OpenTelemetry observable gauge's callback).
  metric_kind kind;
  double value;
  std::span<const metric_label> labels;
};

/// Receives observations (see engine_options::on_metric). Called on the engine's executor,
/// inline where the work happens (a step's journal write, say): it must be cheap, must not
/// block, and should not throw (an exception it throws is swallowed after one line on stderr).
using metric_hook = std::function<void(const metric_observation&)>;

/// A histogram as Prometheus exposes it.
struct histogram_snapshot {
  /// Upper bounds of the buckets, ascending (the +Inf bucket is implicit).
  std::vector<double> upper_bounds;
  /// Cumulative: observations <= upper_bounds[i]; one more entry at the end, for +Inf,
  /// which equals `count`.
  std::vector<std::uint64_t> cumulative;
  double sum = 0;
  std::uint64_t count = 0;
};

/// A counter with one label, by label value ("succeeded" -> 12).
using labelled_counts = std::vector<std::pair<std::string_view, std::uint64_t>>;

/// What engine::metrics() returns: this engine's counters since it was created, its histograms,
/// and its local gauges. (Queue depth is a database fact, read by queue_depths() and
/// prometheus_text().)
struct engine_metrics {
  // ---- steps
  std::uint64_t steps_executed = 0;  ///< steps run and journaled by this engine
  std::uint64_t steps_replayed = 0;  ///< steps answered from the journal without running
  std::uint64_t journal_loads = 0;   ///< queries that loaded journals (one per claim batch)
  // ---- workflows
  labelled_counts workflows_started;       ///< by "via": start, queue
  std::uint64_t workflows_recovered = 0;   ///< resumed by open(), recover_pending(), recover()
  std::uint64_t workflows_taken_over = 0;  ///< claimed from executors whose lease ran out
  labelled_counts workflows_finished;      ///< by "status": succeeded, failed, cancelled
  std::uint64_t workflows_dead_lettered = 0;
  labelled_counts workflows_parked;     ///< by "reason" (see docs/metrics.md)
  std::uint64_t ownership_lost = 0;     ///< runs stopped because another executor took over
  std::uint64_t io_retries = 0;         ///< runs to be claimed again after a transient I/O failure
  labelled_counts background_failures;  ///< by "component": lease, maintenance, ...
  // ---- schedules (slots this engine's maintenance found due)
  std::uint64_t schedule_slots_fired = 0;   ///< slots whose workflow this engine started
  std::uint64_t schedule_slots_missed = 0;  ///< slots found too late that did not run
  std::uint64_t schedule_slots_late = 0;    ///< slots found too late that ran (catch-up)
  // ---- database (round trips and statements: engine::stats(), on the engine's executor)
  histogram_snapshot journal_write_seconds;    ///< submit to acknowledged commit of a journal row
  histogram_snapshot group_commit_batch_size;  ///< statements per group-commit round trip
  histogram_snapshot group_commit_seconds;     ///< duration of each group-commit round trip
  // ---- gauges (now)
  std::size_t workflows_running = 0;  ///< runs in this process
  std::size_t max_running = 0;        ///< engine_options::max_running
  bool lease_expired = false;         ///< this executor could not renew its lease in time
};

/// Workflows of a queue now (engine::queue_depths()).
struct queue_depth {
  std::string queue;
  std::int64_t queued = 0;  ///< waiting to be dispatched (delayed ones included)
  std::int64_t running = 0;
};

}  // namespace durable
