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
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

#include "durable/detail/config.hpp"
#include "durable/detail/failure.hpp"
#include "durable/detail/group_commit.hpp"
#include "durable/detail/metrics.hpp"
#include "durable/error.hpp"
#include "durable/pg/pool.hpp"
#include "durable/store.hpp"

namespace durable::detail {

/// One journaled step, as loaded. Output and error stay JSON text until a step asks for
/// them, so loading a journal costs no parsing.
struct journal_entry {
  std::string name;
  std::string kind;
  bool failed = false;
  std::string output;  // JSON text; empty for void
  std::string error;   // JSON text {"type": ..., "message": ...} when failed
};

/// The recorded attempts of a step that has no journal row yet (step_attempts).
struct attempt_history {
  std::string name, kind;  // of the step that made them (checked against the code, I5)
  int last_attempt = 0;    // the highest attempt number recorded (numbers never restart)
  int failures = 0;        // failed attempts since the last operator retry ('reset')
  bool failed = false;     // the last one was final: the step failed for good
  std::string error;       // JSON {"type", "message"} of the last failure
  std::optional<double> next_attempt_at;  // Unix seconds, while retrying

  void add(int attempt, const std::string& outcome, const std::optional<std::string>& err,
           const std::optional<double>& next) {
    last_attempt = std::max(last_attempt, attempt);
    if (outcome == "due") {  // resume(): the next attempt is due now
      next_attempt_at.reset();
      return;
    }
    if (outcome == "reset") {
      failures = 0;
      failed = false;
      next_attempt_at.reset();
      return;
    }
    ++failures;
    failed = outcome == "failed";
    error = err.value_or("{}");
    next_attempt_at = next;
  }
};

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

/// What runs of this process (and engine::get_event calls) wait for: a key announced on the
/// store's wait channel (a workflow's id: a message for it, or a child of it that ended;
/// "e:<id>": an event of workflow <id>). The listener pokes the waiters of a key it hears.
struct waiter_registry {
  struct waiter {
    explicit waiter(const asio::any_io_executor& ex)
        : timer(ex, asio::steady_timer::time_point::max()) {}
    asio::steady_timer timer;
    bool poked = false;  // kept until the waiter looks, so a poke between looks is not lost
  };
  std::multimap<std::string, waiter*, std::less<>> waiting;

  void poke(std::string_view key) {
    for (auto [it, end] = waiting.equal_range(key); it != end; ++it) {
      it->second->poked = true;
      it->second->timer.cancel();
    }
  }

  /// Registers a waiter for as long as it lives.
  class entry {
  public:
    entry(waiter_registry* r, const std::string& key, const asio::any_io_executor& ex)
        : r_(r), w_(ex) {
      if (r_) it_ = r_->waiting.emplace(key, &w_);
    }
    entry(const entry&) = delete;
    entry& operator=(const entry&) = delete;
    ~entry() {
      if (r_) r_->waiting.erase(it_);
    }
    /// Waits until poked, or `limit` passes. Returns at once if poked since the last call.
    asio::awaitable<void> wait(std::chrono::milliseconds limit) {
      if (!w_.poked) {
        w_.timer.expires_after(limit);
        asio::error_code ec;
        co_await w_.timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      w_.poked = false;
    }

  private:
    waiter_registry* r_;
    waiter w_;
    std::multimap<std::string, waiter*, std::less<>>::iterator it_;
  };
};

/// Thrown by ctx.continue_as_new() once the new generation is committed: unwinds the old run's
/// coroutine to the engine, which starts the new one. Not a std::exception, so that workflow
/// code catching std::exception does not swallow it (and if it catches everything, the
/// run_state's `continued` still decides).
struct continued_as_new {};

/// What ctx.continue_as_new() committed: the workflow's next generation, to run at once.
struct next_generation {
  std::int64_t epoch = 0;
  std::int64_t generation = 0;
  std::string inputs;  // JSON array
};

struct run_state {
  std::string id;
  std::string name;
  std::int64_t epoch = 0;
  // ctx.continue_as_new() starts the workflow again under the same id with an empty journal;
  // every key derived from a step number (child ids, idempotency keys of steps and sends)
  // includes the generation from 1 on, so that no generation collides with another.
  std::int64_t generation = 0;
  std::vector<std::optional<journal_entry>> journal;  // indexed by seq
  // Journal rows: those loaded, plus those this run journaled or is journaling (counted
  // when the step is issued, before its function runs, so that concurrent branches cannot
  // pass the limit together nor run a step whose row would be refused).
  std::size_t journal_rows = 0;
  // Steps counted in journal_rows since they were issued whose rows are not written yet
  // (row_hold): their write uses the count, and a step that ends without a row gives it back.
  std::set<int> held_rows;
  std::size_t journal_limit = 0;  // engine_options::journal_limit (0: none)
  double journal_warning = 0.8;   // engine_options::journal_warning
  bool journal_warned = false;    // once per run
  // Set when a new step would go beyond journal_limit: the workflow is parked with this.
  std::optional<std::string> journal_full;
  // Set once ctx.continue_as_new() committed: this run ends, the next generation runs.
  std::optional<next_generation> continued;
  // The registered workflow's argument check and signature (for continue_as_new).
  const std::function<void(const nlohmann::json&)>* check_inputs = nullptr;
  const std::string* signature = nullptr;
  // Tells the engine's event hook of a journal nearing its limit.
  std::function<void(const std::string&)> report_warning;
  int next_seq = 0;
  int current_seq = -1;
  // Set once the code and the journal disagree (I5); the run is then parked even if the
  // workflow's code catches the exception.
  std::optional<nondeterminism_error> nondeterminism;
  std::optional<std::string> park_reason;
  // Set when the library's own I/O failed transiently: the workflow is retried, not failed.
  bool io_failed = false;
  // Set when a step refused to start or to be journaled because the engine stops or lost its
  // lease: the run ends without writing a final state, even if the workflow caught that.
  bool released = false;
  // Set when the server refused a write it will refuse again (invalid encoding, value too
  // large, permission denied...): the workflow is parked with this reason, nothing re-runs.
  std::optional<std::string> io_refused;
  // What the last I/O failure was, for the hook and for workflows.last_error.
  std::string io_error;
  // A step issued while another step's function runs (a nested step): a programming error
  // that parks the workflow with this reason instead of journaling anything.
  std::optional<std::string> misuse;
  // Failed attempts recorded for steps without a journal row, by step number.
  std::map<int, attempt_history> attempts;
  // The step whose final failure (permanent, or attempts exhausted) was raised in this run:
  // if the workflow lets it escape, the workflow is dead-lettered.
  std::optional<int> dead_step;
  int dead_step_attempts = 0;
  // The workflow's deadline (Unix seconds), loaded when it was claimed.
  std::optional<double> deadline;
  // Set when the run must stop: cancel() (the status is written already) or the deadline
  // (the run writes 'cancelled'). Steps are not started, nor their failures recorded.
  std::optional<std::string> cancelled;
  bool cancelled_elsewhere = false;
  // The workflow function has returned: the run writes its outcome, and a cancellation that
  // arrives now (the deadline) must not interrupt that write.
  bool finishing = false;
  // A backoff at least this long unloads the workflow until the next attempt is due.
  std::chrono::milliseconds unload_after{2000};
  std::optional<double> unloaded_until;  // Unix seconds
  // Tells the engine's event hook of a failed attempt that will be retried.
  std::function<void(const std::string&)> report_retry;
  int step_functions_running = 0;  // step functions (of this run) executing now
  // ctx.all/any/map joins in progress: a run with concurrent branches never unloads (it
  // would stop the other branches' steps).
  int joins_running = 0;
  int anys_running = 0;  // ctx.any joins among them: a recv may not be a branch (it consumes)
  // Waits (recv, get_event, child results): the in-run wait between looks, and the longest
  // an unloaded waiter sleeps before it looks again (engine_options::wait_recheck).
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds wait_recheck{60000};
  waiter_registry* waiters = nullptr;
  const std::string* app_version = nullptr;   // stamped on child workflows
  const std::string* running_step = nullptr;  // the name of one of them, for messages

  // Services; `pool` is null for an in-memory replay, which may not execute anything.
  pg::pool* pool = nullptr;
  group_committer* committer = nullptr;  // journal rows share commits with other runs
  const store* st = nullptr;
  engine_counters* counters = nullptr;
  const bool* stopping = nullptr;       // the engine is shutting down
  const bool* lease_expired = nullptr;  // this executor could not renew its lease in time
  const void* launch_token = nullptr;   // identifies this run's entry in the engine's map

  /// Most step numbers a journal of n rows may skip: gaps come only from concurrent steps
  /// whose later rows committed before an earlier one (I4), so they are small.
  static constexpr std::int64_t max_gap = 1 << 16;

  /// Adds a loaded row. Returns an explanation instead if the row cannot be used (a step
  /// number below zero, repeated, or far beyond the rows loaded), which parks the workflow.
  [[nodiscard]] std::optional<std::string> add_entry(std::int64_t seq, journal_entry e) {
    if (seq < 0 || seq > std::int64_t(journal_rows) + max_gap ||
        (std::size_t(seq) < journal.size() && journal[std::size_t(seq)]))
      return "workflow '" + id + "' (" + name + "): its journal holds a row with step number " +
             std::to_string(seq) + " after " + std::to_string(journal_rows) +
             " rows, which no run of this library writes (step numbers start at 0 and follow "
             "program order). It is parked: inspect and repair its rows in the steps table, "
             "then resume it";
    if (std::size_t(seq) >= journal.size()) journal.resize(std::size_t(seq) + 1);
    journal[std::size_t(seq)] = std::move(e);
    ++journal_rows;
    return std::nullopt;
  }

  /// "<gen>.<seq>" from generation 1 on, "<seq>" in generation 0 (the format before
  /// continue_as_new existed): the suffix of idempotency keys and child ids.
  [[nodiscard]] std::string step_tag(int seq) const {
    if (generation == 0) return std::to_string(seq);
    return std::to_string(generation) + "." + std::to_string(seq);
  }
  /// The idempotency key of step `seq`: "<id>:<seq>", or "<id>:<gen>.<seq>" from generation 1.
  [[nodiscard]] std::string key(int seq) const { return id + ":" + step_tag(seq); }
  /// The id of the child started by step `seq`: "<id>/<seq>", or "<id>/<gen>.<seq>".
  [[nodiscard]] std::string child_id(int seq) const { return id + "/" + step_tag(seq); }
};

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

inline std::string describe_step(const std::string& name, const std::string& kind) {
  return kind == "step" ? "'" + name + "'" : "'" + name + "' (" + kind + ")";
}

/// I5: the journal's entry at `seq`, after checking it is the step the code asks for; null
/// when the step has no row yet and must run.
DURABLE_DECL const journal_entry* replay_entry(run_state& s, int seq, const std::string& name,
                                               const std::string& kind);

/// I5: step `seq` is recorded (in the journal or its attempts) as another step than the code
/// asks for. Parks the workflow (nondeterminism_error).
[[noreturn]] DURABLE_DECL void raise_nondeterminism(run_state& s, int seq,
                                                    const std::string& journaled_name,
                                                    const std::string& journaled_kind,
                                                    const std::string& name,
                                                    const std::string& kind);

/// I5 at the end of a run: journaled steps the code no longer reached mean it changed.
DURABLE_DECL void check_fully_replayed(run_state& s);

/// A pooled connection for the run; failing to get one marks the run for a retry.
DURABLE_DECL asio::awaitable<pg::pool::lease> acquire(run_state& s);

/// Records a failure of the library's own I/O while journaling step `seq`: a transient one
/// retries the run; one the server will repeat parks the workflow (the step is not re-run).
DURABLE_DECL void note_io_failure(run_state& s, int seq, const std::string& name,
                                  const std::exception& e);

/// Why step `seq` was not journaled: the fence (I3) rejected its row. The verdict carries the
/// fence's message when the server raised it (DU001).
DURABLE_DECL std::string journal_fenced_message(const run_state& s, int seq,
                                                const std::string& name, const fence_verdict& v);

/// The journal limit: throws journal_limit_exceeded (and marks the run to be parked) when
/// step `seq` would be a row beyond engine_options::journal_limit. Checked before a new step
/// runs, so that nothing runs whose row could not be journaled.
DURABLE_DECL void check_journal_room(run_state& s, int seq, const std::string& name);

/// Counts the row of step `seq` before it is written (check_journal_room first), and reports
/// once per run when the journal reaches journal_warning of its limit. A write that turns out
/// to journal nothing gives the row back (release_row). A step held since it was issued
/// (row_hold) was counted then: its write uses that count.
DURABLE_DECL void reserve_row(run_state& s, int seq, const std::string& name);
inline void release_row(run_state& s) noexcept {
  if (s.journal_rows > 0) --s.journal_rows;
}

/// Counts the row of step `seq` from the moment it is issued until it is written (its write
/// takes the count over) or, if it ends without a row, until the hold goes out of scope (the
/// count is given back). For steps whose function runs before the write (ctx.step,
/// ctx.transaction, ctx.any): a concurrent branch issued meanwhile sees the row counted, and a
/// step beyond the limit is refused before its function runs.
class row_hold {
public:
  row_hold(run_state& s, int seq, const std::string& name) : s_(s), seq_(seq) {
    reserve_row(s, seq, name);
    s.held_rows.insert(seq);
  }
  row_hold(const row_hold&) = delete;
  row_hold& operator=(const row_hold&) = delete;
  ~row_hold() {
    if (s_.held_rows.erase(seq_) > 0) release_row(s_);
  }
  /// The write of the row failed (nothing journaled) and the step goes on: held again.
  void again() { s_.held_rows.insert(seq_); }

private:
  run_state& s_;
  int seq_;
};

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

DURABLE_DECL asio::awaitable<void> sleep_for(std::chrono::milliseconds d);

/// Awaits `op` to its end even if the awaiting coroutine is cancelled meanwhile (a write whose
/// outcome must be known). A plain function: `op` is moved here, outside any co_await.
template <class T>
asio::awaitable<T> shielded_impl(asio::any_io_executor ex, asio::awaitable<T> op) {
  const bool throws = co_await asio::this_coro::throw_if_cancelled();
  co_await asio::this_coro::throw_if_cancelled(false);
  std::optional<T> out;
  std::exception_ptr failed;
  try {
    out.emplace(co_await asio::co_spawn(
        ex, std::move(op),
        asio::bind_cancellation_slot(asio::cancellation_slot(), asio::use_awaitable)));
  } catch (...) {
    failed = std::current_exception();
  }
  co_await asio::this_coro::throw_if_cancelled(throws);
  if (failed) std::rethrow_exception(failed);
  co_return std::move(*out);
}
template <class T>
asio::awaitable<T> shielded(const asio::any_io_executor& ex, asio::awaitable<T> op) {
  return shielded_impl<T>(ex, std::move(op));
}

}  // namespace durable::detail

#if defined(DURABLE_HEADER_ONLY)
#include "durable/detail/impl/run_state.ipp"
#endif
