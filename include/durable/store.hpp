// The store: the schema, its migrations, and every SQL statement the library runs.
// Nothing outside this file writes SQL text. Statements are named, prepared on each
// connection on first use, and take every value as a bound parameter; the only text that
// varies is the schema name, which is quoted as an identifier once, here.
#pragma once

#include <asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durable/error.hpp"
#include "durable/pg/connection.hpp"

namespace durable {

/// The database holds a schema version newer than this library knows.
class schema_too_new : public error {
public:
  using error::error;
};

namespace detail {

/// The schema name for a message: control characters (NUL included) shown as \xNN.
inline std::string printable_name(std::string_view id) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : id) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out;
}

/// Throws unless `id` is a valid schema name: 1 to 63 bytes (PostgreSQL's identifier limit,
/// beyond which the server silently truncates) and no NUL character.
inline void check_schema_name(std::string_view id) {
  if (id.empty()) throw error("invalid schema name: it is empty; it must have 1 to 63 bytes");
  if (id.size() > 63)
    throw error("invalid schema name '" + printable_name(id) + "': it has " +
                std::to_string(id.size()) +
                " bytes, but PostgreSQL identifiers have at most 63 bytes");
  if (id.find('\0') != std::string_view::npos)
    throw error("invalid schema name '" + printable_name(id) +
                "': it contains a NUL character, which PostgreSQL does not allow in a name");
}

/// Quotes an SQL identifier ("a""b"); used for the schema name only.
inline std::string quote_identifier(std::string_view id) {
  check_schema_name(id);
  std::string q = "\"";
  for (char c : id) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + '"';
}

/// The dollar-quote tag for function bodies that contain `quoted_schema`: $fn$ unless that
/// occurs in the schema name, else the first of $fn_1$, $fn_2$, ... that does not. (The
/// quoted name starts and ends with a double quote, which no tag contains, so a tag can
/// only occur inside it, never across its edges.)
inline std::string dollar_tag(std::string_view quoted_schema) {
  std::string tag = "$fn$";
  for (int i = 1; quoted_schema.find(tag) != std::string_view::npos; ++i)
    tag = "$fn_" + std::to_string(i) + "$";
  return tag;
}

/// Replaces every "{s}" in a statement template with the quoted schema name, and every
/// "$fn$" (the dollar quotes of function bodies in migrations) with a tag that does not
/// occur in the schema name.
inline std::string with_schema(std::string_view text, const std::string& schema) {
  const std::string tag = dollar_tag(schema);
  std::string out;
  out.reserve(text.size() + 64);
  for (std::size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "{s}") == 0) {
      out += schema;
      i += 3;
    } else if (text.compare(i, 4, "$fn$") == 0) {
      out += tag;
      i += 4;
    } else {
      out += text[i++];
    }
  }
  return out;
}

/// A text[] literal ({"a","b"}) for binding a list of strings as one parameter.
inline std::string text_array(const std::vector<std::string>& items) {
  return *pg::to_param(items);
}

/// 64-bit FNV-1a; keys the migration advisory lock per schema.
inline std::int64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return static_cast<std::int64_t>(h);
}

struct migration {
  int version;
  const char* description;
  std::vector<const char*> statements;
};

// Versioned, append-only: a released migration is never edited, only followed by another.
inline const std::vector<migration>& migrations() {
  static const std::vector<migration> all = {
      {1,
       "workflows, steps, executors",
       {
           R"(CREATE TABLE {s}.executors (
  id           text PRIMARY KEY,
  host         text NOT NULL,
  pid          integer NOT NULL,
  app_version  text NOT NULL DEFAULT '',
  started_at   timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now()
))",
           R"(CREATE TABLE {s}.workflows (
  id            text PRIMARY KEY,
  name          text NOT NULL,
  status        text NOT NULL CHECK (status IN
                  ('pending', 'running', 'sleeping', 'succeeded', 'failed', 'parked', 'cancelled')),
  status_reason text,
  inputs        jsonb NOT NULL,
  output        jsonb,
  error         jsonb,
  queue         text,
  priority      integer NOT NULL DEFAULT 0,
  dedup_key     text,
  executor_id   text,
  epoch         bigint NOT NULL DEFAULT 0,
  attempts      integer NOT NULL DEFAULT 0,
  created_at    timestamptz NOT NULL DEFAULT now(),
  started_at    timestamptz,
  updated_at    timestamptz NOT NULL DEFAULT now(),
  completed_at  timestamptz,
  wake_at       timestamptz,
  deadline      timestamptz,
  parent_id     text,
  app_version   text NOT NULL DEFAULT ''
))",
           R"(CREATE INDEX workflows_open_by_executor ON {s}.workflows (executor_id)
  WHERE status IN ('pending', 'running', 'sleeping'))",
           R"(CREATE TABLE {s}.steps (
  workflow_id  text NOT NULL,
  seq          integer NOT NULL,
  name         text NOT NULL,
  kind         text NOT NULL,
  status       text NOT NULL CHECK (status IN ('succeeded', 'failed')),
  output       jsonb,
  error        jsonb,
  attempts     integer NOT NULL DEFAULT 1,
  epoch        bigint NOT NULL,
  started_at   timestamptz,
  completed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, seq)
))",
           // I3: the fence and the write are one statement. FOR SHARE makes a takeover
           // (which bumps the epoch) wait for this row's commit, and makes this call wait
           // for a takeover in progress and then see its new epoch.
           R"(CREATE FUNCTION {s}.append_step(
    p_workflow_id text, p_epoch bigint, p_seq integer, p_name text, p_kind text,
    p_status text, p_output jsonb, p_error jsonb, p_attempts integer, p_started_at timestamptz)
  RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  current_epoch bigint;
BEGIN
  SELECT epoch INTO current_epoch FROM {s}.workflows WHERE id = p_workflow_id FOR SHARE;
  IF current_epoch IS DISTINCT FROM p_epoch THEN
    RAISE EXCEPTION 'workflow % is owned under epoch %, not %', p_workflow_id,
      coalesce(current_epoch::text, '(no such workflow)'), p_epoch
      USING ERRCODE = 'DU001';
  END IF;
  INSERT INTO {s}.steps (workflow_id, seq, name, kind, status, output, error, attempts, epoch,
                         started_at)
  VALUES (p_workflow_id, p_seq, p_name, p_kind, p_status, p_output, p_error, p_attempts, p_epoch,
          p_started_at);
END
$fn$)",
       }},
      {2,
       "queues",
       {
           R"(CREATE TABLE {s}.queues (
  name               text PRIMARY KEY,
  concurrency        integer CHECK (concurrency > 0),
  worker_concurrency integer CHECK (worker_concurrency > 0),
  rate_limit         integer CHECK (rate_limit > 0),
  rate_period_ms     integer CHECK (rate_period_ms > 0),
  updated_at         timestamptz NOT NULL DEFAULT now()
))",
           // A deduplication key is unique among a queue's unfinished workflows only.
           R"(CREATE UNIQUE INDEX workflows_queue_dedup ON {s}.workflows (queue, dedup_key)
  WHERE dedup_key IS NOT NULL AND status IN ('pending', 'running', 'sleeping'))",
           R"(CREATE INDEX workflows_queued ON {s}.workflows (queue, priority DESC, created_at)
  WHERE status = 'pending' AND executor_id IS NULL)",
           R"(CREATE INDEX workflows_queue_running ON {s}.workflows (queue, executor_id)
  WHERE status = 'running')",
           R"(CREATE INDEX workflows_queue_started ON {s}.workflows (queue, started_at))",
       }},
      {3,
       "application versions",
       {
           R"(ALTER TABLE {s}.executors ADD COLUMN versions text[] NOT NULL DEFAULT '{}')",
           // Why each queued workflow is still waiting, for operators (SELECT * FROM queued).
           R"(CREATE VIEW {s}.queued AS
SELECT w.id, w.name, w.queue, w.priority, w.app_version, w.created_at, w.wake_at,
       CASE
         WHEN w.wake_at > now() THEN 'delayed until ' || w.wake_at
         WHEN NOT EXISTS (
           SELECT 1 FROM {s}.executors e
            WHERE e.heartbeat_at > now() - interval '1 minute'
              AND (cardinality(e.versions) = 0 OR w.app_version = ANY(e.versions)))
           THEN 'no live executor runs application version ''' || w.app_version || ''''
         ELSE 'waiting for room in queue ''' || coalesce(w.queue, '') || ''''
       END AS reason
  FROM {s}.workflows w
 WHERE w.status = 'pending' AND w.executor_id IS NULL)",
       }},
      {4,
       "group commit of journal rows",
       {
           // Many journal rows in one statement, fenced row by row (I3): a row is written only
           // while its workflow is owned under the row's epoch, checked under FOR SHARE (a
           // takeover in progress is waited for, and its new epoch then excludes the row).
           // Returns the rows written; a missing row was fenced out. The lateral lookup keeps
           // it one index probe per row whatever the table's size, and the generic plan is
           // forced: with array parameters the planner would otherwise plan every call anew.
           R"(CREATE FUNCTION {s}.append_steps(
    p_workflow_ids text[], p_epochs bigint[], p_seqs integer[], p_names text[], p_kinds text[],
    p_statuses text[], p_outputs jsonb[], p_errors jsonb[], p_attempts integer[],
    p_started_at double precision[])
  RETURNS TABLE (written_id text, written_seq integer)
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
BEGIN
  RETURN QUERY
  INSERT INTO {s}.steps AS s (workflow_id, seq, name, kind, status, output, error, attempts,
                              epoch, started_at)
  SELECT r.workflow_id, r.seq, r.name, r.kind, r.status, r.output, r.error, r.attempts, r.epoch,
         to_timestamp(r.started_at)
    FROM unnest(p_workflow_ids, p_epochs, p_seqs, p_names, p_kinds, p_statuses, p_outputs,
                p_errors, p_attempts, p_started_at)
           AS r(workflow_id, epoch, seq, name, kind, status, output, error, attempts, started_at),
         LATERAL (SELECT FROM {s}.workflows w
                   WHERE w.id = r.workflow_id AND w.epoch = r.epoch FOR SHARE) AS owned
  RETURNING s.workflow_id, s.seq;
END
$fn$)",
       }},
      {5,
       "bounded claims, executor instances",
       {
           // I9: a claim that finds no journal row added since the previous claim counts as a
           // claim without progress; past the engine's limit the claim parks the workflow.
           R"(ALTER TABLE {s}.workflows
  ADD COLUMN stalled_claims integer NOT NULL DEFAULT 0,
  ADD COLUMN progress_mark  integer NOT NULL DEFAULT 0,
  ADD COLUMN last_error     text)",
           // The process that holds an executor id now (a random token per engine), so that a
           // second live process with the same id is refused instead of fighting over work.
           R"(ALTER TABLE {s}.executors ADD COLUMN instance text NOT NULL DEFAULT '')",
       }},
  };
  return all;
}

}  // namespace detail

/// SQLSTATE raised by the journal fence when the caller's epoch is stale.
inline constexpr std::string_view ownership_lost_sqlstate = "DU001";

/// How a fenced write went (I3): a journal row, a workflow's final state, a heartbeat.
enum class fence_outcome {
  written,     ///< the write committed (or is part of the batch that did)
  fenced_out,  ///< another owner (a newer epoch, another instance) holds the row: not written
  failed,      ///< the server refused the write for another reason (see sqlstate)
};

/// The verdict on one fenced write; the one type every writer reports through. When it comes
/// from the server's error (the journal fence's DU001, or any other refusal) it carries the
/// SQLSTATE and the server's message; a row missing from a merged write's RETURNING or an
/// update that matched no row is fenced out without a message.
struct fence_verdict {
  fence_outcome outcome = fence_outcome::written;
  std::string sqlstate;
  std::string server_message;

  [[nodiscard]] bool written() const noexcept { return outcome == fence_outcome::written; }
  [[nodiscard]] bool fenced_out() const noexcept { return outcome == fence_outcome::fenced_out; }
  [[nodiscard]] bool failed() const noexcept { return outcome == fence_outcome::failed; }
};

/// A statement the store built, with the type of the rows it returns (`void`: none, or none
/// that anybody reads). Decode its result with store::rows<Row> / store::first<Row>, or run it
/// and decode in one go with store::fetch / store::fetch_one.
template <class Row>
struct query {
  using row_type = Row;
  pg::statement st;
};

/// A fenced write (I3). Its verdict comes from its result (verdict()), or, when the server
/// refused it, from the error (store::verdict(const pg::sql_error&)).
struct fenced_write {
  /// How the fence shows: the statement raises DU001 (step_append), or it updates no row.
  enum class fence { raises, matches_no_row };
  pg::statement st;
  fence how = fence::raises;

  /// The verdict on a write that returned `r` (no error).
  [[nodiscard]] fence_verdict verdict(const pg::result& r) const {
    if (how == fence::matches_no_row && r.affected() == 0)
      return {fence_outcome::fenced_out, {}, {}};
    return {};
  }
};

/// Names, texts and typed builders of every statement the library runs, the row type of each
/// statement that returns rows, and the decoding of its columns.
class store {
public:
  explicit store(std::string schema = "durable")
      : schema_name_(std::move(schema)), schema_(detail::quote_identifier(schema_name_)) {
    auto cat = std::make_shared<pg::statement_catalog>();
    for (const auto& [name, text] : texts())
      (*cat)[prefix() + name] = detail::with_schema(text, schema_);
    catalog_ = std::move(cat);
  }

  [[nodiscard]] const std::string& schema() const noexcept { return schema_name_; }
  [[nodiscard]] std::shared_ptr<const pg::statement_catalog> catalog() const { return catalog_; }
  /// The newest schema version this library knows.
  [[nodiscard]] static int latest_version() { return detail::migrations().back().version; }

  /// Creates or upgrades the schema. Safe to run from many processes at once: an advisory
  /// lock per schema serializes them, and each migration commits with its version row.
  /// Returns the number of migrations applied. Throws schema_too_new if the database is
  /// ahead of this library.
  [[nodiscard]] asio::awaitable<int> migrate(pg::connection& c) const;

  /// The schema version in the database (0 when the schema does not exist).
  [[nodiscard]] asio::awaitable<int> version(pg::connection& c) const;

  // ---- rows -----------------------------------------------------------------------------
  // One struct per statement that returns rows, read from the columns in the order of the
  // statement's SELECT or RETURNING list (texts() below). Nothing outside the store reads a
  // column by index.

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
    static workflow_record from(const pg::row& r) {
      return {r.get<std::string>(0),
              r.get<std::string>(1),
              r.get<std::optional<std::string>>(2),
              r.get<std::string>(3),
              r.get<std::optional<std::string>>(4),
              r.get<std::optional<std::string>>(5),
              r.get<std::optional<std::string>>(6),
              r.get<std::int64_t>(7),
              r.get<int>(8)};
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
    [[nodiscard]] bool parked() const noexcept { return status == "parked"; }
    static claimed_workflow from(const pg::row& r) {
      return {r.get<std::string>(0),  r.get<std::string>(1), r.get<std::string>(2),
              r.get<std::int64_t>(3), r.get<std::string>(4), r.get<std::optional<std::string>>(5)};
    }
  };

  /// journal_load: one journal row. Output and error stay JSON text.
  struct journal_step {
    std::int64_t seq = 0;
    std::string name, kind;
    bool failed = false;  ///< status 'failed' (else 'succeeded')
    std::optional<std::string> output, error;
    static journal_step from(const pg::row& r) {
      return {r.get<std::int64_t>(0),
              r.get<std::string>(1),
              r.get<std::string>(2),
              r.text(3) == "failed",
              r.get<std::optional<std::string>>(4),
              r.get<std::optional<std::string>>(5)};
    }
  };

  /// journals_load: one journal row of one of the listed workflows.
  struct loaded_step {
    std::string workflow_id;
    journal_step step;
    static loaded_step from(const pg::row& r) {
      return {r.get<std::string>(0),
              {r.get<std::int64_t>(1), r.get<std::string>(2), r.get<std::string>(3),
               r.text(4) == "failed", r.get<std::optional<std::string>>(5),
               r.get<std::optional<std::string>>(6)}};
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
    static dispatched_workflow from(const pg::row& r) {
      return {r.get<std::string>(0), r.get<std::string>(1), r.get<std::string>(2),
              r.get<std::int64_t>(3)};
    }
  };

  /// workflows_take_over: a workflow moved to this executor (to be claimed next).
  struct taken_workflow {
    std::string id;
    static taken_workflow from(const pg::row& r) { return {r.get<std::string>(0)}; }
  };

  /// executor_register: present when this process now holds the executor id.
  struct executor_registered {
    static executor_registered from(const pg::row&) { return {}; }
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

  // ---- decoding and running -------------------------------------------------------------

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
  // Each binds its parameters, in the order of the SQL's $1, $2, ... (texts() below). Lists
  // of workflow names (`names`) and of application versions (`versions`, empty = all) are
  // text[] literals, built once by the engine (detail::text_array).

  /// Inserts a workflow that starts running here at once (epoch 1), unless its id exists.
  /// One row; none when a concurrent insert won the race.
  [[nodiscard]] query<start_outcome> workflow_insert(const std::string& id, const std::string& name,
                                                     const std::string& inputs,
                                                     const std::string& executor_id,
                                                     const std::string& app_version) const {
    return {call("workflow_insert", id, name, inputs, executor_id, app_version)};
  }

  /// One workflow's state; no row when it does not exist.
  [[nodiscard]] query<workflow_record> workflow_get(const std::string& id) const {
    return {call("workflow_get", id)};
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
                                             const std::string& status,
                                             const std::optional<std::string>& output,
                                             const std::optional<std::string>& error,
                                             const std::optional<std::string>& reason) const {
    return {call("workflow_finish", id, epoch, status, output, error, reason),
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
      std::int64_t delay_ms, const std::string& app_version, const std::string& channel) const {
    return {call("workflow_enqueue", id, name, inputs, queue, priority, dedup_key, delay_ms,
                 app_version, channel)};
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

  /// Locks a queue's row until the end of the transaction (serializes its dispatchers).
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
  /// took the id over.
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
  [[nodiscard]] query<executor_registered> executor_register(
      const std::string& id, const std::string& host, int pid, const std::string& app_version,
      const std::string& versions, const std::string& instance, std::int64_t lease_ms,
      bool force) const {
    return {
        call("executor_register", id, host, pid, app_version, versions, instance, lease_ms, force)};
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
  [[nodiscard]] static std::string channel_for(std::string_view schema) {
    constexpr std::size_t limit = 63;
    std::string ch = "durable:";
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

  /// DDL and bookkeeping text with the schema filled in and no parameters.
  pg::statement plain(std::string_view text) const {
    return pg::statement{detail::with_schema(text, schema_), {}, false};
  }

  template <class... A>
  pg::statement call(const char* name, const A&... a) const {
    return pg::prepared(prefix() + name, a...);
  }

  template <class Row, class Conn>
  static asio::awaitable<std::vector<Row>> fetch_impl(Conn& c, pg::statement st) {
    const pg::result r = co_await c.run(std::move(st));
    co_return rows<Row>(r);
  }
  template <class Row, class Conn>
  static asio::awaitable<std::optional<Row>> fetch_one_impl(Conn& c, pg::statement st) {
    const pg::result r = co_await c.run(std::move(st));
    co_return first<Row>(r);
  }

  static const std::vector<std::pair<const char*, const char*>>& texts() {
    static const std::vector<std::pair<const char*, const char*>> all = {
        // $1 id, $2 name, $3 inputs, $4 executor_id, $5 app_version
        {"workflow_insert", R"(WITH ins AS (
  INSERT INTO {s}.workflows (id, name, status, inputs, executor_id, epoch, attempts, started_at,
                             app_version)
  VALUES ($1, $2, 'running', $3::jsonb, $4, 1, 1, now(), $5)
  ON CONFLICT (id) DO NOTHING
  RETURNING id)
SELECT true, NULL::text, NULL::text, NULL::text FROM ins
UNION ALL
SELECT false, w.name, w.inputs::text, w.status FROM {s}.workflows w
 WHERE w.id = $1 AND NOT EXISTS (SELECT 1 FROM ins))"},
        // $1 id
        {"workflow_get",
         R"(SELECT name, status, status_reason, inputs::text, output::text, error::text,
       executor_id, epoch, attempts
  FROM {s}.workflows WHERE id = $1)"},
        // $1 id, $2 executor_id, $3 workflow names this executor runs (text[]). A new epoch
        // fences out any previous owner (I3).
        {"workflow_claim", R"(UPDATE {s}.workflows
   SET status = 'running', executor_id = $2, epoch = epoch + 1, attempts = attempts + 1,
       started_at = coalesce(started_at, now()), updated_at = now()
 WHERE id = $1 AND status IN ('pending', 'running') AND name = ANY($3::text[])
RETURNING name, inputs::text, epoch)"},
        // $1 id, $2 epoch, $3 status, $4 output, $5 error, $6 status_reason
        {"workflow_finish", R"(UPDATE {s}.workflows
   SET status = $3, output = $4::jsonb, error = $5::jsonb, status_reason = $6, updated_at = now(),
       completed_at = CASE WHEN $3 IN ('succeeded', 'failed', 'cancelled') THEN now() END
 WHERE id = $1 AND epoch = $2)"},
        // $1 executor_id, $2 versions it runs (text[], empty = all)
        {"workflows_owned", R"(SELECT id, name FROM {s}.workflows
 WHERE executor_id = $1 AND status IN ('pending', 'running')
   AND (cardinality($2::text[]) = 0 OR app_version = ANY($2::text[]))
 ORDER BY created_at)"},
        // $1 ids (text[]), $2 executor_id, $3 workflow names it runs (text[]), $4 versions it
        // runs (text[], empty = all), $5 most claims in a row without progress (I9).
        // Claims every listed workflow that is unfinished and runnable here, bumping its epoch
        // (I3). A claim that finds no journal row added since the previous claim counts as
        // stalled; past the limit the workflow is parked instead (status 'parked' returned).
        {"workflows_claim", R"(UPDATE {s}.workflows w
   SET stalled_claims = CASE WHEN j.n = w.progress_mark THEN w.stalled_claims + 1 ELSE 0 END,
       progress_mark = j.n,
       status = CASE WHEN j.n = w.progress_mark AND w.stalled_claims >= $5 THEN 'parked'
                     ELSE 'running' END,
       status_reason = CASE WHEN j.n = w.progress_mark AND w.stalled_claims >= $5
         THEN format('claimed %s times in a row without journaling a step (the limit is '
                     'max_claims_without_progress = %s); last error: %s',
                     w.stalled_claims + 1, $5, coalesce(w.last_error, 'none recorded'))
         ELSE w.status_reason END,
       executor_id = $2, epoch = w.epoch + 1, attempts = w.attempts + 1,
       started_at = coalesce(w.started_at, now()), updated_at = now()
  FROM (SELECT x.id, (SELECT count(*)::integer FROM {s}.steps s WHERE s.workflow_id = x.id) AS n
          FROM {s}.workflows x WHERE x.id = ANY($1::text[])) j
 WHERE w.id = j.id AND w.status IN ('pending', 'running') AND w.name = ANY($3::text[])
   AND (cardinality($4::text[]) = 0 OR w.app_version = ANY($4::text[]))
RETURNING w.id, w.name, w.inputs::text, w.epoch, w.status, w.status_reason)"},
        // $1 ids (text[]). I1: every listed journal in one query.
        {"journals_load", R"(SELECT workflow_id, seq, name, kind, status, output::text, error::text
  FROM {s}.steps WHERE workflow_id = ANY($1::text[]) ORDER BY workflow_id, seq)"},
        // $1 id, $2 epoch, $3 the error that ended the run (shown when I9 parks it).
        {"workflow_note_error", R"(UPDATE {s}.workflows SET last_error = $3, updated_at = now()
 WHERE id = $1 AND epoch = $2)"},
        // $1 id. I1: the whole journal in one query.
        {"journal_load", R"(SELECT seq, name, kind, status, output::text, error::text
  FROM {s}.steps WHERE workflow_id = $1 ORDER BY seq)"},
        // $1 id, $2 epoch, $3 seq, $4 name, $5 kind, $6 status, $7 output, $8 error,
        // $9 attempts, $10 started_at (epoch seconds)
        {"step_append", R"(SELECT {s}.append_step($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9,
                        to_timestamp($10::double precision)))"},
        // Group commit of journal rows: many rows, one statement (see append_steps in
        // migration 4). Arrays, one element per row: $1 workflow ids, $2 epochs, $3 seqs,
        // $4 names, $5 kinds, $6 statuses, $7 outputs (jsonb), $8 errors (jsonb), $9 attempts,
        // $10 started_at (epoch seconds). Returns (workflow id, seq) of the rows written. A
        // duplicate row fails the statement; the group committer then sends each row alone
        // through step_append.
        {"steps_append_many", R"(SELECT written_id, written_seq FROM {s}.append_steps(
  $1::text[], $2::bigint[], $3::integer[], $4::text[], $5::text[], $6::text[], $7::jsonb[],
  $8::jsonb[], $9::integer[], $10::double precision[]))"},
        // $1 id, $2 name, $3 inputs, $4 queue, $5 priority, $6 dedup_key, $7 delay (ms),
        // $8 app_version, $9 notify channel. One row: (created, id of the workflow that holds
        // the id or the dedup key, its name, its inputs). NOTIFY is delivered at commit.
        {"workflow_enqueue", R"(WITH ins AS (
  INSERT INTO {s}.workflows (id, name, status, inputs, queue, priority, dedup_key, wake_at,
                             app_version)
  VALUES ($1, $2, 'pending', $3::jsonb, $4, $5, $6,
          CASE WHEN $7::bigint > 0 THEN now() + make_interval(secs => $7::double precision / 1000) END,
          $8)
  ON CONFLICT DO NOTHING
  RETURNING id),
woken AS (SELECT pg_notify($9, $4) FROM ins)
SELECT true, $1::text, $2::text, $3::text, (SELECT count(*) FROM woken) FROM ins
UNION ALL
(SELECT false, w.id, w.name, w.inputs::text, 0 FROM {s}.workflows w
  WHERE NOT EXISTS (SELECT 1 FROM ins)
    AND (w.id = $1 OR (w.queue = $4 AND w.dedup_key = $6
                       AND w.status IN ('pending', 'running', 'sleeping')))
  ORDER BY w.id = $1 DESC LIMIT 1))"},
        // $1 name, $2 concurrency, $3 worker_concurrency, $4 rate_limit, $5 rate_period_ms
        {"queue_upsert",
         R"(INSERT INTO {s}.queues (name, concurrency, worker_concurrency, rate_limit,
                         rate_period_ms)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,
  worker_concurrency = excluded.worker_concurrency, rate_limit = excluded.rate_limit,
  rate_period_ms = excluded.rate_period_ms, updated_at = now())"},
        // $1 queue. Serializes the dispatchers of one queue, so that the counts the next
        // statement reads (in its own, later snapshot) cannot be outdated by another one.
        {"queue_lock", R"(SELECT name FROM {s}.queues WHERE name = $1 FOR UPDATE)"},
        // $1 executor, $2 queue, $3 workflow names it runs (text[]), $4 how many at most,
        // $5 application versions it runs (text[], empty = all).
        // Claims queued workflows within the queue's limits, by priority then age.
        {"queue_dispatch", R"(WITH q AS (
  SELECT concurrency, worker_concurrency, rate_limit, rate_period_ms FROM {s}.queues WHERE name = $2),
budget AS (
  SELECT greatest(0, least(
    $4::integer,
    (SELECT q.concurrency - (SELECT count(*) FROM {s}.workflows
                              WHERE queue = $2 AND status = 'running') FROM q),
    (SELECT q.worker_concurrency - (SELECT count(*) FROM {s}.workflows
                              WHERE queue = $2 AND status = 'running' AND executor_id = $1) FROM q),
    (SELECT q.rate_limit - (SELECT count(*) FROM {s}.workflows WHERE queue = $2
                              AND started_at > now() - make_interval(secs => q.rate_period_ms / 1000.0))
       FROM q))) AS n),
picked AS (
  SELECT w.id FROM {s}.workflows w
   WHERE w.queue = $2 AND w.status = 'pending' AND w.executor_id IS NULL
     AND (w.wake_at IS NULL OR w.wake_at <= now()) AND w.name = ANY($3::text[])
     AND (cardinality($5::text[]) = 0 OR w.app_version = ANY($5::text[]))
   ORDER BY w.priority DESC, w.created_at, w.id
   LIMIT (SELECT n FROM budget)
   FOR UPDATE OF w SKIP LOCKED)
UPDATE {s}.workflows w
   SET status = 'running', executor_id = $1, epoch = w.epoch + 1, attempts = w.attempts + 1,
       started_at = now(), updated_at = now()
  FROM picked WHERE w.id = picked.id
RETURNING w.id, w.name, w.inputs::text, w.epoch)"},
        // $1 channel, $2 payload
        {"notify", R"(SELECT pg_notify($1, $2))"},
        // $1 id, $2 instance. No row updated: another process took the id over.
        {"executor_heartbeat", R"(UPDATE {s}.executors SET heartbeat_at = now()
 WHERE id = $1 AND instance = $2)"},
        // $1 id, $2 instance. Graceful shutdown: the lease ends now, so others take over at once.
        {"executor_release", R"(UPDATE {s}.executors SET heartbeat_at = '-infinity'
 WHERE id = $1 AND instance = $2)"},
        // $1 this executor, $2 lease timeout (ms), $3 workflow names it runs (text[]),
        // $4 how many at most, $5 versions it runs (text[], empty = all). SKIP LOCKED: two live
        // executors never take the same workflow;
        // the new owner then claims each one, which bumps its epoch (I3).
        {"workflows_take_over", R"(WITH dead AS (
  SELECT id FROM {s}.executors
   WHERE id <> $1 AND heartbeat_at < now() - make_interval(secs => $2::double precision / 1000)),
taken AS (
  SELECT w.id FROM {s}.workflows w
   WHERE w.executor_id IN (SELECT id FROM dead) AND w.status IN ('pending', 'running')
     AND w.name = ANY($3::text[])
     AND (cardinality($5::text[]) = 0 OR w.app_version = ANY($5::text[]))
   ORDER BY w.created_at LIMIT $4
   FOR UPDATE OF w SKIP LOCKED)
UPDATE {s}.workflows w SET executor_id = $1, updated_at = now()
  FROM taken WHERE w.id = taken.id
RETURNING w.id)"},
        // $1 id, $2 host, $3 pid, $4 app_version, $5 versions it runs (text[], empty = all),
        // $6 instance, $7 lease timeout (ms), $8 take the id even if its holder looks alive.
        // Registers this process under the id unless another live process holds it (its
        // heartbeat is younger than the lease): then no row.
        {"executor_register",
         R"(INSERT INTO {s}.executors AS e (id, host, pid, app_version, versions,
                                 instance)
VALUES ($1, $2, $3, $4, $5::text[], $6)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
  app_version = excluded.app_version, versions = excluded.versions, instance = excluded.instance,
  started_at = now(), heartbeat_at = now()
  WHERE e.instance = excluded.instance OR $8::boolean
     OR e.heartbeat_at < now() - make_interval(secs => $7::double precision / 1000)
RETURNING true)"},
        // $1 id: who holds it, and how long ago it heartbeat (ms).
        {"executor_get", R"(SELECT host, pid, instance,
       CASE WHEN heartbeat_at = '-infinity' THEN 'infinity'::double precision
            ELSE (extract(epoch FROM now() - heartbeat_at) * 1000)::double precision END
  FROM {s}.executors WHERE id = $1)"},
        // $1 id, $2 host, $3 pid, $4 app_version, $5 versions it runs (text[], empty = all)
        {"executor_upsert", R"(INSERT INTO {s}.executors (id, host, pid, app_version, versions)
VALUES ($1, $2, $3, $4, $5::text[])
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
  app_version = excluded.app_version, versions = excluded.versions, started_at = now(),
  heartbeat_at = now())"},
    };
    return all;
  }

  std::string schema_name_;
  std::string schema_;
  std::shared_ptr<const pg::statement_catalog> catalog_;
};

inline asio::awaitable<int> store::version(pg::connection& c) const {
  pg::statement exists = pg::sql("SELECT CASE WHEN to_regclass($1) IS NULL THEN 0 ELSE 1 END",
                                 schema_ + ".schema_migrations");
  auto r = co_await c.run(std::move(exists));
  if (r[0].get<int>(0) == 0) co_return 0;
  pg::statement max_version = plain("SELECT coalesce(max(version), 0) FROM {s}.schema_migrations");
  auto v = co_await c.run(std::move(max_version));
  co_return v[0].get<int>(0);
}

inline asio::awaitable<int> store::migrate(pg::connection& c) const {
  auto tx = c.begin();
  // The lock comes first: even CREATE SCHEMA IF NOT EXISTS races between sessions.
  pg::statement lock =
      pg::sql("SELECT pg_advisory_xact_lock($1)", detail::fnv1a("durable.migrate:" + schema_name_));
  co_await tx.run(std::move(lock));
  std::vector<pg::statement> bootstrap;
  bootstrap.push_back(plain("CREATE SCHEMA IF NOT EXISTS {s}"));
  bootstrap.push_back(plain(R"(CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
  version     integer PRIMARY KEY,
  description text NOT NULL,
  applied_at  timestamptz NOT NULL DEFAULT now()
))"));
  co_await tx.run_batch(std::move(bootstrap));
  pg::statement max_version = plain("SELECT coalesce(max(version), 0) FROM {s}.schema_migrations");
  auto r = co_await tx.run(std::move(max_version));
  const int current = r[0].get<int>(0);
  if (current > latest_version())
    throw schema_too_new(
        "the database schema '" + schema_name_ + "' is at version " + std::to_string(current) +
        " but this build of durable knows versions up to " + std::to_string(latest_version()) +
        "; upgrade the library in this application, or use another schema");
  int applied = 0;
  for (const auto& m : detail::migrations()) {
    if (m.version <= current) continue;
    std::vector<pg::statement> batch;
    for (const char* text : m.statements) batch.push_back(plain(text));
    batch.push_back(pg::sql(
        detail::with_schema(
            "INSERT INTO {s}.schema_migrations (version, description) VALUES ($1, $2)", schema_),
        m.version, std::string(m.description)));
    co_await tx.run_batch(std::move(batch));
    ++applied;
  }
  co_await tx.commit();
  co_return applied;
}

}  // namespace durable
