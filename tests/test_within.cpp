// detail::within (durable/detail/runtime/within.ipp): an operation bounded by a time limit, as
// shutdown's lease release, the lease keeper's connect and the metrics endpoint use it. No
// database: the operations are timers and throws.
#include <catch2/catch.hpp>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_future.hpp>
#include <chrono>
#include <stdexcept>
#include <string>

#include "durable/detail/runtime/within.ipp"

namespace within_cases {

using namespace std::chrono_literals;

asio::awaitable<int> fails_at_once() {
  throw std::runtime_error("refused");
  co_return 0;
}

asio::awaitable<int> seven_after(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
  co_return 7;
}

/// What each bounded call gave, in words.
asio::awaitable<std::string> outcomes() {
  std::string said;
  // An error before the limit is thrown at once (the limit is an hour: held back until then,
  // the case would run into ctest's timeout).
  try {
    (void)co_await durable::detail::within(fails_at_once(), 1h);
    said += "returned;";
  } catch (const std::runtime_error& e) {
    said += std::string("threw ") + e.what() + ";";
  }
  const auto in_time = co_await durable::detail::within(seven_after(1ms), 1h);
  said += in_time ? "value " + std::to_string(*in_time) + ";" : "cut off;";
  const auto late = co_await durable::detail::within(seven_after(1h), 10ms);
  said += late ? "value " + std::to_string(*late) + ";" : "cut off;";
  co_return said;
}

TEST_CASE("within() throws an operation's error at once, returns its value, or cuts it off",
          "[within]") {
  asio::io_context io;
  auto said = asio::co_spawn(io, outcomes(), asio::use_future);
  io.run();
  CHECK(said.get() == "threw refused;value 7;cut off;");
}

}  // namespace within_cases
