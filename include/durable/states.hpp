// The states the engine writes to its tables, as enums with one spelling each: a workflow's
// status (workflows.status), a journal row's kind (steps.kind, step_attempts.kind), a journal
// row's status (steps.status) and a failed attempt's outcome (step_attempts.outcome).
//
// The spellings are the ones in the tables and in the CHECK constraints of sql/migrations (a
// test reads the constraints from pg_constraint and compares them with these lists); psql, the
// CLI, the metrics and the docs show the same words. Light on purpose: the standard library
// and the error header only, so that the replay core and the tools can include it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "durable/error.hpp"

namespace durable {

// ---- workflows.status ------------------------------------------------------------------------

/// A workflow's status (workflows.status, CHECK workflows_status_check). The struct
/// `durable::workflow_status` (what `workflow_handle::status()` returns) holds one of these
/// spellings in its `status` field; hence the enum's name.
enum class workflow_state : std::uint8_t {
  pending,      ///< started or queued, not claimed yet (or released for another executor)
  running,      ///< claimed by an executor that replays or runs it
  sleeping,     ///< unloaded until wake_at or until what it waits for (wait_for) arrives
  succeeded,    ///< finished, its output committed (I8)
  failed,       ///< finished, the workflow function threw
  parked,       ///< stopped for an operator (nondeterminism, no progress, ...): status_reason
  cancelled,    ///< finished: cancelled or past its deadline
  dead_letter,  ///< a step exhausted its attempts; `durable retry` runs it again
};

inline constexpr std::array all_workflow_states = {
    workflow_state::pending,   workflow_state::running,    workflow_state::sleeping,
    workflow_state::succeeded, workflow_state::failed,     workflow_state::parked,
    workflow_state::cancelled, workflow_state::dead_letter};

/// The finished statuses: nothing runs such a workflow again by itself, gc may delete it, a
/// parent waiting for it wakes up, and it receives no more messages.
inline constexpr std::array finished_workflow_states = {
    workflow_state::succeeded, workflow_state::failed, workflow_state::cancelled};

/// The statuses resume() continues a workflow from; retry() takes a dead letter only.
inline constexpr std::array resumable_workflow_states = {
    workflow_state::cancelled, workflow_state::dead_letter, workflow_state::parked};

[[nodiscard]] constexpr std::string_view to_string(workflow_state s) noexcept {
  switch (s) {
    case workflow_state::pending:
      return "pending";
    case workflow_state::running:
      return "running";
    case workflow_state::sleeping:
      return "sleeping";
    case workflow_state::succeeded:
      return "succeeded";
    case workflow_state::failed:
      return "failed";
    case workflow_state::parked:
      return "parked";
    case workflow_state::cancelled:
      return "cancelled";
    case workflow_state::dead_letter:
      return "dead_letter";
  }
  return "unknown";
}

[[nodiscard]] constexpr bool is_finished(workflow_state s) noexcept {
  return s == workflow_state::succeeded || s == workflow_state::failed ||
         s == workflow_state::cancelled;
}

// ---- steps.kind, step_attempts.kind ----------------------------------------------------------

/// What journaled a row. Replay compares the kind (and the name) of each row with what the code
/// asks for (I5), so these spellings are part of every journal already written: they are never
/// renamed. Two of them break the snake_case pattern, `child-result` (with a hyphen) and
/// `get_event` beside `event` (not `set_event`): a new spelling would make an executor running
/// the previous release (during a rolling deploy) and one running this one each see the other's
/// rows as nondeterministic, and a migration renaming the rows cannot help the older executor.
/// No CHECK constraint lists the kinds (steps is the largest table and a new kind would need a
/// migration first); the enum is the list.
enum class step_kind : std::uint8_t {
  step,          ///< "step": ctx.step, and each element of ctx.map
  transaction,   ///< "transaction": ctx.transaction (user SQL committed with its row)
  now,           ///< "now": ctx.now()
  random,        ///< "random": ctx.random()
  uuid,          ///< "uuid": ctx.uuid()
  patch,         ///< "patch": ctx.patched() answered true
  sleep,         ///< "sleep": ctx.sleep_for / sleep_until (the wake-up time)
  any,           ///< "any": which branch of ctx.any won
  deadline,      ///< "deadline": when a wait with a timeout gives up
  send,          ///< "send": ctx.send
  recv,          ///< "recv": ctx.recv (the message, or none at the deadline)
  set_event,     ///< "event": ctx.set_event
  get_event,     ///< "get_event": ctx.get_event (the value, or none at the deadline)
  child,         ///< "child": ctx.start_child (the child's id)
  child_result,  ///< "child-result": ctx.child_result (the child's output or error)
  write_stream,  ///< "stream": ctx.write_stream (the value's offset)
  close_stream,  ///< "stream_close": ctx.close_stream (the offset of the close)
};

inline constexpr std::array all_step_kinds = {
    step_kind::step,         step_kind::transaction, step_kind::now,
    step_kind::random,       step_kind::uuid,        step_kind::patch,
    step_kind::sleep,        step_kind::any,         step_kind::deadline,
    step_kind::send,         step_kind::recv,        step_kind::set_event,
    step_kind::get_event,    step_kind::child,       step_kind::child_result,
    step_kind::write_stream, step_kind::close_stream};

[[nodiscard]] constexpr std::string_view to_string(step_kind k) noexcept {
  switch (k) {
    case step_kind::step:
      return "step";
    case step_kind::transaction:
      return "transaction";
    case step_kind::now:
      return "now";
    case step_kind::random:
      return "random";
    case step_kind::uuid:
      return "uuid";
    case step_kind::patch:
      return "patch";
    case step_kind::sleep:
      return "sleep";
    case step_kind::any:
      return "any";
    case step_kind::deadline:
      return "deadline";
    case step_kind::send:
      return "send";
    case step_kind::recv:
      return "recv";
    case step_kind::set_event:
      return "event";  // persisted spelling: never renamed
    case step_kind::get_event:
      return "get_event";
    case step_kind::child:
      return "child";
    case step_kind::child_result:
      return "child-result";  // persisted spelling: never renamed
    case step_kind::write_stream:
      return "stream";
    case step_kind::close_stream:
      return "stream_close";
  }
  return "unknown";
}

// ---- steps.status ----------------------------------------------------------------------------

/// A journal row's status (steps.status, CHECK steps_status_check). Retries are not rows of
/// steps: they are rows of step_attempts (attempt_outcome).
enum class step_status : std::uint8_t {
  succeeded,  ///< the row holds the output
  failed,     ///< the row holds the error the workflow sees on every replay
};

inline constexpr std::array all_step_statuses = {step_status::succeeded, step_status::failed};

[[nodiscard]] constexpr std::string_view to_string(step_status s) noexcept {
  switch (s) {
    case step_status::succeeded:
      return "succeeded";
    case step_status::failed:
      return "failed";
  }
  return "unknown";
}

// ---- step_attempts.outcome -------------------------------------------------------------------

/// What a row of step_attempts records (step_attempts.outcome, CHECK
/// step_attempts_outcome_check).
enum class attempt_outcome : std::uint8_t {
  retrying,  ///< an attempt failed; the next one is due at next_attempt_at
  failed,    ///< the last attempt failed: the step is dead-lettered
  reset,     ///< an operator's retry: a fresh count of attempts from here
  due,       ///< an operator's resume: the next attempt is due now
};

inline constexpr std::array all_attempt_outcomes = {attempt_outcome::retrying,
                                                    attempt_outcome::failed, attempt_outcome::reset,
                                                    attempt_outcome::due};

[[nodiscard]] constexpr std::string_view to_string(attempt_outcome o) noexcept {
  switch (o) {
    case attempt_outcome::retrying:
      return "retrying";
    case attempt_outcome::failed:
      return "failed";
    case attempt_outcome::reset:
      return "reset";
    case attempt_outcome::due:
      return "due";
  }
  return "unknown";
}

// ---- parsing ---------------------------------------------------------------------------------

namespace detail {
template <class E, std::size_t N>
constexpr std::optional<E> parse_state(const std::array<E, N>& all,
                                       std::string_view text) noexcept {
  for (const E e : all)
    if (to_string(e) == text) return e;
  return std::nullopt;
}

/// The spellings of `all`, in its order (label values, help texts).
template <class E, std::size_t N>
constexpr std::array<std::string_view, N> to_strings(const std::array<E, N>& all) noexcept {
  std::array<std::string_view, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = to_string(all[i]);
  return out;
}

template <class E, std::size_t N>
std::string spellings(const std::array<E, N>& all) {
  std::string out;
  for (const E e : all) {
    if (!out.empty()) out += ", ";
    out += to_string(e);
  }
  return out;
}
}  // namespace detail

/// The value spelled `text`, or nullopt for a spelling that is not one of the list.
[[nodiscard]] constexpr std::optional<workflow_state> parse_workflow_state(
    std::string_view text) noexcept {
  return detail::parse_state(all_workflow_states, text);
}
[[nodiscard]] constexpr std::optional<step_kind> parse_step_kind(std::string_view text) noexcept {
  return detail::parse_state(all_step_kinds, text);
}
[[nodiscard]] constexpr std::optional<step_status> parse_step_status(
    std::string_view text) noexcept {
  return detail::parse_state(all_step_statuses, text);
}
[[nodiscard]] constexpr std::optional<attempt_outcome> parse_attempt_outcome(
    std::string_view text) noexcept {
  return detail::parse_state(all_attempt_outcomes, text);
}

/// "pending, running, ..., dead_letter": the spellings, for messages and help texts.
[[nodiscard]] inline std::string workflow_state_spellings() {
  return detail::spellings(all_workflow_states);
}

/// The status spelled `text`; throws durable::error ("unknown status 'x'; one of: pending, ...")
/// for any other word (an operator's --status filter, a status read from a newer schema).
[[nodiscard]] inline workflow_state workflow_state_of(std::string_view text) {
  if (const auto s = parse_workflow_state(text)) return *s;
  throw error("unknown status '" + std::string(text) + "'; one of: " + workflow_state_spellings());
}

}  // namespace durable
