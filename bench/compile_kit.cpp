// What a test of one workflow with the test kit costs to compile (issue 38): the kit's header,
// one workflow of two steps, a harness run and check_crashes. scripts/compile-cost --file
// bench/compile_kit.cpp measures it (docs/performance.md, "A test of the test kit"). Not built
// by CMake: it is a translation unit to time, not a program to run.
#include <durable/testing.hpp>
#include <string>

namespace {

asio::awaitable<std::string> greet(durable::context& ctx, std::string name) {
  const std::string text = co_await ctx.step("compose", [&] { return "hello, " + name; });
  co_await ctx.step("send", [&](const durable::step_info&) { return text.size(); });
  co_return text;
}

}  // namespace

int main() {
  durable::testing::harness h;
  h.register_workflow("greet", greet);
  h.start("greet", "g-1", std::string("ada"));
  h.run();
  const auto report = durable::testing::check_crashes(h, "greet", std::string("ada"));
  return h.result<std::string>("g-1") == "hello, ada" && report.ok() ? 0 : 1;
}
