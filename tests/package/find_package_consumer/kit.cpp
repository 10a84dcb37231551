// Package smoke test, header-only: durable::testing (which brings durable::durable) from an
// installed durable, with no database and no test framework: the umbrella header's checks, then
// a workflow crashed at every step. One translation unit, as the header-only engine is the
// longest compile of the package tests.
#include <exception>

#include <durable/testing.hpp>

#include "../checks.hpp"

namespace {

int charged = 0;

asio::awaitable<std::string> checkout(durable::context& ctx, std::string cart) {
  const int total = co_await ctx.step("price", [&] { return int(cart.size()) * 10; });
  co_await ctx.sleep_for(std::chrono::hours(24));
  co_await ctx.step("charge", [&] { ++charged; });
  co_return cart + ":" + std::to_string(total);
}

}  // namespace

int main() {
  if (const int rc = check_package(); rc != 0) return rc;
  try {
    durable::testing::harness h;
    h.register_workflow("checkout", checkout);
    const auto report = durable::testing::check_crashes(h, "checkout", std::string("abc"));
    std::printf("%s", report.summary().c_str());
    if (!report.ok() || report.outcome != "\"abc:30\"") return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
