// The store: the schema, its migrations, and every SQL statement the library runs.
// Nothing outside the store writes SQL text. The SQL lives in sql/ (migrations/NNNN_*.sql,
// statements/<name>.sql, each statement's parameters named in its header comment), embedded into
// durable/detail/sql_text.hpp at build time. Statements are named, prepared on each connection
// on first use, and take every value as a bound parameter; the only text that varies is the
// schema name (the psql variable :"schema"), quoted as an identifier once, here.
// The parts: detail/store/rows.hpp (the row types), detail/store/fence.hpp (query<Row> and the
// fenced write's verdict), detail/store/identifiers.hpp (schema name, text[] lists); this header
// is the store class with its statement builders and the channels, and includes them all.
#pragma once

#include <asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durable/detail/config.hpp"
#include "durable/detail/sql_script.hpp"
#include "durable/detail/store/fence.hpp"
#include "durable/detail/store/identifiers.hpp"
#include "durable/detail/store/operator.hpp"
#include "durable/detail/store/rows.hpp"
#include "durable/detail/store/streams.hpp"
#include "durable/error.hpp"
#include "durable/pg/connection.hpp"
#include "durable/states.hpp"
#include "durable/trace.hpp"

namespace durable {

/// The database holds a schema version newer than this library knows.
class schema_too_new : public error {
public:
  using error::error;
};

namespace detail {

/// One migration: sql/migrations/NNNN_<name>.sql, its first line the description.
struct migration {
  int version;
  std::string_view name, description;
  std::string_view sha256;  ///< of the file, pinned in sql/migrations/SHA256SUMS
  std::string_view text;    ///< the file, psql variables not filled in
};

// Versioned, append-only: a released migration is never edited, only followed by another (the
// lint test sql_checksums holds each file to its checksum).
DURABLE_DECL const std::vector<migration>& migrations();

}  // namespace detail

/// Names, texts and typed builders of every statement the library runs, the row type of each
/// statement that returns rows, and the decoding of its columns.
class store : public detail::store_rows,
              public detail::operator_statements,
              public detail::stream_statements {
public:
  explicit store(std::string schema = "durable")
      : schema_name_(std::move(schema)), schema_(detail::quote_identifier(schema_name_)) {
    auto cat = std::make_shared<pg::statement_catalog>();
    const detail::sql_variables vars{{"\"schema\"", schema_}};
    for (const auto& [name, text] : texts())
      (*cat)[prefix() + std::string(name)] = detail::sql_statements(text, vars, false).at(0);
    catalog_ = std::move(cat);
  }

  [[nodiscard]] const std::string& schema() const noexcept { return schema_name_; }
  [[nodiscard]] std::shared_ptr<const pg::statement_catalog> catalog() const { return catalog_; }
  /// The newest schema version this library knows.
  [[nodiscard]] static int latest_version() { return detail::migrations().back().version; }

  /// Creates or upgrades the schema. Safe to run from many processes at once: an advisory
  /// lock per schema serializes them, and each migration commits with its version row, in a
  /// transaction of its own (a failed one leaves the schema at the version before it).
  /// Returns the number of migrations applied. Throws schema_too_new if the database is
  /// ahead of this library.
  [[nodiscard]] DURABLE_DECL asio::awaitable<int> migrate(pg::connection& c) const;

  /// The schema version in the database (0 when the schema does not exist).
  [[nodiscard]] DURABLE_DECL asio::awaitable<int> version(pg::connection& c) const;

  // ---- running --------------------------------------------------------------------------

  /// Runs `q` on `c` (a pg::connection or pg::transaction) and decodes every row.
  template <class Row, class Conn>
  [[nodiscard]] static asio::awaitable<std::vector<Row>> fetch(Conn& c, query<Row> q) {
    return fetch_impl<Row>(c, std::move(q.st));
  }

  /// Runs `q` on `c` and decodes its first row; none when it returned no row.
  template <class Row, class Conn>
  [[nodiscard]] static asio::awaitable<std::optional<Row>> fetch_one(Conn& c, query<Row> q) {
    return fetch_one_impl<Row>(c, std::move(q.st));
  }

  /// The verdict on a fenced write the server refused with `e`: fenced out when it is the
  /// journal fence's DU001, else failed; both carry the SQLSTATE and the server's message.
  [[nodiscard]] static fence_verdict verdict(const pg::sql_error& e) {
    return {
        e.sqlstate() == ownership_lost_sqlstate ? fence_outcome::fenced_out : fence_outcome::failed,
        e.sqlstate(), e.server_message()};
  }

  // ---- statements ---------------------------------------------------------------------
  // Each binds its parameters, in the order of the SQL's $1, $2, ... (named in the header of
  // sql/statements/<name>.sql). Lists
  // of workflow names (`names`) and of application versions (`versions`, empty = all) are
  // text[] literals, built once by the engine (detail::text_array).

  /// Inserts a workflow that starts running here at once (epoch 1), unless its id exists.
  /// One row; none when a concurrent insert won the race.
  /// With a positive `timeout_ms`, its deadline is that long from now.
  [[nodiscard]] query<start_outcome> workflow_insert(const std::string& id, const std::string& name,
                                                     const std::string& inputs,
                                                     const std::string& executor_id,
                                                     const std::string& app_version,
                                                     std::int64_t timeout_ms,
                                                     const trace_context* trace = nullptr) const {
    return {call("workflow_insert", id, name, inputs, executor_id, app_version, timeout_ms,
                 traceparent_of(trace), tracestate_of(trace))};
  }

  /// One workflow's state; no row when it does not exist.
  [[nodiscard]] query<workflow_record> workflow_get(const std::string& id) const {
    return {call("workflow_get", id)};
  }

  /// Marks workflow `id` as awaited by a result() (migration 15: its end will be told on the
  /// result channel) and returns its state, if it exists, has not ended and was not marked yet.
  /// No row otherwise: read it with workflow_get.
  [[nodiscard]] query<workflow_record> workflow_await(const std::string& id) const {
    return {call("workflow_await", id, channel())};
  }

  /// Claims workflow `id` for `executor_id` if it is unfinished and one of `names` (bumps
  /// its epoch, I3).
  [[nodiscard]] query<claimed_one> workflow_claim(const std::string& id,
                                                  const std::string& executor_id,
                                                  const std::string& names) const {
    return {call("workflow_claim", id, executor_id, names)};
  }

  /// Claims every workflow of `ids` that is unfinished and runnable here (`names`,
  /// `versions`, empty = all), bumping its epoch (I3); parks it instead after more than
  /// `max_claims_without_progress` claims in a row without a new journal row (I9).
  [[nodiscard]] query<claimed_workflow> workflows_claim(const std::vector<std::string>& ids,
                                                        const std::string& executor_id,
                                                        const std::string& names,
                                                        const std::string& versions,
                                                        int max_claims_without_progress) const {
    return {
        call("workflows_claim", ids, executor_id, names, versions, max_claims_without_progress)};
  }

  /// The unfinished workflows `executor_id` owns (only `versions`, empty = all), oldest first.
  [[nodiscard]] query<owned_workflow> workflows_owned(const std::string& executor_id,
                                                      const std::string& versions) const {
    return {call("workflows_owned", executor_id, versions)};
  }

  /// The journals of `ids`, in one query (I1), by workflow id then step number.
  [[nodiscard]] query<loaded_step> journals_load(const std::vector<std::string>& ids) const {
    return {call("journals_load", ids)};
  }

  /// One workflow's journal (I1), by step number.
  [[nodiscard]] query<journal_step> journal_load(const std::string& id) const {
    return {call("journal_load", id)};
  }

  /// Records the error that ended a run under `epoch` (shown when I9 parks the workflow).
  /// Fenced: no row updated when another epoch owns the workflow.
  [[nodiscard]] fenced_write workflow_note_error(const std::string& id, std::int64_t epoch,
                                                 const std::string& error) const {
    return {call("workflow_note_error", id, epoch, error), fenced_write::fence::matches_no_row};
  }

  /// Writes a workflow's final state (status, output, error JSON, status reason), fenced by
  /// `epoch` (I3): fenced out when another epoch owns it now.
  [[nodiscard]] fenced_write workflow_finish(const std::string& id, std::int64_t epoch,
                                             workflow_state status,
                                             const std::optional<std::string>& output,
                                             const std::optional<std::string>& error,
                                             const std::optional<std::string>& reason) const {
    return {call("workflow_finish", id, epoch, to_string(status), output, error, reason),
            fenced_write::fence::matches_no_row};
  }

  /// Journals one step (output and error are JSON text; `started_at` in Unix seconds),
  /// fenced by `epoch` in the same statement (I3): the server raises DU001 when another
  /// epoch owns the workflow.
  [[nodiscard]] fenced_write step_append(const std::string& workflow_id, std::int64_t epoch,
                                         int seq, const std::string& name, const std::string& kind,
                                         const std::string& status,
                                         const std::optional<std::string>& output,
                                         const std::optional<std::string>& error, int attempts,
                                         double started_at) const {
    return {call("step_append", workflow_id, epoch, seq, name, kind, status, output, error,
                 attempts, started_at),
            fenced_write::fence::raises};
  }

  /// Journals one plain step like step_append, in plain SQL under FOR KEY SHARE (which a
  /// claim does not wait for): the INSERT selects the workflow's row under `epoch` (I3), so a
  /// fenced-out write inserts nothing. A write that raced a claim can still insert its row;
  /// the primary key then refuses the new owner's row for that step (23505), and the new
  /// owner replays it instead (sql/statements/step_write.sql).
  [[nodiscard]] fenced_write step_write(const std::string& workflow_id, std::int64_t epoch, int seq,
                                        const std::string& name, const std::string& kind,
                                        const std::string& status,
                                        const std::optional<std::string>& output,
                                        const std::optional<std::string>& error, int attempts,
                                        double started_at) const {
    return {call("step_write", workflow_id, epoch, seq, name, kind, status, output, error, attempts,
                 started_at),
            fenced_write::fence::matches_no_row};
  }

  /// Journals many steps in one statement (group commit), one array element per row, fenced
  /// row by row (I3). Returns the rows written; a row not returned was fenced out.
  [[nodiscard]] query<written_step> steps_append_many(
      const std::vector<std::string>& workflow_ids, const std::vector<std::int64_t>& epochs,
      const std::vector<int>& seqs, const std::vector<std::string>& names,
      const std::vector<std::string>& kinds, const std::vector<std::string>& statuses,
      const std::vector<std::optional<std::string>>& outputs,
      const std::vector<std::optional<std::string>>& errors, const std::vector<int>& attempts,
      const std::vector<double>& started_at) const {
    return {call("steps_append_many", workflow_ids, epochs, seqs, names, kinds, statuses, outputs,
                 errors, attempts, started_at)};
  }

  /// Queues a workflow (delayed by `delay_ms`) unless its id, or `dedup_key` among the
  /// queue's unfinished workflows, is taken; announces `queue` on `channel` at commit. One
  /// row; none when a conflicting workflow committed after the statement's snapshot.
  [[nodiscard]] query<enqueue_outcome> workflow_enqueue(
      const std::string& id, const std::string& name, const std::string& inputs,
      std::string_view queue, int priority, const std::optional<std::string_view>& dedup_key,
      std::int64_t delay_ms, const std::string& app_version, const std::string& channel,
      std::int64_t timeout_ms, const std::optional<std::string_view>& debounce_key,
      std::int64_t debounce_ms, const trace_context* trace = nullptr) const {
    return {call("workflow_enqueue", id, name, inputs, queue, priority, dedup_key, delay_ms,
                 app_version, channel, timeout_ms, debounce_key, debounce_ms, traceparent_of(trace),
                 tracestate_of(trace))};
  }

  /// Records a failed attempt of step `seq` ('retrying', with the pause before the next
  /// attempt; or 'failed', final), fenced by `epoch` (I3): fenced out when no row was written.
  /// With `unload`, the workflow sleeps until the next attempt, owned by nobody, under a new
  /// epoch.
  [[nodiscard]] fenced_write attempt_record(const std::string& id, std::int64_t epoch, int seq,
                                            int attempt, const std::string& name,
                                            const std::string& kind, const std::string& outcome,
                                            const std::string& error, double started_at,
                                            const std::optional<double>& pause_ms, bool unload,
                                            const std::optional<int>& max_attempts) const {
    return {call("attempt_record", id, epoch, seq, attempt, name, kind, outcome, error, started_at,
                 pause_ms, unload, max_attempts),
            fenced_write::fence::matches_no_row};
  }

  /// Unloads workflow `id` (owned under `epoch`) for `pause_ms`: fenced out when no row.
  [[nodiscard]] fenced_write workflow_sleep(const std::string& id, std::int64_t epoch,
                                            double pause_ms) const {
    return {call("workflow_sleep", id, epoch, pause_ms), fenced_write::fence::matches_no_row};
  }

  /// The attempts of the steps of `ids` that have no journal row, oldest first.
  [[nodiscard]] query<step_attempt> attempts_load(const std::vector<std::string>& ids) const {
    return {call("attempts_load", ids)};
  }

  /// Moves up to `limit` sleeping workflows whose wake-up is due (not `busy`: still running
  /// here) to `executor_id`, which then claims them.
  [[nodiscard]] query<taken_workflow> workflows_wake(const std::string& executor_id,
                                                     const std::string& names,
                                                     const std::string& versions,
                                                     std::int64_t limit,
                                                     const std::vector<std::string>& busy) const {
    return {call("workflows_wake", executor_id, names, versions, limit, busy)};
  }

  /// Cancels workflow `id` (unless it is finished): one row with the status it had.
  [[nodiscard]] query<cancelled_tree_member> workflow_cancel(const std::string& id,
                                                             const std::string& reason,
                                                             const std::string& error_type) const {
    return {call("workflow_cancel", id, reason, error_type, cancel_channel())};
  }

  /// Sends a message to workflow `to` (see message_send).
  [[nodiscard]] query<send_outcome> message_send(const std::string& to, const std::string& topic,
                                                 const std::string& payload,
                                                 const std::optional<std::string>& key) const {
    return {call("message_send", to, topic, payload, key, wait_channel(), channel())};
  }
  /// Sends a message from step `seq` of workflow `from` and journals the step (fenced).
  [[nodiscard]] query<send_outcome> message_send_journaled(
      const std::string& to, const std::string& topic, const std::string& payload,
      const std::string& key, const std::string& from, std::int64_t epoch, int seq,
      double started_at) const {
    return {call("message_send_journaled", to, topic, payload, key, wait_channel(), channel(), from,
                 epoch, seq, started_at)};
  }
  /// Consumes the oldest message of `topic` for workflow `id` as its step `seq` (fenced).
  [[nodiscard]] query<taken_message> message_take(const std::string& id, std::int64_t epoch,
                                                  int seq, const std::string& topic,
                                                  double started_at) const {
    return {call("message_take", id, epoch, seq, topic, started_at)};
  }
  /// Publishes event `key` of workflow `id` as its step `seq` (fenced).
  [[nodiscard]] query<written_row> event_set(const std::string& id, std::int64_t epoch, int seq,
                                             const std::string& key, const std::string& value,
                                             double started_at) const {
    return {call("event_set", id, epoch, seq, key, value, started_at, wait_channel(), channel())};
  }
  [[nodiscard]] query<json_value> event_get(const std::string& id, const std::string& key) const {
    return {call("event_get", id, key)};
  }
  /// What a waiting workflow waits for: a message of a topic ('msg', a = topic), an event
  /// ('event', a = publisher, b = key), a child's end ('child', a = child id).
  struct wait_target {
    std::string kind, a, b;
    /// As workflows.wait_for records it (what senders, publishers and children match).
    [[nodiscard]] std::string tag() const {
      if (kind == "event") return "event:" + std::to_string(a.size()) + ":" + a + ":" + b;
      return kind + ":" + a;
    }
  };
  /// workflow_wait: 'unloaded', 'busy' (something for it is being sent: wait in the run),
  /// or 'fenced' (another epoch owns it).
  struct unload_outcome {
    std::string outcome;
    static unload_outcome from(const pg::row& r) { return {r.get<std::string>(0)}; }
  };
  /// Retention: deletes up to `limit` workflows finished more than `age_ms` ago, whose
  /// status is one of `statuses` (a text[] literal; only succeeded, failed and cancelled ones
  /// are ever deleted).
  [[nodiscard]] query<taken_workflow> workflows_delete_finished(
      std::int64_t age_ms, std::int64_t limit,
      const std::string& statuses = finished_statuses()) const {
    return {call("workflows_delete_finished", age_ms, limit, statuses)};
  }
  /// The finished statuses (durable/states.hpp) as a text[] literal: {succeeded,failed,cancelled}.
  [[nodiscard]] static std::string finished_statuses() {
    std::vector<std::string> items;
    for (const workflow_state s : finished_workflow_states) items.emplace_back(to_string(s));
    return detail::text_array(items);
  }

  // ---- operator queries (the durable command-line program) ------------------------------
  // Rows as JSON objects (json_value), columns in the order of the statement's SELECT list.

  // ---- schedules (sql/statements/schedule*.sql; times in Unix seconds) ----------------------
  struct schedule_definition {
    std::string id, cron, time_zone, workflow, inputs, queue;
    int priority = 0;
    std::int64_t timeout_ms = 0;
    std::string app_version, catch_up;
    int catch_up_max = 0;
    std::int64_t late_after_ms = 0, jitter_ms = 0;
    std::optional<std::int64_t> start_at, end_at, next_fire_at;
    bool paused = false, pass_slot = false;
  };
  [[nodiscard]] query<void> schedule_upsert(const schedule_definition& d) const {
    return {call("schedule_upsert", d.id, d.cron, d.time_zone, d.workflow, d.inputs, d.queue,
                 d.priority, d.timeout_ms, d.app_version, d.catch_up, d.catch_up_max,
                 d.late_after_ms, d.jitter_ms, d.start_at, d.end_at, d.next_fire_at, d.paused,
                 d.pass_slot)};
  }
  [[nodiscard]] query<json_value> server_now() const { return {call("server_now")}; }
  [[nodiscard]] query<json_value> schedule_get(const std::string& id) const {
    return {call("schedule_get", id)};
  }
  [[nodiscard]] query<json_value> schedules_list(const std::string& id_prefix) const {
    return {call("schedules_list", id_prefix)};
  }
  [[nodiscard]] query<taken_workflow> schedule_set_paused(
      const std::string& id, bool paused, std::optional<std::int64_t> next_fire_at) const {
    return {call("schedule_set_paused", id, paused, next_fire_at)};
  }
  [[nodiscard]] query<taken_workflow> schedule_delete(const std::string& id) const {
    return {call("schedule_delete", id)};
  }
  [[nodiscard]] query<due_schedule_row> schedules_due(std::int64_t limit) const {
    return {call("schedules_due", limit)};
  }
  /// Arrays per schedule advanced (ids ... last_workflow), then per slot started.
  struct schedule_firing {
    std::vector<std::string> ids;
    std::vector<std::int64_t> expected;
    std::vector<std::optional<std::int64_t>> next, last_slot;
    std::vector<int> fired, missed, late;
    std::vector<std::optional<std::string>> last_workflow;
    std::vector<std::string> slot_schedules, slot_ids, slot_locals;
    std::vector<double> slot_wake;
  };
  [[nodiscard]] query<taken_workflow> schedules_fire(const schedule_firing& f) const {
    return {call("schedules_fire", f.ids, f.expected, f.next, f.last_slot, f.fired, f.missed,
                 f.late, f.last_workflow, f.slot_schedules, f.slot_ids, f.slot_locals, f.slot_wake,
                 channel())};
  }
  [[nodiscard]] query<taken_workflow> schedule_start(const std::string& id,
                                                     const std::vector<std::string>& workflow_ids,
                                                     const std::vector<std::string>& slots,
                                                     const std::vector<double>& wake) const {
    return {call("schedule_start", id, workflow_ids, slots, wake, channel())};
  }

  [[nodiscard]] query<json_value> admin_stats(double lease_s) const {
    return {call("admin_stats", lease_s, schema_name_)};
  }
  /// Unloads workflow `id` until `what` arrives, or `recheck_ms` passes.
  [[nodiscard]] query<unload_outcome> workflow_wait(const std::string& id, std::int64_t epoch,
                                                    const wait_target& what,
                                                    double recheck_ms) const {
    std::optional<std::string> b;
    if (what.kind == "event") b = what.b;
    return {call("workflow_wait", id, epoch, what.tag(), recheck_ms, what.kind, what.a, b)};
  }
  /// Starts child `child_id` of workflow `parent` as its step `seq`, journaled (fenced).
  [[nodiscard]] query<written_row> child_start(const std::string& child_id, const std::string& name,
                                               const std::string& inputs, const std::string& parent,
                                               std::int64_t epoch, int seq, double started_at,
                                               const std::string& app_version,
                                               const std::string& span_id) const {
    return {call("child_start", child_id, name, inputs, parent, epoch, seq, started_at, app_version,
                 channel(), span_id)};
  }

  /// Ends generation n of workflow `id` (owned under `epoch`) and makes generation n + 1 with
  /// `inputs` (JSON array), in one statement (fenced, DU001).
  [[nodiscard]] query<continued_workflow> workflow_continue(const std::string& id,
                                                            std::int64_t epoch,
                                                            const std::string& inputs) const {
    return {call("workflow_continue", id, epoch, inputs)};
  }

  /// Makes workflow `id` due at once if its status is one of `statuses` (a text[] literal);
  /// a dead-lettered one's failed step runs again. One row with the status it had.
  [[nodiscard]] query<previous_status> workflow_resume(const std::string& id,
                                                       const std::string& statuses) const {
    return {call("workflow_resume", id, statuses)};
  }

  /// Creates workflow `new_id` from `id`'s name, inputs and journal rows before `from_step`.
  [[nodiscard]] query<fork_outcome> workflow_fork(const std::string& id, const std::string& new_id,
                                                  int from_step,
                                                  const std::string& app_version) const {
    return {call("workflow_fork", id, new_id, from_step, app_version)};
  }

  /// Cancels up to `limit` waiting workflows whose deadline passed.
  [[nodiscard]] query<taken_workflow> workflows_expire(std::int64_t limit) const {
    return {call("workflows_expire", limit)};
  }

  /// Which of `ids` are cancelled (id and epoch).
  [[nodiscard]] query<cancelled_workflow> workflows_cancelled(
      const std::vector<std::string>& ids) const {
    return {call("workflows_cancelled", ids)};
  }

  /// Creates or updates a queue's limits (unset: no limit).
  [[nodiscard]] query<void> queue_upsert(const std::string& name,
                                         const std::optional<int>& concurrency,
                                         const std::optional<int>& worker_concurrency,
                                         const std::optional<int>& rate_limit,
                                         int rate_period_ms) const {
    return {
        call("queue_upsert", name, concurrency, worker_concurrency, rate_limit, rate_period_ms)};
  }

  /// Per queue of `queues` (a text[] literal), in name order: workflows waiting to be
  /// dispatched (delayed ones included) and running now (the metrics' queue depth).
  [[nodiscard]] query<queue_count> queue_depths(const std::string& queues) const {
    return {call("queue_depths", queues)};
  }

  /// Locks a queue's row until the end of the transaction (serializes its dispatchers).
  /// Pauses or resumes queue `name` (its row is created if need be); a resume notifies.
  [[nodiscard]] query<void> queue_set_paused(const std::string& name, bool paused) const {
    return {call("queue_set_paused", name, paused, channel())};
  }
  [[nodiscard]] query<void> queue_lock(const std::string& queue) const {
    return {call("queue_lock", queue)};
  }

  /// Claims up to `limit` queued workflows of `queue` for `executor_id` within the queue's
  /// limits, by priority then age (only `names`, and `versions`, empty = all).
  [[nodiscard]] query<dispatched_workflow> queue_dispatch(const std::string& executor_id,
                                                          const std::string& queue,
                                                          const std::string& names, int limit,
                                                          const std::string& versions) const {
    return {call("queue_dispatch", executor_id, queue, names, limit, versions)};
  }

  /// pg_notify(channel, payload).
  [[nodiscard]] query<void> notify(const std::string& channel, const std::string& payload) const {
    return {call("notify", channel, payload)};
  }

  /// Renews executor `id`'s lease while `instance` holds it: fenced out when another process
  /// took the id over. Its row (heartbeat_answer) holds the server's clock.
  [[nodiscard]] fenced_write executor_heartbeat(const std::string& id,
                                                const std::string& instance) const {
    return {call("executor_heartbeat", id, instance), fenced_write::fence::matches_no_row};
  }

  /// Ends executor `id`'s lease now (graceful shutdown) while `instance` holds it.
  [[nodiscard]] query<void> executor_release(const std::string& id,
                                             const std::string& instance) const {
    return {call("executor_release", id, instance)};
  }

  /// Moves up to `limit` unfinished workflows (of `names`, and `versions`, empty = all) of
  /// executors whose lease (`lease_ms`) ran out to `executor_id`, which then claims them.
  [[nodiscard]] query<taken_workflow> workflows_take_over(const std::string& executor_id,
                                                          std::int64_t lease_ms,
                                                          const std::string& names,
                                                          std::int64_t limit,
                                                          const std::string& versions) const {
    return {call("workflows_take_over", executor_id, lease_ms, names, limit, versions)};
  }

  /// Registers this process (`instance`) under executor `id` unless another live process
  /// holds it (its heartbeat younger than `lease_ms`), or when `force`: then one row.
  /// `workflows` and `queues` (text[] literals): the names it registered, the queues it serves.
  [[nodiscard]] query<executor_registered> executor_register(
      const std::string& id, const std::string& host, int pid, const std::string& app_version,
      const std::string& versions, const std::string& instance, std::int64_t lease_ms, bool force,
      const std::string& workflows, const std::string& queues) const {
    return {call("executor_register", id, host, pid, app_version, versions, instance, lease_ms,
                 force, workflows, queues)};
  }

  /// Who holds executor `id`, and how long ago it heartbeat.
  [[nodiscard]] query<executor_holder> executor_get(const std::string& id) const {
    return {call("executor_get", id)};
  }

  /// Creates or refreshes executor `id` (without the instance check of executor_register).
  [[nodiscard]] query<void> executor_upsert(const std::string& id, const std::string& host, int pid,
                                            const std::string& app_version,
                                            const std::string& versions) const {
    return {call("executor_upsert", id, host, pid, app_version, versions)};
  }

  /// A prepared-statement call turned into its SQL text with the same parameters, for a
  /// connection that has not prepared it (one the application manages itself).
  [[nodiscard]] pg::statement unprepared(pg::statement st) const {
    if (st.prepared) {
      st.text = catalog_->at(st.text);
      st.prepared = false;
    }
    return st;
  }
  /// The NOTIFY channel on which enqueues announce their queue: "durable:<schema>" while
  /// that fits PostgreSQL's 63-byte limit on channel names (schema names up to 55 bytes).
  /// For longer names it is "durable:", the name's first 38 bytes (cut at a UTF-8
  /// character boundary), "#" and 16 hex digits of a hash of the whole name: at most 63
  /// bytes, and distinct for distinct schemas.
  [[nodiscard]] std::string channel() const { return channel_for(schema_name_); }
  /// The channel on which cancel() names the workflow it cancelled, so that the process that
  /// runs it stops it at once: the same rule with the prefix "durable.cancel:".
  [[nodiscard]] std::string cancel_channel() const {
    return channel_for(schema_name_, "durable.cancel:");
  }
  /// The channel on which what a waiting workflow waits for is announced (a message for it, a
  /// child of it that ended: payload its id; an event of workflow X: "e:X"), so that a run
  /// waiting here wakes at once: the same rule with the prefix "durable.wait:".
  [[nodiscard]] std::string wait_channel() const {
    return channel_for(schema_name_, "durable.wait:");
  }
  /// The channel on which the end of a workflow that a result() awaits is told (migration 15:
  /// the outcome, a newline, the id): the same rule with the prefix "durable.result:".
  [[nodiscard]] std::string result_channel() const {
    return channel_for(schema_name_, "durable.result:");
  }
  [[nodiscard]] static std::string channel_for(std::string_view schema,
                                               std::string_view prefix = "durable:") {
    constexpr std::size_t limit = 63;
    std::string ch(prefix);
    if (ch.size() + schema.size() <= limit) return ch.append(schema);
    std::size_t keep = limit - ch.size() - 17;
    while (keep > 0 && (static_cast<unsigned char>(schema[keep]) & 0xC0) == 0x80) --keep;
    static constexpr char hex[] = "0123456789abcdef";
    const auto h = static_cast<std::uint64_t>(detail::fnv1a(schema));
    ch.append(schema.substr(0, keep)).push_back('#');
    for (int shift = 60; shift >= 0; shift -= 4) ch.push_back(hex[(h >> shift) & 15]);
    return ch;
  }

private:
  static std::string prefix() { return "durable_"; }
  /// A trace context's parts as bound: null when there is none (or no tracestate).
  static std::optional<std::string_view> traceparent_of(const trace_context* t) {
    if (!t) return std::nullopt;
    return t->traceparent;
  }
  static std::optional<std::string_view> tracestate_of(const trace_context* t) {
    if (!t || t->tracestate.empty()) return std::nullopt;
    return t->tracestate;
  }

  /// Bookkeeping text with the schema filled in and no parameters.
  pg::statement plain(std::string_view text) const {
    return pg::statement{
        detail::sql_statements(text, {{"\"schema\"", schema_}}, false).at(0), {}, false};
  }

  template <class... A>
  pg::statement call(const char* name, const A&... a) const {
    return pg::prepared(prefix() + name, a...);
  }

  template <class Row, class Conn>
  static asio::awaitable<std::vector<Row>> fetch_impl(Conn& c, pg::statement st) {
    static_assert(
        !requires { Row::views; }, "rows of views need their result: run the statement");
    const pg::result r = co_await c.run(std::move(st));
    co_return rows<Row>(r);
  }
  template <class Row, class Conn>
  static asio::awaitable<std::optional<Row>> fetch_one_impl(Conn& c, pg::statement st) {
    static_assert(
        !requires { Row::views; }, "rows of views need their result: run the statement");
    const pg::result r = co_await c.run(std::move(st));
    co_return first<Row>(r);
  }

  /// Every statement the store runs (sql/statements/): its name (without the prefix) and its
  /// text, :"schema" standing for the quoted schema.
  DURABLE_DECL static const std::vector<std::pair<std::string_view, std::string_view>>& texts();

  std::string schema_name_;
  std::string schema_;
  std::shared_ptr<const pg::statement_catalog> catalog_;
};

}  // namespace durable

#if defined(DURABLE_HEADER_ONLY)
#include "durable/impl/store.ipp"
#endif
