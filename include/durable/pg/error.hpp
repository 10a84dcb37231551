// Errors raised by the PostgreSQL layer.
//
// The layer stands alone: its errors derive from pg::error (a std::runtime_error), not from
// durable::error, so that durable/pg/ can be used, and its errors caught, without the rest of
// the library. Two families:
//
//   pg::error
//     sql_error                      the server refused a statement (SQLSTATE, message, ...)
//       integrity_constraint_violation, transaction_rollback, ...   one class per SQLSTATE
//       class, and below them the conditions worth catching on their own (unique_violation,
//       serialization_failure, query_canceled, ...); see make_sql_error() for the mapping
//     connection_error               could not connect
//       connection_lost              an established connection broke
//       statement_timeout            no answer within the connection's deadline
//     conversion_error               a result value did not fit the C++ type asked for
//
// Which of them are worth retrying is pg/classify.hpp's business.
#pragma once

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>

#include "durable/detail/config.hpp"

namespace durable::pg {

/// Base of every exception the PostgreSQL layer throws. A misuse of the layer (committing a
/// finished transaction, a prepared statement that no catalog knows) is a plain pg::error.
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The server rejected a statement. Carries the SQLSTATE, the server's primary message and
/// the name of the statement that failed (the prepared statement's name, or its first line).
/// The layer always throws the most specific subclass its SQLSTATE has (make_sql_error), so
/// `catch (const pg::unique_violation&)` works; a SQLSTATE without a class of its own here is
/// a plain sql_error.
class sql_error : public error {
public:
  sql_error(std::string sqlstate, std::string server_message, std::string statement,
            std::string detail = {}, int batch_index = -1)
      : error(format(sqlstate, server_message, statement, detail)),
        sqlstate_(std::move(sqlstate)),
        server_message_(std::move(server_message)),
        statement_(std::move(statement)),
        detail_(std::move(detail)),
        batch_index_(batch_index) {}

  /// Five-character SQLSTATE, e.g. "23505" for a unique violation.
  [[nodiscard]] const std::string& sqlstate() const noexcept { return sqlstate_; }
  [[nodiscard]] const std::string& server_message() const noexcept { return server_message_; }
  [[nodiscard]] const std::string& statement() const noexcept { return statement_; }
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }
  /// Which statement of a batch (run_batch, transaction::commit) failed, counting from 0;
  /// -1 when the error is not tied to one statement of the caller's batch.
  [[nodiscard]] int batch_index() const noexcept { return batch_index_; }
  void set_batch_index(int i) noexcept { batch_index_ = i; }

private:
  static std::string format(const std::string& state, const std::string& msg,
                            const std::string& stmt, const std::string& detail) {
    std::string s = "statement '" + stmt + "' failed with SQLSTATE " + state + ": " + msg;
    if (!detail.empty()) s += " (" + detail + ")";
    return s;
  }
  std::string sqlstate_, server_message_, statement_, detail_;
  int batch_index_ = -1;
};

/// The exception a server error with these fields is raised as: the class of its SQLSTATE
/// (exact code first, e.g. 23505 unique_violation, then its two-character class, e.g. 23xxx
/// integrity_constraint_violation), or sql_error for a SQLSTATE this layer has no class for.
/// Every server error the layer raises is made here.
[[nodiscard]] DURABLE_DECL std::exception_ptr make_sql_error(std::string sqlstate,
                                                             std::string server_message,
                                                             std::string statement,
                                                             std::string detail = {},
                                                             int batch_index = -1);

/// Throws what make_sql_error() makes.
[[noreturn]] DURABLE_DECL void throw_sql_error(std::string sqlstate, std::string server_message,
                                               std::string statement, std::string detail = {},
                                               int batch_index = -1);

// ---- SQLSTATE classes (PostgreSQL manual, appendix A) --------------------------------------
// Each class of SQLSTATEs has an exception type; below it, the conditions an application
// commonly acts on. All take sql_error's constructor.

/// Class 08, as reported by the server (e.g. 08P01 protocol violation). A connection that
/// could not be made or broke is a connection_error, not this.
class connection_exception : public sql_error {
public:
  using sql_error::sql_error;
};

/// Class 22: a value the statement computed or was given is invalid.
class data_exception : public sql_error {
public:
  using sql_error::sql_error;
};
/// 22001
class string_data_right_truncation : public data_exception {
public:
  using data_exception::data_exception;
};
/// 22003
class numeric_value_out_of_range : public data_exception {
public:
  using data_exception::data_exception;
};
/// 22007
class invalid_datetime_format : public data_exception {
public:
  using data_exception::data_exception;
};
/// 22008
class datetime_field_overflow : public data_exception {
public:
  using data_exception::data_exception;
};
/// 22012
class division_by_zero : public data_exception {
public:
  using data_exception::data_exception;
};
/// 22021: a byte sequence that is not valid in the database's encoding.
class character_not_in_repertoire : public data_exception {
public:
  using data_exception::data_exception;
};
/// 22P02: text that does not parse as the type (e.g. 'x'::int).
class invalid_text_representation : public data_exception {
public:
  using data_exception::data_exception;
};
/// 22P05: a character the database's encoding cannot store.
class untranslatable_character : public data_exception {
public:
  using data_exception::data_exception;
};

/// Class 23: a constraint refused the row.
class integrity_constraint_violation : public sql_error {
public:
  using sql_error::sql_error;
};
/// 23001
class restrict_violation : public integrity_constraint_violation {
public:
  using integrity_constraint_violation::integrity_constraint_violation;
};
/// 23502
class not_null_violation : public integrity_constraint_violation {
public:
  using integrity_constraint_violation::integrity_constraint_violation;
};
/// 23503
class foreign_key_violation : public integrity_constraint_violation {
public:
  using integrity_constraint_violation::integrity_constraint_violation;
};
/// 23505
class unique_violation : public integrity_constraint_violation {
public:
  using integrity_constraint_violation::integrity_constraint_violation;
};
/// 23514
class check_violation : public integrity_constraint_violation {
public:
  using integrity_constraint_violation::integrity_constraint_violation;
};
/// 23P01
class exclusion_violation : public integrity_constraint_violation {
public:
  using integrity_constraint_violation::integrity_constraint_violation;
};

/// Class 25: the statement is not allowed in the transaction's current state.
class invalid_transaction_state : public sql_error {
public:
  using sql_error::sql_error;
};
/// 25006: a write in a READ ONLY transaction (or on a standby).
class read_only_sql_transaction : public invalid_transaction_state {
public:
  using invalid_transaction_state::invalid_transaction_state;
};
/// 25P02: a statement after an earlier one failed in the same transaction.
class in_failed_sql_transaction : public invalid_transaction_state {
public:
  using invalid_transaction_state::invalid_transaction_state;
};
/// 25P03: the server ended a session idle in a transaction too long.
class idle_in_transaction_session_timeout : public invalid_transaction_state {
public:
  using invalid_transaction_state::invalid_transaction_state;
};

/// Class 3F (3F000): the schema named does not exist.
class invalid_schema_name : public sql_error {
public:
  using sql_error::sql_error;
};

/// Class 40: the transaction was rolled back; running it again may succeed.
class transaction_rollback : public sql_error {
public:
  using sql_error::sql_error;
};
/// 40001: lost a race with a concurrent transaction (REPEATABLE READ, SERIALIZABLE).
class serialization_failure : public transaction_rollback {
public:
  using transaction_rollback::transaction_rollback;
};
/// 40003: the connection broke during COMMIT; whether it committed is unknown.
class statement_completion_unknown : public transaction_rollback {
public:
  using transaction_rollback::transaction_rollback;
};
/// 40P01
class deadlock_detected : public transaction_rollback {
public:
  using transaction_rollback::transaction_rollback;
};

/// Class 42: the statement is malformed, names something missing, or is not permitted.
class syntax_error_or_access_rule_violation : public sql_error {
public:
  using sql_error::sql_error;
};
/// 42501
class insufficient_privilege : public syntax_error_or_access_rule_violation {
public:
  using syntax_error_or_access_rule_violation::syntax_error_or_access_rule_violation;
};
/// 42601
class syntax_error : public syntax_error_or_access_rule_violation {
public:
  using syntax_error_or_access_rule_violation::syntax_error_or_access_rule_violation;
};
/// 42703
class undefined_column : public syntax_error_or_access_rule_violation {
public:
  using syntax_error_or_access_rule_violation::syntax_error_or_access_rule_violation;
};
/// 42883
class undefined_function : public syntax_error_or_access_rule_violation {
public:
  using syntax_error_or_access_rule_violation::syntax_error_or_access_rule_violation;
};
/// 42P01
class undefined_table : public syntax_error_or_access_rule_violation {
public:
  using syntax_error_or_access_rule_violation::syntax_error_or_access_rule_violation;
};
/// 42704
class undefined_object : public syntax_error_or_access_rule_violation {
public:
  using syntax_error_or_access_rule_violation::syntax_error_or_access_rule_violation;
};
/// 42P07
class duplicate_table : public syntax_error_or_access_rule_violation {
public:
  using syntax_error_or_access_rule_violation::syntax_error_or_access_rule_violation;
};
/// 42710
class duplicate_object : public syntax_error_or_access_rule_violation {
public:
  using syntax_error_or_access_rule_violation::syntax_error_or_access_rule_violation;
};

/// Class 53: the server ran short of something (disk, memory, connection slots).
class insufficient_resources : public sql_error {
public:
  using sql_error::sql_error;
};
/// 53100
class disk_full : public insufficient_resources {
public:
  using insufficient_resources::insufficient_resources;
};
/// 53200
class out_of_memory : public insufficient_resources {
public:
  using insufficient_resources::insufficient_resources;
};
/// 53300
class too_many_connections : public insufficient_resources {
public:
  using insufficient_resources::insufficient_resources;
};

/// Class 54: a statement or value beyond a fixed limit of the server (e.g. a value over 1 GB).
class program_limit_exceeded : public sql_error {
public:
  using sql_error::sql_error;
};

/// Class 55: the object is not in the state the statement needs.
class object_not_in_prerequisite_state : public sql_error {
public:
  using sql_error::sql_error;
};
/// 55006
class object_in_use : public object_not_in_prerequisite_state {
public:
  using object_not_in_prerequisite_state::object_not_in_prerequisite_state;
};
/// 55P03: a lock was not granted (NOWAIT, or lock_timeout passed).
class lock_not_available : public object_not_in_prerequisite_state {
public:
  using object_not_in_prerequisite_state::object_not_in_prerequisite_state;
};

/// Class 57: an operator or the server itself intervened.
class operator_intervention : public sql_error {
public:
  using sql_error::sql_error;
};
/// 57014: cancelled (pg_cancel_backend, a cancel request, the server's statement_timeout).
class query_canceled : public operator_intervention {
public:
  using operator_intervention::operator_intervention;
};
/// 57P01: the backend was terminated or the server is shutting down.
class admin_shutdown : public operator_intervention {
public:
  using operator_intervention::operator_intervention;
};
/// 57P02
class crash_shutdown : public operator_intervention {
public:
  using operator_intervention::operator_intervention;
};
/// 57P03: the server is starting up or in recovery.
class cannot_connect_now : public operator_intervention {
public:
  using operator_intervention::operator_intervention;
};
/// 57P04
class database_dropped : public operator_intervention {
public:
  using operator_intervention::operator_intervention;
};
/// 57P05: the server ended a session idle too long.
class idle_session_timeout : public operator_intervention {
public:
  using operator_intervention::operator_intervention;
};

/// Class 58: an error outside PostgreSQL (the operating system, the disk).
class system_error : public sql_error {
public:
  using sql_error::sql_error;
};

/// Class P0: raised by PL/pgSQL (P0001 is RAISE EXCEPTION without a SQLSTATE of its own).
class plpgsql_error : public sql_error {
public:
  using sql_error::sql_error;
};
/// P0001
class raise_exception : public plpgsql_error {
public:
  using plpgsql_error::plpgsql_error;
};

/// Class XX: a bug or corruption the server detected.
class internal_error : public sql_error {
public:
  using sql_error::sql_error;
};

// ---- errors of the client side -------------------------------------------------------------

/// A connection could not be established: the message names the cause (unknown host,
/// authentication failure, server not running, ...).
class connection_error : public error {
public:
  using error::error;
};

/// An established connection broke (server restart, network failure, backend terminated).
/// A statement in flight when this happens has an unknown outcome: it may or may not have
/// committed. A pool replaces the connection on the next acquire.
class connection_lost : public connection_error {
public:
  using connection_error::connection_error;
};

/// A batch of statements had no complete answer by its deadline
/// (connection_options::statement_timeout). The connection sent the server a cancel request:
/// if the server answered it, the batch failed (it did not commit, unless it was COMMIT
/// itself racing the deadline) and the connection stays usable; if not even the cancel got
/// an answer within connection_options::cancel_grace, the connection is broken (a pool
/// replaces it) and the outcome of the batch is unknown, as with connection_lost. Derives
/// from connection_error: like a lost connection, it is a transient failure of the
/// database, not of the statement.
class statement_timeout : public connection_error {
public:
  statement_timeout(std::string statement, std::chrono::milliseconds deadline,
                    bool connection_broken)
      : connection_error(format(statement, deadline, connection_broken)),
        statement_(std::move(statement)),
        deadline_(deadline),
        connection_broken_(connection_broken) {}

  /// The statement whose results were awaited when the deadline passed.
  [[nodiscard]] const std::string& statement() const noexcept { return statement_; }
  [[nodiscard]] std::chrono::milliseconds deadline() const noexcept { return deadline_; }
  /// True when the server did not answer the cancel request: the connection was given up
  /// and the batch's outcome is unknown.
  [[nodiscard]] bool connection_broken() const noexcept { return connection_broken_; }

private:
  static std::string format(const std::string& stmt, std::chrono::milliseconds deadline,
                            bool broken) {
    std::string s = "statement '" + stmt + "' had no complete answer within its deadline of " +
                    std::to_string(deadline.count()) + " ms (statement_timeout); ";
    if (broken)
      s += "the server did not answer the cancel request either, so the connection was given "
           "up and the outcome of the statement is unknown";
    else
      s += "it was cancelled on the server (SQLSTATE 57014) and did not take effect";
    return s;
  }
  std::string statement_;
  std::chrono::milliseconds deadline_;
  bool connection_broken_;
};

/// A value read from a result did not have the requested C++ type (or was NULL).
class conversion_error : public error {
public:
  using error::error;
};

}  // namespace durable::pg

#if defined(DURABLE_HEADER_ONLY)
#include "durable/pg/impl/error.ipp"
#endif
