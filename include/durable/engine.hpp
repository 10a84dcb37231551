// The engine: registry of workflow functions, start and handles, running and recovery.
#pragma once

#include <unistd.h>

#include <asio/any_io_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "durable/codec.hpp"
#include "durable/context.hpp"
#include "durable/detail/completion.hpp"
#include "durable/detail/config.hpp"
#include "durable/detail/encode_text.hpp"
#include "durable/detail/engine_state.hpp"
#include "durable/detail/invoke_workflow.hpp"
#include "durable/detail/run_state.hpp"
#include "durable/detail/workflow_signature.hpp"
#include "durable/error.hpp"
#include "durable/fwd.hpp"
#include "durable/options.hpp"
#include "durable/pg/pool.hpp"
#include "durable/schedule.hpp"
#include "durable/stream_reader.hpp"
#include "durable/workflow_handle.hpp"

namespace durable {

class engine;

namespace detail {

/// The statements of an engine's schema, for the library's own tools (the CLI, tests,
/// benchmarks), which include durable/store.hpp themselves. Not part of the public API.
const store& store_of(const engine& e) noexcept;

/// An enqueue's statement, with what its outcome is checked against (see impl/engine_start.ipp).
struct enqueue_request;

}  // namespace detail

/// The engine's operations (open, start, enqueue, cancel, send, shutdown, ...) take an Asio
/// completion token as their last argument. By default it is asio::use_awaitable: the operation
/// returns an asio::awaitable to co_await, at no extra cost. Any other token works as for an
/// Asio operation whose completion is void(std::exception_ptr, value) (void(std::exception_ptr)
/// when there is no value): asio::use_future gives a std::future<value>, a callback is called
/// with (std::exception_ptr, value), asio::experimental::deferred gives a deferred operation.
/// Whatever the token, the operation runs on the engine's strand; an invalid argument reaches
/// the token as the exception. The engine must outlive the operations started on it (as an Asio
/// I/O object must); shutdown() before destroying it.
class engine {
public:
  /// The engine runs its workflows and its background parts on a strand of `ex` (so an
  /// io_context run by several threads is fine). Its operations may be called from any
  /// thread and awaited from any executor; the synchronous ones (register_workflow, running(),
  /// stats(), pool()) and the pool's connections belong to executor() (or to a single-threaded
  /// io_context).
  DURABLE_DECL engine(asio::any_io_executor ex, engine_options options = {});

  /// The strand on which the engine runs everything.
  [[nodiscard]] const asio::any_io_executor& executor() const noexcept { return s_->ex; }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// Registers a workflow under a stable name; the name is what the database records, so
  /// renaming it strands workflows. `fn` is anything callable as
  /// `asio::awaitable<R>(durable::context&, Args...)` with one signature: a function, a
  /// lambda (capturing the application's services, say), a function object. The engine
  /// keeps a copy of it for its whole life.
  template <class F>
  void register_workflow(std::string name, F fn);

  /// Registers member function `fn` of `object` (which must outlive the engine's runs).
  template <class R, class C, class... Args>
  void register_workflow(std::string name, asio::awaitable<R> (C::*fn)(context&, Args...),
                         C* object);

  /// Migrates (unless disabled), registers this executor, resumes the unfinished workflows
  /// it owned, and starts the background loop that heartbeats and takes over the workflows
  /// of executors whose lease ran out. Completes with the number resumed.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto open(CompletionToken&& token = {}) {
    return detail::launch<std::size_t>(
        s_->ex, std::forward<CompletionToken>(token), [&] { return open_hop(); },
        [&] { return open_impl(); });
  }

  /// open()'s background work (heartbeats, takeover, queue dispatch, LISTEN) runs until
  /// shutdown(); until then the io_context does not run out of work.
  ///
  /// Graceful shutdown: accepts no new work, lets running steps finish (for up to `grace`,
  /// 10 seconds when not given), stops each workflow at its next step boundary, and ends this
  /// executor's lease so that other executors resume its workflows at once instead of after
  /// the lease timeout.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto shutdown(std::chrono::milliseconds grace, CompletionToken&& token = {}) {
    return detail::launch<void>(
        s_->ex, std::forward<CompletionToken>(token), [&] { return shutdown_hop(grace); },
        [&] { return shutdown_impl(grace); });
  }
  template <class CompletionToken = detail::default_token>
    requires detail::completion_token_for<CompletionToken, void>
  [[nodiscard]] auto shutdown(CompletionToken&& token = {}) {
    return shutdown(std::chrono::seconds(10), std::forward<CompletionToken>(token));
  }

  /// Runs the schema migrations (open() does unless engine_options::migrate is false; see
  /// docs/deployment.md); completes with the schema version.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto migrate(CompletionToken&& token = {}) {
    return detail::launch<int>(
        s_->ex, std::forward<CompletionToken>(token), [&] { return migrate_hop(); },
        [&] { return migrate_impl(); });
  }

  /// Starts workflow `name` with id `workflow_id` (its idempotency key). If that id exists,
  /// completes with a handle to it without running anything; a different name or different
  /// inputs for the same id is a workflow_conflict. The last argument may be a completion
  /// token; the others are the workflow's inputs.
  template <class... ArgsAndToken>
  [[nodiscard]] auto start(std::string name, std::string workflow_id, ArgsAndToken&&... args) {
    return detail::split_token<workflow_handle>(
        [&](auto&& token, const auto&... inputs) {
          return launch_start(std::forward<decltype(token)>(token), std::move(name),
                              std::move(workflow_id), start_options{}, inputs...);
        },
        std::forward<ArgsAndToken>(args)...);
  }

  /// start() with options: a deadline (`opts.timeout`) and a trace context stored with it.
  template <class... ArgsAndToken>
  [[nodiscard]] auto start(start_options opts, std::string name, std::string workflow_id,
                           ArgsAndToken&&... args) {
    return detail::split_token<workflow_handle>(
        [&](auto&& token, const auto&... inputs) {
          return launch_start(std::forward<decltype(token)>(token), std::move(name),
                              std::move(workflow_id), opts, inputs...);
        },
        std::forward<ArgsAndToken>(args)...);
  }

  /// start() inside the caller's transaction: queued on the "default" queue, which every
  /// engine serves, and run once the transaction commits.
  template <class... ArgsAndToken>
  [[nodiscard]] auto start(pg::transaction& tx, std::string name, std::string workflow_id,
                           ArgsAndToken&&... args) {
    return enqueue(tx, enqueue_options{}, std::move(name), std::move(workflow_id),
                   std::forward<ArgsAndToken>(args)...);
  }

  /// Cancels workflow `workflow_id` from any process: it becomes 'cancelled' at once (its
  /// epoch moves on, so a run in progress can journal nothing more), and the process that
  /// runs it, told by a notification (or at its next heartbeat), stops it: the step running
  /// there receives Asio cancellation. Works on pending, running, sleeping, parked and
  /// dead-lettered workflows. Completes with false if it is finished or unknown.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto cancel(std::string workflow_id, CompletionToken&& token = {}) {
    return detail::launch<bool>(
        s_->ex, std::forward<CompletionToken>(token),
        [&] { return cancel_impl(std::move(workflow_id)); },
        [&] { return cancel_on_strand(std::move(workflow_id)); });
  }

  /// Continues a cancelled, dead-lettered or parked workflow from its journal: any executor
  /// claims it at once and replays it (its deadline is cleared; a dead-lettered one's failed
  /// step runs again). Completes with false if it has another status or is unknown.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto resume(std::string workflow_id, CompletionToken&& token = {}) {
    return launch_resume(std::forward<CompletionToken>(token), std::move(workflow_id), false);
  }

  /// Retries a dead-lettered workflow once its cause is fixed: the step that failed for good
  /// runs again with a fresh count of attempts; the failed attempts stay in step_attempts.
  /// Completes with false if it is not dead-lettered.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto retry(std::string workflow_id, CompletionToken&& token = {}) {
    return launch_resume(std::forward<CompletionToken>(token), std::move(workflow_id), true);
  }

  /// Creates a new workflow (`new_id`, or "<id>:fork:<random>" when empty or not given) with
  /// the same name, inputs and generation (ctx.continue_as_new), whose journal holds copies of
  /// `workflow_id`'s rows before step `from_step`, and runs the rest with this code ("re-run from
  /// step 3 after the fix"). The original is not touched. Completes with the new workflow's
  /// handle.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto fork(std::string workflow_id, int from_step, std::string new_id,
                          CompletionToken&& token = {}) {
    return detail::launch<workflow_handle>(
        s_->ex, std::forward<CompletionToken>(token),
        [&] { return fork_impl(std::move(workflow_id), from_step, std::move(new_id)); },
        [&] { return fork_on_strand(std::move(workflow_id), from_step, std::move(new_id)); });
  }
  template <class CompletionToken = detail::default_token>
    requires detail::completion_token_for<CompletionToken, workflow_handle>
  [[nodiscard]] auto fork(std::string workflow_id, int from_step, CompletionToken&& token = {}) {
    return fork(std::move(workflow_id), from_step, std::string(),
                std::forward<CompletionToken>(token));
  }

  /// Queues the workflow for whichever executor serving `opts.queue` has room for it, within
  /// the queue's limits. The id is the idempotency key as for start(); with a deduplication
  /// key, an unfinished workflow holding it is the result (or, with on_duplicate::fail, a
  /// duplicate_workflow error). The last argument may be a completion token.
  template <class... ArgsAndToken>
  [[nodiscard]] auto enqueue(enqueue_options opts, std::string name, std::string workflow_id,
                             ArgsAndToken&&... args) {
    return detail::split_token<workflow_handle>(
        [&](auto&& token, const auto&... inputs) {
          return launch_enqueue(std::forward<decltype(token)>(token), nullptr, opts,
                                std::move(name), std::move(workflow_id), inputs...);
        },
        std::forward<ArgsAndToken>(args)...);
  }

  /// The same inside the caller's transaction: if it rolls back, the workflow never existed.
  template <class... ArgsAndToken>
  [[nodiscard]] auto enqueue(pg::transaction& tx, enqueue_options opts, std::string name,
                             std::string workflow_id, ArgsAndToken&&... args) {
    return detail::split_token<workflow_handle>(
        [&](auto&& token, const auto&... inputs) {
          return launch_enqueue(std::forward<decltype(token)>(token), &tx, opts, std::move(name),
                                std::move(workflow_id), inputs...);
        },
        std::forward<ArgsAndToken>(args)...);
  }

  /// The enqueue as a statement, for a transaction the application runs on its own PGconn*
  /// (execute it with pg::exec_blocking or your own PQexecParams; read column 0 of its one
  /// row: true if this call created the workflow).
  template <class... Args>
  [[nodiscard]] pg::statement enqueue_statement(const enqueue_options& opts,
                                                const std::string& name,
                                                const std::string& workflow_id,
                                                const Args&... args) const {
    return enqueue_statement_encoded(opts, name, workflow_id, detail::encode_inputs(args...));
  }

  /// Sends `value` to workflow `workflow_id` under `topic`, for its ctx.recv. With an
  /// idempotency key, a send repeated with the same key (to the same workflow) sends nothing
  /// and completes with false. A recipient waiting in its run is told at once (notification);
  /// one unloaded to wait is woken in the same transaction. Fails with durable::error if no
  /// workflow has that id.
  template <class T, class CompletionToken = detail::default_token>
  [[nodiscard]] auto send(std::string workflow_id, std::string topic, const T& value,
                          std::string idempotency_key, CompletionToken&& token = {}) {
    return detail::launch<bool>(
        s_->ex, std::forward<CompletionToken>(token),
        [&] {
          return send_impl(std::move(workflow_id), std::move(topic),
                           durable::encode<T>(value).dump(), std::move(idempotency_key));
        },
        [&] {
          return send_on_strand(std::move(workflow_id), std::move(topic),
                                durable::encode<T>(value).dump(), std::move(idempotency_key));
        });
  }
  template <class T, class CompletionToken = detail::default_token>
    requires detail::completion_token_for<CompletionToken, bool>
  [[nodiscard]] auto send(std::string workflow_id, std::string topic, const T& value,
                          CompletionToken&& token = {}) {
    return send(std::move(workflow_id), std::move(topic), value, std::string(),
                std::forward<CompletionToken>(token));
  }

  /// The send as a statement, for a transaction the application runs itself (its own
  /// PGconn*, with pg::exec_blocking or PQexecParams): the message exists if and only if that
  /// transaction commits. Its one row: (sent now, the recipient exists); a recipient that
  /// does not exist gets no message.
  template <class T>
  [[nodiscard]] pg::statement send_statement(const std::string& workflow_id,
                                             const std::string& topic, const T& value,
                                             const std::string& idempotency_key = {}) const {
    return send_statement_encoded(workflow_id, topic, durable::encode<T>(value).dump(),
                                  idempotency_key);
  }

  /// The value workflow `workflow_id` published under `key` (ctx.set_event), waiting up to
  /// `timeout` (forever when not given) for it to be published; nullopt if it was not by then.
  /// While the database does not answer it reads again with backoff; if the timeout passes
  /// then, the last connection error is thrown (docs/primitives.md).
  template <class T, class CompletionToken = detail::default_token>
  [[nodiscard]] auto get_event(std::string workflow_id, std::string key,
                               std::chrono::milliseconds timeout, CompletionToken&& token = {}) {
    return detail::launch<std::optional<T>>(
        s_->ex, std::forward<CompletionToken>(token),
        [&] {
          std::string what = "get_event('" + workflow_id + "', '" + key + "')";
          return decode_event<T>(get_event_impl(std::move(workflow_id), std::move(key), timeout),
                                 std::move(what));
        },
        [&] {
          std::string what = "get_event('" + workflow_id + "', '" + key + "')";
          return decode_event<T>(
              get_event_on_strand(std::move(workflow_id), std::move(key), timeout),
              std::move(what));
        });
  }
  template <class T, class CompletionToken = detail::default_token>
    requires detail::completion_token_for<CompletionToken, std::optional<T>>
  [[nodiscard]] auto get_event(std::string workflow_id, std::string key,
                               CompletionToken&& token = {}) {
    return get_event<T>(std::move(workflow_id), std::move(key), forever,
                        std::forward<CompletionToken>(token));
  }

  /// Reads stream `key` of workflow `workflow_id` (ctx.write_stream) in order from offset
  /// `from_offset` on, as its values are written (durable/stream_reader.hpp). No I/O until
  /// the reader's first next(). Throws durable::error for a negative offset, invalid_text for
  /// a NUL in the id or key.
  template <class T>
  [[nodiscard]] stream_reader<T> read_stream(std::string workflow_id, std::string key,
                                             std::int64_t from_offset = 0) const {
    return stream_reader<T>(s_, std::move(workflow_id), std::move(key), from_offset);
  }

  /// Sets a queue's limits (stored in the database, shared by all executors).
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto configure_queue(queue_options q, CompletionToken&& token = {}) {
    return detail::launch<void>(
        s_->ex, std::forward<CompletionToken>(token), [&] { return configure_queue_hop(q); },
        [&] { return configure_queue_impl(q); });
  }

  /// Pauses queue `name` for every executor: nothing more is dispatched from it (what runs
  /// finishes; enqueues still queue) until resume_queue(). Stored with the queue's limits.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto pause_queue(std::string name, CompletionToken&& token = {}) {
    return admin_call<void>(std::forward<CompletionToken>(token),
                            [this, name] { return set_queue_paused_impl(name, true); });
  }
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto resume_queue(std::string name, CompletionToken&& token = {}) {
    return admin_call<void>(std::forward<CompletionToken>(token),
                            [this, name] { return set_queue_paused_impl(name, false); });
  }

  /// This executor dispatches `queue` too (see engine_options::queues). Call before open().
  void serve_queue(std::string queue) { s_->queues.push_back(std::move(queue)); }

  /// Claims workflow `workflow_id` for this executor (fencing out a previous owner) and
  /// resumes it by replay. Completes with false if it is finished, parked or unknown here.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto recover(std::string workflow_id, CompletionToken&& token = {}) {
    return detail::launch<bool>(
        s_->ex, std::forward<CompletionToken>(token),
        [&] { return recover_impl(std::move(workflow_id)); },
        [&] { return recover_impl_on_strand(std::move(workflow_id)); });
  }

  /// Resumes every unfinished workflow this executor owns. Completes with how many.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto recover_pending(CompletionToken&& token = {}) {
    return detail::launch<std::size_t>(
        s_->ex, std::forward<CompletionToken>(token), [&] { return recover_pending_hop(); },
        [&] { return recover_pending_impl(); });
  }

  [[nodiscard]] workflow_handle handle(std::string workflow_id) const {
    return {s_, std::move(workflow_id)};
  }

  [[nodiscard]] DURABLE_DECL engine_stats stats() const;

  /// This engine's counters and histograms since it was created, and its local gauges (see
  /// docs/metrics.md). Unlike stats(), it may be called from any thread. For the exposition
  /// format, see prometheus_text() and serve_metrics() in durable/metrics_server.hpp.
  [[nodiscard]] DURABLE_DECL engine_metrics metrics() const;

  /// How many workflows wait to be dispatched, and run, in each queue this engine serves,
  /// read now (one statement).
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto queue_depths(CompletionToken&& token = {}) {
    return detail::launch<std::vector<queue_depth>>(
        s_->ex, std::forward<CompletionToken>(token), [&] { return queue_depths_hop(); },
        [&] { return queue_depths_impl(); });
  }
  // ---- schedules (docs/schedules.md) ----------------------------------------------------
  /// Creates schedule `opts.id` or replaces its definition: from its next slot on, each slot
  /// of `opts.cron` enqueues `opts.workflow` with `args` as "<id>@<slot>". Throws
  /// invalid_schedule for a bad expression, zone or option. The last argument may be a token.
  template <class... ArgsAndToken>
  [[nodiscard]] auto schedule(schedule_options opts, ArgsAndToken&&... args) {
    return detail::split_token<void>(
        [&](auto&& token, const auto&... inputs) {
          nlohmann::json encoded = detail::encode_inputs(inputs...);
          auto body = [&] {  // the views of opts are copied into the coroutine's strings
            return schedule_impl(std::string(opts.id), std::string(opts.cron),
                                 std::string(opts.time_zone), std::string(opts.workflow),
                                 std::string(opts.queue), opts, std::move(encoded));
          };
          return detail::launch<void>(
              s_->ex, std::forward<decltype(token)>(token),
              [&] { return detail::on_strand(s_, body()); }, body);
        },
        std::forward<ArgsAndToken>(args)...);
  }
  /// Pauses schedule `id` (no slot fires until resume_schedule; false: no such schedule).
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto pause_schedule(std::string id, CompletionToken&& token = {}) {
    return admin_call<bool>(std::forward<CompletionToken>(token),
                            [this, id] { return set_schedule_paused_impl(id, true); });
  }
  /// Resumes it from the first slot after now: the slots that passed while paused do not run.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto resume_schedule(std::string id, CompletionToken&& token = {}) {
    return admin_call<bool>(std::forward<CompletionToken>(token),
                            [this, id] { return set_schedule_paused_impl(id, false); });
  }
  /// Starts one run of the schedule now, outside its timetable ("<id>@trigger:<time>"),
  /// paused or not; completes with its workflow id. Throws durable::error if there is no such
  /// schedule.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto trigger_schedule(std::string id, CompletionToken&& token = {}) {
    return admin_call<std::string>(std::forward<CompletionToken>(token),
                                   [this, id] { return trigger_schedule_impl(id); });
  }
  /// Starts the workflows of every slot in [from, to] (at most `limit`, else nothing starts
  /// and durable::error says how many there are); a slot whose workflow exists is left alone,
  /// so a repeated backfill starts nothing twice. Completes with the number started.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto backfill_schedule(std::string id, std::chrono::sys_seconds from,
                                       std::chrono::sys_seconds to, std::size_t limit = 1000,
                                       CompletionToken&& token = {}) {
    return admin_call<std::size_t>(std::forward<CompletionToken>(token), [=, this] {
      return backfill_schedule_impl(id, from, to, limit);
    });
  }
  /// Deletes schedule `id` (the workflows it started stay); false: no such schedule.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto delete_schedule(std::string id, CompletionToken&& token = {}) {
    return admin_call<bool>(std::forward<CompletionToken>(token),
                            [this, id] { return delete_schedule_impl(id); });
  }
  /// The schedules whose id starts with `prefix` ("" for all), by id.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto list_schedules(std::string prefix = {}, CompletionToken&& token = {}) {
    return admin_call<std::vector<schedule_info>>(
        std::forward<CompletionToken>(token),
        [this, prefix] { return list_schedules_impl(prefix); });
  }

  [[nodiscard]] const std::string& executor_id() const noexcept { return s_->options.executor_id; }
  /// engine_options::app_version of this engine.
  [[nodiscard]] const std::string& app_version() const noexcept { return s_->options.app_version; }

  /// Whether shutdown() has begun (on executor(), like stats()).
  [[nodiscard]] bool shutting_down() const noexcept { return s_->stopping; }

  /// Completes when shutdown() begins, at once if it has: what a part the application serves
  /// beside the engine (serve_metrics(), say) waits on to stop with it. Cancelling the operation
  /// (Asio per-operation cancellation, asio::bind_cancellation_slot) completes it too, without an
  /// error: that is how such a part stops waiting when it ends first.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto until_shutdown(CompletionToken&& token = {}) {
    return detail::launch<void>(
        s_->ex, std::forward<CompletionToken>(token), [&] { return until_shutdown_hop(); },
        [&] { return until_shutdown_impl(); });
  }

  /// Reports a failure of a part the application runs beside the engine (serve_metrics(), its
  /// own loops) the way the engine reports those of its background parts: an event of severity
  /// warning from `component` through engine_options::on_event, counted in
  /// engine_metrics::background_failures (durable_background_failures_total) under `component`
  /// when it is one the metrics list (docs/metrics.md), else under "other". Call it on
  /// executor().
  DURABLE_DECL void report_background_failure(std::string_view component,
                                              const std::string& message);
  /// The PostgreSQL schema that holds this engine's tables (engine_options::schema), as given:
  /// quote it (it may need quoting) before putting it into SQL text.
  [[nodiscard]] const std::string& schema_name() const noexcept { return s_->options.schema; }
  [[nodiscard]] pg::pool& pool() noexcept { return s_->pool; }
  /// Number of workflows running in this process now.
  [[nodiscard]] std::size_t running() const noexcept { return s_->running.size(); }

private:
  template <class R, class... Args, class Fn>
  void add_workflow(std::string name, std::shared_ptr<Fn> fn);

  template <class Token, class... Args>
  auto launch_start(Token&& token, std::string name, std::string id, const start_options& opts,
                    const Args&... inputs) {
    const std::int64_t timeout_ms = opts.timeout.count();
    return detail::launch<workflow_handle>(
        s_->ex, std::forward<Token>(token),
        [&] {
          auto trace = check_start(name, id, opts);
          return start_encoded(std::move(name), std::move(id), detail::encode_inputs(inputs...),
                               timeout_ms, std::move(trace));
        },
        [&] {
          auto trace = check_start(name, id, opts);
          return start_encoded_impl(std::move(name), std::move(id),
                                    detail::encode_inputs(inputs...), timeout_ms, std::move(trace));
        });
  }
  template <class Token, class... Args>
  auto launch_enqueue(Token&& token, pg::transaction* tx, const enqueue_options& opts,
                      std::string name, std::string id, const Args&... inputs) {
    return detail::launch<workflow_handle>(
        s_->ex, std::forward<Token>(token),
        [&] {
          return enqueue_hop(tx, opts, std::move(name), std::move(id),
                             detail::encode_inputs(inputs...));
        },
        [&] {
          return enqueue_body(tx, opts, std::move(name), std::move(id),
                              detail::encode_inputs(inputs...));
        });
  }
  template <class Token>
  auto launch_resume(Token&& token, std::string id, bool dead_letter_only) {
    return detail::launch<bool>(
        s_->ex, std::forward<Token>(token),
        [&] { return resume_impl(std::move(id), dead_letter_only); },
        [&] { return resume_on_strand(std::move(id), dead_letter_only); });
  }
  template <class T>
  static asio::awaitable<std::optional<T>> decode_event(
      asio::awaitable<std::optional<std::string>> wait, std::string what) {
    const std::optional<std::string> text = co_await std::move(wait);
    if (!text) co_return std::nullopt;
    co_return detail::decode_read<T>(*text, what, "the value");
  }

  // Naming: X_impl / X_on_strand is an operation's body, which runs on the strand; the function
  // that returns it hopped onto the strand (for the default token) is X_hop, or for older
  // operations the one whose body is called X_on_strand.
  DURABLE_DECL asio::awaitable<bool> send_impl(std::string workflow_id, std::string topic,
                                               std::string payload, std::string idempotency_key);
  DURABLE_DECL asio::awaitable<bool> send_on_strand(std::string workflow_id, std::string topic,
                                                    std::string payload,
                                                    std::string idempotency_key);
  DURABLE_DECL pg::statement send_statement_encoded(const std::string& workflow_id,
                                                    const std::string& topic,
                                                    const std::string& payload,
                                                    const std::string& idempotency_key) const;
  DURABLE_DECL asio::awaitable<std::optional<std::string>> get_event_impl(
      std::string workflow_id, std::string key, std::chrono::milliseconds timeout);
  DURABLE_DECL asio::awaitable<std::optional<std::string>> get_event_on_strand(
      std::string workflow_id, std::string key, std::chrono::milliseconds timeout);

  DURABLE_DECL asio::awaitable<bool> recover_impl(std::string workflow_id);
  DURABLE_DECL asio::awaitable<bool> recover_impl_on_strand(std::string workflow_id);
  DURABLE_DECL asio::awaitable<std::size_t> recover_pending_hop();
  DURABLE_DECL asio::awaitable<std::size_t> recover_pending_impl();
  DURABLE_DECL asio::awaitable<int> migrate_hop();
  DURABLE_DECL asio::awaitable<int> migrate_impl();
  DURABLE_DECL asio::awaitable<std::size_t> open_hop();
  DURABLE_DECL asio::awaitable<std::size_t> open_impl();
  DURABLE_DECL asio::awaitable<void> shutdown_hop(std::chrono::milliseconds grace);
  DURABLE_DECL asio::awaitable<void> shutdown_impl(std::chrono::milliseconds grace);
  DURABLE_DECL asio::awaitable<workflow_handle> enqueue_hop(pg::transaction* tx,
                                                            const enqueue_options& opts,
                                                            std::string name, std::string id,
                                                            nlohmann::json inputs);
  DURABLE_DECL asio::awaitable<workflow_handle> enqueue_body(pg::transaction* tx,
                                                             const enqueue_options& opts,
                                                             std::string name, std::string id,
                                                             nlohmann::json inputs);
  DURABLE_DECL asio::awaitable<workflow_handle> enqueue_run_impl(pg::transaction* tx,
                                                                 bool fail_on_duplicate,
                                                                 std::string name, std::string id,
                                                                 detail::enqueue_request req);
  DURABLE_DECL detail::enqueue_request make_enqueue(const enqueue_options& opts,
                                                    const std::string& name,
                                                    const std::string& workflow_id,
                                                    const nlohmann::json& inputs) const;
  DURABLE_DECL pg::statement enqueue_statement_encoded(const enqueue_options& opts,
                                                       const std::string& name,
                                                       const std::string& workflow_id,
                                                       const nlohmann::json& inputs) const;
  DURABLE_DECL asio::awaitable<void> configure_queue_hop(const queue_options& q);
  DURABLE_DECL asio::awaitable<void> configure_queue_impl(const queue_options& q);
  /// Checks a start's arguments; its trace context (the options', else current_trace's).
  DURABLE_DECL std::optional<trace_context> check_start(const std::string& name,
                                                        const std::string& id,
                                                        const start_options& opts) const;
  /// The trace context given (checked: invalid_text), else current_trace's (one that is not
  /// valid is dropped with a warning); `call` names the caller in messages.
  DURABLE_DECL std::optional<trace_context> resolve_trace(std::string_view traceparent,
                                                          std::string_view tracestate,
                                                          const std::string& call,
                                                          const std::string& id) const;
  /// Throws when `bytes` of JSON are over engine_options::max_value_bytes.
  DURABLE_DECL void refuse_large(const std::string& what, std::size_t bytes) const;
  DURABLE_DECL asio::awaitable<workflow_handle> start_encoded_impl(
      std::string name, std::string id, nlohmann::json inputs, std::int64_t timeout_ms,
      std::optional<trace_context> trace);
  DURABLE_DECL asio::awaitable<bool> cancel_impl(std::string id);
  DURABLE_DECL asio::awaitable<bool> cancel_on_strand(std::string id);
  DURABLE_DECL asio::awaitable<bool> resume_impl(std::string id, bool dead_letter_only);
  DURABLE_DECL asio::awaitable<bool> resume_on_strand(std::string id, bool dead_letter_only);
  DURABLE_DECL asio::awaitable<workflow_handle> fork_impl(std::string id, int from_step,
                                                          std::string new_id);
  DURABLE_DECL asio::awaitable<workflow_handle> fork_on_strand(std::string id, int from_step,
                                                               std::string new_id);
  DURABLE_DECL void check_enqueue(const enqueue_options& opts, const std::string& name,
                                  const std::string& id, const nlohmann::json& inputs) const;
  DURABLE_DECL asio::awaitable<workflow_handle> start_encoded(std::string name, std::string id,
                                                              nlohmann::json inputs,
                                                              std::int64_t timeout_ms,
                                                              std::optional<trace_context> trace);

  friend const store& detail::store_of(const engine& e) noexcept;
  DURABLE_DECL asio::awaitable<std::vector<queue_depth>> queue_depths_hop();
  DURABLE_DECL asio::awaitable<std::vector<queue_depth>> queue_depths_impl();
  template <class R, class Token, class Body>
  auto admin_call(Token&& token, Body body) {
    return detail::launch<R>(
        s_->ex, std::forward<Token>(token), [&] { return detail::on_strand(s_, body()); }, body);
  }
  DURABLE_DECL asio::awaitable<void> schedule_impl(std::string id, std::string cron,
                                                   std::string time_zone, std::string workflow,
                                                   std::string queue, schedule_options opts,
                                                   nlohmann::json inputs);
  DURABLE_DECL asio::awaitable<bool> set_schedule_paused_impl(std::string id, bool paused);
  DURABLE_DECL asio::awaitable<std::string> trigger_schedule_impl(std::string id);
  DURABLE_DECL asio::awaitable<std::size_t> backfill_schedule_impl(std::string id,
                                                                   std::chrono::sys_seconds from,
                                                                   std::chrono::sys_seconds to,
                                                                   std::size_t limit);
  DURABLE_DECL asio::awaitable<bool> delete_schedule_impl(std::string id);
  DURABLE_DECL asio::awaitable<void> set_queue_paused_impl(std::string name, bool paused);
  DURABLE_DECL asio::awaitable<std::vector<schedule_info>> list_schedules_impl(std::string prefix);
  DURABLE_DECL asio::awaitable<void> until_shutdown_hop();
  DURABLE_DECL asio::awaitable<void> until_shutdown_impl();
  std::shared_ptr<detail::engine_state> s_;
};

inline const store& detail::store_of(const engine& e) noexcept { return e.s_->st; }

}  // namespace durable

#include "durable/impl/engine.hpp"
#if defined(DURABLE_HEADER_ONLY)
#include "durable/impl/engine.ipp"
#endif
