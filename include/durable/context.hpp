// What a workflow sees: journaled steps, transactional steps, and journaled inputs from the
// outside world (time, randomness, ids).
#pragma once

#include <algorithm>
#include <array>
#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "durable/codec.hpp"
#include "durable/detail/config.hpp"
#include "durable/detail/run_state.hpp"
#include "durable/error.hpp"
#include "durable/pg/connection.hpp"

namespace durable {

/// No timeout: ctx.recv, ctx.get_event and engine::get_event wait until the value arrives.
inline constexpr std::chrono::milliseconds forever = std::chrono::milliseconds::max();

class context;

/// Retry policy of a step. Every failed attempt is recorded in step_attempts (its error, its
/// time, the time of the next attempt) before the next one, so a crash in the middle of a
/// retry sequence continues the count instead of starting over. A backoff of at least
/// engine_options::unload_after releases the workflow (no coroutine, no connection held) until
/// the attempt is due. When no attempt is left, or the error is permanent (durable::
/// permanent_error, or `retry_if` says so), the step has failed for good: step_failed is
/// raised, and a workflow that lets it escape is dead-lettered for a person to retry.
/// Trivially copyable on purpose (GCC 12, see docs/concepts.md#gcc-12): the predicate is a
/// function pointer, a captureless lambda converts to it.
struct retry {
  int max_attempts = 1;                    ///< attempts in all, the first one included
  std::chrono::milliseconds initial{100};  ///< the pause after the first failure
  double factor = 2.0;                     ///< each pause is this many times the one before
  std::chrono::milliseconds max{std::chrono::seconds(30)};  ///< no pause is longer
  double jitter = 0.0;  ///< 0..1: each pause is drawn from [p * (1 - jitter), p * (1 + jitter)]
  /// Which errors are worth another attempt (null: all but permanent_error, which never
  /// is). durable::retry_on<E...> retries only the exception types listed.
  bool (*retry_if)(const std::exception&) = nullptr;
  /// Per attempt (0: none; steps whose function returns an asio::awaitable only): past it the
  /// attempt receives Asio cancellation (terminal), is abandoned without being waited for,
  /// and counts as a failed attempt with step_timeout.
  std::chrono::milliseconds timeout{0};
  /// ctx.transaction only: serialization failures and deadlocks run the function again in a
  /// fresh transaction up to this many times in a row; they are the database's, never
  /// recorded as the step's failures. Beyond that the run is retried as after any transient
  /// database failure (bounded by max_claims_without_progress, I9).
  int contention_attempts = 10;

  /// The pause after the n-th failed attempt (without jitter).
  [[nodiscard]] std::chrono::milliseconds delay(int failures) const {
    double d = double(initial.count());
    for (int i = 1; i < failures && d < double(max.count()); ++i) d *= factor;
    return std::chrono::milliseconds(std::int64_t(std::min(d, double(max.count()))));
  }
};

/// A retry_if predicate: retry only errors of the types listed (or derived from them).
template <class... E>
bool retry_on(const std::exception& e) noexcept {
  return ((dynamic_cast<const E*>(&e) != nullptr) || ...);
}

/// Passed to a step's function if it accepts one.
struct step_info {
  int seq;
  const std::string& name;
  int attempt;                  ///< 1 on the first attempt
  std::string idempotency_key;  ///< "<workflow id>:<seq>": stable across retries and replays
};

namespace detail {
template <class T>
struct awaitable_value {
  static constexpr bool is_awaitable = false;
  using type = T;
};
template <class T, class E>
struct awaitable_value<asio::awaitable<T, E>> {
  static constexpr bool is_awaitable = true;
  using type = T;
};

template <class F>
auto call_step(F& fn, const step_info& info) {
  if constexpr (std::is_invocable_v<F&, const step_info&>)
    return std::invoke(fn, info);
  else
    return std::invoke(fn);
}

template <class F>
using step_return_t = decltype(call_step(std::declval<F&>(), std::declval<const step_info&>()));

template <class F>
using step_value_t = typename awaitable_value<step_return_t<F>>::type;

/// A workflow's arguments as journaled: a JSON array, one element per parameter.
template <class... Args>
nlohmann::json encode_inputs(const Args&... args) {
  nlohmann::json inputs = nlohmann::json::array();
  (inputs.push_back(durable::encode<Args>(args)), ...);
  return inputs;
}

/// void results travel as monostate inside the replay core.
template <class T>
using stored_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

/// Decodes JSON `text` that step `seq` (journal entry `e`) produced: a value that no longer
/// decodes parks the workflow with the reason.
template <class T>
T decode_text(run_state& s, int seq, const journal_entry& e, const std::string& text) {
  if constexpr (std::is_void_v<T>) {
    return;
  } else {
    try {
      return durable::decode<T>(nlohmann::json::parse(text));
    } catch (const std::exception& x) {
      throw codec_error(
          std::string(type_name<T>()),
          note_park(s, park_cause::codec,
                    "workflow '" + s.id + "' (" + s.name + "): the journaled output of step " +
                        std::to_string(seq) + " '" + e.name + "' no longer decodes as " +
                        std::string(type_name<T>()) + ": " + x.what() +
                        ". The step's result type changed while the workflow was in flight; it "
                        "is parked until code that reads the old value is deployed"));
    }
  }
}

template <class T>
T decode_journaled(run_state& s, int seq, const journal_entry& e) {
  return decode_text<T>(s, seq, e, e.output);
}

template <class T>
T replay_value(run_state& s, int seq, const journal_entry& e) {
  if (s.counters) ++s.counters->steps_replayed;
  if (e.failed) {
    auto j = nlohmann::json::parse(e.error, nullptr, false);
    std::string type = j.is_object() ? j.value("type", "unknown") : "unknown";
    std::string message = j.is_object() ? j.value("message", "") : e.error;
    throw step_failed(s.id, seq, e.name, std::move(type), std::move(message));
  }
  return decode_journaled<T>(s, seq, e);
}

/// GCC 12 miscompiles a temporary closure with non-trivially-copyable captures (a std::string
/// captured by value, say) created inside a co_await expression: the temporary is relocated
/// bytewise and its destructor frees memory it does not own. `F` is the step function's type as
/// deduced by a forwarding reference: an lvalue (a named closure) is not a temporary and is
/// safe, so only prvalue/xvalue closures are checked. The check turns the silent corruption into
/// a compile error; see docs/concepts.md#gcc-12.
template <class F>
constexpr void check_step_function() {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13 && \
    !defined(DURABLE_NO_GCC12_CAPTURE_CHECK)
  static_assert(std::is_lvalue_reference_v<F> || std::is_trivially_copyable_v<std::decay_t<F>>,
                "durable: with GCC 12 a step function must be trivially copyable: capture by "
                "reference ([&]) instead of copying strings or containers into the lambda "
                "(GCC 12 corrupts such closures inside co_await). See docs/concepts.md#gcc-12");
#endif
}

/// Before a new step runs: the run may still start steps (not released, cancelled, or after a
/// failed write; see require_running) and the journal has room for its row (journal_limit).
DURABLE_DECL void require_live(run_state& s, int seq, const std::string& name);
DURABLE_DECL void require_running(run_state& s, int seq, const std::string& name);

/// ctx.continue_as_new: checks the new inputs against the registered signature, that no
/// journaled step lies beyond this point (I5) and that no join runs, then commits the next
/// generation (one fenced statement) and throws continued_as_new.
DURABLE_DECL asio::awaitable<void> continue_run(run_state& s, const std::string& inputs);
/// continue_as_new is refused in a branch of ctx.all/any/map (parks the workflow).
DURABLE_DECL void refuse_continue_in_join(run_state& s);

/// The parameter types of a workflow function (a function, a function pointer, or a
/// captureless lambda), for a continue_as_new typed against it.
template <class F>
struct workflow_function_traits : workflow_function_traits<decltype(&F::operator())> {};
template <class R, class... Args>
struct workflow_function_traits<asio::awaitable<R> (*)(context&, Args...)> {
  using result = R;
  using args = std::tuple<std::decay_t<Args>...>;
};
template <class R, class... Args>
struct workflow_function_traits<asio::awaitable<R>(context&, Args...)>
    : workflow_function_traits<asio::awaitable<R> (*)(context&, Args...)> {};
template <class C, class R, class... Args>
struct workflow_function_traits<asio::awaitable<R> (C::*)(context&, Args...) const>
    : workflow_function_traits<asio::awaitable<R> (*)(context&, Args...)> {};
template <class C, class R, class... Args>
struct workflow_function_traits<asio::awaitable<R> (C::*)(context&, Args...)>
    : workflow_function_traits<asio::awaitable<R> (*)(context&, Args...)> {};

/// Whether the failure `e` of a step may be tried again under `policy`.
DURABLE_DECL bool retryable(const retry& policy, std::exception_ptr e);

/// The recorded attempts of step `seq` (null when none). A step that failed for good is
/// raised again as step_failed, without running (a replay of the failure). I5: the attempts
/// must be the same step's.
DURABLE_DECL const attempt_history* attempt_state(run_state& s, int seq, const std::string& name,
                                                  const std::string& kind);

/// A timeout needs a step function that can be cancelled (one that returns an awaitable) and
/// that can be left behind (copyable, with a default-constructible result): refused otherwise,
/// `why` says which.
DURABLE_DECL void refuse_timeout(run_state& s, int seq, const std::string& name, const char* why);

/// Waits until the next attempt of step `seq` is due (after a takeover, or a claim before it
/// is due: a resume, say); a wait of at least unload_after unloads the workflow instead.
DURABLE_DECL asio::awaitable<void> wait_until_due(run_state& s, int seq, const std::string& name,
                                                  const attempt_history* h);

/// Waits `pause` in the run, or, when it is at least unload_after (and a second), unloads the
/// workflow until then (status 'sleeping', no owner, a new epoch) and throws run_released.
/// `what` says what is awaited, for the message.
DURABLE_DECL asio::awaitable<void> pause_or_unload(run_state& s, int seq, const std::string& name,
                                                   std::chrono::milliseconds pause,
                                                   const std::string& what, int own_steps);

/// After attempt `attempt` of step `seq` failed (the `failures`-th since the last operator
/// retry): records it (fenced, I3) and returns the pause before the next attempt. A final
/// failure (not retryable, or no attempt left) throws step_failed; a pause of at least
/// unload_after unloads the workflow (run_released) until the attempt is due.
DURABLE_DECL asio::awaitable<std::chrono::milliseconds> record_failure(
    run_state& s, int seq, const std::string& name, const std::string& kind, retry policy,
    int attempt, int failures, bool may_retry, const captured_error& failure, double started);

/// Runs a fenced write of run `s` (through the group committer when there is one): ownership_lost
/// with `if_fenced` when another epoch owns the workflow, and any other failure noted for
/// step `seq` (note_io_failure: retried or parked) and rethrown.
DURABLE_DECL asio::awaitable<void> write_fenced(run_state& s, int seq, const std::string& name,
                                                fenced_write& w, const std::string& if_fenced);

/// Runs `st` for run `s`: through the group committer when there is one.
DURABLE_DECL asio::awaitable<pg::result> run_statement(run_state& s, pg::statement st);

/// Ends the run: the workflow was unloaded (its status written) for `pause`.
[[noreturn]] DURABLE_DECL void unload(run_state& s, std::chrono::milliseconds pause,
                                      const std::string& why);

/// A serialization failure or a deadlock: the transaction lost a race, run it again.
[[nodiscard]] inline bool is_contention(const pg::sql_error& e) noexcept {
  return pg::is_contention(e);
}

/// The attempts of one step that were abandoned at their timeout and still run. The step does
/// not hand its result (or its failure) back to the workflow until they have ended: what they
/// captured by reference lives in the workflow's frame, and ctx.idempotency_key() must still
/// name their step.
struct left_behind {
  explicit left_behind(const asio::any_io_executor& ex)
      : ended(ex, asio::steady_timer::time_point::max()) {}
  int running = 0;
  asio::steady_timer ended;
};

/// Waits until every attempt `lb` counts has ended (they were sent cancellation already).
DURABLE_DECL asio::awaitable<void> wait_for_abandoned(left_behind& lb);

/// One attempt of a step under a timeout. It owns copies of the step's function and of its
/// step_info, so that an attempt abandoned at its deadline (sent cancellation; the next
/// attempt starts without waiting for it) never refers to the loop that gave up on it.
template <class T, class F>
struct timed_attempt {
  timed_attempt(const asio::any_io_executor& ex, const F& f, const step_info& i,
                std::shared_ptr<left_behind> l, const std::string& workflow)
      : wake(ex, asio::steady_timer::time_point::max()),
        fn(f),
        name(i.name),
        workflow_id(workflow),
        info{i.seq, name, i.attempt, i.idempotency_key},
        lb(std::move(l)) {}
  asio::steady_timer wake;
  asio::cancellation_signal cancel;
  F fn;
  std::string name, workflow_id;
  step_info info;
  std::shared_ptr<left_behind> lb;
  std::optional<stored_t<T>> value;
  std::exception_ptr error;
  bool done = false;
  bool abandoned = false;

  void end() {
    done = true;
    if (abandoned && --lb->running == 0) lb->ended.cancel();
    wake.cancel();
  }
};

template <class T, class F>
asio::awaitable<stored_t<T>> timed_call_impl(std::shared_ptr<timed_attempt<T, F>> a,
                                             std::chrono::milliseconds limit) {
  a->wake.expires_after(limit);
  auto ex = co_await asio::this_coro::executor;
  auto op = call_step(a->fn, a->info);
  if constexpr (std::is_void_v<T>) {
    asio::co_spawn(ex, std::move(op),
                   asio::bind_cancellation_slot(a->cancel.slot(), [a](std::exception_ptr e) {
                     a->error = e;
                     if (!e) a->value.emplace();
                     a->end();
                   }));
  } else {
    asio::co_spawn(ex, std::move(op),
                   asio::bind_cancellation_slot(a->cancel.slot(), [a](std::exception_ptr e, T v) {
                     if (e)
                       a->error = e;
                     else
                       a->value.emplace(std::move(v));
                     a->end();
                   }));
  }
  asio::error_code ec;
  if (!a->done) co_await a->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (a->done) {
    if (a->error) std::rethrow_exception(a->error);
    co_return std::move(*a->value);
  }
  // The timeout, or the run was cancelled: the attempt is cancelled and left behind.
  a->abandoned = true;
  ++a->lb->running;
  a->cancel.emit(asio::cancellation_type::terminal);
  const asio::cancellation_state outer = co_await asio::this_coro::cancellation_state;
  if (outer.cancelled() != asio::cancellation_type::none)
    throw asio::system_error(asio::error::operation_aborted);
  throw step_timeout("workflow '" + a->workflow_id + "': attempt " +
                     std::to_string(a->info.attempt) + " of step " + std::to_string(a->info.seq) +
                     " '" + a->name + "' took longer than its " + std::to_string(limit.count()) +
                     " ms timeout; it was sent cancellation and abandoned");
}

/// Runs one attempt of an awaitable step function under `limit`. (A plain function: the
/// copies are made here, outside any co_await expression, GCC 12.)
template <class T, class F>
asio::awaitable<stored_t<T>> timed_call(const asio::any_io_executor& ex, const F& fn,
                                        const step_info& info, std::chrono::milliseconds limit,
                                        const std::shared_ptr<left_behind>& lb,
                                        const std::string& workflow_id) {
  auto a = std::make_shared<timed_attempt<T, F>>(ex, fn, info, lb, workflow_id);
  return timed_call_impl<T, F>(std::move(a), limit);
}
/// A step issued while a step function of the same run executes: from inside that function
/// (a nested step), or from a branch that runs beside it, which would number steps by
/// timing instead of program order (I4). Rejected at once; the workflow is parked.
DURABLE_DECL void check_not_nested(run_state& s, const std::string& name);

/// Counts a step function as running for check_not_nested() while it is in scope.
/// (On the path of every new step: a counter and a pointer, no copies.)
class step_function_scope {
public:
  step_function_scope(run_state& s, const std::string& name) : s_(s), name_(&name) {
    ++s_.step_functions_running;
    s_.running_step = name_;
  }
  step_function_scope(const step_function_scope&) = delete;
  step_function_scope& operator=(const step_function_scope&) = delete;
  ~step_function_scope() {
    --s_.step_functions_running;
    if (s_.running_step == name_) s_.running_step = nullptr;  // never left dangling
  }

private:
  run_state& s_;
  const std::string* name_;
};

/// After a step function failed: errors that are not the step's own (a nested step, the
/// engine shutting down and cancelling it) are raised as they are, never journaled.
DURABLE_DECL void check_failure_is_the_steps(run_state& s, int seq, const std::string& name);

// ---- waits, messages, events, child workflows (the non-template parts) ----

/// Whether run `s` may unload to wait: an engine behind it, no join running, and no step in
/// progress but the `own_steps` of the caller (1 from inside a step, 0 from a wait).
DURABLE_DECL bool can_unload(const run_state& s, int own_steps);

/// Runs statement `st` of step `seq`, which journals the step itself (fenced by the epoch,
/// DU001): ownership_lost when fenced out; other failures noted (retry or park) and rethrown.
DURABLE_DECL asio::awaitable<pg::result> run_journaling(run_state& s, int seq,
                                                        const std::string& name, pg::statement st);

/// Journals step `seq` as succeeded with `output` (JSON text).
DURABLE_DECL asio::awaitable<void> journal_value(run_state& s, int seq, const std::string& name,
                                                 const std::string& kind, const std::string& output,
                                                 double started);

/// The deadline (Unix seconds) of a wait whose first step is `seq`: journaled there (a step of
/// kind "deadline") when the wait begins, so that a replay waits only what is left. None for
/// `forever`.
DURABLE_DECL asio::awaitable<std::optional<double>> wait_deadline(
    run_state& s, int seq, const std::string& name, std::chrono::milliseconds timeout);

/// Waits for step `seq` until `look` finds what it waits for (true) or `deadline` passes
/// (false). Between looks the run sleeps until the listener pokes `key` (or poll_interval);
/// after unload_after in the run it unloads (run_released) with `wait_for` recorded, and what
/// it waits for wakes it.
DURABLE_DECL asio::awaitable<bool> wait_for_arrival(
    run_state& s, int seq, const std::string& name, const std::string& key,
    const store::wait_target& wait_for, std::optional<double> deadline,
    const std::function<asio::awaitable<bool>()>& look);

/// ctx.recv: the JSON its step (seq + 1; seq holds the deadline) journaled: "[payload]", or
/// "null" when the timeout passed.
DURABLE_DECL asio::awaitable<std::string> receive(run_state& s, int seq, const std::string& topic,
                                                  std::chrono::milliseconds timeout);
DURABLE_DECL asio::awaitable<void> send_message(run_state& s, int seq, const std::string& to,
                                                const std::string& topic,
                                                const std::string& payload);
DURABLE_DECL asio::awaitable<void> publish_event(run_state& s, int seq, const std::string& key,
                                                 const std::string& value);
/// ctx.get_event: "[value]" or "null" (timeout), journaled at seq + 1 (seq: the deadline).
DURABLE_DECL asio::awaitable<std::string> await_event(run_state& s, int seq,
                                                      const std::string& workflow_id,
                                                      const std::string& key,
                                                      std::chrono::milliseconds timeout);
/// A child's output (JSON), journaled; its failure is journaled and raised as step_failed.
DURABLE_DECL asio::awaitable<std::string> await_child(run_state& s, int seq,
                                                      const std::string& child);
/// Starts child workflow `name` as step `seq` (journaled with it); returns the child's id.
DURABLE_DECL asio::awaitable<std::string> start_child_workflow(run_state& s, int seq,
                                                               const std::string& name,
                                                               const std::string& inputs);

/// Decodes a "[value]" / "null" wait outcome.
template <class T>
std::optional<T> decode_arrival(run_state& s, int seq, const std::string& name,
                                const std::string& kind, const std::string& text) {
  if (text == "null") return std::nullopt;
  const journal_entry e{name, kind, false, text, {}};
  auto one = decode_text<std::vector<T>>(s, seq, e, text);
  if (one.size() != 1) {
    throw error(note_park(s, park_cause::codec,
                          "workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) +
                              " '" + name + "' journaled " + text +
                              ", not a one-element array; it is parked: repair the row, then "
                              "resume it"));
  }
  return std::optional<T>(std::move(one.front()));
}

/// Branches of ctx.all/any/map running as coroutines of their own. They are waited for in
/// every case (they refer to the workflow's frame); the first failure (or, for any, the
/// first branch to end) halts the others with Asio cancellation (terminal).
struct join_state {
  explicit join_state(const asio::any_io_executor& ex)
      : wake(ex, asio::steady_timer::time_point::max()) {}
  join_state(const join_state&) = delete;
  join_state& operator=(const join_state&) = delete;
  asio::steady_timer wake;
  std::deque<asio::cancellation_signal> signals;  // one per branch or worker
  int running = 0;
  bool halted = false;
  std::exception_ptr error;           // the failure that halted the join
  std::optional<std::size_t> winner;  // any: the branch that ended first

  /// Cancels every branch but `self`.
  void halt(std::size_t self) {
    if (halted) return;
    halted = true;
    for (std::size_t i = 0; i < signals.size(); ++i)
      if (i != self) signals[i].emit(asio::cancellation_type::terminal);
  }
  void fail(std::size_t self, std::exception_ptr e) {
    if (!error) error = std::move(e);
    halt(self);
  }

  /// Starts `branch` (an asio::awaitable<void>) as branch number signals.size().
  template <class Awaitable>
  void spawn(const asio::any_io_executor& ex, std::shared_ptr<join_state> self, Awaitable branch) {
    auto& sig = signals.emplace_back();
    ++running;
    const std::size_t index = signals.size() - 1;
    asio::co_spawn(ex, std::move(branch),
                   asio::bind_cancellation_slot(
                       sig.slot(), [self = std::move(self), index](std::exception_ptr e) {
                         if (e) self->fail(index, e);  // a branch's own errors are caught inside
                         --self->running;
                         self->wake.cancel();
                       }));
  }
};

/// Waits for every branch of `j` (see join_state).
DURABLE_DECL asio::awaitable<void> join_branches(join_state& j);

/// After a join: no branch may have issued a step meanwhile (I4); parks the workflow if one did.
DURABLE_DECL void check_join(run_state& s, int issued_before, const char* what);

/// Whether exception `e` is a step's own journaled failure (step_failed), which a branch of
/// ctx.any may win with.
inline bool is_step_failure(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const step_failed&) {
    return true;
  } catch (...) {
    return false;
  }
}
}  // namespace detail

/// A child workflow started by ctx.start_child(): its id (derived from the parent's id and the
/// step, "<parent id>/<step>"), and its result, awaited as a journaled step of the parent.
class child_handle {
public:
  child_handle() = default;
  [[nodiscard]] const std::string& id() const noexcept { return id_; }
  /// Waits for the child to end (its end wakes the parent, which unloads while it waits
  /// long) and returns its output, journaled. A child that failed or was cancelled raises
  /// step_failed (journaled too); one that is parked or dead-lettered keeps the parent
  /// waiting until an operator resumes, retries or cancels it.
  template <class R = void>
  [[nodiscard]] asio::awaitable<R> result() const;

private:
  friend class context;
  child_handle(context* c, std::string id) : ctx_(c), id_(std::move(id)) {}
  context* ctx_ = nullptr;
  std::string id_;
};

namespace detail {
/// Counts a join (ctx.all/any/map) as running while it is in scope: the run does not unload.
class join_scope {
public:
  explicit join_scope(run_state& s, bool any = false) : s_(s), any_(any) {
    ++s_.joins_running;
    if (any_) ++s_.anys_running;
  }
  join_scope(const join_scope&) = delete;
  join_scope& operator=(const join_scope&) = delete;
  ~join_scope() {
    --s_.joins_running;
    if (any_) --s_.anys_running;
  }

private:
  run_state& s_;
  bool any_;
};

/// One item of ctx.map as a step function: refers to the map's copy of the function and of
/// the item (trivially copyable, GCC 12; the map outlives its steps).
template <class F, class Item>
struct map_item_call {
  F* fn;
  const Item* item;
  decltype(auto) operator()(const step_info& info) const {
    if constexpr (std::is_invocable_v<F&, const Item&, const step_info&>)
      return std::invoke(*fn, *item, info);
    else
      return std::invoke(*fn, *item);
  }
};

template <class F, class Item>
struct map_state {
  using call = map_item_call<F, Item>;
  using value = step_value_t<call>;
  using stored = stored_t<value>;
  map_state(std::string n, std::vector<Item> i, F f, retry p)
      : name(std::move(n)),
        items(std::move(i)),
        fn(std::move(f)),
        policy(p),
        results(items.size()) {}
  std::string name;
  std::vector<Item> items;
  F fn;
  retry policy;
  std::vector<std::optional<stored>> results;
  std::size_t next = 0;
};
}  // namespace detail

class context {
public:
  explicit context(detail::run_state& s) noexcept : s_(&s) {}
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  [[nodiscard]] const std::string& workflow_id() const noexcept { return s_->id; }
  [[nodiscard]] const std::string& workflow_name() const noexcept { return s_->name; }

  /// The idempotency key of the step running now: "<workflow id>:<step number>", the same on
  /// every retry and replay. Hand it to external APIs so a repeated call is harmless. With
  /// concurrent steps, take the key from the step_info the step function can accept.
  [[nodiscard]] std::string idempotency_key() const {
    if (s_->current_seq < 0)
      throw error("workflow '" + s_->id + "': idempotency_key() called outside a step");
    return s_->key(s_->current_seq);
  }

  /// The rows this generation's journal holds: those loaded when the run began plus those it
  /// journaled since. engine_options::journal_limit bounds it (a new step beyond it parks the
  /// workflow); a workflow that runs for ever continues as new before it gets there:
  ///
  ///   if (ctx.journal_size() > 1000) co_return co_await ctx.continue_as_new<&poll>(cursor);
  [[nodiscard]] std::size_t journal_size() const noexcept { return s_->journal_rows; }

  /// How many times this workflow continued as new (0 for a workflow that never did).
  [[nodiscard]] std::int64_t generation() const noexcept { return s_->generation; }

  /// Ends this run and starts the workflow again from the top, under the same id, with `args`
  /// as its inputs and an empty journal: generation n + 1. One fenced statement replaces the
  /// inputs, deletes the journal, the recorded attempts and the consumed messages of
  /// generation n and bumps the generation; then the new generation starts at once in this
  /// process. Unconsumed messages stay for it, handles and result() keep working (same id).
  /// Crash-safe: before the statement commits a replay reaches this call again; after it the
  /// new generation runs. The awaitable never completes: write
  ///
  ///   co_return co_await ctx.continue_as_new<&poll>(next_cursor);
  ///
  /// `Workflow` (a function or a captureless lambda with the workflow's signature) types the
  /// call at compile time: `args` must convert to its parameters, and the awaitable's type is
  /// its result type. The workflow that continues is this one (its registered name); refused
  /// (the workflow parked) inside a ctx.all/any/map branch, inside a step, or with arguments
  /// that do not decode as the registered parameters. See docs/primitives.md#continue-as-new.
  template <auto Workflow, class... A>
  [[nodiscard]] auto continue_as_new(const A&... args)
      -> asio::awaitable<typename detail::workflow_function_traits<
          std::remove_pointer_t<decltype(Workflow)>>::result> {
    using traits = detail::workflow_function_traits<std::remove_pointer_t<decltype(Workflow)>>;
    using params = typename traits::args;
    static_assert(std::tuple_size_v<params> == sizeof...(A),
                  "continue_as_new<Workflow>(args...): give as many arguments as the workflow "
                  "has parameters (after its context&)");
    return continue_typed<typename traits::result>(static_cast<params*>(nullptr), args...);
  }

  /// The same without a function to type it against: the result type `R` (void by default)
  /// is given, and the arguments are checked when the call runs against the parameters the
  /// workflow was registered with (a mismatch parks the workflow with a clear reason).
  ///
  ///   co_await ctx.continue_as_new(next_cursor);                     // a void workflow
  ///   co_return co_await ctx.continue_as_new<int>(next_cursor);      // an int one
  template <class R = void, class... A>
  [[nodiscard]] asio::awaitable<R> continue_as_new(const A&... args) {
    detail::refuse_continue_in_join(*s_);
    detail::check_not_nested(*s_, "continue_as_new");
    std::string inputs = detail::encode_inputs(args...).dump();
    return continue_impl<R>(std::move(inputs));
  }

  /// True while the next step will come from the journal.
  [[nodiscard]] bool replaying() const noexcept {
    return std::size_t(s_->next_seq) < s_->journal.size() && s_->journal[std::size_t(s_->next_seq)];
  }

  /// Runs `fn` once and journals its result before the workflow continues; on replay returns
  /// the journaled result without calling `fn`. `fn` returns a value, void, or an
  /// asio::awaitable of either, and may take a `const step_info&`. If it throws (after
  /// `policy`'s retries), the error is journaled and raised as step_failed, now and on every
  /// replay. The step's number is taken here, when the step is issued (I4).
  template <class F>
  [[nodiscard]] asio::awaitable<detail::step_value_t<std::decay_t<F>>> step(std::string name,
                                                                            F&& fn,
                                                                            retry policy = {}) {
    using T = detail::step_value_t<std::decay_t<F>>;
    detail::check_step_function<F>();
    detail::check_not_nested(*s_, name);
    return run_step<T>(s_->next_seq++, std::move(name), "step", std::forward<F>(fn), policy);
  }

  /// Runs `fn(tx)` in a database transaction that commits together with the step's journal
  /// row: exactly once. `fn` returns asio::awaitable<T> and issues its SQL through `tx`.
  template <class F>
  [[nodiscard]] auto transaction(std::string name, F&& fn, retry policy = {}) -> asio::awaitable<
      typename detail::awaitable_value<std::invoke_result_t<F&, pg::transaction&>>::type> {
    using T = typename detail::awaitable_value<std::invoke_result_t<F&, pg::transaction&>>::type;
    detail::check_step_function<F>();
    detail::check_not_nested(*s_, name);
    return run_transaction<T>(s_->next_seq++, std::move(name), std::forward<F>(fn), policy);
  }

  /// The wall-clock time, journaled (I6): a replay sees the time of the first run.
  [[nodiscard]] asio::awaitable<std::chrono::system_clock::time_point> now() {
    detail::check_not_nested(*s_, "now");
    return now_impl(s_->next_seq++);
  }

  /// Durable sleep. The wake-up time is journaled (a step of kind "sleep"), so a replay sleeps
  /// only what is left, wherever and whenever it runs; a wake-up that fell in an outage comes
  /// right after it. A sleep of at least engine_options::unload_after unloads the workflow: its
  /// coroutine frame is destroyed, its ownership released, and whichever executor is free when
  /// it is due resumes it by replay (found by an index on workflows.wake_at). Shorter ones
  /// sleep in the run. Cancellation (cancel(), the deadline, shutdown) interrupts it.
  [[nodiscard]] asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    detail::check_not_nested(*s_, "sleep");
    return sleep_impl(s_->next_seq++, std::chrono::system_clock::now() + d);
  }

  /// Durable sleep until `t` (see sleep_for).
  [[nodiscard]] asio::awaitable<void> sleep_until(std::chrono::system_clock::time_point t) {
    detail::check_not_nested(*s_, "sleep");
    return sleep_impl(s_->next_seq++, t);
  }

  /// Versioning: true for a workflow that reaches this point under code that has the change
  /// `change_id`, false for one that passed this point before the change was deployed (its
  /// journal holds the old code's step here). The answer is journaled (a step of kind "patch"
  /// named `change_id`) the first time, so replays agree; a false answer takes no step number.
  ///
  ///   if (co_await ctx.patched("fraud-check")) co_await ctx.step("fraud-check", ...);
  ///
  /// See docs/versioning.md, also for retiring a patch with deprecate_patch().
  [[nodiscard]] asio::awaitable<bool> patched(std::string change_id) {
    detail::check_not_nested(*s_, change_id);
    const int seq = s_->next_seq;
    if (const detail::journal_entry* e = journal_at(seq)) {
      if (e->kind != "patch" || e->name != change_id) return no_patch();
      ++s_->next_seq;
      return replayed_patch();
    }
    ++s_->next_seq;
    return record_patch(seq, std::move(change_id));
  }

  /// Retires a patch once no workflow that passed its point before the change is left: code
  /// that called patched(id) and kept only the new branch calls deprecate_patch(id) there. It
  /// consumes the patch's journal row where a workflow has one (so both kinds replay) and
  /// journals nothing; once no workflow has the row, the call can be removed.
  [[nodiscard]] asio::awaitable<void> deprecate_patch(std::string change_id) {
    detail::check_not_nested(*s_, change_id);
    if (const detail::journal_entry* e = journal_at(s_->next_seq);
        e && e->kind == "patch" && e->name == change_id) {
      ++s_->next_seq;
      if (s_->counters) ++s_->counters->steps_replayed;
    }
    return no_op();
  }

  // ---- messages ------------------------------------------------------------------------

  /// Sends `value` to workflow `workflow_id` under `topic`, exactly once: the message and the
  /// step's journal row commit in one statement (the message's idempotency key is this
  /// step's, "<workflow id>:<step>"). A recipient that does not exist fails the step for good
  /// (step_failed, journaled).
  template <class T>
  [[nodiscard]] asio::awaitable<void> send(std::string workflow_id, std::string topic,
                                           const T& value) {
    detail::check_not_nested(*s_, topic);
    std::string payload = durable::encode<T>(value).dump();
    return send_impl(s_->next_seq++, std::move(workflow_id), std::move(topic), std::move(payload));
  }

  /// The oldest message sent to this workflow under `topic` that no recv consumed yet, or
  /// nullopt once `timeout` passed without one. Consuming it and journaling it commit in one
  /// statement: no message is lost or delivered twice across crashes. The wait is durable
  /// (its deadline is journaled, a replay waits what is left); a notification wakes it, with
  /// polling as the fallback, and a wait longer than engine_options::unload_after unloads the
  /// workflow until a message comes. Takes two step numbers (the deadline, the message).
  template <class T>
  [[nodiscard]] asio::awaitable<std::optional<T>> recv(
      std::string topic, std::chrono::milliseconds timeout = forever) {
    detail::check_not_nested(*s_, topic);
    const int seq = s_->next_seq;
    s_->next_seq += 2;
    return recv_impl<T>(seq, std::move(topic), timeout);
  }

  // ---- events --------------------------------------------------------------------------

  /// Publishes `value` under `key` for anyone to read (engine::get_event, ctx.get_event): the
  /// latest value wins. Published and journaled in one statement.
  template <class T>
  [[nodiscard]] asio::awaitable<void> set_event(std::string key, const T& value) {
    detail::check_not_nested(*s_, key);
    std::string v = durable::encode<T>(value).dump();
    return set_event_impl(s_->next_seq++, std::move(key), std::move(v));
  }

  /// The value workflow `workflow_id` published under `key`, waiting up to `timeout` for it
  /// (nullopt then). Journaled: a replay returns what the first run read. Takes two step
  /// numbers (the deadline, the value).
  template <class T>
  [[nodiscard]] asio::awaitable<std::optional<T>> get_event(
      std::string workflow_id, std::string key, std::chrono::milliseconds timeout = forever) {
    detail::check_not_nested(*s_, key);
    const int seq = s_->next_seq;
    s_->next_seq += 2;
    return get_event_impl<T>(seq, std::move(workflow_id), std::move(key), timeout);
  }

  // ---- child workflows -----------------------------------------------------------------

  /// Starts workflow `name` with `args` as a child of this one: its id is "<this id>/<step>",
  /// its parent_id this workflow's, so a replay reattaches to the same child instead of
  /// starting another; the child and this step's journal row commit together. Any executor
  /// that runs `name` picks it up. Cancelling this workflow cancels its unfinished children.
  template <class... Args>
  [[nodiscard]] asio::awaitable<child_handle> start_child(std::string name, const Args&... args) {
    detail::check_not_nested(*s_, name);
    std::string inputs = detail::encode_inputs(args...).dump();
    return start_child_impl(s_->next_seq++, std::move(name), std::move(inputs));
  }

  /// child_handle::result: the child's output, as a journaled step of this workflow.
  template <class R = void>
  [[nodiscard]] asio::awaitable<R> child_result(std::string child_id) {
    detail::check_not_nested(*s_, child_id);
    return child_result_impl<R>(s_->next_seq++, std::move(child_id));
  }

  // ---- fan-out and fan-in --------------------------------------------------------------

  /// Runs branches issued beforehand (steps, child results, receives: anything that took its
  /// step number when it was created) concurrently and returns all their values, in the
  /// order given. Step numbers come from the order the branches were issued, never from the
  /// order they complete, so a replay is identical whatever the timing. The first failure
  /// cancels the others (their steps are not recorded as failed) and is raised.
  ///
  ///   auto a = ctx.step("price", [&] { return price(sku); });  // step 0
  ///   auto b = ctx.step("stock", [&] { return stock(sku); });  // step 1
  ///   auto [p, n] = co_await ctx.all(std::move(a), std::move(b));
  template <class... T>
  [[nodiscard]] asio::awaitable<std::tuple<detail::stored_t<T>...>> all(
      asio::awaitable<T>&&... branches) {
    static_assert(sizeof...(T) > 0, "ctx.all needs at least one branch");
    return all_impl<T...>(std::tuple<asio::awaitable<T>...>(std::move(branches)...));
  }

  /// Runs branches issued beforehand concurrently until the first one ends; the others are
  /// cancelled. Which branch won is journaled (a step of kind "any"), so a replay returns the
  /// same branch's journaled outcome. The variant's index is the winner's position; a winner
  /// that failed raises its step_failed. Takes one step number, after the branches'.
  template <class... T>
  [[nodiscard]] asio::awaitable<std::variant<detail::stored_t<T>...>> any(
      asio::awaitable<T>&&... branches) {
    static_assert(sizeof...(T) > 0, "ctx.any needs at least one branch");
    detail::check_not_nested(*s_, "any");
    return any_impl<T...>(s_->next_seq++,
                          std::tuple<asio::awaitable<T>...>(std::move(branches)...));
  }

  /// A bounded map: one step per item ("name[i]", step numbers taken now in item order),
  /// at most `in_flight` running at once; returns the results in item order. The map owns
  /// `items` and its copy of `fn`, which receives each item by const reference (and, if it
  /// accepts one, the step_info): nothing refers to a loop variable of the caller. The first
  /// item that fails for good cancels the ones running and is raised; a replay returns the
  /// journaled results and runs only the missing items.
  template <class Item, class F>
  [[nodiscard]] auto map(std::string name, std::vector<Item> items, std::size_t in_flight, F&& fn,
                         retry policy = {}) {
    detail::check_step_function<F>();
    detail::check_not_nested(*s_, name);
    using state = detail::map_state<std::decay_t<F>, Item>;
    if (in_flight == 0)
      throw error("workflow '" + s_->id + "': ctx.map('" + name + "') needs in_flight >= 1");
    const int base = s_->next_seq;
    s_->next_seq += int(items.size());
    auto st =
        std::make_shared<state>(std::move(name), std::move(items), std::forward<F>(fn), policy);
    return map_impl<state>(base, in_flight, std::move(st));
  }

  /// 64 random bits, journaled (I6).
  [[nodiscard]] asio::awaitable<std::uint64_t> random() {
    detail::check_not_nested(*s_, "random");
    return run_step<std::uint64_t>(s_->next_seq++, "random", "random", [] { return random_u64(); },
                                   {});
  }

  /// A random (version 4) UUID, journaled (I6).
  [[nodiscard]] asio::awaitable<std::string> uuid() {
    detail::check_not_nested(*s_, "uuid");
    return run_step<std::string>(s_->next_seq++, "uuid", "uuid", [] { return make_uuid(); }, {});
  }

private:
  static std::uint64_t random_u64() {
    thread_local std::mt19937_64 gen{std::random_device{}()};
    return gen();
  }
  static std::string make_uuid() {
    std::uint64_t hi = random_u64(), lo = random_u64();
    hi = (hi & 0xffffffffffff0fffull) | 0x0000000000004000ull;  // version 4
    lo = (lo & 0x3fffffffffffffffull) | 0x8000000000000000ull;  // variant 10
    char buf[37];
    std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", unsigned(hi >> 32),
                  unsigned((hi >> 16) & 0xffff), unsigned(hi & 0xffff), unsigned(lo >> 48),
                  static_cast<unsigned long long>(lo & 0xffffffffffffull));
    return buf;
  }

  template <class R, class... P, class... A>
  asio::awaitable<R> continue_typed(std::tuple<P...>*, const A&... args) {
    static_assert((std::is_convertible_v<const A&, P> && ...),
                  "continue_as_new<Workflow>(args...): an argument does not convert to the "
                  "workflow's parameter type");
    detail::refuse_continue_in_join(*s_);
    detail::check_not_nested(*s_, "continue_as_new");
    std::string inputs = detail::encode_inputs<P...>(P(args)...).dump();
    return continue_impl<R>(std::move(inputs));
  }
  template <class R>
  asio::awaitable<R> continue_impl(std::string inputs) {
    co_await detail::continue_run(*s_, inputs);
    throw detail::continued_as_new{};  // not reached: continue_run always throws
  }

  asio::awaitable<std::chrono::system_clock::time_point> now_impl(int seq) {
    using namespace std::chrono;
    auto step = run_step<std::int64_t>(
        seq, "now", "now",
        [] { return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count(); },
        {});
    const auto us = co_await std::move(step);
    co_return system_clock::time_point(duration_cast<system_clock::duration>(microseconds(us)));
  }

  [[nodiscard]] const detail::journal_entry* journal_at(int seq) const {
    if (std::size_t(seq) >= s_->journal.size() || !s_->journal[std::size_t(seq)]) return nullptr;
    return &*s_->journal[std::size_t(seq)];
  }
  static asio::awaitable<bool> no_patch() { co_return false; }
  asio::awaitable<bool> replayed_patch() {
    if (s_->counters) ++s_->counters->steps_replayed;
    co_return true;
  }
  static asio::awaitable<void> no_op() { co_return; }
  asio::awaitable<bool> record_patch(int seq, std::string change_id) {
    auto step = run_step<void>(seq, std::move(change_id), "patch", [] {}, {});
    co_await std::move(step);
    co_return true;
  }

  asio::awaitable<void> sleep_impl(int seq, std::chrono::system_clock::time_point until) {
    using namespace std::chrono;
    // The first run journals the wake-up time it asked for; a replay reads it back.
    const std::int64_t asked = duration_cast<microseconds>(until.time_since_epoch()).count();
    auto step = run_step<std::int64_t>(seq, "sleep", "sleep", [asked] { return asked; }, {});
    const std::int64_t wake_us = co_await std::move(step);
    const std::int64_t now_us =
        duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
    if (wake_us <= now_us) co_return;
    const auto left = milliseconds((wake_us - now_us + 999) / 1000);
    const std::string name = "sleep", what = "the wake-up of its sleep";
    co_await detail::pause_or_unload(*s_, seq, name, left, what, 0);
  }

  asio::awaitable<void> send_impl(int seq, std::string to, std::string topic, std::string payload) {
    co_await detail::send_message(*s_, seq, to, topic, payload);
  }
  template <class T>
  asio::awaitable<std::optional<T>> recv_impl(int seq, std::string topic,
                                              std::chrono::milliseconds timeout) {
    const std::string text = co_await detail::receive(*s_, seq, topic, timeout);
    const std::string kind = "recv";
    co_return detail::decode_arrival<T>(*s_, seq + 1, topic, kind, text);
  }
  asio::awaitable<void> set_event_impl(int seq, std::string key, std::string value) {
    co_await detail::publish_event(*s_, seq, key, value);
  }
  template <class T>
  asio::awaitable<std::optional<T>> get_event_impl(int seq, std::string workflow_id,
                                                   std::string key,
                                                   std::chrono::milliseconds timeout) {
    const std::string text = co_await detail::await_event(*s_, seq, workflow_id, key, timeout);
    const std::string kind = "get_event", name = workflow_id + ":" + key;
    co_return detail::decode_arrival<T>(*s_, seq + 1, name, kind, text);
  }
  asio::awaitable<child_handle> start_child_impl(int seq, std::string name, std::string inputs) {
    std::string id = co_await detail::start_child_workflow(*s_, seq, name, inputs);
    co_return child_handle(this, std::move(id));
  }
  template <class R>
  asio::awaitable<R> child_result_impl(int seq, std::string child_id) {
    const std::string text = co_await detail::await_child(*s_, seq, child_id);
    if constexpr (!std::is_void_v<R>) {
      const detail::journal_entry e{child_id, "child-result", false, text, {}};
      co_return detail::decode_text<R>(*s_, seq, e, text);
    }
  }

  template <std::size_t I, class Values, class T>
  static asio::awaitable<void> all_branch(std::shared_ptr<detail::join_state> j,
                                          std::shared_ptr<Values> values, asio::awaitable<T> a) {
    try {
      if constexpr (std::is_void_v<T>) {
        co_await std::move(a);
        std::get<I>(*values).emplace();
      } else {
        std::get<I>(*values).emplace(co_await std::move(a));
      }
    } catch (...) {
      j->fail(I, std::current_exception());
    }
  }
  template <class Values, class Branches, std::size_t... I>
  static void spawn_all(const asio::any_io_executor& ex,
                        const std::shared_ptr<detail::join_state>& j,
                        const std::shared_ptr<Values>& values, Branches& branches,
                        std::index_sequence<I...>) {
    (j->spawn(ex, j, all_branch<I>(j, values, std::move(std::get<I>(branches)))), ...);
  }
  template <class... T>
  asio::awaitable<std::tuple<detail::stored_t<T>...>> all_impl(
      std::tuple<asio::awaitable<T>...> branches) {
    using values_t = std::tuple<std::optional<detail::stored_t<T>>...>;
    auto ex = co_await asio::this_coro::executor;
    auto j = std::make_shared<detail::join_state>(ex);
    auto values = std::make_shared<values_t>();
    const int before = s_->next_seq;
    {
      detail::join_scope scope(*s_);
      spawn_all(ex, j, values, branches, std::index_sequence_for<T...>{});
      co_await detail::join_branches(*j);
    }
    detail::check_join(*s_, before, "all");
    if (j->error) std::rethrow_exception(j->error);
    co_return std::apply([](auto&... v) { return std::make_tuple(std::move(*v)...); }, *values);
  }

  template <class... T>
  struct any_values {
    std::tuple<std::optional<detail::stored_t<T>>...> values;
    std::array<std::exception_ptr, sizeof...(T)> failures{};
  };
  template <std::size_t I, class Values, class T>
  static asio::awaitable<void> any_branch(std::shared_ptr<detail::join_state> j,
                                          std::shared_ptr<Values> v, asio::awaitable<T> a) {
    std::exception_ptr failure;
    try {
      if constexpr (std::is_void_v<T>) {
        co_await std::move(a);
        std::get<I>(v->values).emplace();
      } else {
        std::get<I>(v->values).emplace(co_await std::move(a));
      }
    } catch (...) {
      failure = std::current_exception();
    }
    if (j->winner) co_return;  // lost (cancelled, or ended after the winner)
    if (failure && !detail::is_step_failure(failure)) {
      j->fail(I, failure);  // not the step's own outcome: the join stops without a winner
      co_return;
    }
    j->winner = I;
    v->failures[I] = failure;
    j->halt(I);
  }
  template <class Values, class Branches, std::size_t... I>
  static void spawn_any(const asio::any_io_executor& ex,
                        const std::shared_ptr<detail::join_state>& j,
                        const std::shared_ptr<Values>& v, Branches& branches,
                        std::optional<std::size_t> only, std::index_sequence<I...>) {
    ((!only || *only == I ? j->spawn(ex, j, any_branch<I>(j, v, std::move(std::get<I>(branches))))
                          : void()),
     ...);
  }
  template <class Variant, class Values, std::size_t... I>
  static Variant pick(Values& v, std::size_t winner, std::index_sequence<I...>) {
    std::optional<Variant> out;
    ((winner == I ? (void)out.emplace(std::in_place_index<I>, std::move(*std::get<I>(v.values)))
                  : void()),
     ...);
    return std::move(*out);
  }
  template <class... T>
  asio::awaitable<std::variant<detail::stored_t<T>...>> any_impl(
      int seq, std::tuple<asio::awaitable<T>...> branches) {
    detail::run_state& s = *s_;
    const std::string name = "any", kind = "any";
    std::optional<std::size_t> journaled;
    if (const detail::journal_entry* e = detail::replay_entry(s, seq, name, kind)) {
      journaled = detail::decode_journaled<std::size_t>(s, seq, *e);
      if (s.counters) ++s.counters->steps_replayed;
      if (*journaled >= sizeof...(T)) {
        throw error(detail::note_park(
            s, detail::park_cause::codec,
            "workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) +
                " journaled branch " + std::to_string(*journaled) + " of ctx.any as the " +
                "winner, but the code has " + std::to_string(sizeof...(T)) +
                " branches there. It is parked until code that matches it is deployed"));
      }
    } else {
      detail::require_live(s, seq, name);
    }
    // The winner's row is counted now, before the branches run (the journal limit).
    std::optional<detail::row_hold> hold;
    if (!journaled) hold.emplace(s, seq, name);
    const double started = detail::unix_seconds();
    auto ex = co_await asio::this_coro::executor;
    auto j = std::make_shared<detail::join_state>(ex);
    auto v = std::make_shared<any_values<T...>>();
    const int before = s.next_seq;
    {
      detail::join_scope scope(s, true);
      spawn_any(ex, j, v, branches, journaled, std::index_sequence_for<T...>{});
      co_await detail::join_branches(*j);
    }
    detail::check_join(s, before, "any");
    // A failure that is no branch's own outcome (I/O, misuse, a lost lease) wins over any
    // winner: nothing is journaled.
    if (j->error || !j->winner) std::rethrow_exception(j->error);
    const std::size_t winner = *j->winner;
    if (!journaled) {
      const std::string output = std::to_string(winner);
      co_await detail::journal_value(s, seq, name, kind, output, started);
    }
    if (v->failures[winner]) std::rethrow_exception(v->failures[winner]);
    co_return pick<std::variant<detail::stored_t<T>...>>(*v, winner,
                                                         std::index_sequence_for<T...>{});
  }

  template <class State>
  asio::awaitable<void> map_worker(std::shared_ptr<detail::join_state> j, std::shared_ptr<State> st,
                                   int base, std::size_t self) {
    for (;;) {
      if (j->halted) co_return;
      const std::size_t i = st->next++;
      if (i >= st->items.size()) co_return;
      const typename State::call call{&st->fn, &st->items[i]};
      try {
        auto step = run_step<typename State::value>(
            base + int(i), st->name + "[" + std::to_string(i) + "]", "step", call, st->policy);
        if constexpr (std::is_void_v<typename State::value>) {
          co_await std::move(step);
          st->results[i].emplace();
        } else {
          st->results[i].emplace(co_await std::move(step));
        }
      } catch (...) {
        j->fail(self, std::current_exception());
        co_return;
      }
    }
  }
  template <class State>
  asio::awaitable<std::vector<typename State::stored>> map_impl(int base, std::size_t in_flight,
                                                                std::shared_ptr<State> st) {
    auto ex = co_await asio::this_coro::executor;
    auto j = std::make_shared<detail::join_state>(ex);
    const std::size_t workers = std::min(in_flight, st->items.size());
    {
      detail::join_scope scope(*s_);
      for (std::size_t k = 0; k < workers; ++k) j->spawn(ex, j, map_worker(j, st, base, k));
      co_await detail::join_branches(*j);
    }
    if (j->error) std::rethrow_exception(j->error);
    std::vector<typename State::stored> out;
    out.reserve(st->results.size());
    for (auto& r : st->results) out.push_back(std::move(*r));
    co_return out;
  }

  template <class T, class F>
  asio::awaitable<T> run_step(int seq, std::string name, std::string kind, F fn, retry policy) {
    detail::run_state& s = *s_;
    if (const detail::journal_entry* e = detail::replay_entry(s, seq, name, kind))
      co_return detail::replay_value<T>(s, seq, *e);
    const detail::attempt_history* history = detail::attempt_state(s, seq, name, kind);
    detail::require_live(s, seq, name);
    constexpr bool is_awaitable = detail::awaitable_value<detail::step_return_t<F>>::is_awaitable;
    if (!is_awaitable && policy.timeout.count() > 0)
      detail::refuse_timeout(s, seq, name,
                             "its function cannot be cancelled: a timeout needs a step function "
                             "that returns an asio::awaitable (a synchronous function blocks the "
                             "event loop until it returns)");
    // Its row is counted from now on (the journal limit): a concurrent branch issued while
    // its function runs sees it, and nothing runs beyond the limit.
    detail::row_hold hold(s, seq, name);
    // From here until its row is committed the step is in progress: its function, the pauses
    // between attempts, and the journal write. A step issued meanwhile is refused (I4).
    detail::step_function_scope scope(s, name);
    if (history && history->next_attempt_at) co_await detail::wait_until_due(s, seq, name, history);

    const double first_started = detail::unix_seconds();
    int attempt = history ? history->last_attempt : 0;
    int failures = history ? history->failures : 0;
    std::shared_ptr<detail::left_behind> abandoned;  // attempts left at their timeout
    std::optional<detail::stored_t<T>> result;
    std::exception_ptr stop;
    try {
      for (;;) {
        if (attempt > (history ? history->last_attempt : 0))
          detail::require_live(s, seq, name);  // the pause may have outlasted the lease
        ++attempt;
        ++failures;
        s.current_seq = seq;
        const double started = detail::unix_seconds();
        const step_info info{seq, name, attempt, s.key(seq)};
        std::optional<detail::stored_t<T>> value;
        detail::captured_error failure;
        std::exception_ptr thrown;
        bool may_retry = false;
        try {
          if constexpr (is_awaitable) {
            if (policy.timeout.count() > 0) {
              // An attempt left behind at its timeout owns a copy of the function, and hands
              // its value through asio::co_spawn, which needs a default-constructible result.
              if constexpr (std::is_copy_constructible_v<F> &&
                            (std::is_void_v<T> || std::is_default_constructible_v<T>)) {
                auto ex = co_await asio::this_coro::executor;
                if (!abandoned) abandoned = std::make_shared<detail::left_behind>(ex);
                auto timed = detail::timed_call<T>(ex, fn, info, policy.timeout, abandoned, s.id);
                value.emplace(co_await std::move(timed));
              } else {
                detail::refuse_timeout(s, seq, name,
                                       "a step with a timeout needs a copyable function and a "
                                       "default-constructible result (an attempt abandoned at "
                                       "its timeout keeps a copy of the function)");
              }
            } else if constexpr (std::is_void_v<T>) {
              co_await detail::call_step(fn, info);
              value.emplace();
            } else {
              value.emplace(co_await detail::call_step(fn, info));
            }
          } else {
            if constexpr (std::is_void_v<T>) {
              detail::call_step(fn, info);
              value.emplace();
            } else {
              value.emplace(detail::call_step(fn, info));
            }
          }
        } catch (...) {
          thrown = std::current_exception();
          failure = detail::capture(thrown);
          may_retry = detail::retryable(policy, thrown);
        }
        if (value) {
          // Named, not temporaries: GCC 12 corrupts owning temporaries inside co_await.
          std::optional<std::string> output;
          const std::optional<std::string> no_error;
          if constexpr (!std::is_void_v<T>) output = durable::encode<T>(*value).dump();
          co_await detail::append(s, seq, name, kind, output, no_error, attempt, first_started);
          result = std::move(value);
          break;
        }
        detail::check_failure_is_the_steps(s, seq, name);
        {
          // Cancelled from outside (ctx.all/any gave up on this branch): not the step's
          // failure, nothing is recorded; the step runs again if the workflow gets here again.
          const asio::cancellation_state outer = co_await asio::this_coro::cancellation_state;
          if (outer.cancelled() != asio::cancellation_type::none) std::rethrow_exception(thrown);
        }
        const auto pause = co_await detail::record_failure(s, seq, name, kind, policy, attempt,
                                                           failures, may_retry, failure, started);
        co_await detail::sleep_for(pause);
      }
    } catch (...) {
      stop = std::current_exception();
    }
    if (abandoned && abandoned->running > 0) {
      // Waited for even when the run is being cancelled (a cancelled coroutine would throw at
      // the co_await instead of entering it): the frame they may refer to must outlive them.
      const bool throws = co_await asio::this_coro::throw_if_cancelled();
      co_await asio::this_coro::throw_if_cancelled(false);
      co_await detail::wait_for_abandoned(*abandoned);
      co_await asio::this_coro::throw_if_cancelled(throws);
    }
    if (stop) std::rethrow_exception(stop);
    if constexpr (!std::is_void_v<T>) co_return std::move(*result);
  }

  template <class T, class F>
  asio::awaitable<T> run_transaction(int seq, std::string name, F fn, retry policy) {
    detail::run_state& s = *s_;
    const std::string kind = "transaction";
    if (const detail::journal_entry* e = detail::replay_entry(s, seq, name, kind))
      co_return detail::replay_value<T>(s, seq, *e);
    const detail::attempt_history* history = detail::attempt_state(s, seq, name, kind);
    detail::require_live(s, seq, name);
    if (policy.timeout.count() > 0)
      detail::refuse_timeout(s, seq, name,
                             "a transactional step cannot be abandoned (use SET LOCAL "
                             "statement_timeout in the transaction instead)");
    detail::row_hold hold(s, seq, name);         // its row counted from now on (journal limit)
    detail::step_function_scope scope(s, name);  // in progress until its row commits (I4)
    if (history && history->next_attempt_at) co_await detail::wait_until_due(s, seq, name, history);

    const double first_started = detail::unix_seconds();
    int attempt = history ? history->last_attempt : 0;
    int failures = history ? history->failures : 0;
    int contended_in_a_row = 0;
    for (;;) {
      s.current_seq = seq;
      const double started = detail::unix_seconds();
      std::optional<detail::stored_t<T>> value;
      detail::captured_error failure;
      bool may_retry = false;
      std::string contention;  // the serialization failure or deadlock, if that was it
      {                        // the connection goes back to the pool before a failure is recorded
        auto conn = co_await detail::acquire(s);
        std::optional<pg::transaction> tx;
        tx.emplace(conn->begin());
        try {
          if constexpr (std::is_void_v<T>) {
            co_await fn(*tx);
            value.emplace();
          } else {
            value.emplace(co_await fn(*tx));
          }
        } catch (const pg::sql_error& e) {
          if (detail::is_contention(e)) {
            contention = detail::describe_io_failure(e);
          } else if (detail::classify(e) == detail::io_verdict::transient) {
            // A timeout, a cancel, a lost server is the database's, not the step's: the run
            // is retried (the function runs again in a fresh transaction).
            s.outcome.note(detail::verdict::retry(detail::describe_io_failure(e)));
            throw;
          } else {
            failure = detail::capture(std::current_exception());
            may_retry = detail::retryable(policy, std::current_exception());
          }
        } catch (const pg::connection_error& e) {
          // The database, not the step, failed: retry the workflow instead of recording it.
          s.outcome.note(detail::verdict::retry(detail::describe_io_failure(e)));
          throw;
        } catch (...) {
          failure = detail::capture(std::current_exception());
          may_retry = detail::retryable(policy, std::current_exception());
        }
        if (!value && contention.empty()) detail::check_failure_is_the_steps(s, seq, name);
        if (value) {
          std::optional<std::string> output;
          if constexpr (!std::is_void_v<T>) output = durable::encode<T>(*value).dump();
          // Counted since the step was issued (the hold); held again below if the
          // transaction does not commit.
          detail::reserve_row(s, seq, name);
          try {
            // The journal row rides in the same round trip as COMMIT, inside the transaction:
            // the user's writes and the row commit together or not at all.
            const std::string succeeded = "succeeded";
            fenced_write write =
                s.st->step_append(s.id, s.epoch, seq, name, kind, succeeded, output, std::nullopt,
                                  attempt + 1, first_started);
            std::vector<pg::statement> row;
            row.push_back(std::move(write.st));
            co_await tx->commit(std::move(row));
          } catch (const pg::sql_error& e) {
            const fence_verdict verdict = store::verdict(e);
            if (verdict.fenced_out())
              throw ownership_lost(s.id, "workflow '" + s.id + "': transaction step " +
                                             std::to_string(seq) + " '" + name +
                                             "' rolled back because another executor took "
                                             "the workflow over; this run stops");
            if (e.batch_index() != 0 && detail::is_contention(e)) {
              contention = detail::describe_io_failure(e);  // COMMIT lost a race (SERIALIZABLE)
            } else if (e.batch_index() == 0 ||
                       detail::classify(e) == detail::io_verdict::transient) {
              // The journal row (statement 0) refused, or any transient error: the
              // library's failure, never recorded as the step's. COMMIT refused (a deferred
              // constraint of the user's tables): the step's own failure.
              detail::note_io_failure(s, seq, name, e);
              throw;
            } else {
              failure = detail::capture(std::current_exception());
              may_retry = detail::retryable(policy, std::current_exception());
            }
            value.reset();
          } catch (const pg::connection_error& e) {
            s.outcome.note(detail::verdict::retry(detail::describe_io_failure(e)));
            throw;
          } catch (const pg::error&) {
            // The function left the transaction failed (it caught a failing statement and
            // returned): it rolls back, and that is the step's failure.
            failure = detail::capture(std::current_exception());
            may_retry = detail::retryable(policy, std::current_exception());
            value.reset();
          }
          if (value) {
            if (s.counters) ++s.counters->steps_executed;
            if constexpr (!std::is_void_v<T>)
              co_return std::move(*value);
            else
              co_return;
          }
          hold.again();
        }
        tx.reset();  // rolls back with the connection's next statement
      }
      if (!contention.empty()) {
        // Lost a race with another transaction: the database's doing, not the step's. Run
        // the function again in a fresh transaction after a short, growing, jittered pause.
        if (++contended_in_a_row >= std::max(policy.contention_attempts, 1)) {
          s.outcome.note(detail::verdict::retry(contention));
          throw error("workflow '" + s.id + "': transaction step " + std::to_string(seq) + " '" +
                      name + "' lost " + std::to_string(contended_in_a_row) + " races in a row (" +
                      contention + "); the workflow is retried");
        }
        co_await detail::sleep_for(std::chrono::milliseconds(
            1 + random_u64() % std::uint64_t(5 << std::min(contended_in_a_row, 6))));
        continue;
      }
      contended_in_a_row = 0;
      ++attempt;
      ++failures;
      const auto pause = co_await detail::record_failure(s, seq, name, kind, policy, attempt,
                                                         failures, may_retry, failure, started);
      co_await detail::sleep_for(pause);
    }
  }

  detail::run_state* s_;
};

template <class R>
asio::awaitable<R> child_handle::result() const {
  if (!ctx_) throw error("child_handle::result(): this handle refers to no child workflow");
  return ctx_->child_result<R>(id_);
}

}  // namespace durable

#if defined(DURABLE_HEADER_ONLY)
#include "durable/impl/context.ipp"
#endif
