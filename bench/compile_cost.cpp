// What including durable costs to compile: the smallest useful program, one workflow with one
// step, started and awaited. scripts/compile-cost compiles this file (without linking) and reports
// the wall time and peak memory of the compiler; see docs/performance.md, "Compile cost".
#include <asio/detached.hpp>
#include <cstdio>
#include <durable.hpp>
#include <string>

namespace {

asio::awaitable<std::string> greet(durable::context& ctx, std::string who) {
  co_return co_await ctx.step("greet", [&] { return "hello " + who; });
}

asio::awaitable<void> run(durable::engine& eng) {
  eng.register_workflow("greet", &greet);
  (void)co_await eng.open();
  const std::string who = "world";
  auto h = co_await eng.start("greet", "greet-1", who);
  const std::string text = co_await h.result<std::string>();
  std::printf("%s\n", text.c_str());
  co_await eng.shutdown();
}

}  // namespace

int main() {
  asio::io_context io;
  durable::engine_options options;
  options.conninfo = "postgresql:///durable";
  durable::engine eng(io.get_executor(), options);
  asio::co_spawn(io, run(eng), asio::detached);
  io.run();
}
