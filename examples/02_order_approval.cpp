// Example 02: an order that fans out, waits for a person, and fans out again.
//
//   order("order-7", parcels)
//     start_child "reserve"  one child workflow per warehouse, awaited together (ctx.all)
//     set_event   "stage"    "awaiting approval", readable from outside
//     recv        "approval" waits up to 30 s for a person's decision (a message)
//     map         "ship"     one step per parcel, at most 4 in flight
//
// The program starts the order, waits from outside until the order says it awaits approval
// (engine::get_event), sends the approval (engine::send), waits for the result, and prints the
// journal and the tree of workflows. It exits with 0 and prints OK only if every expectation
// holds.
//
// Database: DURABLE_DATABASE_URL (a libpq URL or conninfo string); unset or empty means libpq's
// PG* environment variables. The program drops and recreates the schema `durable_demo_orders`.
// The workflows are in 02_order_approval.hpp, which the test suite checks with the test kit.

#include <fmt/core.h>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/this_coro.hpp>
#include <chrono>
#include <cstdlib>
#include <durable.hpp>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "02_order_approval.hpp"  // the workflows

using namespace std::chrono_literals;

namespace {

durable::engine_options demo_options() {
  durable::engine_options o;
  if (const char* url = std::getenv("DURABLE_DATABASE_URL")) o.conninfo = url;
  o.schema = "durable_demo_orders";
  o.executor_id = "orders-demo";
  o.poll_interval = 100ms;
  return o;
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("expectation failed: " + what);
  fmt::print("  ok: {}\n", what);
}

asio::awaitable<void> drive(durable::engine& eng) {
  const std::vector<std::string> parcels{"p1", "p2", "p3", "p4", "p5", "p6"};
  auto h = co_await eng.start("order", "order-7", parcels);

  // From outside: wait until the order asks for approval, then approve it.
  const auto stage = co_await eng.get_event<std::string>("order-7", "stage", 20s);
  expect(stage.value_or("") == "awaiting approval", "the order published 'awaiting approval'");
  const bool sent = co_await eng.send("order-7", "approval", std::string("alice"));
  expect(sent, "the approval was sent");

  const std::string result = co_await h.result<std::string>();
  fmt::print("result: {}\n", result);
  expect(result == "10 units reserved, approved by alice, 6 parcels shipped", "the order finished");
  const auto last = co_await eng.get_event<std::string>("order-7", "stage", 0ms);
  expect(last.value_or("") == "shipped", "the latest event wins");

  auto c = co_await eng.pool().acquire();
  auto journal = co_await c->exec(
      "SELECT seq, name, kind FROM durable_demo_orders.steps WHERE workflow_id = $1 ORDER BY seq",
      std::string("order-7"));
  fmt::print("journal of order-7:\n");
  for (int i = 0; i < journal.rows(); ++i)
    fmt::print("  {:>2}  {:<22} {}\n", journal[i].get<int>(0), journal[i].get<std::string>(1),
               journal[i].get<std::string>(2));
  auto tree = co_await c->exec(
      "SELECT id, coalesce(parent_id, '-'), status FROM durable_demo_orders.workflows "
      "WHERE id = $1 OR parent_id = $1 ORDER BY id",
      std::string("order-7"));
  fmt::print("workflows:\n");
  for (int i = 0; i < tree.rows(); ++i)
    fmt::print("  {:<10} parent {:<8} {}\n", tree[i].get<std::string>(0),
               tree[i].get<std::string>(1), tree[i].get<std::string>(2));
  expect(tree.rows() == 3, "two child workflows, parent_id recorded");
}

asio::awaitable<void> run() {
  auto ex = co_await asio::this_coro::executor;
  {
    auto c = co_await durable::pg::connection::connect(demo_options().conninfo);
    co_await c->exec("DROP SCHEMA IF EXISTS durable_demo_orders CASCADE");
  }
  durable::engine eng(ex, demo_options());
  eng.register_workflow("order", &order_example::order);
  eng.register_workflow("reserve", &order_example::reserve);
  (void)co_await eng.open();

  // The engine's background work runs until shutdown(): stop it whatever happens.
  std::exception_ptr failed;
  try {
    co_await drive(eng);
  } catch (...) {
    failed = std::current_exception();
  }
  co_await eng.shutdown();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace

int main() {
  try {
    asio::io_context io;
    std::exception_ptr failed;
    asio::co_spawn(io, run(), [&](std::exception_ptr e) { failed = e; });
    io.run();
    if (failed) std::rethrow_exception(failed);
    fmt::print("OK\n");
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "FAILED: {}\n", e.what());
    return 1;
  }
}
