// The failure model of the library's own I/O (docs/architecture.md#failure-model): which
// errors are transient (retry the run after a pause) and which the server will refuse again
// (park the workflow with the server's reason). User errors are the retry policy's business.
#pragma once

#include <exception>
#include <string>
#include <string_view>

#include "durable/detail/utf8.hpp"
#include "durable/pg/error.hpp"

namespace durable::detail {

/// True for SQLSTATEs that say "try again later": connection exceptions (class 08),
/// serialization failure and deadlock (40001, 40P01, 40003), query cancelled and statement
/// timeout (57014), lock timeout (55P03), insufficient resources such as too many
/// connections (class 53), operator intervention (57P01..57P05: shutdown, restart), system
/// and I/O errors (58000, 58030), and the idle-session timeouts (25P03, 57P05).
[[nodiscard]] inline bool is_transient_sqlstate(std::string_view state) noexcept {
  if (state.size() != 5) return false;
  const std::string_view cls = state.substr(0, 2);
  if (cls == "08" || cls == "53") return true;
  return state == "40001" || state == "40P01" || state == "40003" || state == "57014" ||
         state == "55P03" || state == "57P01" || state == "57P02" || state == "57P03" ||
         state == "57P04" || state == "57P05" || state == "58000" || state == "58030" ||
         state == "25P03";
}

/// How the library treats an exception raised by its own database I/O.
enum class io_verdict {
  transient,  ///< retry the run after a bounded, growing pause
  permanent,  ///< the server will refuse it again: park the workflow with the reason
};

[[nodiscard]] inline io_verdict classify(const std::exception& e) noexcept {
  if (const auto* s = dynamic_cast<const pg::sql_error*>(&e))
    return is_transient_sqlstate(s->sqlstate()) ? io_verdict::transient : io_verdict::permanent;
  return io_verdict::transient;  // connection errors, timeouts, pool exhaustion
}

/// A one-line description of an I/O failure for operators: SQLSTATE and server message for
/// a server error, what() otherwise.
[[nodiscard]] inline std::string describe_io_failure(const std::exception& e) {
  if (const auto* s = dynamic_cast<const pg::sql_error*>(&e))
    return valid_utf8("SQLSTATE " + s->sqlstate() + ": " + s->server_message() +
                      (s->statement().empty() ? "" : " (statement " + s->statement() + ")"));
  return valid_utf8(e.what());
}

}  // namespace durable::detail
