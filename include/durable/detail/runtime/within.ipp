// Bounding an operation by a time limit (shutdown, the lease keeper's connect).
#pragma once

#include <asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <optional>
#include <variant>

#include "durable/detail/engine_state.hpp"

namespace durable::detail {

template <class T>
asio::awaitable<std::optional<T>> within_impl(asio::awaitable<T> op,
                                              std::chrono::milliseconds limit) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, limit);
  auto wait = timer.async_wait(asio::use_awaitable);
  auto race = std::move(op) || std::move(wait);
  auto r = co_await std::move(race);
  if (r.index() == 0) co_return std::move(std::get<0>(r));
  co_return std::nullopt;
}

/// Runs `op` unless `limit` passes first; then `op` is cancelled and nullopt returned. (A
/// plain function: GCC 12 mishandles a prvalue passed straight to a coroutine in co_await.)
template <class T>
asio::awaitable<std::optional<T>> within(asio::awaitable<T> op, std::chrono::milliseconds limit) {
  return within_impl(std::move(op), limit);
}

}  // namespace durable::detail
