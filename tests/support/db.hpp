// Test fixtures: the database to use, fresh schemas, and running a coroutine to completion.
#pragma once

#include <unistd.h>

#include <asio/any_io_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

namespace test {

/// The server under test: $DURABLE_DATABASE_URL (scripts/test sets it), else libpq's PG*
/// environment.
inline std::string conninfo() {
  const char* url = std::getenv("DURABLE_DATABASE_URL");
  return url ? url : "";
}

/// A schema name no other test (or process) uses.
inline std::string fresh_schema(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "t_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
}

/// Runs `a` on a new io_context until it completes, then abandons whatever else is still
/// pending there (as a process that exits would); rethrows `a`'s exception.
template <class T>
T run(asio::awaitable<T> a) {
  asio::io_context io;
  std::exception_ptr error;
  std::optional<std::conditional_t<std::is_void_v<T>, int, T>> value;
  if constexpr (std::is_void_v<T>) {
    asio::co_spawn(io, std::move(a), [&](std::exception_ptr e) {
      error = e;
      value.emplace(0);
      io.stop();
    });
  } else {
    asio::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
      error = e;
      if (!e) value.emplace(std::move(v));
      io.stop();
    });
  }
  io.run();
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<T>) return std::move(*value);
}

/// Coroutines started by spawn_all(): how many still run, and the first exception.
struct spawned {
  int running = 0;
  std::exception_ptr error;
};

/// Starts f(0) ... f(n - 1) (each returning asio::awaitable<void>) as concurrent coroutines
/// on `ex`; they begin in the same turn of the event loop. Await wait_all() on the result.
template <class F>
std::shared_ptr<spawned> spawn_all(const asio::any_io_executor& ex, int n, F f) {
  auto state = std::make_shared<spawned>();
  state->running = n;
  for (int i = 0; i < n; ++i)
    asio::co_spawn(
        ex, [f, i] { return f(i); },
        [state](std::exception_ptr e) {
          if (e && !state->error) state->error = e;
          --state->running;
        });
  return state;
}

/// Waits until every coroutine of spawn_all() has ended; rethrows the first exception.
inline asio::awaitable<void> wait_all(std::shared_ptr<spawned> state) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  while (state->running > 0) {
    t.expires_after(std::chrono::milliseconds(1));
    co_await t.async_wait(asio::use_awaitable);
  }
  if (state->error) std::rethrow_exception(state->error);
}

/// The message of the E that awaiting `a` throws, or nullopt if it completes. (Catch's
/// assertion macros must not contain co_await: GCC 12 miscompiles that.)
template <class E, class T>
asio::awaitable<std::optional<std::string>> error_of_impl(asio::awaitable<T> a) {
  try {
    co_await std::move(a);
  } catch (const E& e) {
    co_return std::string(e.what());
  }
  co_return std::nullopt;
}

// A plain function, not a coroutine: GCC 12 mishandles a prvalue passed straight to a
// coroutine inside co_await.
template <class E = std::exception, class T>
asio::awaitable<std::optional<std::string>> error_of(asio::awaitable<T> a) {
  return error_of_impl<E>(std::move(a));
}

/// What awaiting `a` throws (null if it completes), with its dynamic type: test it with
/// holds<E>(). A plain function for the reason given at error_of().
template <class T>
asio::awaitable<std::exception_ptr> exception_of_impl(asio::awaitable<T> a) {
  try {
    co_await std::move(a);
  } catch (...) {
    co_return std::current_exception();
  }
  co_return nullptr;
}

template <class T>
asio::awaitable<std::exception_ptr> exception_of(asio::awaitable<T> a) {
  return exception_of_impl(std::move(a));
}

/// True when `e` is an E (or derived from it).
template <class E>
bool holds(const std::exception_ptr& e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
  }
  return false;
}

}  // namespace test
