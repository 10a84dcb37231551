// The machinery around each step of durable/context.hpp: value types, decoding journaled
// values, the checks before and after a step, timed attempts, waits and joins (declarations of
// the non-template parts live here; their bodies are in impl/context.ipp).
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
#include "durable/detail/spans.hpp"
#include "durable/error.hpp"
#include "durable/pg/connection.hpp"
#include "durable/retry.hpp"

namespace durable {
class context;
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

/// Awaits `op`, a write of run `s`'s journal for step `seq` (shielded from cancellation while a
/// join runs: a halted branch waits for its write's outcome): ownership_lost when the fence
/// refused it (with `if_fenced`, or the step's own message), any other failure noted
/// (note_io_failure: retried or parked) and rethrown.
template <class T>
asio::awaitable<T> journaling_impl(run_state& s, int seq, const std::string& name,
                                   asio::awaitable<T> op, const std::string* if_fenced) {
  try {
    if (s.joins_running > 0) {
      auto ex = co_await asio::this_coro::executor;
      co_return co_await shielded(ex, std::move(op));
    }
    co_return co_await std::move(op);
  } catch (const journal_fenced& f) {
    throw ownership_lost(s.id, if_fenced ? *if_fenced : journal_fenced_message(s, seq, name, f));
  } catch (const std::exception& e) {
    note_io_failure(s, seq, name, e);
    throw;
  }
}
/// A plain function, so that the awaitable made in the caller's co_await is moved into the
/// coroutine, never relocated by GCC 12 (docs/architecture.md#compiler-notes).
template <class T>
asio::awaitable<T> journaling(run_state& s, int seq, const std::string& name, asio::awaitable<T> op,
                              const std::string* if_fenced = nullptr) {
  return journaling_impl<T>(s, seq, name, std::move(op), if_fenced);
}

/// The journal of run `s`, which must have one (it executes a step).
inline journal& io_of(run_state& s) {
  if (!s.io) throw error("workflow '" + s.id + "': this replay has no journal to write to");
  return *s.io;
}

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
                std::shared_ptr<left_behind> l, const std::string& workflow, virtual_clock* c)
      : wake(ex, asio::steady_timer::time_point::max()),
        clock(c),
        fn(f),
        name(i.name),
        workflow_id(workflow),
        info{i.seq, name, i.attempt, i.idempotency_key},
        lb(std::move(l)) {}
  timed_attempt(const timed_attempt&) = delete;
  timed_attempt& operator=(const timed_attempt&) = delete;
  ~timed_attempt() { disarm_timer(clock, wake); }
  asio::steady_timer wake;
  virtual_clock* clock;  // the run's (the test kit's), null for real time
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
  arm_timer(a->clock, a->wake, limit);
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
  disarm_timer(a->clock, a->wake);
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
                                        const std::string& workflow_id, virtual_clock* clock) {
  auto a = std::make_shared<timed_attempt<T, F>>(ex, fn, info, lb, workflow_id, clock);
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

/// Whether run `s` may unload to wait: a journal that unloads, no join running, and no step in
/// progress but the `own_steps` of the caller (1 from inside a step, 0 from a wait).
DURABLE_DECL bool can_unload(const run_state& s, int own_steps);

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
/// it waits for wakes it. The caller has looked once: this looks again once registered, unless
/// `nothing_new` (if given) says that nothing can have arrived since.
DURABLE_DECL asio::awaitable<bool> wait_for_arrival(
    run_state& s, int seq, const std::string& name, const std::string& key,
    const wait_target& wait_for, std::optional<double> deadline,
    const std::function<asio::awaitable<bool>()>& look,
    const std::function<bool()>& nothing_new = {});

/// ctx.recv: the JSON its step (seq + 1; seq holds the deadline) journaled: "[payload]", or
/// "null" when the timeout passed.
DURABLE_DECL asio::awaitable<std::string> receive(run_state& s, int seq, const std::string& topic,
                                                  std::chrono::milliseconds timeout);
DURABLE_DECL asio::awaitable<void> send_message(run_state& s, int seq, const std::string& to,
                                                const std::string& topic,
                                                const std::string& payload);
DURABLE_DECL asio::awaitable<void> publish_event(run_state& s, int seq, const std::string& key,
                                                 const std::string& value);
/// ctx.write_stream (a value) and ctx.close_stream (none): the offset journaled at `seq`.
DURABLE_DECL asio::awaitable<std::int64_t> append_to_stream(run_state& s, int seq, std::string key,
                                                            std::optional<std::string> value);
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
}  // namespace durable
