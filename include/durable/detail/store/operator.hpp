// The statements of the operator's tools (the `durable` program, the web console): lists,
// details, exports and the audit, each returning JSON objects the tools print or serve.
// durable::store derives from operator_statements, so that each is store::<statement>.
// Machinery of durable/store.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "durable/detail/store/fence.hpp"
#include "durable/detail/store/identifiers.hpp"
#include "durable/detail/store/rows.hpp"
#include "durable/pg/connection.hpp"

namespace durable::detail {

class operator_statements {
public:
  /// Workflows, newest first, filtered (see sql/statements/admin_list.sql).
  struct list_filter {
    std::vector<std::string> statuses;  ///< empty: any
    std::optional<std::string> name, queue, executor, id_prefix;
    std::optional<double> since_s, until_s;         ///< created at most / at least this long ago
    std::optional<std::string> since_at, until_at;  ///< timestamps, parsed by the server
    std::int64_t limit = 50, offset = 0;
    /// Keyset paging: only rows after this one (its created_at and id) in the order.
    std::optional<std::string> after_created_at, after_id;
    /// Rows of each status past the cursor one request reads at most (nullopt: all). When a
    /// status has more, admin_list ends with a {"scanned_to": {created_at, id}} row: the
    /// result is whole down to there, and a request with that as its cursor goes on; admin_ids
    /// starts with a row whose `edge` is true (sql/statements/admin_list.sql).
    std::optional<std::int64_t> scan;
    /// Only rows changed (updated_at) at most this many seconds ago.
    std::optional<double> changed_since_s;
    /// Only workflows retrying a step (its latest attempt 'retrying', no journal row yet).
    bool retrying = false;
    /// Only rows holding this text (any case) in their id, inputs, last error, error message or
    /// status reason.
    std::optional<std::string> text;
  };
  [[nodiscard]] query<store_rows::json_value> admin_list(const list_filter& f) const {
    return {call("admin_list", detail::text_array(f.statuses), f.name, f.queue, f.executor,
                 f.since_s, f.since_at, f.until_s, f.until_at, f.limit, f.offset,
                 f.after_created_at, f.after_id, f.id_prefix, f.scan, f.changed_since_s, f.retrying,
                 f.text)};
  }
  /// One JSON object about workflow `id`: workflow, history, steps, children, inbox, events,
  /// streams.
  [[nodiscard]] query<store_rows::json_value> admin_show(const std::string& id) const {
    return {call("admin_show", id)};
  }
  /// One JSON object: up to `limit` values of stream `key` of workflow `id` from offset `from`
  /// on, with the workflow's status and the stream's close (sql/statements/admin_stream.sql).
  [[nodiscard]] query<store_rows::json_value> admin_stream(const std::string& id,
                                                           const std::string& key,
                                                           std::int64_t from, int limit) const {
    return {call("admin_stream", id, key, from, limit)};
  }
  /// Workflow `id` (with its descendants when `children`) as one versioned JSON document
  /// (sql/statements/admin_export.sql); no row: no such workflow.
  [[nodiscard]] query<store_rows::json_value> admin_export(const std::string& id,
                                                           bool children) const {
    return {call("admin_export", id, children)};
  }
  /// admin_import: workflows and rows inserted, and the root's id here.
  struct import_outcome {
    std::int64_t workflows = 0, rows = 0;
    std::string id;
    static import_outcome from(const pg::row& r) {
      return {r.get<std::int64_t>(0), r.get<std::int64_t>(1), r.get<std::string>(2)};
    }
  };
  /// Loads an admin_export document as new workflows (the root as `new_id` if given); the
  /// unfinished ones parked with `reason`. Nothing is written if an id is taken (0 workflows).
  [[nodiscard]] query<import_outcome> admin_import(const std::string& document,
                                                   const std::optional<std::string>& new_id,
                                                   const std::string& reason) const {
    return {call("admin_import", document, new_id, reason)};
  }
  [[nodiscard]] query<store_rows::json_value> admin_queues() const {
    return {call("admin_queues")};
  }
  /// The console's overview charts: {"hour": [...], "day": [...]} (console_series.sql).
  [[nodiscard]] query<store_rows::json_value> console_series() const {
    return {call("console_series")};
  }
  /// Executors; alive when they heartbeat within `lease_s`.
  [[nodiscard]] query<store_rows::json_value> admin_executors(double lease_s) const {
    return {call("admin_executors", lease_s)};
  }
  /// How many workflows workflows_delete_finished would delete (one row, one count).
  struct count_row {
    std::int64_t n = 0;
    static count_row from(const pg::row& r) { return {r.get<std::int64_t>(0)}; }
  };
  [[nodiscard]] query<count_row> admin_gc_count(double age_s, const std::string& statuses) const {
    return {call("admin_gc_count", age_s, statuses)};
  }
  /// The workflows that do not move (the view stuck), longest stuck first, at most `limit`.
  [[nodiscard]] query<store_rows::json_value> admin_stuck(std::int64_t limit) const {
    return {call("admin_stuck", limit)};
  }
  /// 1 when queue `name` has a row or a workflow was enqueued on it, else 0.
  [[nodiscard]] query<count_row> admin_queue_known(const std::string& name) const {
    return {call("admin_queue_known", name)};
  }
  /// The ids a bulk action over `f` acts on (f's limit; its paging fields are ignored). A row
  /// with `edge` set holds no id of the set: f.scan was too small to read the set whole.
  struct id_row {
    std::string id;
    bool edge = false;
    std::string status;
    static id_row from(const pg::row& r) {
      return {r.get<std::string>(0), r.get<bool>(1), r.get<std::string>(2)};
    }
  };
  [[nodiscard]] query<id_row> admin_ids(const list_filter& f) const {
    return {call("admin_ids", text_array(f.statuses), f.name, f.queue, f.executor, f.since_s,
                 f.since_at, f.until_s, f.until_at, f.limit, f.id_prefix, f.scan, f.changed_since_s,
                 f.retrying, f.text)};
  }
  /// One audit row (migration 13): its id. `target` is JSON text.
  struct audit_id {
    std::int64_t id = 0;
    static audit_id from(const pg::row& r) { return {r.get<std::int64_t>(0)}; }
  };
  [[nodiscard]] query<audit_id> audit_insert(const std::string& actor, const std::string& via,
                                             const std::string& address, const std::string& action,
                                             const std::string& target, std::int64_t count,
                                             const std::string& result,
                                             const std::string& detail) const {
    return {call("audit_insert", actor, via, address, action, target, count, result, detail)};
  }
  /// The end of the action of audit row `id`, written 'started' first (migration 16); no row
  /// when it had ended already.
  [[nodiscard]] query<audit_id> audit_finish(std::int64_t id, const std::string& target,
                                             std::int64_t count, const std::string& result,
                                             const std::string& detail) const {
    return {call("audit_finish", id, target, count, result, detail)};
  }
  /// The audit newest first: at most `limit` rows below `before_id`, of `action` if given.
  [[nodiscard]] query<store_rows::json_value> audit_list(
      std::int64_t limit, const std::optional<std::int64_t>& before_id,
      const std::optional<std::string>& action) const {
    return {call("audit_list", limit, before_id, action)};
  }

private:
  template <class... A>
  static pg::statement call(const char* name, const A&... a) {
    return pg::prepared(std::string("durable_") + name, a...);
  }
};

}  // namespace durable::detail
