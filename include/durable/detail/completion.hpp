// Completion tokens for the engine's operations: which argument is a token, and how an operation
// is launched with one. Machinery of durable/engine.hpp; a user never names it.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/use_awaitable.hpp>
#include <cstddef>
#include <exception>
#include <tuple>
#include <type_traits>
#include <utility>

namespace durable::detail {

/// The token an operation takes when given none: it returns an asio::awaitable, as it always did.
using default_token = asio::use_awaitable_t<>;

template <class Token>
inline constexpr bool is_default_token_v = std::is_same_v<std::decay_t<Token>, default_token>;

/// The completion signature of an operation whose value is R: co_spawn's, so that use_future
/// gives std::future<R>, a callback is called as f(std::exception_ptr, R), and so on.
template <class R>
struct completion_signature {
  using type = void(std::exception_ptr, R);
};
template <>
struct completion_signature<void> {
  using type = void(std::exception_ptr);
};

/// Asio's primary async_result treats any type as a completion handler. A type is a completion
/// token of its own (use_future, deferred, use_awaitable, detached, ...) when async_result is
/// specialized for it, which shows as a completion_handler_type other than the type itself.
template <class T, class Sig, class = void>
struct has_own_async_result : std::true_type {};
template <class T, class Sig>
struct has_own_async_result<
    T, Sig, std::void_t<typename asio::async_result<T, Sig>::completion_handler_type>>
    : std::bool_constant<
          !std::is_same_v<typename asio::async_result<T, Sig>::completion_handler_type, T>> {};

template <class Sig>
struct invocable_with;
template <class... A>
struct invocable_with<void(A...)> {
  template <class F>
  static constexpr bool value = std::is_invocable_v<F&, A...>;
};

/// T can complete an operation whose value is R: a callback f(std::exception_ptr[, R]) or a
/// token type such as asio::use_future. Used to tell a trailing token from a workflow input in
/// start() and enqueue() (an input is never callable like that, nor a token type).
template <class T, class R>
concept completion_token_for =
    invocable_with<typename completion_signature<R>::type>::template value<std::decay_t<T>> ||
    has_own_async_result<std::decay_t<T>, typename completion_signature<R>::type>::value;

template <class R, class... Args>
struct last_is_token : std::false_type {};
template <class R, class A, class... Rest>
struct last_is_token<R, A, Rest...>
    : std::bool_constant<
          completion_token_for<std::tuple_element_t<sizeof...(Rest), std::tuple<A, Rest...>>, R>> {
};

/// Calls f(token, inputs...): the token is the last argument if it is one, else the default
/// token and every argument is an input.
template <class R, class F, class... Args>
decltype(auto) split_token(F&& f, Args&&... args) {
  if constexpr (last_is_token<R, Args...>::value) {
    auto all = std::forward_as_tuple(std::forward<Args>(args)...);
    return [&]<std::size_t... I>(std::index_sequence<I...>)->decltype(auto) {
      return std::forward<F>(f)(std::get<sizeof...(Args) - 1>(std::move(all)), std::get<I>(all)...);
    }
    (std::make_index_sequence<sizeof...(Args) - 1>{});
  } else {
    return std::forward<F>(f)(default_token{}, args...);
  }
}

/// An operation that failed before it began: the error reaches the token like any other.
template <class R>
asio::awaitable<R> failed_operation(std::exception_ptr e) {
  (void)co_await asio::this_coro::executor;
  std::rethrow_exception(e);
}

/// Launches an operation with `token`. The default token gets `hop()`: the awaitable the engine
/// always returned (it hops onto the strand by itself), at no extra cost. Any other token gets
/// `body()`, the operation's coroutine, spawned on the engine's strand `ex` with the token, so
/// that co_spawn's completion (void(std::exception_ptr[, R])) is the operation's; an exception
/// thrown while the operation is set up (an invalid argument) reaches the token too.
template <class R, class Token, class Hop, class Body>
auto launch(const asio::any_io_executor& ex, Token&& token, Hop&& hop, Body&& body) {
  if constexpr (is_default_token_v<Token>) {
    return std::forward<Hop>(hop)();
  } else {
    asio::awaitable<R> op;
    try {
      op = std::forward<Body>(body)();
    } catch (...) {
      op = failed_operation<R>(std::current_exception());
    }
    return asio::co_spawn(ex, std::move(op), std::forward<Token>(token));
  }
}

}  // namespace durable::detail
