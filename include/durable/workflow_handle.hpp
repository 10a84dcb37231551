// A workflow by id (what start(), enqueue() and engine::handle() return): its status, and
// waiting for its result. Included by durable/engine.hpp; its bodies are in
// impl/workflow_handle.ipp (compiled with the engine's).
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "durable/codec.hpp"
#include "durable/detail/completion.hpp"
#include "durable/detail/config.hpp"
#include "durable/detail/engine_state.hpp"
#include "durable/detail/type_name.hpp"
#include "durable/error.hpp"
#include "durable/options.hpp"
#include "durable/retry.hpp"

namespace durable {

namespace detail {
struct result_wait;  // engine_state.hpp
}  // namespace detail

/// Refers to one workflow by id; cheap to copy. Works for workflows running anywhere: the
/// outcome is read from the database.
///
/// Its operations, like the engine's, take an Asio completion token as their last argument:
/// asio::use_awaitable by default (they return an asio::awaitable), asio::use_future, a callback
/// f(std::exception_ptr, value), asio::experimental::deferred, ... (docs/getting-started.md,
/// "Without coroutines"). A handle may be destroyed before its operations complete.
class workflow_handle {
public:
  /// A handle that refers to no workflow (assign one from start(), enqueue() or handle()).
  workflow_handle() = default;
  workflow_handle(std::shared_ptr<detail::engine_state> s, std::string id)
      : s_(std::move(s)), id_(std::move(id)) {}

  [[nodiscard]] const std::string& id() const noexcept { return id_; }

  /// The workflow's status as stored now.
  template <class CompletionToken = detail::default_token>
  [[nodiscard]] auto status(CompletionToken&& token = {}) const {
    return detail::launch<workflow_status>(
        executor(), std::forward<CompletionToken>(token), [&] { return status_hop(); },
        [&] { return status_of(*this); });
  }

  /// Waits for the workflow to end. Returns its output; throws workflow_failed (with the
  /// type and message it threw), workflow_dead_letter (a step failed for good and the
  /// workflow did not handle it), workflow_cancelled, workflow_parked (with the reason), or
  /// nondeterminism_error.
  ///
  /// While the database does not answer (a restart, a failover with no primary yet) it waits
  /// on: it reads again with backoff (10 ms doubling to 1 s) and reports the outage once as a
  /// warning event. A refusal by the server (a permission, a missing schema) is thrown at once.
  template <class R = void, class CompletionToken = detail::default_token>
    requires detail::completion_token_for<CompletionToken, R>
  [[nodiscard]] auto result(CompletionToken&& token = {}) const {
    return result<R>(forever, std::forward<CompletionToken>(token));
  }

  /// result(), waiting at most `timeout`: then throws result_timeout, which says the status
  /// last read, or that (and since when) the database has not served its reads. Nothing changes:
  /// wait again, or look at the workflow. (`forever`: no limit. A limit under a second still lets
  /// the first read answer, up to a second: result(0ms) of an ended workflow returns it.)
  template <class R = void, class CompletionToken = detail::default_token>
  [[nodiscard]] auto result(std::chrono::milliseconds timeout, CompletionToken&& token = {}) const {
    return detail::launch<R>(
        executor(), std::forward<CompletionToken>(token),
        [&] { return decode_output<R>(wait_output(timeout)); },
        [&] { return result_of<R>(*this, timeout); });
  }

private:
  // The bodies for tokens other than use_awaitable own a copy of the handle: a handle used
  // with a future or a callback may be gone before the operation completes.
  static asio::awaitable<workflow_status> status_of(workflow_handle self) {
    co_return co_await self.status_impl();
  }
  template <class R>
  static asio::awaitable<R> result_of(workflow_handle self, std::chrono::milliseconds timeout) {
    co_return co_await self.decode_output<R>(self.wait_output_within(timeout));
  }
  template <class R>
  asio::awaitable<R> decode_output(asio::awaitable<std::string> wait) const {
    std::string output = co_await std::move(wait);
    if constexpr (std::is_void_v<R>) {
      co_return;
    } else {
      try {
        co_return durable::decode<R>(nlohmann::json::parse(output));
      } catch (const std::exception& e) {
        throw codec_error(std::string(detail::type_name<R>()),
                          "workflow '" + id_ + "': its output does not decode as " +
                              std::string(detail::type_name<R>()) + ": " + e.what());
      }
    }
  }
  const asio::any_io_executor& executor() const {
    if (!s_)
      throw error(
          "workflow_handle: this handle refers to no workflow (it was default-constructed)");
    return s_->ex;
  }
  // wait_output: on the engine's strand; wait_output_within: where it is called (on it).
  DURABLE_DECL asio::awaitable<std::string> wait_output(std::chrono::milliseconds timeout) const;
  DURABLE_DECL asio::awaitable<std::string> wait_output_within(
      std::chrono::milliseconds timeout) const;
  DURABLE_DECL asio::awaitable<std::string> wait_output_impl(
      std::shared_ptr<detail::result_wait> progress) const;
  DURABLE_DECL asio::awaitable<workflow_status> status_hop() const;
  DURABLE_DECL asio::awaitable<workflow_status> status_impl() const;
  std::shared_ptr<detail::engine_state> s_;
  std::string id_;
};

}  // namespace durable
