// Example 03: the engine from code that is not a coroutine.
//
// A plain main() runs the io_context on a thread of its own and calls the engine with the
// completion token asio::use_future: each operation returns a std::future, and get() waits for
// it (never call get() on the io_context's own thread: the operation runs there). It opens the
// engine, starts a workflow, waits for its result, shows that starting the same id again runs
// nothing, and shuts down. A callback, f(std::exception_ptr, value), works the same way.
//
// Database: DURABLE_DATABASE_URL (a libpq URL or conninfo string); unset or empty means libpq's
// PG* environment variables. The program uses the schema `durable_demo_future`.

#include <fmt/core.h>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <cstdlib>
#include <durable.hpp>
#include <exception>
#include <string>
#include <thread>

namespace {

asio::awaitable<std::string> greet(durable::context& ctx, std::string who) {
  co_return co_await ctx.step("greet", [&] { return "hello " + who; });
}

}  // namespace

int main() {
  asio::io_context io;
  auto work = asio::make_work_guard(io);  // keeps run() going while main() has work for it
  std::thread runner([&] { io.run(); });
  int status = 0;
  try {
    durable::engine_options options;
    if (const char* url = std::getenv("DURABLE_DATABASE_URL")) options.conninfo = url;
    options.schema = "durable_demo_future";
    durable::engine eng(io.get_executor(), options);
    eng.register_workflow("greet", &greet);

    const std::size_t resumed = eng.open(asio::use_future).get();
    fmt::print("engine open ({} unfinished workflows resumed)\n", resumed);

    std::future<durable::workflow_handle> started =
        eng.start("greet", "greet-future", std::string("world"), asio::use_future);
    durable::workflow_handle h = started.get();
    const std::string text = h.result<std::string>(asio::use_future).get();
    fmt::print("{}: {}\n", h.id(), text);

    // Starting the same id again returns the same workflow; nothing runs twice.
    auto again = eng.start("greet", "greet-future", std::string("world"), asio::use_future).get();
    const std::string same = again.result<std::string>(asio::use_future).get();
    fmt::print("again: {} ({})\n", same, same == text ? "the journaled result" : "UNEXPECTED");
    if (same != text) status = 1;

    eng.shutdown(asio::use_future).get();
    fmt::print("{}\n", status == 0 ? "OK" : "FAILED");
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    status = 1;
  }
  work.reset();
  io.stop();
  runner.join();
  return status;
}
