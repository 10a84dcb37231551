// The failure model of the library's own I/O (docs/architecture.md#failure-model): which
// errors are transient (retry the run after a pause) and which the server will refuse again
// (park the workflow with the server's reason). User errors are the retry policy's business.
// The classification itself belongs to the PostgreSQL layer (durable/pg/classify.hpp); this
// file gives it the engine's names and adds the operator's one-line description.
#pragma once

#include <exception>
#include <string>

#include "durable/detail/utf8.hpp"
#include "durable/pg/classify.hpp"
#include "durable/pg/error.hpp"

namespace durable::detail {

using pg::classify;
using pg::is_transient_sqlstate;

/// How the library treats an exception raised by its own database I/O: transient (retry the
/// run after a bounded, growing pause) or permanent (park the workflow with the reason).
using io_verdict = pg::failure_kind;

/// A one-line description of an I/O failure for operators: SQLSTATE and server message for
/// a server error, what() otherwise.
[[nodiscard]] inline std::string describe_io_failure(const std::exception& e) {
  if (const auto* s = dynamic_cast<const pg::sql_error*>(&e))
    return valid_utf8("SQLSTATE " + s->sqlstate() + ": " + s->server_message() +
                      (s->statement().empty() ? "" : " (statement " + s->statement() + ")"));
  return valid_utf8(e.what());
}

}  // namespace durable::detail
