// The state of one workflow run: its loaded journal, the step cursor, and the services
// the replay core needs. A user never names anything here.
#pragma once

#include <cxxabi.h>

#include <algorithm>
#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "durable/detail/attempt_observer.hpp"
#include "durable/detail/config.hpp"
#include "durable/detail/failure.hpp"
#include "durable/detail/metrics.hpp"
#include "durable/detail/replay/cursor.hpp"
#include "durable/detail/replay/journal.hpp"
#include "durable/detail/utf8.hpp"
#include "durable/detail/virtual_clock.hpp"
#include "durable/error.hpp"
#include "durable/retry.hpp"
#include "durable/states.hpp"
#include "durable/trace.hpp"

namespace durable::detail {

/// Thrown at a step boundary when the engine shuts down: the run stops without writing,
/// and another executor resumes the workflow.
class run_released : public error {
public:
  using error::error;
};

/// Thrown at a step boundary, or into a running step as Asio cancellation, when the workflow
/// is cancelled or its deadline passes: the run stops without recording the step.
class run_cancelled : public error {
public:
  using error::error;
};

/// What runs of this process (and engine::get_event, result() and read_stream calls) wait for:
/// a key announced on the store's wait channel (a workflow's id: a message for it, or a child
/// of it that ended; "e:<id>": an event of workflow <id>; "s:<id>": an append to a stream of
/// it) or its result channel ("r:<id>"). The listener pokes the waiters of a key it hears.
struct waiter_registry {
  struct waiter {
    explicit waiter(const asio::any_io_executor& ex)
        : timer(ex, asio::steady_timer::time_point::max()) {}
    asio::steady_timer timer;
    bool poked = false;  // kept until the waiter looks, so a poke between looks is not lost
    std::optional<std::string> told;  // what the poke said (a result()'s outcome), if anything
  };
  std::multimap<std::string, waiter*, std::less<>> waiting;

  /// `told`: what the poke says (a result()'s outcome), or null. (A pointer, not an optional
  /// defaulted to nullopt: GCC 12 at -O3 warns that copying that empty optional reads its
  /// uninitialised string.)
  void poke(std::string_view key, const std::string* told = nullptr) {
    note_poke(key);
    for (auto [it, end] = waiting.equal_range(key); it != end; ++it) {
      it->second->poked = true;
      if (told) it->second->told = *told;
      it->second->timer.cancel();
    }
  }

  /// Pokes every waiter whose key starts with `prefix` (every waiter for ""): they look again.
  void poke_all(std::string_view prefix = {}) {
    forget_keys();
    for (auto it = waiting.lower_bound(prefix);
         it != waiting.end() && it->first.starts_with(prefix); ++it) {
      it->second->poked = true;
      it->second->timer.cancel();
    }
  }

  /// Whether every send to a workflow of this process pokes its key from now on: a listener
  /// holds its LISTEN. Either way every mark taken so far goes stale (nobody listened, or the
  /// listener that heard them is gone).
  void set_hears_all(bool on) {
    hears_all_ = on;
    forget_keys();
  }

  /// The pokes so far, to hand to quiet_since(key, ...) later: taken before a look for `key`
  /// that may find nothing. While a listener hears every send, the pokes of `key` are counted
  /// from now on (of at most remembered_keys keys: past that all are forgotten at once).
  [[nodiscard]] std::uint64_t mark(std::string_view key) {
    if (hears_all_ && !last_poke_.contains(key)) {
      if (last_poke_.size() >= remembered_keys) forget_keys();
      last_poke_.emplace(std::string(key), 0);
    }
    return pokes_;
  }

  /// Whether no poke of `key` can have come since `mark` (mark(key)'s): the listener heard
  /// every send meanwhile, and none was for `key`. A look taken after `mark` that found nothing
  /// then still holds, and a waiter registered now is poked by anything that arrives later
  /// (its notification is on the way). False whenever it cannot be known.
  [[nodiscard]] bool quiet_since(std::string_view key, std::uint64_t mark) const {
    if (!hears_all_ || floor_ > mark) return false;
    const auto it = last_poke_.find(key);
    return it != last_poke_.end() && it->second <= mark;
  }

  /// Registers a waiter for as long as it lives.
  class entry {
  public:
    /// `clock`: the run's virtual clock, null for real time.
    entry(waiter_registry* r, const std::string& key, const asio::any_io_executor& ex,
          virtual_clock* clock = nullptr)
        : r_(r), w_(ex), clock_(clock) {
      if (r_) it_ = r_->waiting.emplace(key, &w_);
    }
    entry(const entry&) = delete;
    entry& operator=(const entry&) = delete;
    ~entry() {
      disarm_timer(clock_, w_.timer);
      if (r_) r_->waiting.erase(it_);
      if (r_ && also_) r_->waiting.erase(*also_);
    }
    /// Registers the waiter for a second key too (once): a poke of either wakes it.
    void also(const std::string& key) {
      if (r_ && !also_) also_ = r_->waiting.emplace(key, &w_);
    }
    /// Waits until poked, or `limit` passes. Returns at once if poked since the last call.
    asio::awaitable<void> wait(std::chrono::milliseconds limit) {
      if (!w_.poked) {
        arm_timer(clock_, w_.timer, limit);
        asio::error_code ec;
        co_await w_.timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        disarm_timer(clock_, w_.timer);
      }
      w_.poked = false;
    }
    /// Forgets the pokes so far (the caller is about to look anyway); what they said stays.
    void forget_pokes() noexcept { w_.poked = false; }
    /// What a poke said since the last call, if anything.
    std::optional<std::string> take_told() { return std::exchange(w_.told, std::nullopt); }

  private:
    waiter_registry* r_;
    waiter w_;
    virtual_clock* clock_;
    std::multimap<std::string, waiter*, std::less<>>::iterator it_;
    std::optional<std::multimap<std::string, waiter*, std::less<>>::iterator> also_;
  };

private:
  /// Keys counted at most; past it they are all forgotten at once (floor_ moves up).
  static constexpr std::size_t remembered_keys = 4096;

  void note_poke(std::string_view key) {
    ++pokes_;
    if (const auto it = last_poke_.find(key); it != last_poke_.end()) it->second = pokes_;
  }
  /// Every key counts as poked now (a poke_all, or too many keys to remember).
  void forget_keys() {
    floor_ = ++pokes_;
    last_poke_.clear();
  }

  bool hears_all_ = false;   // see set_hears_all()
  std::uint64_t pokes_ = 0;  // pokes so far
  std::uint64_t floor_ = 0;  // every key counts as poked at this count
  // The keys marked since the last forget_keys(), each with its latest poke (0: none since).
  std::map<std::string, std::uint64_t, std::less<>> last_poke_;
};

/// Thrown by ctx.continue_as_new() once the new generation is committed: unwinds the old run's
/// coroutine to the engine, which starts the new one. Not a std::exception, so that workflow
/// code catching std::exception does not swallow it (and if it catches everything, the
/// run's verdict, continued, still decides).
struct continued_as_new {};

/// The status, output, error and reason the final write of verdict `v` records.
struct final_state {
  workflow_state status;
  std::optional<std::string> output, error, reason;
};

/// One run of a workflow: the replay cursor plus what the runtime lends it (the journal it
/// reaches I/O through, the options that shape waits, the event hooks).
struct run_state : cursor {
  // The registered workflow's argument check and signature (for continue_as_new).
  const std::function<void(const nlohmann::json&)>* check_inputs = nullptr;
  const std::string* signature = nullptr;
  // The workflow function has returned: the run writes its outcome, and a cancellation that
  // arrives now (the deadline) must not interrupt that write.
  bool finishing = false;
  // The final state this run committed (its verdict's, or the park that replaced it): what a
  // result() of this process returns without reading it back. Unset until it committed.
  std::optional<final_state> written_final;
  // Set once the batch carrying the final state went to the server (null before the run
  // writes it). A result() called before then knows the commit comes after its call, so what
  // the run wrote is news to it; one called after may be late for it (an operator may have
  // acted on the workflow since the commit), and reads the row.
  std::shared_ptr<bool> final_sent;
  // Its end may let the dispatcher claim queued work: a queue's slot or this engine's room
  // comes free (false for a workflow start() launched, which holds no queue's slot).
  bool holds_queue_slot = true;
  // The workflow's deadline (Unix seconds on the journal's clock, clock_now), loaded when it was
  // claimed.
  std::optional<double> deadline;
  // A backoff at least this long unloads the workflow until the next attempt is due.
  std::chrono::milliseconds unload_after{2000};
  // engine_options::max_value_bytes: a larger value is not written (0: no limit).
  std::size_t max_value_bytes = 0;
  std::optional<double> unloaded_until;  // Unix seconds (clock_latest: never before the server's)
  // Tells the engine's event hook of a failed attempt that will be retried.
  std::function<void(const std::string&)> report_retry;
  int step_functions_running = 0;  // step functions (of this run) executing now
  // ctx.all/any/map joins in progress: a run with concurrent branches never unloads (it
  // would stop the other branches' steps).
  int joins_running = 0;
  int anys_running = 0;  // ctx.any joins among them: a recv may not be a branch (it consumes)
  // The streams a write of this run is being journaled to, each with the timer its next writer
  // waits on: one write of a stream at a time, so that positions follow the order the writes
  // reach the run, and a write never waits on another's transaction lock (group commit).
  std::map<std::string, std::shared_ptr<asio::steady_timer>, std::less<>> streams_writing;
  // Waits (recv, get_event, child results): the in-run wait between looks, and the longest
  // an unloaded waiter sleeps before it looks again (engine_options::wait_recheck).
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds wait_recheck{60000};
  waiter_registry* waiters = nullptr;
  // Topics whose last take left no message of theirs, with the registry's mark taken before
  // it: while nothing was sent to this workflow since (waiter_registry::quiet_since), the
  // topic's next receive waits at once instead of looking first (one round trip fewer).
  std::map<std::string, std::uint64_t, std::less<>> empty_topics;
  const std::string* app_version = nullptr;  // stamped on child workflows
  // The workflow's stored W3C traceparent (none: its spans are the root of a trace of its own),
  // and where its spans go (engine_options::on_span; null: no spans are made).
  std::optional<std::string> traceparent;
  const span_hook* on_span = nullptr;
  const std::string* running_step = nullptr;  // the name of one of them, for messages

  // Every I/O of the run goes through its journal (detail/replay/journal.hpp): the engine's
  // over PostgreSQL, or an in-memory one. Null: a bare replay, which may not execute anything.
  detail::journal* io = nullptr;
  engine_counters* counters = nullptr;  // null: not counted
  const void* launch_token = nullptr;   // identifies this run's entry in the engine's map

  // The test kit's (durable/testing.hpp); null in an engine's run. `clock`: every wait of the
  // run is measured on it instead of real time. `on_attempt`: told before a step function's
  // every attempt. `fail_attempt`: asked after an attempt's function returned whether to fail
  // it anyway (a reply lost on its way back), which is done only when the step's retry policy
  // would retry that failure.
  virtual_clock* clock = nullptr;
  std::function<void(const step_info&)> on_attempt;
  // Told when each attempt's function begins and ends (attempt_scope), however it ends.
  std::shared_ptr<attempt_observer> observer;
  std::function<bool(const step_info&)> fail_attempt;
  // The bits of ctx.random()/uuid() at step `seq` (draw 0, 1): the kit's are a function of the
  // workflow and the step, so that runs in separate harnesses (check_crashes) draw alike.
  std::uint64_t (*random_bits)(const run_state&, int seq, int draw) = nullptr;
};

/// A replay that may not execute reached a step without a journal row: the journal ends there.
class journal_exhausted : public error {
public:
  using error::error;
};

/// The failure the test kit injects into an attempt whose function ran (run_state::fail_attempt).
class injected_failure : public error {
public:
  using error::error;
};

/// Marks the extent of an attempt of a step function (kind "step" or "transaction": a function
/// of the workflow's, not ctx.now() or a sleep) for the test kit: run_state::on_attempt and the
/// observer's begins, then its ends when the scope ends, however it ends. No-op in an engine's
/// run. Ending twice is harmless (GCC 12 may destroy a coroutine's local twice).
class attempt_scope {
public:
  attempt_scope(const run_state& s, const step_info& info, const std::string& kind,
                bool may_suspend)
      : info_(info) {
    if (!s.on_attempt && !s.observer) return;  // an engine's run
    if (kind != to_string(step_kind::step) && kind != to_string(step_kind::transaction)) return;
    if (s.on_attempt) s.on_attempt(info);
    if (s.observer) {
      observer_ = s.observer;
      observer_->begins(info, may_suspend);
    }
  }
  attempt_scope(const attempt_scope&) = delete;
  attempt_scope& operator=(const attempt_scope&) = delete;
  ~attempt_scope() {
    if (!observer_) return;
    const std::shared_ptr<attempt_observer> o = std::move(observer_);
    observer_.reset();
    o->ends(info_);
  }

private:
  const step_info& info_;
  std::shared_ptr<attempt_observer> observer_;
};

/// After an attempt's function returned: throws injected_failure when the test kit asks for
/// it and `policy` would retry it (attempts left, and its retry_on accepts the failure).
DURABLE_DECL void attempt_returned(const run_state& s, const step_info& info,
                                   const std::string& kind, const retry& policy);

inline std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  if (out.rfind("std::__cxx11::", 0) == 0) out = "std::" + out.substr(14);
  return out;
}

/// The type name and message of an exception, for the journal.
struct captured_error {
  std::string type;
  std::string message;
  [[nodiscard]] std::string to_json() const {
    return nlohmann::json{{"type", type}, {"message", message}}.dump();
  }
};

DURABLE_DECL captured_error capture(std::exception_ptr e);

/// {"type": type, "message": message} as JSON text (invalid UTF-8 replaced).
DURABLE_DECL std::string error_json(std::string_view type, const std::string& message);

/// The verdict of what the workflow's code did with exception `e` escaping it: the lowest
/// precedence of all (see verdict), so whatever the run learned meanwhile overrides it.
DURABLE_DECL verdict escaped(run_state& run, std::exception_ptr e);

/// The final state verdict `v` writes (v.writes_final_state()).
DURABLE_DECL final_state final_state_of(const verdict& v);

/// Notes a failure of a read the run made through its journal (an event, a child's state): a
/// transient one retries the run; one that will recur parks the workflow.
DURABLE_DECL void note_read_failure(run_state& s, const std::exception& e);

/// Records a failure of the library's own I/O while journaling step `seq`: a transient one
/// retries the run; one the server will repeat parks the workflow (the step is not re-run).
DURABLE_DECL void note_io_failure(run_state& s, int seq, const std::string& name,
                                  const std::exception& e);

/// Why step `seq` was not journaled: the fence (I3) rejected its row. Carries the fence's
/// message when the journal gave one (the server's DU001).
DURABLE_DECL std::string journal_fenced_message(const run_state& s, int seq,
                                                const std::string& name, const journal_fenced& f);

/// A value of `bytes` (JSON text) over the run's max_value_bytes is not written: notes the park
/// (park_cause::value_too_large) and throws value_too_large. `what` names the value ("the
/// output of step 3 'fetch'"), `then` says what happens on resume.
DURABLE_DECL void check_value_size(run_state& s, std::size_t bytes, const std::string& what,
                                   const char* then);

/// Journals one step (I2: one round trip, fenced by the epoch in the same statement, I3).
/// Through the group committer the round trip and its commit are shared with other runs;
/// the step still resumes only once its row is committed.
DURABLE_DECL asio::awaitable<void> append(run_state& s, int seq, const std::string& name,
                                          const std::string& kind,
                                          const std::optional<std::string>& output,
                                          const std::optional<std::string>& error, int attempts,
                                          double started_at);

inline double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

/// Now (Unix seconds) on the clock the run's wake-up times are measured against: its journal's
/// (the server's, for the engine), or this host's for a bare replay. Every wake-up time a run
/// journals or compares comes from here, never from the host's wall clock.
inline double clock_now(const run_state& s) noexcept { return s.io ? s.io->now() : unix_seconds(); }
/// The earliest clock_now() can be (journal::earliest_now): what a wait's wake-up time is
/// compared with, so that the wait never ends early on that clock.
inline double clock_earliest(const run_state& s) noexcept {
  return s.io ? s.io->earliest_now() : unix_seconds();
}
/// The latest clock_now() can be (journal::latest_now): an upper bound on a wake-up time the
/// server has just computed from its own clock.
inline double clock_latest(const run_state& s) noexcept {
  return s.io ? s.io->latest_now() : unix_seconds();
}
/// When a step (or a wait, a send) began, as its journal row's started_at: the earliest the
/// server's clock can have read then. The row's completed_at is the server's own now() when its
/// statement runs, after the step ended; an estimate from the middle of a reading's round trip
/// (clock_now) can be later than that by half the trip, which made short steps end before they
/// began. So a duration is never below zero, and reads at most the clock's uncertainty long.
inline double journal_started_at(const run_state& s) noexcept { return clock_earliest(s); }

DURABLE_DECL asio::awaitable<void> sleep_for(std::chrono::milliseconds d);
/// Sleeps `d` on the run's clock (its virtual clock in the test kit, else real time); throws
/// operation_aborted if the run is cancelled meanwhile.
DURABLE_DECL asio::awaitable<void> sleep_for(const run_state& s, std::chrono::milliseconds d);

/// Awaits `op` to its end even if the awaiting coroutine is cancelled meanwhile (a write whose
/// outcome must be known). A plain function: `op` is moved here, outside any co_await.
template <class T>
asio::awaitable<T> shielded_impl(asio::any_io_executor ex, asio::awaitable<T> op) {
  const bool throws = co_await asio::this_coro::throw_if_cancelled();
  co_await asio::this_coro::throw_if_cancelled(false);
  std::optional<std::conditional_t<std::is_void_v<T>, bool, T>> out;
  std::exception_ptr failed;
  try {
    auto token = asio::bind_cancellation_slot(asio::cancellation_slot(), asio::use_awaitable);
    if constexpr (std::is_void_v<T>) {
      co_await asio::co_spawn(ex, std::move(op), token);
      out.emplace(true);
    } else {
      out.emplace(co_await asio::co_spawn(ex, std::move(op), token));
    }
  } catch (...) {
    failed = std::current_exception();
  }
  co_await asio::this_coro::throw_if_cancelled(throws);
  if (failed) std::rethrow_exception(failed);
  if constexpr (!std::is_void_v<T>) co_return std::move(*out);
}
template <class T>
asio::awaitable<T> shielded(const asio::any_io_executor& ex, asio::awaitable<T> op) {
  return shielded_impl<T>(ex, std::move(op));
}

}  // namespace durable::detail

#if defined(DURABLE_HEADER_ONLY)
#include "durable/detail/impl/run_state.ipp"
#endif
