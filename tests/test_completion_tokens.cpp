// The engine's operations with completion tokens other than asio::use_awaitable: std::future
// from a thread that is not the io_context's, callbacks, and deferred operations. Against the
// real server; the engine runs on an io_context driven by a thread of its own.
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <durable/version.hpp>
#include <exception>
#include <future>
#include <string>
#include <thread>

#include "support/workflows.hpp"

using namespace std::chrono_literals;

namespace {

asio::awaitable<int> doubled(durable::context& ctx, int n) {
  co_return co_await ctx.step("double", [n] { return 2 * n; });
}

asio::awaitable<std::string> waits_for_a_message(durable::context& ctx) {
  co_await ctx.set_event("stage", std::string("waiting"));
  auto who = co_await ctx.recv<std::string>("greeting", 20s);
  co_return "hello " + who.value_or("nobody");
}

/// An io_context run by its own thread, as an application that is not written as coroutines
/// would run it; the test's thread only calls the engine and waits on futures.
struct io_thread {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
  ~io_thread() {
    work.reset();
    io.stop();  // abandons what the engine left behind, like a process that exits
    thread.join();
  }
};

durable::engine_options options_for(const char* tag) {
  return test::options(test::fresh_schema(tag));
}

}  // namespace

static_assert(DURABLE_VERSION ==
              DURABLE_VERSION_MAJOR * 10000 + DURABLE_VERSION_MINOR * 100 + DURABLE_VERSION_PATCH);

TEST_CASE("use_future from plain code: open, start, result and shutdown", "[tokens]") {
  io_thread t;
  durable::engine eng(t.io.get_executor(), options_for("future"));
  eng.register_workflow("doubled", &doubled);
  CHECK(eng.open(asio::use_future).get() == 0);

  std::future<durable::workflow_handle> started = eng.start("doubled", "d-1", 21, asio::use_future);
  durable::workflow_handle h = started.get();
  CHECK(h.id() == "d-1");
  std::future<int> result = h.result<int>(asio::use_future);
  CHECK(result.get() == 42);
  CHECK(h.status(asio::use_future).get().status == "succeeded");

  // The same id again: the existing workflow, nothing runs twice.
  CHECK(eng.start("doubled", "d-1", 21, asio::use_future).get().id() == "d-1");
  CHECK(eng.handle("d-1").result<int>(asio::use_future).get() == 42);

  // Errors arrive through the future, also those found before anything ran.
  CHECK_THROWS_AS(eng.start("doubled", "d-1", 5, asio::use_future).get(),
                  durable::workflow_conflict);
  CHECK_THROWS_WITH(eng.start("not registered", "d-2", asio::use_future).get(),
                    Catch::Contains("no workflow named 'not registered'"));
  CHECK_THROWS_WITH(
      eng.start(durable::start_options{.timeout = -1ms}, "doubled", "d-3", 1, asio::use_future)
          .get(),
      Catch::Contains("the timeout must not be negative"));
  CHECK_THROWS_WITH(
      eng.enqueue(durable::enqueue_options{.queue = ""}, "doubled", "d-4", 1, asio::use_future)
          .get(),
      Catch::Contains("the queue name must not be empty"));
  CHECK_FALSE(eng.cancel("no such workflow", asio::use_future).get());

  eng.shutdown(asio::use_future).get();
}

TEST_CASE("use_future drives enqueue, get_event, send and cancel", "[tokens]") {
  io_thread t;
  durable::engine eng(t.io.get_executor(), options_for("future_ops"));
  eng.register_workflow("doubled", &doubled);
  eng.register_workflow("waits", &waits_for_a_message);
  (void)eng.open(asio::use_future).get();

  auto queued = eng.enqueue(durable::enqueue_options{}, "doubled", "q-1", 4, asio::use_future);
  CHECK(queued.get().result<int>(asio::use_future).get() == 8);

  auto w = eng.start("waits", "w-1", asio::use_future).get();
  std::optional<std::string> stage =
      eng.get_event<std::string>("w-1", "stage", 20s, asio::use_future).get();
  CHECK(stage == std::optional<std::string>("waiting"));
  CHECK(eng.send("w-1", "greeting", std::string("alice"), asio::use_future).get());
  CHECK(w.result<std::string>(asio::use_future).get() == "hello alice");

  auto w2 = eng.start("waits", "w-2", asio::use_future).get();
  CHECK(eng.get_event<std::string>("w-2", "stage", asio::use_future).get() ==
        std::optional<std::string>("waiting"));
  CHECK(eng.cancel("w-2", asio::use_future).get());
  CHECK_THROWS_AS(w2.result<std::string>(asio::use_future).get(), durable::workflow_cancelled);

  eng.shutdown(1s, asio::use_future).get();
}

TEST_CASE("a callback token gets the exception and the value", "[tokens]") {
  io_thread t;
  durable::engine eng(t.io.get_executor(), options_for("callback"));
  eng.register_workflow("doubled", &doubled);
  (void)eng.open(asio::use_future).get();

  std::promise<int> outcome;
  eng.start("doubled", "c-1", 5, [&](std::exception_ptr e, durable::workflow_handle h) {
    if (e) return outcome.set_exception(e);
    h.result<int>([&](std::exception_ptr e2, int v) {
      if (e2) return outcome.set_exception(e2);
      outcome.set_value(v);
    });
  });
  CHECK(outcome.get_future().get() == 10);

  std::promise<std::string> failure;
  eng.start("not registered", "c-2", [&](std::exception_ptr e, durable::workflow_handle) {
    try {
      if (e) std::rethrow_exception(e);
      failure.set_value("no error");
    } catch (const durable::error& err) {
      failure.set_value(err.what());
    }
  });
  CHECK_THAT(failure.get_future().get(), Catch::Contains("no workflow named 'not registered'"));

  std::promise<void> stopped;
  eng.shutdown([&](std::exception_ptr e) {
    if (e) return stopped.set_exception(e);
    stopped.set_value();
  });
  stopped.get_future().get();
}

TEST_CASE("asio::experimental::deferred: nothing runs until the operation is launched",
          "[tokens]") {
  io_thread t;
  durable::engine eng(t.io.get_executor(), options_for("deferred"));
  eng.register_workflow("doubled", &doubled);
  (void)eng.open(asio::experimental::deferred)(asio::use_future).get();

  auto start = eng.start("doubled", "x-1", 7, asio::experimental::deferred);
  // Not launched yet: no workflow has that id.
  CHECK_THROWS_WITH(eng.handle("x-1").status(asio::use_future).get(),
                    Catch::Contains("does not exist"));
  durable::workflow_handle h = std::move(start)(asio::use_future).get();
  CHECK(h.result<int>(asio::experimental::deferred)(asio::use_future).get() == 14);

  eng.shutdown(asio::experimental::deferred)(asio::use_future).get();
}

TEST_CASE("the default token still returns an awaitable, and use_awaitable may be named",
          "[tokens]") {
  test::run([]() -> asio::awaitable<void> {
    durable::engine eng(co_await asio::this_coro::executor, options_for("awaitable"));
    eng.register_workflow("doubled", &doubled);
    (void)co_await eng.open();
    asio::awaitable<durable::workflow_handle> start = eng.start("doubled", "a-1", 3);
    auto h = co_await std::move(start);
    CHECK(co_await h.result<int>(asio::use_awaitable) == 6);
    auto h2 = co_await eng.start("doubled", "a-2", 4, asio::use_awaitable);
    CHECK(co_await h2.result<int>() == 8);
    co_await eng.shutdown(asio::use_awaitable);
  }());
}
