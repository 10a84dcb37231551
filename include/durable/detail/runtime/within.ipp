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

template <class T>
asio::awaitable<std::optional<T>> within_impl(asio::awaitable<T> op,
                                              std::chrono::milliseconds limit) {
  namespace x = asio::experimental;
  // Whichever ends first, in success or not: awaitable_operators' `||` would wait for a success,
  // holding an operation's error back until the limit passed and then reporting a timeout.
  const auto ex = co_await asio::this_coro::executor;
  auto run = asio::co_spawn(ex, std::move(op), x::deferred);
  auto timer = asio::co_spawn(ex, limit_passes(limit), x::deferred);
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

/// Runs `op` unless `limit` passes first; then `op` is cancelled and nullopt returned. An error
/// of `op` before the limit is thrown at once. (A plain function: GCC 12 mishandles a prvalue
/// passed straight to a coroutine in co_await.)
template <class T>
asio::awaitable<std::optional<T>> within(asio::awaitable<T> op, std::chrono::milliseconds limit) {
  return within_impl(std::move(op), limit);
}

}  // namespace durable::detail
