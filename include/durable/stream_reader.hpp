// Reading a workflow's durable stream (ctx.write_stream) from outside it: what
// engine::read_stream returns. Included by durable/engine.hpp; its bodies are in
// impl/stream_reader.ipp (compiled with the engine's).
#pragma once

#include <asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "durable/codec.hpp"
#include "durable/detail/completion.hpp"
#include "durable/detail/config.hpp"
#include "durable/detail/engine_state.hpp"
#include "durable/detail/text_check.hpp"
#include "durable/detail/type_name.hpp"
#include "durable/error.hpp"
#include "durable/retry.hpp"

namespace durable {

/// Where a stream_reader stands.
enum class stream_end : std::uint8_t {
  open,      ///< it may yield more values
  closed,    ///< the workflow closed the stream (ctx.close_stream) and every value was read
  finished,  ///< the workflow finished (succeeded, failed, cancelled) without closing it,
             ///< and every value was read
};

/// A value of a stream and its offset (0, 1, ... in each stream).
template <class T>
struct stream_value {
  std::int64_t offset = 0;
  T value;
};

namespace detail {
/// A stream_reader's state, shared with the operations that read for it (they run on the
/// engine's strand, and a reader may be gone before they complete).
struct stream_cursor {
  std::shared_ptr<engine_state> s;
  std::string id, key;
  std::int64_t next = 0;  ///< the offset the next read starts at
  std::deque<std::pair<std::int64_t, std::string>> buffered;  ///< read, not yielded yet
  stream_end end = stream_end::open;   ///< what ended() says: set once `buffered` is empty
  stream_end ends = stream_end::open;  ///< how the stream ends after what is buffered
  std::string finished_status;         ///< the workflow's, when it ends as finished
  bool reading = false;                ///< a next() is under way
  bool marked = false;  ///< the workflow is marked awaited: each append is told (migration 19)
  std::optional<std::int64_t> closed_at;  ///< the close's offset, once a read saw it
  [[nodiscard]] std::int64_t offset() const noexcept {
    return buffered.empty() ? next : buffered.front().first;
  }
};
using stream_text = std::optional<std::pair<std::int64_t, std::string>>;
/// `text` (JSON) decoded as T; else codec_error: "<what>: <value> <text> does not decode...".
template <class T>
T decode_read(const std::string& text, const std::string& what, const std::string& value) {
  try {
    return durable::decode<T>(nlohmann::json::parse(text));
  } catch (const std::exception& e) {
    throw codec_error(std::string(type_name<T>()),
                      what + ": " + value + " " + text + " does not decode as " +
                          std::string(type_name<T>()) + ": " + e.what());
  }
}
/// The next value's text: on the engine's strand (stream_next) or hopping onto it first.
DURABLE_DECL asio::awaitable<stream_text> stream_next(std::shared_ptr<stream_cursor> c,
                                                      std::chrono::milliseconds timeout);
DURABLE_DECL asio::awaitable<stream_text> stream_next_hop(std::shared_ptr<stream_cursor> c,
                                                          std::chrono::milliseconds timeout);
}  // namespace detail

/// Reads stream `key` of workflow `workflow_id` in order, from an offset on, as its values are
/// written: a new value wakes it through a notification, and it also reads every poll_interval
/// (a notification can be lost). It holds no connection between reads, and a database that
/// does not answer is read again with backoff, so it survives a reconnect; a reader that
/// restarts goes on from the offset it had (offset()). It ends at the stream's close, or once
/// the workflow has finished and every value it wrote was read.
///
/// One next() at a time; offset() and ended() between them. Cheap to move; copies share their
/// position. next() takes an Asio completion token like the engine's operations.
template <class T>
class stream_reader {
public:
  stream_reader(std::shared_ptr<detail::engine_state> s, std::string workflow_id, std::string key,
                std::int64_t from_offset)
      : c_(std::make_shared<detail::stream_cursor>()) {
    detail::refuse_nul("read_stream()", "workflow id", workflow_id);
    detail::refuse_nul("read_stream()", "key", key);
    if (key.empty())
      throw error("read_stream('" + workflow_id +
                  "', ''): the key is empty; a stream is named by a key; nothing was read");
    if (from_offset < 0)
      throw error("read_stream('" + workflow_id + "', '" + key + "'): the offset " +
                  std::to_string(from_offset) +
                  " is negative; offsets count from 0 (the first value); nothing was read");
    c_->s = std::move(s);
    c_->id = std::move(workflow_id);
    c_->key = std::move(key);
    c_->next = from_offset;
  }

  [[nodiscard]] const std::string& workflow_id() const noexcept { return c_->id; }
  [[nodiscard]] const std::string& key() const noexcept { return c_->key; }
  /// The offset of the next value next() yields: where a reader started anew goes on.
  [[nodiscard]] std::int64_t offset() const noexcept { return c_->offset(); }
  /// stream_end::open while more may come; closed or finished once next() returned the end.
  [[nodiscard]] stream_end ended() const noexcept { return c_->end; }
  /// The workflow's status when the stream ended because it finished ("succeeded", ...).
  [[nodiscard]] const std::string& finished_status() const noexcept { return c_->finished_status; }
  /// The offset of the stream's close (the number of values in it), once a read saw it.
  [[nodiscard]] std::optional<std::int64_t> closed_at() const noexcept { return c_->closed_at; }

  /// The next value, waiting as long as it takes; nullopt once the stream has ended. Throws
  /// durable::error if the workflow does not exist (not started, or deleted by retention), and
  /// codec_error for a value that does not decode as T (the reader has moved past it).
  template <class CompletionToken = detail::default_token>
    requires detail::completion_token_for<CompletionToken, std::optional<stream_value<T>>>
  [[nodiscard]] auto next(CompletionToken&& token = {}) {
    return next(forever, std::forward<CompletionToken>(token));
  }
  /// next(), waiting at most `timeout`: nullopt then too, with ended() still open. Once the
  /// database has not answered for all of `timeout`, its last error is thrown instead.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto next(std::chrono::milliseconds timeout, CompletionToken&& token = {}) {
    return detail::launch<std::optional<stream_value<T>>>(
        c_->s->ex, std::forward<CompletionToken>(token),
        [&] { return decode(c_, detail::stream_next_hop(c_, timeout)); },
        [&] { return decode(c_, detail::stream_next(c_, timeout)); });
  }

private:
  static asio::awaitable<std::optional<stream_value<T>>> decode(
      std::shared_ptr<detail::stream_cursor> c, asio::awaitable<detail::stream_text> read) {
    detail::stream_text text = co_await std::move(read);
    if (!text) co_return std::nullopt;
    T value = detail::decode_read<T>(text->second, "read_stream('" + c->id + "', '" + c->key + "')",
                                     "the value at offset " + std::to_string(text->first));
    co_return stream_value<T>{text->first, std::move(value)};
  }

  std::shared_ptr<detail::stream_cursor> c_;
};

}  // namespace durable
