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
#include <string>
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
  std::string app_version{};
  std::size_t pool_size = 8;
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
};

/// Counters that show what work cost; the pool's are statements and round trips sent.
struct engine_stats {
  std::uint64_t round_trips = 0;
  std::uint64_t statements = 0;
  std::uint64_t journal_loads = 0;
  std::uint64_t steps_replayed = 0;
  std::uint64_t steps_executed = 0;
  std::uint64_t ownership_lost = 0;
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

struct registered_workflow {
  std::string name;
  std::string signature;
  std::function<void(const nlohmann::json&)> check_inputs;
  std::function<asio::awaitable<std::optional<std::string>>(context&, const nlohmann::json&)>
      invoke;
};

struct engine_state {
  engine_state(asio::any_io_executor e, engine_options o)
      : ex(e),
        options(std::move(o)),
        st(options.schema),
        pool(e, options.conninfo, options.pool_size, st.catalog()) {}

  asio::any_io_executor ex;
  engine_options options;
  store st;
  pg::pool pool;
  std::map<std::string, registered_workflow, std::less<>> registry;
  engine_counters counters;
  bool stopping = false;
  std::shared_ptr<asio::steady_timer> maintenance;
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
    nlohmann::json inputs = nlohmann::json::array();
    (inputs.push_back(durable::encode<Args>(args)), ...);
    return start_encoded(std::move(name), std::move(workflow_id), std::move(inputs));
  }

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
