// The statements and rows of durable streams (migration 19): a workflow's append (journaled
// with its step) and a reader's read by offset. durable::store derives from stream_statements,
// so that each is store::<statement> and store::<row>. Machinery of durable/store.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "durable/detail/store/fence.hpp"
#include "durable/pg/connection.hpp"

namespace durable::detail {

class stream_statements {
public:
  /// stream_write: whether it was written (false: the stream was closed, at `position` by
  /// step `closed_by` of generation `closed_generation`, and nothing was written or
  /// journaled), and where.
  struct stream_appended {
    bool written = false;
    std::int64_t position = 0;
    std::optional<int> closed_by, closed_generation;
    static stream_appended from(const pg::row& r) {
      return {r.get<bool>(0), r.get<std::int64_t>(1), r.get<std::optional<int>>(2),
              r.get<std::optional<int>>(3)};
    }
  };
  /// stream_read: the workflow's status (none: no such workflow) and mark, the offset of the
  /// stream's close (none: not closed), and a row of the stream, if any (`value` none: the
  /// close).
  struct stream_row {
    std::optional<std::string> status;
    bool awaited = false;  ///< a reader marked the workflow: each append is told
    std::optional<std::int64_t> closed_at;
    std::optional<std::int64_t> position;
    std::optional<std::string> value;
    static stream_row from(const pg::row& r) {
      return {r.get<std::optional<std::string>>(0), r.get<std::optional<bool>>(1).value_or(false),
              r.get<std::optional<std::int64_t>>(2), r.get<std::optional<std::int64_t>>(3),
              r.get<std::optional<std::string>>(4)};
    }
  };

  /// Appends `value` (none: the close) to stream `key` of workflow `id` as its step `seq` of
  /// kind `kind` (fenced), telling readers on `wait_channel`.
  [[nodiscard]] query<stream_appended> stream_write(const std::string& id, std::int64_t epoch,
                                                    int seq, const std::string& key,
                                                    const std::optional<std::string>& value,
                                                    double started_at, const std::string& kind,
                                                    const std::string& wait_channel) const {
    return {call("stream_write", id, epoch, seq, key, value, started_at, kind, wait_channel)};
  }
  /// The workflow's status and up to `limit` rows of stream `key` from offset `from` on.
  [[nodiscard]] query<stream_row> stream_read(const std::string& id, const std::string& key,
                                              std::int64_t from, int limit) const {
    return {call("stream_read", id, key, from, limit)};
  }

private:
  template <class... A>
  static pg::statement call(const char* name, const A&... a) {
    return pg::prepared(std::string("durable_") + name, a...);
  }
};

}  // namespace durable::detail
