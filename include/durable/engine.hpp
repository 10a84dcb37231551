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
#include "durable/detail/config.hpp"
#include "durable/detail/engine_state.hpp"
#include "durable/detail/run_state.hpp"
#include "durable/error.hpp"
#include "durable/options.hpp"
#include "durable/pg/pool.hpp"
#include "durable/store.hpp"

namespace durable {

class engine;

namespace detail {

/// How durable's own free functions (prometheus_text, serve_metrics) reach an engine's state.
struct engine_access {
  static const std::shared_ptr<engine_state>& state(const engine& e) noexcept;
};

/// The signature of a workflow callable: asio::awaitable<R>(context&, Args...).
template <class Sig>
struct workflow_signature {
  static constexpr bool valid = false;
};
template <class R, class... Args>
struct workflow_signature<asio::awaitable<R>(context&, Args...)> {
  static constexpr bool valid = true;
  using result = R;
  using args = std::tuple<Args...>;
};

/// The call signature of a function, function pointer, or object with one operator().
template <class F, class = void>
struct call_signature {
  using type = void;
};
template <class R, class... A>
struct call_signature<R (*)(A...), void> {
  using type = R(A...);
};
template <class R, class... A>
struct call_signature<R (*)(A...) noexcept, void> {
  using type = R(A...);
};
template <class M>
struct member_call_signature {
  using type = void;
};
#define DURABLE_MEMBER_SIGNATURE(QUALIFIERS)                \
  template <class R, class C, class... A>                   \
  struct member_call_signature<R (C::*)(A...) QUALIFIERS> { \
    using type = R(A...);                                   \
  };
DURABLE_MEMBER_SIGNATURE()
DURABLE_MEMBER_SIGNATURE(const)
DURABLE_MEMBER_SIGNATURE(noexcept)
DURABLE_MEMBER_SIGNATURE(const noexcept)
DURABLE_MEMBER_SIGNATURE(&)
DURABLE_MEMBER_SIGNATURE(const&)
#undef DURABLE_MEMBER_SIGNATURE
template <class F>
struct call_signature<F, std::void_t<decltype(&F::operator())>>
    : member_call_signature<decltype(&F::operator())> {};

template <class F>
using workflow_signature_of = workflow_signature<typename call_signature<std::decay_t<F>>::type>;

}  // namespace detail

/// Refers to one workflow by id; cheap to copy. Works for workflows running anywhere: the
/// outcome is read from the database.
class workflow_handle {
public:
  /// A handle that refers to no workflow (assign one from start(), enqueue() or handle()).
  workflow_handle() = default;
  workflow_handle(std::shared_ptr<detail::engine_state> s, std::string id)
      : s_(std::move(s)), id_(std::move(id)) {}

  [[nodiscard]] const std::string& id() const noexcept { return id_; }

  [[nodiscard]] DURABLE_DECL asio::awaitable<workflow_status> status() const;

  /// Waits for the workflow to end. Returns its output; throws workflow_failed (with the
  /// type and message it threw), workflow_dead_letter (a step failed for good and the
  /// workflow did not handle it), workflow_cancelled, workflow_parked (with the reason), or
  /// nondeterminism_error.
  template <class R = void>
  [[nodiscard]] asio::awaitable<R> result() const {
    std::string output = co_await wait_output();
    if constexpr (std::is_void_v<R>) {
      co_return;
    } else {
      try {
        co_return durable::decode<R>(nlohmann::json::parse(output));
      } catch (const std::exception& e) {
        throw codec_error(std::string(detail::type_name<R>()),
                          "workflow '" + id_ + "': its output does not decode as " +
                              std::string(detail::type_name<R>()) + ": " + e.what());
      }
    }
  }

private:
  DURABLE_DECL asio::awaitable<std::string> wait_output() const;
  DURABLE_DECL asio::awaitable<std::string> wait_output_impl() const;
  DURABLE_DECL asio::awaitable<workflow_status> status_impl() const;
  std::shared_ptr<detail::engine_state> s_;
  std::string id_;
};

class engine {
public:
  /// The engine runs its workflows and its background parts on a strand of `ex` (so an
  /// io_context run by several threads is fine). Its awaitable functions may be awaited from
  /// any executor; the synchronous ones (register_workflow, running(), stats(), pool()) and
  /// the pool's connections belong to executor() (or to a single-threaded io_context).
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
  /// of executors whose lease ran out. Returns the number resumed.
  [[nodiscard]] DURABLE_DECL asio::awaitable<std::size_t> open();

  /// open()'s background work (heartbeats, takeover, queue dispatch, LISTEN) runs until
  /// shutdown(); until then the io_context does not run out of work.
  ///
  /// Graceful shutdown: accepts no new work, lets running steps finish (for up to `grace`),
  /// stops each workflow at its next step boundary, and ends this executor's lease so that
  /// other executors resume its workflows at once instead of after the lease timeout.
  [[nodiscard]] DURABLE_DECL asio::awaitable<void> shutdown(
      std::chrono::milliseconds grace = std::chrono::seconds(10));

  /// Runs the schema migrations; see store::migrate.
  [[nodiscard]] DURABLE_DECL asio::awaitable<int> migrate();

  /// Starts workflow `name` with id `workflow_id` (its idempotency key). If that id exists,
  /// returns a handle to it without running anything; a different name or different
  /// inputs for the same id throws workflow_conflict.
  template <class... Args>
  [[nodiscard]] asio::awaitable<workflow_handle> start(std::string name, std::string workflow_id,
                                                       const Args&... args) {
    return start_encoded(std::move(name), std::move(workflow_id), detail::encode_inputs(args...),
                         0);
  }

  /// start() with options: a deadline (`opts.timeout`) stored with the workflow.
  template <class... Args>
  [[nodiscard]] asio::awaitable<workflow_handle> start(start_options opts, std::string name,
                                                       std::string workflow_id,
                                                       const Args&... args) {
    if (opts.timeout.count() < 0)
      throw error("start('" + name + "', '" + workflow_id + "'): the timeout must not be negative");
    return start_encoded(std::move(name), std::move(workflow_id), detail::encode_inputs(args...),
                         std::int64_t(opts.timeout.count()));
  }

  /// Cancels workflow `workflow_id` from any process: it becomes 'cancelled' at once (its
  /// epoch moves on, so a run in progress can journal nothing more), and the process that
  /// runs it, told by a notification (or at its next heartbeat), stops it: the step running
  /// there receives Asio cancellation. Works on pending, running, sleeping, parked and
  /// dead-lettered workflows. Returns false if it is finished or unknown.
  [[nodiscard]] asio::awaitable<bool> cancel(std::string workflow_id) {
    return cancel_impl(std::move(workflow_id));
  }

  /// Continues a cancelled, dead-lettered or parked workflow from its journal: any executor
  /// claims it at once and replays it (its deadline is cleared; a dead-lettered one's failed
  /// step runs again). Returns false if it has another status or is unknown.
  [[nodiscard]] asio::awaitable<bool> resume(std::string workflow_id) {
    return resume_impl(std::move(workflow_id), false);
  }

  /// Retries a dead-lettered workflow once its cause is fixed: the step that failed for good
  /// runs again with a fresh count of attempts; the failed attempts stay in step_attempts.
  /// Returns false if it is not dead-lettered.
  [[nodiscard]] asio::awaitable<bool> retry(std::string workflow_id) {
    return resume_impl(std::move(workflow_id), true);
  }

  /// Creates a new workflow (`new_id`, or "<id>:fork:<random>" when empty) with the same
  /// name, inputs and generation (ctx.continue_as_new), whose journal holds copies of
  /// `workflow_id`'s rows before step `from_step`, and runs the rest with this code ("re-run from
  /// step 3 after the fix"). The original is not touched. Returns the new workflow's handle.
  [[nodiscard]] asio::awaitable<workflow_handle> fork(std::string workflow_id, int from_step,
                                                      std::string new_id = {}) {
    return fork_impl(std::move(workflow_id), from_step, std::move(new_id));
  }

  /// Queues the workflow for whichever executor serving `opts.queue` has room for it, within
  /// the queue's limits. The id is the idempotency key as for start(); with a deduplication
  /// key, an unfinished workflow holding it is returned (or on_duplicate::fail throws
  /// duplicate_workflow).
  template <class... Args>
  [[nodiscard]] asio::awaitable<workflow_handle> enqueue(enqueue_options opts, std::string name,
                                                         std::string workflow_id,
                                                         const Args&... args) {
    auto req = make_enqueue(opts, name, workflow_id, args...);
    return enqueue_run(nullptr, opts.duplicate == on_duplicate::fail, std::move(name),
                       std::move(workflow_id), std::move(req));
  }

  /// The same inside the caller's transaction: if it rolls back, the workflow never existed.
  template <class... Args>
  [[nodiscard]] asio::awaitable<workflow_handle> enqueue(pg::transaction& tx, enqueue_options opts,
                                                         std::string name, std::string workflow_id,
                                                         const Args&... args) {
    auto req = make_enqueue(opts, name, workflow_id, args...);
    return enqueue_run(&tx, opts.duplicate == on_duplicate::fail, std::move(name),
                       std::move(workflow_id), std::move(req));
  }

  /// start() inside the caller's transaction: queued on the "default" queue, which every
  /// engine serves, and run once the transaction commits.
  template <class... Args>
  [[nodiscard]] asio::awaitable<workflow_handle> start(pg::transaction& tx, std::string name,
                                                       std::string workflow_id,
                                                       const Args&... args) {
    return enqueue(tx, enqueue_options{}, std::move(name), std::move(workflow_id), args...);
  }

  /// The enqueue as a statement, for a transaction the application runs on its own PGconn*
  /// (execute it with pg::exec_blocking or your own PQexecParams; read column 0 of its one
  /// row: true if this call created the workflow).
  template <class... Args>
  [[nodiscard]] pg::statement enqueue_statement(const enqueue_options& opts,
                                                const std::string& name,
                                                const std::string& workflow_id,
                                                const Args&... args) const {
    return s_->st.unprepared(make_enqueue(opts, name, workflow_id, args...).q.st);
  }

  /// An enqueue's statement, with what its outcome is checked against.
  struct enqueue_request {
    query<store::enqueue_outcome> q;
    std::string inputs;  ///< the encoded inputs, as bound
    std::string queue;
    std::string dedup_key;  ///< empty when none
  };

  template <class... Args>
  [[nodiscard]] enqueue_request make_enqueue(const enqueue_options& opts, const std::string& name,
                                             const std::string& workflow_id,
                                             const Args&... args) const {
    const nlohmann::json inputs = detail::encode_inputs(args...);
    check_enqueue(opts, name, workflow_id, inputs);
    enqueue_request req;
    req.inputs = inputs.dump();
    req.queue = std::string(opts.queue);
    if (opts.dedup_key) req.dedup_key = std::string(*opts.dedup_key);
    req.q = s_->st.workflow_enqueue(workflow_id, name, req.inputs, opts.queue, opts.priority,
                                    opts.dedup_key, std::int64_t(opts.delay.count()),
                                    s_->options.app_version, s_->st.channel(),
                                    std::int64_t(opts.timeout.count()));
    return req;
  }

  /// Sends `value` to workflow `workflow_id` under `topic`, for its ctx.recv. With an
  /// idempotency key, a send repeated with the same key (to the same workflow) sends nothing
  /// and returns false. A recipient waiting in its run is told at once (notification); one
  /// unloaded to wait is woken in the same transaction. Throws durable::error if no workflow
  /// has that id.
  template <class T>
  [[nodiscard]] asio::awaitable<bool> send(std::string workflow_id, std::string topic,
                                           const T& value, std::string idempotency_key = {}) {
    std::string payload = durable::encode<T>(value).dump();
    return send_impl(std::move(workflow_id), std::move(topic), std::move(payload),
                     std::move(idempotency_key));
  }

  /// The send as a statement, for a transaction the application runs itself (its own
  /// PGconn*, with pg::exec_blocking or PQexecParams): the message exists if and only if that
  /// transaction commits. Its one row: (sent now, the recipient exists); a recipient that
  /// does not exist gets no message.
  template <class T>
  [[nodiscard]] pg::statement send_statement(const std::string& workflow_id,
                                             const std::string& topic, const T& value,
                                             const std::string& idempotency_key = {}) const {
    std::optional<std::string> key;
    if (!idempotency_key.empty()) key = idempotency_key;
    const std::string payload = durable::encode<T>(value).dump();
    return s_->st.unprepared(s_->st.message_send(workflow_id, topic, payload, key).st);
  }

  /// The value workflow `workflow_id` published under `key` (ctx.set_event), waiting up to
  /// `timeout` for it to be published; nullopt if it was not by then.
  template <class T>
  [[nodiscard]] asio::awaitable<std::optional<T>> get_event(
      std::string workflow_id, std::string key, std::chrono::milliseconds timeout = forever) {
    return get_event_typed<T>(std::move(workflow_id), std::move(key), timeout);
  }

  /// Sets a queue's limits (stored in the database, shared by all executors).
  [[nodiscard]] asio::awaitable<void> configure_queue(queue_options q) {
    return run_statement(make_queue_upsert(q));
  }

  /// This executor dispatches `queue` too (see engine_options::queues). Call before open().
  void serve_queue(std::string queue) { s_->queues.push_back(std::move(queue)); }

  /// Claims workflow `workflow_id` for this executor (fencing out a previous owner) and
  /// resumes it by replay. Returns false if it is finished, parked or unknown here.
  [[nodiscard]] asio::awaitable<bool> recover(std::string workflow_id) {
    return recover_impl(std::move(workflow_id));
  }

  /// Resumes every unfinished workflow this executor owns. Returns how many.
  [[nodiscard]] DURABLE_DECL asio::awaitable<std::size_t> recover_pending();

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
  [[nodiscard]] DURABLE_DECL asio::awaitable<std::vector<queue_depth>> queue_depths();
  [[nodiscard]] const std::string& executor_id() const noexcept { return s_->options.executor_id; }
  [[nodiscard]] const store& schema() const noexcept { return s_->st; }
  [[nodiscard]] pg::pool& pool() noexcept { return s_->pool; }
  /// Number of workflows running in this process now.
  [[nodiscard]] std::size_t running() const noexcept { return s_->running.size(); }

private:
  template <class R, class... Args, class Fn>
  void add_workflow(std::string name, std::shared_ptr<Fn> fn);
  template <class T>
  asio::awaitable<std::optional<T>> get_event_typed(std::string workflow_id, std::string key,
                                                    std::chrono::milliseconds timeout) {
    const std::optional<std::string> text = co_await get_event_impl(workflow_id, key, timeout);
    if (!text) co_return std::nullopt;
    try {
      co_return durable::decode<T>(nlohmann::json::parse(*text));
    } catch (const std::exception& e) {
      throw codec_error(std::string(detail::type_name<T>()),
                        "get_event('" + workflow_id + "', '" + key + "'): the value " + *text +
                            " does not decode as " + std::string(detail::type_name<T>()) + ": " +
                            e.what());
    }
  }
  DURABLE_DECL asio::awaitable<bool> send_impl(std::string workflow_id, std::string topic,
                                               std::string payload, std::string idempotency_key);
  DURABLE_DECL asio::awaitable<bool> send_on_strand(std::string workflow_id, std::string topic,
                                                    std::string payload,
                                                    std::string idempotency_key);
  DURABLE_DECL asio::awaitable<std::optional<std::string>> get_event_impl(
      std::string workflow_id, std::string key, std::chrono::milliseconds timeout);
  DURABLE_DECL asio::awaitable<std::optional<std::string>> get_event_on_strand(
      std::string workflow_id, std::string key, std::chrono::milliseconds timeout);

  DURABLE_DECL asio::awaitable<bool> recover_impl(std::string workflow_id);
  DURABLE_DECL asio::awaitable<bool> recover_impl_on_strand(std::string workflow_id);
  DURABLE_DECL asio::awaitable<std::size_t> recover_pending_impl();
  DURABLE_DECL asio::awaitable<int> migrate_impl();
  DURABLE_DECL asio::awaitable<std::size_t> open_impl();
  DURABLE_DECL asio::awaitable<void> shutdown_impl(std::chrono::milliseconds grace);
  DURABLE_DECL asio::awaitable<workflow_handle> enqueue_run_impl(pg::transaction* tx,
                                                                 bool fail_on_duplicate,
                                                                 std::string name, std::string id,
                                                                 enqueue_request req);
  DURABLE_DECL asio::awaitable<void> run_statement_impl(pg::statement st);
  DURABLE_DECL asio::awaitable<workflow_handle> start_encoded_impl(std::string name, std::string id,
                                                                   nlohmann::json inputs,
                                                                   std::int64_t timeout_ms);
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
  DURABLE_DECL query<void> make_queue_upsert(const queue_options& q) const;
  DURABLE_DECL asio::awaitable<void> run_statement(query<void> q);
  DURABLE_DECL asio::awaitable<workflow_handle> enqueue_run(pg::transaction* tx,
                                                            bool fail_on_duplicate,
                                                            std::string name, std::string id,
                                                            enqueue_request req);
  DURABLE_DECL asio::awaitable<workflow_handle> start_encoded(std::string name, std::string id,
                                                              nlohmann::json inputs,
                                                              std::int64_t timeout_ms);

  friend struct detail::engine_access;
  DURABLE_DECL asio::awaitable<std::vector<queue_depth>> queue_depths_impl();
  std::shared_ptr<detail::engine_state> s_;
};

inline const std::shared_ptr<detail::engine_state>& detail::engine_access::state(
    const engine& e) noexcept {
  return e.s_;
}

}  // namespace durable

#include "durable/impl/engine.hpp"
#if defined(DURABLE_HEADER_ONLY)
#include "durable/impl/engine.ipp"
#endif
