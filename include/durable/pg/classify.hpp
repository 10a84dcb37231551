// Which failures of a database call are worth trying again. The engine's failure model
// (docs/architecture.md#failure-model) is built on this; an application may use it for its
// own statements too.
#pragma once

#include <exception>
#include <string_view>

#include "durable/pg/error.hpp"

namespace durable::pg {

/// What a failed database call says about trying it again.
enum class failure_kind {
  transient,  ///< the same call may succeed later: retry after a pause
  permanent,  ///< the server will refuse it again: report it, do not retry
};

/// True for SQLSTATEs that say "try again later": connection exceptions (class 08), serialization
/// failure, deadlock and an unknown COMMIT outcome (40001, 40P01, 40003), query cancelled and
/// statement timeout (57014), lock not available or lock timeout (55P03), insufficient
/// resources such as too many connections (class 53), operator intervention (57P01..57P05:
/// shutdown, crash, starting up, database dropped, idle session), system and I/O errors (58000,
/// 58030), and the idle-in-transaction timeout (25P03).
[[nodiscard]] inline bool is_transient_sqlstate(std::string_view state) noexcept {
  if (state.size() != 5) return false;
  const std::string_view cls = state.substr(0, 2);
  if (cls == "08" || cls == "53") return true;
  return state == "40001" || state == "40P01" || state == "40003" || state == "57014" ||
         state == "55P03" || state == "57P01" || state == "57P02" || state == "57P03" ||
         state == "57P04" || state == "57P05" || state == "58000" || state == "58030" ||
         state == "25P03";
}

/// A server error by its SQLSTATE (is_transient_sqlstate). Anything else is transient: the
/// server did not refuse the statement, the way to it failed (connection_error and its
/// subclasses connection_lost and statement_timeout, a pool that had no connection, a wait
/// that was cancelled).
[[nodiscard]] inline failure_kind classify(const std::exception& e) noexcept {
  if (const auto* s = dynamic_cast<const sql_error*>(&e))
    return is_transient_sqlstate(s->sqlstate()) ? failure_kind::transient : failure_kind::permanent;
  return failure_kind::transient;
}

/// A transaction that lost a race with another one (serialization_failure, deadlock_detected):
/// running it again from the start, in a new transaction, is the remedy.
[[nodiscard]] inline bool is_contention(const std::exception& e) noexcept {
  return dynamic_cast<const serialization_failure*>(&e) != nullptr ||
         dynamic_cast<const deadlock_detected*>(&e) != nullptr;
}

}  // namespace durable::pg
