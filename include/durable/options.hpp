// The engine's options and the values it reports.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "durable/events.hpp"
#include "durable/metrics.hpp"
#include "durable/pg/connection.hpp"
#include "durable/trace.hpp"

namespace durable {

struct engine_options {
  /// libpq conninfo string or URL; empty means the PG* environment variables.
  std::string conninfo{};
  /// Schema holding every table (created by migrate()).
  std::string schema = "durable";
  /// Identity under which this engine owns workflows. Default: $DURABLE_EXECUTOR_ID, else
  /// "<host>:<pid>:<random>", unique per process (another executor takes this one's
  /// workflows over once its lease runs out). With a stable id per process slot, open()
  /// resumes the slot's unfinished workflows at once instead. One live process per id: a
  /// second one is refused by open() (see docs/deployment.md#executor-ids).
  std::string executor_id{};
  /// Application version stamped on the workflows this engine starts or enqueues.
  std::string app_version{};
  /// Application versions whose workflows this executor runs from queues and takes over
  /// from dead executors; empty runs every version. Others stay queued (see the `queued`
  /// view for the reason).
  std::vector<std::string> run_versions{};
  std::size_t pool_size = 8;
  /// Settings of the pool's connections, e.g. the statement deadline (60 s; 0 = none).
  pg::connection_options connection{};
  /// Run migrations in open().
  bool migrate = true;
  /// Pause before a workflow whose database I/O failed transiently is claimed and replayed
  /// again; it doubles (with jitter) on every further failure, up to io_retry_max_delay.
  std::chrono::milliseconds io_retry_delay{500};
  std::chrono::milliseconds io_retry_max_delay{30000};
  /// I9: a workflow claimed this many times in a row without journaling anything new (its
  /// runs crash, or keep failing on transient errors) is parked with its last error instead
  /// of being claimed again.
  int max_claims_without_progress = 20;
  /// A step's retry backoff at least this long unloads the workflow: its run ends, nothing is
  /// held (coroutine, connection, slot in max_running), and whichever executor is free claims
  /// it when the next attempt is due (workflows.status 'sleeping', wake_at). Shorter ones
  /// wait in the run.
  std::chrono::milliseconds unload_after{2000};
  /// A workflow unloaded while it waits (ctx.recv, ctx.get_event, a child's result) is woken
  /// at once by what it waits for (a send, an event, the child's end update its row in the
  /// same transaction, and a send in flight keeps it from unloading); it also looks again
  /// after this long, as a safety net.
  std::chrono::milliseconds wait_recheck{60000};
  /// Retention: finished workflows (succeeded, failed, cancelled) are deleted, with their
  /// journal, attempts, messages and events, once they completed longer ago than this (0:
  /// kept for ever). Dead letters and parked workflows are never deleted. Every executor's
  /// maintenance tick deletes up to `retention_batch` of them (oldest first, skipping rows
  /// locked by anything else), so each deletion is short.
  std::chrono::milliseconds retention{0};
  std::size_t retention_batch = 500;
  /// Most journal rows one workflow may hold (0: no limit). Every claim loads the whole
  /// journal in one query and keeps it in memory while the workflow runs (I1), so a journal
  /// that grows without end makes every resume slower and every run bigger; 10 000 rows load
  /// in a few tens of milliseconds (docs/performance.md). A new step that would go beyond it
  /// does not run and the workflow is parked with a reason; raise the limit and resume it to
  /// go on. Replaying rows already journaled is never refused. Workflows that run for ever
  /// (pollers, schedulers) call ctx.continue_as_new() to start again with an empty journal.
  std::size_t journal_limit = 10000;
  /// One warning event (severity::warning) per run when a workflow's journal reaches this
  /// fraction of journal_limit, naming the workflow, its size, the limit and the remedy.
  double journal_warning = 0.8;
  /// Largest value, as JSON text, that a run writes: a step's output or error, the
  /// workflow's result (0: no limit but PostgreSQL's own, 255 MiB for a jsonb value). A larger
  /// one is not written and the workflow is parked with a reason that names the step and the
  /// size (durable::value_too_large); the step runs again once an operator raises the limit
  /// and resumes it. Every claim loads the whole journal, and a write of N bytes takes about
  /// N / 50 MB/s on a local server (docs/failures.md#large-values): keep large data in an
  /// object store or a table of your own and journal a reference to it.
  std::size_t max_value_bytes = std::size_t(64) << 20;
  /// At most this many workflows run in this process at once: queue dispatch, takeover and
  /// open() claim no more (start() of a registered workflow is not limited).
  std::size_t max_running = 1000;
  /// Receives what the engine reports (background failures, parks, retries, takeovers) at
  /// or above `min_severity`. Default: one line per event on stderr.
  event_hook on_event{};
  severity min_severity = severity::warning;
  /// Receives every counter increment and histogram observation as it happens (steps,
  /// journal write latencies, parks...; docs/metrics.md), for an application that forwards
  /// them to its own metrics system. Unset (the default), observations cost nothing beyond
  /// the counters engine::metrics() and the Prometheus endpoint read.
  metric_hook on_metric{};
  /// Supplies the caller's trace context to start() and enqueue() calls whose options carry
  /// no traceparent, e.g. from OpenTelemetry's current span (docs/tracing.md). Unset: none.
  trace_context_hook current_trace{};
  /// Receives the spans of the workflows this engine runs: runs, steps, attempts and waits,
  /// each when it starts and when it ends, in the workflow's stored trace (docs/tracing.md).
  /// Unset (the default): none is made.
  span_hook on_span{};
  /// shutdown(): after the grace period, running steps receive cancellation; this long is
  /// then allowed for them to end and for the lease release to reach the database.
  std::chrono::milliseconds shutdown_timeout{2000};
  /// How often open()'s background loop refreshes this executor's lease and looks for
  /// workflows of executors whose lease ran out.
  std::chrono::milliseconds heartbeat_interval{1000};
  /// An executor that has not heartbeaten for this long is presumed dead: live executors
  /// take its unfinished workflows over (bumping their epoch, which fences the old owner).
  std::chrono::milliseconds lease_timeout{5000};
  /// Fire the schedules whose slot has come (docs/schedules.md) from the background loop's
  /// tick, every heartbeat_interval. Any number of executors may; each slot runs once.
  bool fire_schedules = true;
  /// How often the dispatcher looks for queued work when no notification arrives.
  /// Notifications (LISTEN/NOTIFY) make it react at once; polling keeps it correct where
  /// notifications are lost (connection poolers, some Postgres-compatible databases).
  std::chrono::milliseconds poll_interval{500};
  /// At most this many queued workflows claimed per queue in one dispatch round (within the
  /// queue's limits). Larger rounds start a burst sooner; smaller ones leave more of it to
  /// other executors. worker_concurrency bounds what one executor holds in any case.
  std::size_t dispatch_batch = 64;
  /// Listen on a dedicated connection for what the engine waits for: enqueues, cancels,
  /// messages, events, and (push_results) the ends of workflows whose result() it awaits.
  /// open() starts it; with push_results on, an engine that is never opened starts it with
  /// its first result() or get_event and stops it after the last. Off: every wait polls
  /// (every poll_interval; result() of another process's workflow 1 ms doubling to 500 ms).
  bool listen = true;
  /// result() of a workflow that runs in another process is told by a notification when the
  /// workflow ends, instead of polled: once the listener (`listen`) listens, result() marks
  /// the workflow awaited (migration 15, which the schema must have: without it result()
  /// warns once and polls), its end sends NOTIFY on the result channel with the outcome when
  /// it fits, and the listener wakes every result() of it in the process. poll_interval
  /// bounds a wait whose notification is lost. Off: result() polls, 1 ms doubling up to
  /// 500 ms, and marks nothing. Off by default while its end-to-result latency misses its
  /// target (docs/performance.md, run S); a workflow nobody awaits pays nothing either way.
  /// get_event from outside a workflow is woken by the event's notification in any engine
  /// that listens; this option only lets an engine never opened start a listener for it.
  bool push_results = false;
  /// Group commit: journal rows, starts and finishes of concurrent workflows share round
  /// trips and commits (one WAL flush for many rows). At most this many rows per batch...
  std::size_t group_commit_max_batch = 512;
  /// ...and at most this many batches in flight at once (each on its own pooled
  /// connection). A row submitted while fewer are in flight goes out at once, so a single
  /// workflow's steps see no added latency.
  std::size_t group_commit_in_flight = 2;
  /// A journal row, start or finish submitted while no batch is queued or in flight, the last
  /// batch having carried a single statement too (a workflow running alone), is sent from the
  /// run's own coroutine instead of a batch's: about 12 µs less per step of a lone workflow
  /// (of 230-250). Off by default: with it, 2 000 queued workflows ran 9 % slower in the
  /// same runs (docs/performance.md, run AA), for causes not yet found.
  bool group_commit_send_alone = false;
  /// Queues this executor dispatches (serve_queue() adds more). start() inside a
  /// transaction uses "default".
  std::vector<std::string> queues{"default"};
};

// The option structs below hold only trivially copyable members (string_view, not string):
// GCC 12 corrupts class temporaries with owning members created inside a co_await
// expression, and `co_await eng.enqueue({.queue = "q"}, ...)` is the natural way to write it.
// Every string they refer to is copied before the call returns.

/// Limits of a queue, shared by every executor that serves it (see docs/queues.md).
struct queue_options {
  std::string_view name;
  std::optional<int> concurrency{};         ///< running workflows, across all executors
  std::optional<int> worker_concurrency{};  ///< running workflows, per executor
  std::optional<int> rate_limit{};          ///< starts per rate_period
  std::chrono::milliseconds rate_period{1000};
};

/// What enqueue() does when the deduplication key is taken by an unfinished workflow.
enum class on_duplicate { return_existing, fail };

/// Debounce (enqueue_options::debounce): enqueues of one queue with one key collapse into one
/// workflow while it waits to be dispatched (docs/queues.md#debounce).
struct debounce_options {
  std::string_view key{};
  /// The first enqueue of a burst makes a workflow due this long after it; the later ones,
  /// until it is dispatched, replace its arguments.
  std::chrono::milliseconds window{0};
};

struct enqueue_options {
  std::string_view queue = "default";
  int priority = 0;  ///< higher starts first
  std::optional<std::string_view> dedup_key{};
  std::chrono::milliseconds delay{0};  ///< not started before this much time has passed
  on_duplicate duplicate = on_duplicate::return_existing;
  /// The workflow's deadline, this long after the enqueue (0: none); see start_options.
  std::chrono::milliseconds timeout{0};
  /// Collapse a burst of enqueues with one key into one workflow, run with the arguments of
  /// the last one once the window from the first has passed. Its handle is the first one's.
  std::optional<debounce_options> debounce{};
  /// W3C trace context of the span that enqueues (docs/tracing.md): stored with the workflow
  /// and inherited by its children. Empty: engine_options::current_trace's, if any. A
  /// traceparent that is not valid is refused (durable::invalid_text) before anything is done.
  std::string_view traceparent{};
  std::string_view tracestate{};
};

/// Options of engine::start(start_options, ...).
struct start_options {
  /// The workflow's deadline, this long after the start (0: none). Stored with the workflow,
  /// so it holds across restarts and takeovers: when it passes, the workflow stops at its
  /// next step (a running step receives Asio cancellation) and ends as 'cancelled'.
  std::chrono::milliseconds timeout{0};
  /// W3C trace context of the span that starts it; see enqueue_options::traceparent.
  std::string_view traceparent{};
  std::string_view tracestate{};
};
static_assert(std::is_trivially_copyable_v<queue_options> &&
              std::is_trivially_copyable_v<enqueue_options> &&
              std::is_trivially_copyable_v<start_options>);

/// Counters that show what work cost; the pool's are statements and round trips sent.
struct engine_stats {
  std::uint64_t round_trips = 0;
  std::uint64_t statements = 0;
  std::uint64_t journal_loads = 0;
  std::uint64_t steps_replayed = 0;
  std::uint64_t steps_executed = 0;
  std::uint64_t ownership_lost = 0;
  std::uint64_t group_commits = 0;       ///< batches the group committer sent
  std::size_t largest_group_commit = 0;  ///< most statements in one of them
  /// Of the batches, those a run sent itself (engine_options::group_commit_send_alone).
  std::uint64_t group_commits_alone = 0;
};

/// What status() reports; see docs/concepts.md for the lifecycle.
struct workflow_status {
  /// pending, running, sleeping, succeeded, failed, parked, cancelled, dead_letter
  std::string status;
  std::optional<std::string> reason;
  std::int64_t epoch = 0;
  int attempts = 0;
  std::optional<std::string> executor_id;
  /// Its W3C trace context's traceparent, if it was started with one (docs/tracing.md).
  std::optional<std::string> traceparent;
};

}  // namespace durable
