// What the store's builders return: a statement with the type of its rows (query), and a
// fenced write (I3) with the verdict on it (fence_verdict). Machinery of durable/store.hpp.
#pragma once

#include <string>
#include <string_view>

#include "durable/pg/connection.hpp"

namespace durable {

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

}  // namespace durable
