// The engine: registry of workflow functions, start and handles, running and recovery.
#pragma once

#include <unistd.h>

#include <asio/any_io_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
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
#include "durable/detail/run_state.hpp"
#include "durable/error.hpp"
#include "durable/pg/pool.hpp"
#include "durable/store.hpp"

namespace durable {

struct engine_options {
  /// libpq conninfo string or URL; empty means the PG* environment variables.
  std::string conninfo{};
  /// Schema holding every table (created by migrate()).
  std::string schema = "durable";
  /// Identity under which this engine owns workflows. open() resumes the unfinished
  /// workflows of this id, so keep it stable across restarts of the same process slot.
  /// Default: $DURABLE_EXECUTOR_ID, else the host name.
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
  /// Pause before a workflow whose database I/O failed is claimed and replayed again.
  std::chrono::milliseconds io_retry_delay{500};
  /// How often open()'s background loop refreshes this executor's lease and looks for
  /// workflows of executors whose lease ran out.
  std::chrono::milliseconds heartbeat_interval{1000};
  /// An executor that has not heartbeaten for this long is presumed dead: live executors
  /// take its unfinished workflows over (bumping their epoch, which fences the old owner).
  std::chrono::milliseconds lease_timeout{5000};
  /// How often the dispatcher looks for queued work when no notification arrives.
  /// Notifications (LISTEN/NOTIFY) make it react at once; polling keeps it correct where
  /// notifications are lost (connection poolers, some Postgres-compatible databases).
  std::chrono::milliseconds poll_interval{500};
  /// At most this many queued workflows claimed per queue in one dispatch round (within the
  /// queue's limits). Larger rounds start a burst sooner; smaller ones leave more of it to
  /// other executors. worker_concurrency bounds what one executor holds in any case.
  std::size_t dispatch_batch = 64;
  /// Listen for enqueue notifications on a dedicated connection.
  bool listen = true;
  /// Group commit: journal rows, starts and finishes of concurrent workflows share round
  /// trips and commits (one WAL flush for many rows). At most this many rows per batch...
  std::size_t group_commit_max_batch = 512;
  /// ...and at most this many batches in flight at once (each on its own pooled
  /// connection). A row submitted while fewer are in flight goes out at once, so a single
  /// workflow's steps see no added latency.
  std::size_t group_commit_in_flight = 2;
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

struct enqueue_options {
  std::string_view queue = "default";
  int priority = 0;  ///< higher starts first
  std::optional<std::string_view> dedup_key{};
  std::chrono::milliseconds delay{0};  ///< not started before this much time has passed
  on_duplicate duplicate = on_duplicate::return_existing;
};
static_assert(std::is_trivially_copyable_v<queue_options> &&
              std::is_trivially_copyable_v<enqueue_options>);

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
};

/// What status() reports; see docs/concepts.md for the lifecycle.
struct workflow_status {
  std::string status;  // pending, running, sleeping, succeeded, failed, parked, cancelled
  std::optional<std::string> reason;
  std::int64_t epoch = 0;
  int attempts = 0;
  std::optional<std::string> executor_id;
};

class engine;

namespace detail {

/// A workflow's arguments as journaled: a JSON array, one element per parameter.
template <class... Args>
nlohmann::json encode_inputs(const Args&... args) {
  nlohmann::json inputs = nlohmann::json::array();
  (inputs.push_back(durable::encode<Args>(args)), ...);
  return inputs;
}

struct registered_workflow {
  std::string name;
  std::string signature;
  std::function<void(const nlohmann::json&)> check_inputs;

  /// Throws a clear error if `inputs` do not decode as this workflow's parameters.
  void check_arguments(const std::string& op, const std::string& id,
                       const nlohmann::json& inputs) const {
    try {
      check_inputs(inputs);
    } catch (const codec_error& e) {
      throw error(op + "('" + name + "', '" + id + "'): workflow '" + name + "' takes " +
                  signature + " but was given arguments that do not convert: " + e.what());
    }
  }
  std::function<asio::awaitable<std::optional<std::string>>(context&, const nlohmann::json&)>
      invoke;
};

struct engine_state {
  engine_state(asio::any_io_executor e, engine_options o)
      : ex(e),
        options(std::move(o)),
        st(options.schema),
        pool(e, options.conninfo, options.pool_size, st.catalog(), options.connection),
        committer(e, pool, {options.group_commit_max_batch, options.group_commit_in_flight}, &st) {}

  asio::any_io_executor ex;
  engine_options options;
  store st;
  pg::pool pool;
  group_committer committer;
  std::map<std::string, registered_workflow, std::less<>> registry;
  engine_counters counters;
  bool stopping = false;
  std::shared_ptr<asio::steady_timer> maintenance;
  std::shared_ptr<asio::steady_timer> dispatch_timer;
  std::vector<std::string> queues = options.queues;
  std::set<std::string, std::less<>> retrying;  // ids to claim again after an I/O error
  std::string names = "{}";                     // the registered workflow names as a text[] literal
  bool wake_pending = false;
  // A wake-up that arrives while the dispatcher is busy is kept, not lost.
  void wake_dispatcher() {
    wake_pending = true;
    if (dispatch_timer) dispatch_timer->cancel();
  }
  // Local runs by workflow id; waiters in result() sleep on `done` until the run ends.
  struct local_run {
    std::shared_ptr<asio::steady_timer> done;
  };
  std::map<std::string, local_run, std::less<>> running;
};

template <class T>
struct workflow_traits;
template <class R, class... Args>
struct workflow_traits<asio::awaitable<R> (*)(context&, Args...)> {
  using result = R;
  using inputs = std::tuple<std::decay_t<Args>...>;
};

}  // namespace detail

/// Refers to one workflow by id; cheap to copy. Works for workflows running anywhere: the
/// outcome is read from the database.
class workflow_handle {
public:
  workflow_handle(std::shared_ptr<detail::engine_state> s, std::string id)
      : s_(std::move(s)), id_(std::move(id)) {}

  [[nodiscard]] const std::string& id() const noexcept { return id_; }

  [[nodiscard]] asio::awaitable<workflow_status> status() const;

  /// Waits for the workflow to end. Returns its output; throws workflow_failed (with the
  /// type and message it threw), workflow_parked (with the reason), or
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
  asio::awaitable<std::string> wait_output() const;
  std::shared_ptr<detail::engine_state> s_;
  std::string id_;
};

class engine {
public:
  /// The engine runs its workflows on `ex`; use it from one thread (an io_context run by one
  /// thread, or a strand).
  engine(asio::any_io_executor ex, engine_options options = {});
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// Registers a workflow function `asio::awaitable<R>(durable::context&, Args...)` under a
  /// stable name; the name is what the database records, so renaming it strands workflows.
  template <class R, class... Args>
  void register_workflow(std::string name, asio::awaitable<R> (*fn)(context&, Args...));

  /// Migrates (unless disabled), registers this executor, resumes the unfinished workflows
  /// it owned, and starts the background loop that heartbeats and takes over the workflows
  /// of executors whose lease ran out. Returns the number resumed.
  [[nodiscard]] asio::awaitable<std::size_t> open();

  /// open()'s background work (heartbeats, takeover, queue dispatch, LISTEN) runs until
  /// shutdown(); until then the io_context does not run out of work.
  ///
  /// Graceful shutdown: accepts no new work, lets running steps finish (for up to `grace`),
  /// stops each workflow at its next step boundary, and ends this executor's lease so that
  /// other executors resume its workflows at once instead of after the lease timeout.
  [[nodiscard]] asio::awaitable<void> shutdown(
      std::chrono::milliseconds grace = std::chrono::seconds(10));

  /// Runs the schema migrations; see store::migrate.
  [[nodiscard]] asio::awaitable<int> migrate();

  /// Starts workflow `name` with id `workflow_id` (its idempotency key). If that id exists,
  /// returns a handle to it without running anything; a different name or different
  /// inputs for the same id throws workflow_conflict.
  template <class... Args>
  [[nodiscard]] asio::awaitable<workflow_handle> start(std::string name, std::string workflow_id,
                                                       const Args&... args) {
    return start_encoded(std::move(name), std::move(workflow_id), detail::encode_inputs(args...));
  }

  /// Queues the workflow for whichever executor serving `opts.queue` has room for it, within
  /// the queue's limits. The id is the idempotency key as for start(); with a deduplication
  /// key, an unfinished workflow holding it is returned (or on_duplicate::fail throws
  /// duplicate_workflow).
  template <class... Args>
  [[nodiscard]] asio::awaitable<workflow_handle> enqueue(enqueue_options opts, std::string name,
                                                         std::string workflow_id,
                                                         const Args&... args) {
    auto st = make_enqueue(opts, name, workflow_id, args...);
    return enqueue_run(nullptr, opts.duplicate == on_duplicate::fail, std::move(name),
                       std::move(workflow_id), std::move(st));
  }

  /// The same inside the caller's transaction: if it rolls back, the workflow never existed.
  template <class... Args>
  [[nodiscard]] asio::awaitable<workflow_handle> enqueue(pg::transaction& tx, enqueue_options opts,
                                                         std::string name, std::string workflow_id,
                                                         const Args&... args) {
    auto st = make_enqueue(opts, name, workflow_id, args...);
    return enqueue_run(&tx, opts.duplicate == on_duplicate::fail, std::move(name),
                       std::move(workflow_id), std::move(st));
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
    return s_->st.unprepared(make_enqueue(opts, name, workflow_id, args...));
  }

  template <class... Args>
  [[nodiscard]] pg::statement make_enqueue(const enqueue_options& opts, const std::string& name,
                                           const std::string& workflow_id,
                                           const Args&... args) const {
    const nlohmann::json inputs = detail::encode_inputs(args...);
    check_enqueue(opts, name, workflow_id, inputs);
    return s_->st.workflow_enqueue(workflow_id, name, inputs.dump(), opts.queue, opts.priority,
                                   opts.dedup_key, std::int64_t(opts.delay.count()),
                                   s_->options.app_version, s_->st.channel());
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
  [[nodiscard]] asio::awaitable<std::size_t> recover_pending();

  [[nodiscard]] workflow_handle handle(std::string workflow_id) const {
    return {s_, std::move(workflow_id)};
  }

  [[nodiscard]] engine_stats stats() const;
  [[nodiscard]] const std::string& executor_id() const noexcept { return s_->options.executor_id; }
  [[nodiscard]] const store& schema() const noexcept { return s_->st; }
  [[nodiscard]] pg::pool& pool() noexcept { return s_->pool; }
  /// Number of workflows running in this process now.
  [[nodiscard]] std::size_t running() const noexcept { return s_->running.size(); }

private:
  asio::awaitable<bool> recover_impl(std::string workflow_id);
  void check_enqueue(const enqueue_options& opts, const std::string& name, const std::string& id,
                     const nlohmann::json& inputs) const;
  pg::statement make_queue_upsert(const queue_options& q) const;
  asio::awaitable<void> run_statement(pg::statement st);
  asio::awaitable<workflow_handle> enqueue_run(pg::transaction* tx, bool fail_on_duplicate,
                                               std::string name, std::string id, pg::statement st);
  static asio::awaitable<void> dispatch(std::shared_ptr<detail::engine_state> s);
  static asio::awaitable<void> listen_loop(std::shared_ptr<detail::engine_state> s);
  asio::awaitable<workflow_handle> start_encoded(std::string name, std::string id,
                                                 nlohmann::json inputs);
  static void launch(std::shared_ptr<detail::engine_state> s,
                     std::shared_ptr<detail::run_state> run, nlohmann::json inputs);
  static asio::awaitable<void> execute(std::shared_ptr<detail::engine_state> s,
                                       std::shared_ptr<detail::run_state> run,
                                       nlohmann::json inputs);
  static asio::awaitable<void> maintain(std::shared_ptr<detail::engine_state> s);
  static asio::awaitable<bool> claim_and_run(std::shared_ptr<detail::engine_state> s,
                                             std::string id);

  std::shared_ptr<detail::engine_state> s_;
};

}  // namespace durable

#include "durable/impl/engine.ipp"
