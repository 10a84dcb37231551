// The rows of the store's statements: one struct per statement that returns rows, and their
// decoding. durable::store derives from store_rows, so that each is named store::<row> (as
// store::workflow_record). Machinery of durable/store.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durable/pg/connection.hpp"

namespace durable::detail {

struct store_rows {
  // ---- rows -----------------------------------------------------------------------------
  // One struct per statement that returns rows, read from the columns in the order of the
  // statement's SELECT or RETURNING list (sql/statements/<name>.sql). Nothing outside the store
  // reads a column by index.

  /// workflow_insert: `created`, or the workflow that already holds the id.
  struct start_outcome {
    bool created = false;
    std::string name, inputs, status;  ///< the existing workflow's (empty when created)
    static start_outcome from(const pg::row& r) {
      start_outcome o;
      o.created = r.get<bool>(0);
      if (!o.created) {
        o.name = r.get<std::string>(1);
        o.inputs = r.get<std::string>(2);
        o.status = r.get<std::string>(3);
      }
      return o;
    }
  };

  /// workflow_get: one workflow's state.
  struct workflow_record {
    std::string name, status;
    std::optional<std::string> reason;  ///< status_reason
    std::string inputs;
    std::optional<std::string> output, error, executor_id;
    std::int64_t epoch = 0;
    int attempts = 0;
    std::optional<std::string> traceparent;  ///< its W3C trace context, if started with one
    static workflow_record from(const pg::row& r) {
      return {r.get<std::string>(0),
              r.get<std::string>(1),
              r.get<std::optional<std::string>>(2),
              r.get<std::string>(3),
              r.get<std::optional<std::string>>(4),
              r.get<std::optional<std::string>>(5),
              r.get<std::optional<std::string>>(6),
              r.get<std::int64_t>(7),
              r.get<int>(8),
              r.get<std::optional<std::string>>(9)};
    }
  };

  /// workflow_claim: the workflow claimed, under its new epoch.
  struct claimed_one {
    std::string name, inputs;
    std::int64_t epoch = 0;
    static claimed_one from(const pg::row& r) {
      return {r.get<std::string>(0), r.get<std::string>(1), r.get<std::int64_t>(2)};
    }
  };

  /// workflows_claim: a workflow claimed (status 'running'), or parked by its claim (status
  /// 'parked', with the reason).
  struct claimed_workflow {
    std::string id, name, inputs;
    std::int64_t epoch = 0;
    std::string status;
    std::optional<std::string> reason;
    std::optional<double> deadline_in;       ///< seconds from the server's now() (< 0: passed)
    int generation = 0;                      ///< see ctx.continue_as_new (integer in SQL)
    bool queued = false;                     ///< it was enqueued: its run holds a queue's slot
    std::optional<std::string> traceparent;  ///< its W3C trace context, if any
    [[nodiscard]] bool parked() const noexcept { return status == "parked"; }
    static claimed_workflow from(const pg::row& r) {
      return {r.get<std::string>(0),
              r.get<std::string>(1),
              r.get<std::string>(2),
              r.get<std::int64_t>(3),
              r.get<std::string>(4),
              r.get<std::optional<std::string>>(5),
              r.get<std::optional<double>>(6),
              r.get<int>(7),
              r.get<bool>(8),
              r.get<std::optional<std::string>>(9)};
    }
  };

  /// attempts_load: one recorded attempt of a step that has no journal row yet.
  struct step_attempt {
    std::string workflow_id;
    int seq = 0;
    int attempt = 0;
    std::string outcome;  ///< 'retrying', 'failed' (final), 'reset' (retry()), 'due' (resume())
    std::optional<std::string> error;       ///< JSON text {"type", "message"}
    std::optional<double> next_attempt_in;  ///< seconds from the server's now()
    std::string name, kind;
    static step_attempt from(const pg::row& r) {
      return {r.get<std::string>(0),
              r.get<int>(1),
              r.get<int>(2),
              r.get<std::string>(3),
              r.get<std::optional<std::string>>(4),
              r.get<std::optional<double>>(5),
              r.get<std::string>(6),
              r.get<std::string>(7)};
    }
  };

  /// workflow_cancel: the status the workflow had, and its epoch now; workflows_cancelled:
  /// a cancelled workflow's id (as `status`) and epoch.
  struct cancelled_workflow {
    std::string status;
    std::int64_t epoch = 0;
    static cancelled_workflow from(const pg::row& r) {
      return {r.get<std::string>(0), r.get<std::int64_t>(1)};
    }
  };

  /// workflow_cancel: one row per workflow cancelled (the one named, and its unfinished
  /// descendants): the status it had, its epoch now, its id, whether it is the one named.
  struct cancelled_tree_member {
    std::string status;
    std::int64_t epoch = 0;
    std::string id;
    bool root = false;
    static cancelled_tree_member from(const pg::row& r) {
      return {r.get<std::string>(0), r.get<std::int64_t>(1), r.get<std::string>(3), r.get<bool>(4)};
    }
  };

  /// message_send, message_send_journaled: whether the message was queued by this call (not
  /// by an earlier one with the same idempotency key), whether the recipient exists.
  struct send_outcome {
    bool queued = false;
    bool recipient_exists = false;
    static send_outcome from(const pg::row& r) { return {r.get<bool>(0), r.get<bool>(1)}; }
  };

  /// event_get: the value (JSON).
  struct json_value {
    std::string json;
    static json_value from(const pg::row& r) { return {r.get<std::string>(0)}; }
  };

  /// message_take: the message consumed (a one-element JSON array holding its payload), and
  /// whether another unconsumed message of the topic remained.
  struct taken_message {
    std::string json;
    bool more = false;
    static taken_message from(const pg::row& r) { return {r.get<std::string>(0), r.get<bool>(2)}; }
  };

  /// workflow_continue: the epoch and generation the workflow runs under from now on.
  struct continued_workflow {
    std::int64_t epoch = 0;
    int generation = 0;
    static continued_workflow from(const pg::row& r) {
      return {r.get<std::int64_t>(0), r.get<int>(1)};
    }
  };

  /// event_set, child_start: present when the statement wrote (and journaled).
  struct written_row {
    static written_row from(const pg::row&) { return {}; }
  };

  /// workflow_resume: the status the workflow had.
  struct previous_status {
    std::string status;
    static previous_status from(const pg::row& r) { return {r.get<std::string>(0)}; }
  };

  /// queue_depths: how many workflows of a queue wait to be dispatched, and run, now.
  struct queue_count {
    std::string queue;
    std::int64_t queued = 0, running = 0;
    static queue_count from(const pg::row& r) {
      return {r.get<std::string>(0), r.get<std::int64_t>(1), r.get<std::int64_t>(2)};
    }
  };

  /// workflow_fork: whether the source exists, whether the fork was created (its id was
  /// free), and how many journal rows it got.
  struct fork_outcome {
    bool source_found = false, created = false;
    int copied = 0;
    static fork_outcome from(const pg::row& r) {
      return {r.get<bool>(0), r.get<bool>(1), r.get<int>(2)};
    }
  };

  /// journal_load: one journal row. Output and error stay JSON text.
  struct journal_step {
    int seq = 0;  ///< steps.seq is integer
    std::string name, kind;
    bool failed = false;  ///< status 'failed' (else 'succeeded')
    std::optional<std::string> output, error;
    static journal_step from(const pg::row& r) {
      return {r.get<int>(0),
              r.get<std::string>(1),
              r.get<std::string>(2),
              r.text(3) == "failed",
              r.get<std::optional<std::string>>(4),
              r.get<std::optional<std::string>>(5)};
    }
  };

  /// journals_load: one journal row of one of the listed workflows, its text fields as views
  /// into the result (valid while the result lives): a claim copies each field once, into the
  /// journal entry it builds.
  struct loaded_step {
    std::string_view workflow_id;
    int seq = 0;
    std::string_view name, kind;
    bool failed = false;  ///< status 'failed' (else 'succeeded')
    std::optional<std::string_view> output, error;
    static constexpr bool views = true;  ///< store::fetch refuses it: the result would be freed
    static loaded_step from(const pg::row& r) {
      return {r.get<std::string_view>(0),
              r.get<int>(1),
              r.get<std::string_view>(2),
              r.get<std::string_view>(3),
              r.text(4) == "failed",
              r.get<std::optional<std::string_view>>(5),
              r.get<std::optional<std::string_view>>(6)};
    }
  };

  /// steps_append_many: a journal row written (a row of the batch not returned was fenced
  /// out).
  struct written_step {
    std::string workflow_id;
    int seq = 0;
    static written_step from(const pg::row& r) { return {r.get<std::string>(0), r.get<int>(1)}; }
  };

  /// workflows_owned: an unfinished workflow this executor owns.
  struct owned_workflow {
    std::string id, name;
    static owned_workflow from(const pg::row& r) {
      return {r.get<std::string>(0), r.get<std::string>(1)};
    }
  };

  /// workflow_enqueue: `created`, or the workflow that holds the id or the deduplication key.
  /// (The statement's fifth column only makes the server send the NOTIFY; it is not read.)
  struct enqueue_outcome {
    bool created = false;
    std::string id, name, inputs;  ///< the created workflow's, or the existing one's
    static enqueue_outcome from(const pg::row& r) {
      return {r.get<bool>(0), r.get<std::string>(1), r.get<std::string>(2), r.get<std::string>(3)};
    }
  };

  /// queue_dispatch: a queued workflow claimed for this executor, under its new epoch.
  struct dispatched_workflow {
    std::string id, name, inputs;
    std::int64_t epoch = 0;
    std::optional<double> deadline_in;       ///< seconds from the server's now() (< 0: passed)
    int generation = 0;                      ///< see ctx.continue_as_new (integer in SQL)
    std::optional<std::string> traceparent;  ///< its W3C trace context, if any
    static dispatched_workflow from(const pg::row& r) {
      return {r.get<std::string>(0),
              r.get<std::string>(1),
              r.get<std::string>(2),
              r.get<std::int64_t>(3),
              r.get<std::optional<double>>(4),
              r.get<int>(5),
              r.get<std::optional<std::string>>(6)};
    }
  };

  /// workflows_take_over: a workflow moved to this executor (to be claimed next).
  /// schedules_due: a schedule whose next slot has come (times in Unix seconds), with the
  /// server's now.
  struct due_schedule_row {
    std::string id, cron, time_zone, catch_up;
    int catch_up_max = 0;
    std::int64_t late_after_ms = 0, jitter_ms = 0;
    std::optional<std::int64_t> end_at;
    std::int64_t next_fire_at = 0;
    double now = 0;
    static due_schedule_row from(const pg::row& r) {
      return {r.get<std::string>(0),  r.get<std::string>(1),
              r.get<std::string>(2),  r.get<std::string>(3),
              r.get<int>(4),          r.get<std::int64_t>(5),
              r.get<std::int64_t>(6), r.get<std::optional<std::int64_t>>(7),
              r.get<std::int64_t>(8), r.get<double>(9)};
    }
  };

  struct taken_workflow {
    std::string id;
    static taken_workflow from(const pg::row& r) { return {r.get<std::string>(0)}; }
  };

  /// executor_register: present when this process now holds the executor id.
  struct executor_registered {
    double server_time = 0;  ///< the server's clock_timestamp() (Unix seconds)
    static executor_registered from(const pg::row& r) { return {r.get<double>(0)}; }
  };

  /// executor_heartbeat: the server's clock_timestamp() (Unix seconds) when it renewed the lease.
  struct heartbeat_answer {
    double server_time = 0;
    static heartbeat_answer from(const pg::row& r) { return {r.get<double>(0)}; }
  };

  /// executor_get: the process that holds an executor id.
  struct executor_holder {
    std::string host;
    int pid = 0;
    std::string instance;
    double heartbeat_age_ms = 0;  ///< infinity after a graceful release
    static executor_holder from(const pg::row& r) {
      return {r.get<std::string>(0), r.get<int>(1), r.get<std::string>(2), r.get<double>(3)};
    }
  };

  // ---- decoding -------------------------------------------------------------------------

  /// Every row of `r`, decoded.
  template <class Row>
  [[nodiscard]] static std::vector<Row> rows(const pg::result& r) {
    std::vector<Row> out;
    out.reserve(std::size_t(r.rows()));
    for (const pg::row row : r) out.push_back(Row::from(row));
    return out;
  }

  /// The first row of `r`, decoded; none when `r` is empty.
  template <class Row>
  [[nodiscard]] static std::optional<Row> first(const pg::result& r) {
    if (r.empty()) return std::nullopt;
    return Row::from(r[0]);
  }
};

}  // namespace durable::detail
