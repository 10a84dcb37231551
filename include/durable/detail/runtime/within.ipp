// Bounding an operation by a time limit (shutdown, the lease keeper's connect, the metrics
// endpoint's reads and writes).
#pragma once

#include <array>
#include <asio/co_spawn.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/experimental/parallel_group.hpp>
#include <chrono>
#include <exception>
#include <optional>
#include <tuple>

#include "durable/detail/engine_state.hpp"

namespace durable::detail {

inline asio::awaitable<void> limit_passes(std::chrono::milliseconds limit) {
  asio::steady_timer timer(co_await asio::this_coro::executor, limit);
  co_await timer.async_wait(asio::use_awaitable);
}

/// Runs `op` until it ends or `limit` does, whichever first, in success or not: `op`'s value,
/// its error at once, or nullopt when `limit` ended first (and `op` was cancelled). Not
/// awaitable_operators' `||`, which waits for a success: it would hold an error of `op` back
/// until the limit ended, and then report a timeout.
template <class T>
asio::awaitable<std::optional<T>> first_of_impl(asio::awaitable<T> op,
                                                asio::awaitable<void> limit) {
  namespace x = asio::experimental;
  const auto ex = co_await asio::this_coro::executor;
  auto run = asio::co_spawn(ex, std::move(op), x::deferred);
  auto timer = asio::co_spawn(ex, std::move(limit), x::deferred);
  auto group = x::make_parallel_group(std::move(run), std::move(timer));
  auto [order, op_error, value, limit_error] =
      co_await group.async_wait(x::wait_for_one(), asio::use_awaitable);
  if (order[0] == 0) {
    if (op_error) std::rethrow_exception(op_error);
    co_return std::optional<T>(std::move(value));
  }
  if (limit_error) std::rethrow_exception(limit_error);  // the caller cancelled the wait
  co_return std::nullopt;
}

/// first_of_impl, as a plain function (GCC 12 mishandles a prvalue passed straight to a
/// coroutine in co_await).
template <class T>
asio::awaitable<std::optional<T>> first_of(asio::awaitable<T> op, asio::awaitable<void> limit) {
  return first_of_impl(std::move(op), std::move(limit));
}

/// Runs `op` unless `limit` passes first; then `op` is cancelled and nullopt returned. An error
/// of `op` before the limit is thrown at once. (A plain function: GCC 12 mishandles a prvalue
/// passed straight to a coroutine in co_await.)
template <class T>
asio::awaitable<std::optional<T>> within(asio::awaitable<T> op, std::chrono::milliseconds limit) {
  return first_of(std::move(op), limit_passes(limit));
}

}  // namespace durable::detail
