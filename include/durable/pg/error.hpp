// Errors raised by the PostgreSQL layer.
#pragma once

#include <chrono>
#include <string>

#include "durable/error.hpp"

namespace durable::pg {

/// The server rejected a statement. Carries the SQLSTATE, the server's primary message and
/// the name of the statement that failed (the prepared statement's name, or its first line).
class sql_error : public durable::error {
public:
  sql_error(std::string sqlstate, std::string server_message, std::string statement,
            std::string detail = {})
      : durable::error(format(sqlstate, server_message, statement, detail)),
        sqlstate_(std::move(sqlstate)),
        server_message_(std::move(server_message)),
        statement_(std::move(statement)),
        detail_(std::move(detail)) {}

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

/// A connection could not be established: the message names the cause (unknown host,
/// authentication failure, server not running, ...).
class connection_error : public durable::error {
public:
  using durable::error::error;
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
class conversion_error : public durable::error {
public:
  using durable::error::error;
};

}  // namespace durable::pg
