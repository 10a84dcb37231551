// Workflows with the nondeterminism the test kit cannot always catch (issue 38's planted bugs 3
// and 4), for the determinism lint (tools/durable-lint, tests/lint/check_lint.py): every line
// marked "lint:" must be reported with the named call, and no other line. Also compiled into
// testing_tests, where the kit runs them (tests/test_testing_effects.cpp).
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>

#include "durable/context.hpp"

namespace planted {

using namespace std::chrono_literals;

/// Planted bug 3: a step that runs only when rand() says so.
inline asio::awaitable<int> lucky(durable::context& ctx) {
  int n = co_await ctx.step("always", [] { return 1; });
  if (std::rand() % 100 == 0) {  // lint: rand()
    n += co_await ctx.step("rarely", [] { return 10; });
  }
  // Inside a step the draw is journaled: not reported.
  n += co_await ctx.step("draw", [] { return std::rand() % 2; });
  co_return n;
}

/// The region whose office hours apply, from the environment (a helper of the workflow's).
inline std::string region() {
  const char* r = std::getenv("ORDER_REGION");  // lint: getenv()
  return r ? r : "eu";
}

/// Planted bug 4: a step that runs only at some time of the host's clock.
inline asio::awaitable<std::string> office_hours(durable::context& ctx, std::string order) {
  const auto now = std::chrono::system_clock::now();  // lint: std::chrono::system_clock::now()
  const auto hour = std::chrono::duration_cast<std::chrono::hours>(now.time_since_epoch()) % 24h;
  std::string how = "queued";
  if (hour.count() >= 9 && hour.count() < 17) {
    how = co_await ctx.step("call-customer", [&] { return std::string("called"); });
  }
  const std::string where = region();  // followed: its getenv is reported
  // The right way: ctx.now() is journaled.
  const auto journaled = co_await ctx.now();
  (void)journaled;
  const auto stamp = co_await ctx.step("stamp", [] {
    return std::chrono::system_clock::now().time_since_epoch().count() > 0;  // in a step: fine
  });
  std::random_device seed;  // lint: std::random_device
  (void)seed;
  co_return order + ":" + how + "@" + where + (stamp ? "" : "?");
}

/// A workflow template: its steps are found although the calls stay unresolved.
template <class T>
asio::awaitable<int> templated(durable::context& ctx, T x) {
  const int a = co_await ctx.step("a", [&] { return std::rand() + int(x); });  // in a step
  if (std::rand() % 2 == 0) co_return a;                                       // lint: rand()
  co_return 0;
}

/// A step's function kept in a variable; a step name read outside the step.
inline asio::awaitable<int> named(durable::context& ctx) {
  auto draw = [] { return std::rand(); };  // the step's function: not reported
  const int a = co_await ctx.step("draw", draw);
  const char* mode = std::getenv("MODE");  // lint: getenv()
  const int b = co_await ctx.step(mode ? "fast" : "slow", [] { return 2; });
  co_return a + b;
}

}  // namespace planted
