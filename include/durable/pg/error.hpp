// Errors raised by the PostgreSQL layer.
#pragma once

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

/// A value read from a result did not have the requested C++ type (or was NULL).
class conversion_error : public durable::error {
public:
  using durable::error::error;
};

}  // namespace durable::pg
