// The engine's shared state: options, store, pool, group committer, registry, the runs of
// this process, and the event hook. Every part of the engine (runner, dispatcher, lease
// keeper, listener, maintenance) reads and writes it on the engine's executor.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "durable/context.hpp"
#include "durable/detail/group_commit.hpp"
#include "durable/detail/run_state.hpp"
#include "durable/detail/runtime/engine_journal.hpp"
#include "durable/error.hpp"
#include "durable/events.hpp"
#include "durable/options.hpp"
#include "durable/pg/pool.hpp"
#include "durable/store.hpp"

namespace durable::detail {

/// A registered workflow: its name, its signature for messages, an argument check, and the
/// call that decodes the journaled inputs and runs it.
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

/// A run of a workflow in this process.
struct local_run {
  std::shared_ptr<asio::steady_timer> done;           // waiters in result() sleep on it
  std::shared_ptr<asio::cancellation_signal> cancel;  // cancel(), the deadline, shutdown
  std::shared_ptr<run_state> run;
  std::shared_ptr<asio::steady_timer> deadline;  // fires at the workflow's deadline
};

struct engine_state {
  engine_state(asio::any_io_executor e, engine_options o, std::string instance_token)
      : ex(e),
        options(std::move(o)),
        instance(std::move(instance_token)),
        st(options.schema),
        pool(e, options.conninfo, options.pool_size, st.catalog(), options.connection),
        committer(e, pool, {options.group_commit_max_batch, options.group_commit_in_flight}, &st) {
    counters.set_hook(options.on_metric ? &options.on_metric : nullptr);
    committer.set_metrics(&counters);
  }

  asio::any_io_executor ex;
  engine_options options;
  std::string instance;  // this engine's token in executors.instance
  store st;
  pg::pool pool;
  group_committer committer;
  std::map<std::string, registered_workflow, std::less<>> registry;
  engine_counters counters;
  std::string names = "{}";     // the registered workflow names as a text[] literal
  std::string versions = "{}";  // options.run_versions as a text[] literal

  // ---- lifecycle
  bool opened = false;
  bool stopping = false;
  bool lease_expired = false;  // the lease keeper could not renew the lease in time
  bool id_taken = false;       // another process registered under this executor id

  // The journal the runs reach PostgreSQL through (detail/runtime/engine_journal.hpp).
  engine_journal journal{pool, committer, st, stopping, lease_expired};

  // ---- background parts (started by open(), each watched by the supervisor)
  std::shared_ptr<asio::steady_timer> maintenance;
  std::shared_ptr<asio::steady_timer> dispatch_timer;
  std::vector<std::string> queues = options.queues;
  std::set<std::shared_ptr<asio::cancellation_signal>> tasks;  // running background parts
  std::set<std::shared_ptr<asio::steady_timer>> sleepers;      // pauses shutdown cuts short
  bool wake_pending = false;
  std::multiset<double> local_wakes;               // due times (Unix s) of workflows unloaded here
  std::shared_ptr<asio::steady_timer> wake_timer;  // fires at the earliest of them
  bool wake_timers = false;  // a sleeping workflow may be due: the dispatcher looks
  void wake_due() {
    wake_timers = true;
    wake_dispatcher();
  }
  // A wake-up that arrives while the dispatcher is busy is kept, not lost.
  void wake_dispatcher() {
    wake_pending = true;
    if (dispatch_timer) dispatch_timer->cancel();
  }

  // ---- runs of this process, by workflow id
  std::map<std::string, local_run, std::less<>> running;
  std::set<std::string, std::less<>> retrying;  // ids to claim again after an I/O error
  waiter_registry waiters;                      // runs and get_event calls that wait here

  /// The workflows this process runs, or waits to claim again.
  [[nodiscard]] std::vector<std::string> busy_ids() const {
    std::vector<std::string> ids;
    ids.reserve(running.size() + retrying.size());
    for (const auto& [id, run] : running) ids.push_back(id);
    ids.insert(ids.end(), retrying.begin(), retrying.end());
    return ids;
  }

  /// Whether this process runs the workflow now, or waits to claim it again.
  [[nodiscard]] bool busy(std::string_view id) const {
    return running.contains(id) || retrying.contains(id);
  }
  /// Whether a workflow this executor owns should be claimed here: registered, not busy.
  [[nodiscard]] bool claimable_here(std::string_view id, std::string_view name) const {
    return registry.contains(name) && !busy(id);
  }

  /// Stops the run of `id` in this process, if there is one: it stops at its next step, and
  /// a step running now receives Asio cancellation (terminal). `elsewhere`: cancel() wrote
  /// the status already (and fenced the run out); otherwise the run writes 'cancelled'.
  /// Only a run under an older epoch than `epoch` (the one cancel() gave the workflow) is
  /// stopped: a run claimed after a later resume() is not.
  bool cancel_local(std::string_view id, const std::string& reason, bool elsewhere,
                    std::int64_t epoch = INT64_MAX) {
    const auto it = running.find(id);
    if (it == running.end() || it->second.run->outcome.is(verdict::kind::cancelled) ||
        it->second.run->finishing || it->second.run->epoch >= epoch)
      return false;
    it->second.run->outcome.note(verdict::cancelled(reason, elsewhere));
    it->second.cancel->emit(asio::cancellation_type::terminal);
    return true;
  }

  /// Shutdown: every run of this process stops now. The verdict (released: another executor
  /// resumes the workflow) is noted before the cancellation reaches the run, so that whatever
  /// the cancellation raises inside it (a join's or a timer's operation_aborted, a step's
  /// error) is never taken for the workflow's own failure.
  void release_runs(const std::string& why) {
    for (const auto& [id, run] : running) {
      run.run->outcome.note(verdict::released(why));
      run.cancel->emit(asio::cancellation_type::terminal);
    }
  }

  [[nodiscard]] std::size_t room() const noexcept {
    const std::size_t busy = running.size() + retrying.size();
    return busy >= options.max_running ? 0 : options.max_running - busy;
  }

  // ---- events
  std::uint64_t events_reported = 0;
  void report(severity level, std::string_view component, std::string_view workflow_id,
              const std::string& message) noexcept {
    if (level < options.min_severity) return;
    ++events_reported;
    const std::string text = valid_utf8(message);
    const event e{level, component, workflow_id, text};
    try {
      if (options.on_event) {
        options.on_event(e);
        return;
      }
    } catch (const std::exception& x) {
      std::fprintf(stderr, "[durable] the event hook threw: %s\n", x.what());
    } catch (...) {
      std::fprintf(stderr, "[durable] the event hook threw\n");
    }
    std::string id = workflow_id.empty() ? std::string() : " workflow " + std::string(workflow_id);
    std::fprintf(stderr, "[durable] %s %s%s: %s\n", std::string(to_string(level)).c_str(),
                 std::string(component).c_str(), id.c_str(), text.c_str());
  }
};

/// Runs `a` on the engine's strand; the caller resumes on its own executor.
template <class T>
asio::awaitable<T> on_strand(const std::shared_ptr<engine_state>& s, asio::awaitable<T> a) {
  return asio::co_spawn(s->ex, std::move(a), asio::use_awaitable);
}

}  // namespace durable::detail
