// The exception hierarchy of the engine. Every error the engine and the workflow API raise
// derives from durable::error and says what happened, to which workflow and step, and what to
// do about it. The PostgreSQL layer has its own root, durable::pg::error (durable/pg/error.hpp,
// a std::runtime_error too): a database error is not a durable::error. See docs/errors.md.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace durable {

/// Base of every exception the engine throws (the PostgreSQL layer's derive from pg::error).
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A value could not be encoded to, or decoded from, its journal representation.
/// `type()` names the C++ type involved.
class codec_error : public error {
public:
  codec_error(std::string type, const std::string& what) : error(what), type_(std::move(type)) {}
  [[nodiscard]] const std::string& type() const noexcept { return type_; }

private:
  std::string type_;
};

/// Base of errors that concern one workflow; `workflow_id()` names it.
class workflow_error : public error {
public:
  workflow_error(std::string workflow_id, const std::string& what)
      : error(what), workflow_id_(std::move(workflow_id)) {}
  [[nodiscard]] const std::string& workflow_id() const noexcept { return workflow_id_; }

private:
  std::string workflow_id_;
};

/// What an error says about the step that failed: its number, its name, and the type and
/// message of what its function threw (after its retries).
class failed_step_info {
public:
  failed_step_info(int seq, std::string step_name, std::string error_type,
                   std::string error_message)
      : seq_(seq),
        step_name_(std::move(step_name)),
        error_type_(std::move(error_type)),
        error_message_(std::move(error_message)) {}

  [[nodiscard]] int seq() const noexcept { return seq_; }
  [[nodiscard]] const std::string& step_name() const noexcept { return step_name_; }
  /// The C++ type of the exception the step threw, e.g. "std::runtime_error".
  [[nodiscard]] const std::string& error_type() const noexcept { return error_type_; }
  /// Its what().
  [[nodiscard]] const std::string& error_message() const noexcept { return error_message_; }

private:
  int seq_;
  std::string step_name_, error_type_, error_message_;
};

/// A step's function threw (after its retries). The error's type and message are
/// journaled, so the same exception, with the same text, is raised on every replay.
class step_failed : public workflow_error, public failed_step_info {
public:
  step_failed(std::string workflow_id, int seq, std::string step_name, std::string error_type,
              std::string error_message)
      : workflow_error(workflow_id, "workflow '" + workflow_id + "': step " + std::to_string(seq) +
                                        " '" + step_name + "' failed: " + error_type + ": " +
                                        error_message),
        failed_step_info(seq, std::move(step_name), std::move(error_type),
                         std::move(error_message)) {}
};

/// Thrown by a step's function: the failure is permanent (a bad input, a refusal that will
/// not change), so no further attempt is made whatever the retry policy allows. Derive from it
/// to keep your own type name in the journal.
class permanent_error : public error {
public:
  using error::error;
};

/// An attempt of a step ran past its retry policy's timeout: it was sent Asio cancellation
/// and abandoned. Counts as a failed attempt (retried like any other error).
class step_timeout : public error {
public:
  using error::error;
};

/// The awaited workflow is dead-lettered: step `seq()` failed permanently or exhausted its
/// attempts and the workflow did not handle it. It waits for a person: fix the cause, then
/// engine::retry(id) runs the step again (or cancel it).
class workflow_dead_letter : public workflow_error, public failed_step_info {
public:
  workflow_dead_letter(std::string workflow_id, int seq, std::string step_name,
                       std::string error_type, std::string error_message, int attempts,
                       const std::string& what)
      : workflow_error(std::move(workflow_id), what),
        failed_step_info(seq, std::move(step_name), std::move(error_type),
                         std::move(error_message)),
        attempts_(attempts) {}
  /// Failed attempts of the step before it was dead-lettered.
  [[nodiscard]] int attempts() const noexcept { return attempts_; }

private:
  int attempts_;
};

/// The awaited workflow was cancelled (engine::cancel, or its deadline passed); `what()`
/// gives the reason.
class workflow_cancelled : public workflow_error {
public:
  using workflow_error::workflow_error;
};

/// result(timeout) passed its timeout before the workflow ended. Nothing changed: wait again,
/// or look at the workflow. `database_unreachable()` says whether the database was not
/// serving the reads when the time ran out (a restart, a failover: result() reconnects with backoff
/// while it waits); `what()` gives the last status read, or since when and why the database does
/// not answer.
class result_timeout : public workflow_error {
public:
  result_timeout(std::string workflow_id, const std::string& what, bool database_unreachable)
      : workflow_error(std::move(workflow_id), what), unreachable_(database_unreachable) {}
  [[nodiscard]] bool database_unreachable() const noexcept { return unreachable_; }

private:
  bool unreachable_;
};

/// Replay found the code asking for a different step than the journal holds at that
/// position: the workflow's code changed while it was in flight (I5). The workflow is
/// parked for an operator; it is not retried and never handed a wrong value.
class nondeterminism_error : public workflow_error {
public:
  nondeterminism_error(std::string workflow_id, int seq, std::string journaled,
                       std::string requested, const std::string& what)
      : workflow_error(std::move(workflow_id), what),
        seq_(seq),
        journaled_(std::move(journaled)),
        requested_(std::move(requested)) {}

  [[nodiscard]] int seq() const noexcept { return seq_; }
  /// The step the journal holds at seq() (name and kind), or empty if none.
  [[nodiscard]] const std::string& journaled() const noexcept { return journaled_; }
  /// The step the code asked for at seq(), or empty if the code ended before it.
  [[nodiscard]] const std::string& requested() const noexcept { return requested_; }

private:
  int seq_;
  std::string journaled_, requested_;
};

/// Another executor took this workflow over (its epoch moved on, I3). The coroutine that
/// gets this must stop: the new owner continues the workflow, and nothing this one writes
/// can reach the journal any more.
class ownership_lost : public workflow_error {
public:
  using workflow_error::workflow_error;
};

/// start() found the workflow id in use with another workflow name or other inputs.
class workflow_conflict : public workflow_error {
public:
  using workflow_error::workflow_error;
};

/// enqueue() found an unfinished workflow with the same deduplication key in that queue
/// (and was asked to fail rather than return it). `existing_id()` names it.
class duplicate_workflow : public workflow_error {
public:
  duplicate_workflow(std::string requested_id, std::string existing_id, const std::string& what)
      : workflow_error(std::move(requested_id), what), existing_id_(std::move(existing_id)) {}
  [[nodiscard]] const std::string& existing_id() const noexcept { return existing_id_; }

private:
  std::string existing_id_;
};

/// The awaited workflow ended in failure; carries the type and message of what it threw.
class workflow_failed : public workflow_error {
public:
  workflow_failed(std::string workflow_id, std::string error_type, std::string error_message)
      : workflow_error(workflow_id, "workflow '" + workflow_id + "' failed: " + error_type + ": " +
                                        error_message),
        error_type_(std::move(error_type)),
        error_message_(std::move(error_message)) {}
  [[nodiscard]] const std::string& error_type() const noexcept { return error_type_; }
  [[nodiscard]] const std::string& error_message() const noexcept { return error_message_; }

private:
  std::string error_type_, error_message_;
};

/// The awaited workflow is parked for an operator (nondeterminism, undecodable journal);
/// `what()` gives the reason recorded in workflows.status_reason.
class workflow_parked : public workflow_error {
public:
  using workflow_error::workflow_error;
};

/// A new step would take a workflow's journal beyond engine_options::journal_limit: the step
/// does not run, and the workflow is parked (whatever its code does with this exception) until
/// an operator raises the limit and resumes it. See docs/failures.md#journal-limit.
class journal_limit_exceeded : public workflow_error {
public:
  using workflow_error::workflow_error;
};

/// A value (a step's output or error, the workflow's result) is larger than
/// engine_options::max_value_bytes: it is not written, and the workflow is parked (whatever its
/// code does with this exception) until an operator raises the limit and resumes it, or
/// cancels it. See docs/failures.md#large-values.
class value_too_large : public workflow_error {
public:
  using workflow_error::workflow_error;
};

/// Text given to the engine that cannot be stored or would be read as other text: a NUL
/// character (PostgreSQL text cannot hold one, and libpq would send only the text before it,
/// which may name another workflow or queue). Thrown before anything is done; `field()` names
/// the argument ("workflow id", "topic", ...). Fix the caller: trying again changes nothing, so
/// it is a permanent_error (a step that meets it is not retried).
class invalid_text : public permanent_error {
public:
  invalid_text(std::string field, const std::string& what)
      : permanent_error(what), field_(std::move(field)) {}
  [[nodiscard]] const std::string& field() const noexcept { return field_; }

private:
  std::string field_;
};

}  // namespace durable
