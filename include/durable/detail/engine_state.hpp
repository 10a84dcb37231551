// The engine's shared state: options, store, pool, group committer, registry, the runs of
// this process, and the event hook. Every part of the engine (runner, dispatcher, lease
// keeper, listener, maintenance) reads and writes it on the engine's executor. It is split by
// concern into the structs below (services, registry, lifecycle, lease, dispatch, runs), each
// saying who writes and who reads it.
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

// The engine's state is split by concern into the structs below, each saying who writes and who
// reads it; engine_state derives from all of them, so that a part names a member as s->running or
// s->stopping whichever struct holds it. Everything is touched only on the engine's strand,
// except the counters (atomics: engine::metrics() reads them from any thread).

/// What every part uses, made once by the constructor and never replaced: the strand, the options
/// (as given, with the defaults the engine filled in), the store, the pool, the group committer
/// and the counters. The parts call them; nothing assigns them after construction.
struct engine_services {
  engine_services(asio::any_io_executor e, engine_options o)
      : ex(e),
        options(std::move(o)),
        st(options.schema),
        pool(e, options.conninfo, options.pool_size, st.catalog(), options.connection),
        committer(e, pool,
                  {.max_batch = options.group_commit_max_batch,
                   .max_in_flight = options.group_commit_in_flight,
                   .send_alone = options.group_commit_send_alone},
                  &st) {
    counters.set_hook(options.on_metric ? &options.on_metric : nullptr);
    committer.set_metrics(&counters);
  }

  asio::any_io_executor ex;
  engine_options options;
  store st;
  pg::pool pool;
  group_committer committer;
  engine_counters counters;
};

/// The workflow functions this process runs. Written by register_workflow() (before open());
/// read by the runner (invoke), start() and enqueue() (check_arguments), and the claiming
/// statements of the runner, dispatcher and maintenance (names and versions, as filters).
struct workflow_registry {
  std::map<std::string, registered_workflow, std::less<>> registry;
  std::string names = "{}";     // the registered workflow names as a text[] literal
  std::string versions = "{}";  // options.run_versions as a text[] literal (set by the engine)
};

/// What one wait for another process's workflow (result(), get_event) has seen, for the error of
/// its limit: whether it has read yet, the status it last read, since when a read is waiting for
/// its answer and, while its reads fail (the database restarts, fails over), since when and why.
struct result_wait {
  explicit result_wait(const asio::any_io_executor& ex)
      : first_look(ex, asio::steady_timer::time_point::max()) {}
  // Cancelled once the first read has answered or failed: a limit ends no wait before that.
  asio::steady_timer first_look;
  bool looked = false;
  std::string status;  // empty: not read yet
  std::optional<std::chrono::steady_clock::time_point> reading_since;
  std::optional<std::chrono::steady_clock::time_point> failing_since;
  std::string failure;
  bool counted = false;  // among wait_outage::failing
};

/// The reads of waits for other processes' workflows that fail now: the first failure of an
/// outage is reported, and the first read that works after it, by whichever wait.
struct wait_outage {
  int failing = 0;                                             // waits whose last read failed
  std::optional<std::chrono::steady_clock::time_point> since;  // reported, not yet over
};

/// The engine's life and its background parts. open() sets `opened` and starts the parts under
/// the supervisor, which keeps `tasks`; shutdown() sets `stopping` and cancels the tasks, the
/// sleepers (pauses of the parts, waits that shutdown cuts short) and the maintenance timer.
/// Every loop reads `stopping` to end.
struct lifecycle_state {
  bool opened = false;
  bool stopping = false;
  // The listener: open()'s, for the engine's life (`listener_started`); `listening` while a
  // listener's LISTEN holds. An engine never opened listens (with push_results on) only while
  // one of its waits for another process's workflow runs (result(), get_event: remote_wait in
  // listener.ipp): the first starts `wait_listener`, the last one's end sets `*wait_cut` and
  // cancels it, so that between its waits such an engine holds no connection and leaves its
  // io_context no work.
  bool listener_started = false;
  bool listening = false;
  bool push_unavailable = false;  // push_results on, but the schema predates migration 15
  wait_outage wait_reads;         // result() and get_event of other processes' workflows
  std::size_t remote_waits = 0;
  std::shared_ptr<asio::cancellation_signal> wait_listener;
  std::shared_ptr<bool> wait_cut;
  std::shared_ptr<asio::steady_timer> maintenance;
  std::set<std::shared_ptr<asio::cancellation_signal>> tasks;  // running background parts
  std::set<std::shared_ptr<asio::steady_timer>> sleepers;      // pauses shutdown cuts short
};

/// This process's hold on its executor id. `instance` is fixed at construction; the lease keeper
/// writes `lease_expired` and `id_taken`; the runner, dispatcher and maintenance read
/// `lease_expired` (no new work while it is set). It also writes `clock` (the server's clock).
struct lease_state {
  std::string instance;        // this engine's token in executors.instance
  bool lease_expired = false;  // the lease keeper could not renew the lease in time
  bool id_taken = false;       // another process registered under this executor id
  // The server's clock, read by the lease keeper at registration and every heartbeat; every
  // wake-up time is measured against it (runs reach it through the journal).
  server_clock clock;
};

/// What the dispatcher serves and what wakes it. serve_queue() adds to `queues` (before open());
/// the listener, start/enqueue, the runner and resume() wake the dispatcher (wake_dispatcher,
/// wake_due); the runner keeps `local_wakes` and `wake_timer` for workflows it unloaded; the
/// dispatcher reads and clears the flags.
struct dispatch_state {
  explicit dispatch_state(std::vector<std::string> served) : queues(std::move(served)) {}

  std::shared_ptr<asio::steady_timer> dispatch_timer;
  std::vector<std::string> queues;
  bool wake_pending = false;
  // The last dispatch round ended with no room here (max_running): a run that ends must wake
  // the dispatcher, whatever it ran.
  bool dispatch_lacked_room = false;
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
};

/// The runs of this process, by workflow id, and how many it may have. The runner adds and
/// removes runs and retries; cancel(), maintenance and shutdown stop runs (cancel_local,
/// release_runs); the dispatcher, maintenance and recovery ask for room() before claiming;
/// get_event and waiting runs register in `waiters`, which the listener wakes.
struct run_table {
  explicit run_table(std::size_t max_running) : capacity(max_running) {}

  std::size_t capacity;  // engine_options::max_running
  std::map<std::string, local_run, std::less<>> running;
  std::set<std::string, std::less<>> retrying;  // ids to claim again after an I/O error
  // The pauses of those runs before they claim again. Once the database has answered for a
  // while (no I/O failure seen for three heartbeat intervals), the lease keeper cuts each down
  // to io_retry_delay: a pause that grew during an outage does not outlast it by half a minute.
  std::set<std::shared_ptr<asio::steady_timer>> retry_pauses;
  std::chrono::steady_clock::time_point last_io_failure{};  // by a run, a claim or a heartbeat
  waiter_registry waiters;  // runs and get_event calls that wait here

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

  /// How many more runs this process may take on now (capacity minus the busy ones).
  [[nodiscard]] std::size_t room() const noexcept {
    const std::size_t busy = running.size() + retrying.size();
    return busy >= capacity ? 0 : capacity - busy;
  }
};

/// Tests only (tests/test_results.cpp): when set, a listener (listener.ipp) awaits it between
/// its connect and its LISTEN, so that a test can land a workflow's end in that window. Never
/// set in a program.
inline std::function<asio::awaitable<void>()> listener_connected_hook;

/// The engine's whole state: the parts above, and what spans them (claimable_here, report).
struct engine_state : engine_services,
                      workflow_registry,
                      lifecycle_state,
                      lease_state,
                      dispatch_state,
                      run_table {
  engine_state(asio::any_io_executor e, engine_options o, std::string instance_token)
      : engine_services(e, std::move(o)),
        lease_state{std::move(instance_token), false, false, {}},
        dispatch_state(options.queues),
        run_table(options.max_running) {}

  // The journal the runs reach PostgreSQL through (detail/runtime/engine_journal.hpp): the
  // services above, and the flags that release a run (stopping, lease_expired).
  engine_journal journal{pool, committer, st, stopping, lease_expired, clock};

  /// Whether a workflow this executor owns should be claimed here: registered, not busy.
  [[nodiscard]] bool claimable_here(std::string_view id, std::string_view name) const {
    return registry.contains(name) && !busy(id);
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
