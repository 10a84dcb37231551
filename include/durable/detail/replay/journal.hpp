// The replay core's one door to I/O: what a run asks of the place its workflow's journal lives.
// The engine implements it over the group committer and the pool (detail/runtime/
// engine_journal.hpp); memory_journal (detail/replay/memory_journal.hpp) keeps the journals of
// one process in memory, for tests of the replay logic and the test kit.
//
// Every write names the run by its workflow id and epoch and is fenced (I3): it lands only
// while that epoch owns the workflow; otherwise it throws journal_fenced (with the owner's
// words when it has any) and writes nothing. A failure of the I/O itself is thrown as whatever the
// implementation raised; judge() says whether it is transient (the run is retried) or will
// recur (the workflow is parked). This header includes nothing from the runtime, the store or
// durable/pg (a test checks).
#pragma once

#include <asio/awaitable.hpp>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "durable/error.hpp"

namespace durable::pg {
class transaction;
}  // namespace durable::pg

namespace durable::detail {

/// Thrown by a journal's write when the fence (I3) refused it: another epoch owns the workflow,
/// and nothing was written. The run turns it into ownership_lost, in its own words.
class journal_fenced : public std::exception {
public:
  explicit journal_fenced(std::string owner_message = {}) : owner_(std::move(owner_message)) {}
  [[nodiscard]] const char* what() const noexcept override {
    return owner_.empty() ? "the journal's fence refused the write" : owner_.c_str();
  }
  /// The owner's words (the server's message), empty when the journal gave none.
  [[nodiscard]] const std::string& owner_message() const noexcept { return owner_; }

private:
  std::string owner_;
};

/// Thrown by a journal's append when the step already has a row that this run did not load:
/// a run that lost the workflow wrote it while its takeover was in flight (a plain step's
/// write does not make a claim wait, and the primary key keeps the first row). Nothing was written;
/// the run is retried, and the new claim replays that row.
class journal_row_taken : public error {
public:
  using error::error;
};

/// Thrown by a journal asked for what it cannot do (a transaction of a journal without a
/// database): the run cannot go on with this journal at all.
class journal_unsupported : public error {
public:
  using error::error;
};

/// One journal row: step `seq` of a run, with its output (JSON) or its error (JSON
/// {"type", "message"}).
struct step_row {
  int seq = 0;
  std::string name, kind;
  std::optional<std::string> output;
  std::optional<std::string> error;  // set: the step failed for good
  int attempts = 1;
  double started_at = 0;  // Unix seconds
};

/// One failed attempt of a step that has no row yet (outcome "retrying" or "failed"); with
/// `pause_ms` the next attempt is due that long after it is recorded, and `unloads` releases
/// the workflow until then.
struct attempt_row {
  int seq = 0;
  int attempt = 0;
  std::string name, kind, outcome;
  std::string error;  // JSON {"type", "message"}
  double started_at = 0;
  std::optional<double> pause_ms;
  bool unloads = false;
  int max_attempts = 0;  // the attempts the step's policy allows in all (0: not said)
};

/// What a waiting step waits for, as workflows.wait_for records it: a message of a topic, an
/// event of a workflow, or a child's end.
struct wait_target {
  std::string kind;  // "msg", "event", "child"
  std::string a;     // the topic, the event's workflow, the child's id
  std::string b;     // the event's key
  [[nodiscard]] std::string tag() const {
    if (kind == "event") return "event:" + std::to_string(a.size()) + ":" + a + ":" + b;
    return kind + ":" + a;
  }
};

/// Asking to be unloaded while waiting: unloaded (the run ends; what it waits for wakes it),
/// busy (it is arriving right now: wait in the run), or fenced (another epoch owns it).
enum class unload_answer { unloaded, busy, fenced };

/// A workflow another one waits for (its child): its status and, once it ended, its outcome.
struct workflow_outcome {
  std::string name;
  std::string status;
  std::optional<std::string> output;  // JSON
  std::optional<std::string> error;   // JSON {"type", "message"}
  std::optional<std::string> reason;
};

/// Whether the run may go on at its next step boundary.
enum class run_standing {
  owned,         ///< go on
  stopping,      ///< the engine shuts down: release the run (another executor resumes it)
  lease_expired  ///< the executor's lease is in doubt: release the run
};

/// How the run treats a failure of the journal's own I/O.
struct io_judgement {
  bool permanent = false;  // the journal will refuse it again: park (else retry the run)
  std::string description;
};

/// A transactional step's transaction: the step's statements run in sql(), and commit()
/// journals the step's row inside the same transaction, so that both commit or neither.
/// Destroying it without commit() rolls back.
class journal_transaction {
public:
  virtual ~journal_transaction() = default;
  virtual pg::transaction& sql() = 0;
  /// Commits with the row. A fenced row throws journal_fenced; any other failure is thrown as
  /// raised.
  virtual asio::awaitable<void> commit(const std::string& id, std::int64_t epoch, step_row row) = 0;
};

/// What take_message found: the message it consumed (a one-element JSON array holding it), if
/// any, and whether another unconsumed message of the topic remained when it looked.
struct taken_message {
  std::optional<std::string> message;
  bool more = false;
};

/// What write_stream did: appended at `offset` (a close: the close's offset, the one there
/// already when it was closed before), or, for a value, nothing, because the stream was closed
/// (at `offset`, by step `closed_by` of generation `closed_generation`).
struct stream_write_outcome {
  bool written = false;
  std::int64_t offset = 0;
  int closed_by = -1;
  int closed_generation = -1;
};

/// The next generation a continue_as_new started.
struct continued_generation {
  std::int64_t epoch = 0;
  std::int64_t generation = 0;
};

class journal {
public:
  virtual ~journal() = default;

  // ---- the run's standing -------------------------------------------------------------------

  [[nodiscard]] virtual run_standing standing() const noexcept = 0;
  /// False for a journal that can only replay (new steps are refused).
  [[nodiscard]] virtual bool executes() const noexcept = 0;
  /// Whether a run may end to wait elsewhere (a long sleep, backoff or wait) and be woken.
  [[nodiscard]] virtual bool unloads() const noexcept = 0;
  /// Transient or permanent, and one line for operators.
  [[nodiscard]] virtual io_judgement judge(const std::exception& e) const = 0;
  /// Now, in Unix seconds, on the clock that every wake-up time of a run is measured against
  /// (journaled sleeps and wait deadlines, due retries, the workflow's deadline): for the
  /// engine, the database server's clock as this process last measured it, so that hosts whose
  /// clocks disagree agree on when a wait ends. Reads memory only; no I/O.
  [[nodiscard]] virtual double now() const noexcept = 0;
  /// The earliest now() can be, given how well this process knows that clock: what a wait
  /// compares its wake-up time with, so that it never ends early on that clock. now() unless
  /// the clock is an estimate (the engine's reading of the server's is good to half a round
  /// trip).
  [[nodiscard]] virtual double earliest_now() const noexcept { return now(); }
  /// The latest now() can be: a bound on a time the clock's owner (the server) computed from
  /// its own now() just before, which a local timer must not undershoot.
  [[nodiscard]] virtual double latest_now() const noexcept { return now(); }

  // ---- steps ---------------------------------------------------------------------------------

  /// Journals a step's row; the step resumes only once it is durable (I2).
  virtual asio::awaitable<void> append(const std::string& id, std::int64_t epoch, step_row row) = 0;
  /// Records a failed attempt of a step without a row (I9: the count survives restarts).
  virtual asio::awaitable<void> record_attempt(const std::string& id, std::int64_t epoch,
                                               attempt_row a) = 0;
  /// Opens a transactional step's transaction. Refused (thrown) by a journal without a database.
  virtual asio::awaitable<std::unique_ptr<journal_transaction>> begin_transaction(
      const std::string& id, int seq, const std::string& name) = 0;

  // ---- unloading -----------------------------------------------------------------------------

  /// Unloads the workflow for `pause_ms` (a sleep or a backoff): any executor claims it then.
  virtual asio::awaitable<void> sleep(const std::string& id, std::int64_t epoch,
                                      double pause_ms) = 0;
  /// Unloads the workflow until `what` arrives, or `recheck_ms` passes (fenced:
  /// unload_answer::fenced).
  virtual asio::awaitable<unload_answer> unload_to_wait(const std::string& id, std::int64_t epoch,
                                                        const wait_target& what,
                                                        double recheck_ms) = 0;
  /// Replaces the inputs, empties the journal and starts the next generation.
  virtual asio::awaitable<continued_generation> continue_as_new(const std::string& id,
                                                                std::int64_t epoch,
                                                                const std::string& inputs) = 0;

  // ---- messages, events, children ------------------------------------------------------------

  /// Takes the oldest unconsumed message of `topic` and journals it as step `seq` (kind recv,
  /// output a one-element array holding it) at once; no message when there is none. Says
  /// whether another one of the topic is left, so that a run that hears every send to it (a
  /// listener holds its LISTEN) need not look before its next receive waits.
  virtual asio::awaitable<taken_message> take_message(const std::string& id, std::int64_t epoch,
                                                      int seq, const std::string& topic,
                                                      double started_at) = 0;
  /// Sends `payload` to workflow `to` (once per `key`) and journals the send as step `seq` at
  /// once. False, with nothing journaled, when `to` does not exist.
  virtual asio::awaitable<bool> send(const std::string& id, std::int64_t epoch, int seq,
                                     const std::string& to, const std::string& topic,
                                     const std::string& payload, const std::string& key,
                                     double started_at) = 0;
  /// Publishes event `key` (the latest value wins) and journals it as step `seq` at once.
  virtual asio::awaitable<bool> set_event(const std::string& id, std::int64_t epoch, int seq,
                                          const std::string& key, const std::string& value,
                                          double started_at) = 0;
  /// The value of event `key` of `workflow_id`, if published.
  virtual asio::awaitable<std::optional<std::string>> get_event(const std::string& workflow_id,
                                                                const std::string& key) = 0;
  /// Appends `value` (none: the close) to stream `key` and journals it as step `seq` at once
  /// (kind "stream" or "stream_close", output the offset); nothing is written or journaled
  /// when the stream was closed and this is a value.
  virtual asio::awaitable<stream_write_outcome> write_stream(
      const std::string& id, std::int64_t epoch, int seq, const std::string& key,
      const std::optional<std::string>& value, double started_at) = 0;
  /// Starts child `child_id` and journals the start as step `seq` at once (a child left by a
  /// run whose row did not commit is reattached). False when the id is another workflow's. The
  /// child inherits the workflow's trace context, with `span_id` (the step's) as parent.
  virtual asio::awaitable<bool> start_child(const std::string& id, std::int64_t epoch, int seq,
                                            const std::string& child_id, const std::string& name,
                                            const std::string& inputs, double started_at,
                                            const std::string& app_version,
                                            const std::string& span_id) = 0;
  /// The status and outcome of workflow `workflow_id`, if it exists.
  virtual asio::awaitable<std::optional<workflow_outcome>> workflow(
      const std::string& workflow_id) = 0;
};

}  // namespace durable::detail
