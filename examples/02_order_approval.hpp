// Example 02's workflows, in a header of their own so that the test suite checks them with the
// test kit (tests/test_kit_examples.cpp: durable::testing::check_crashes) as the program runs
// them.
//
//   order("order-7", parcels)
//     start_child "reserve"  one child workflow per warehouse, awaited together (ctx.all)
//     set_event   "stage"    "awaiting approval", readable from outside
//     recv        "approval" waits up to 30 s for a person's decision (a message)
//     map         "ship"     one step per parcel, at most 4 in flight
#pragma once

#include <fmt/core.h>

#include <asio/awaitable.hpp>
#include <chrono>
#include <durable.hpp>
#include <string>
#include <vector>

namespace order_example {

using namespace std::chrono_literals;

// A child workflow: reserves stock in one warehouse (a stand-in for a call to its API).
inline asio::awaitable<int> reserve(durable::context& ctx, std::string warehouse) {
  co_return co_await ctx.step("reserve", [&](const durable::step_info& info) {
    fmt::print("  reserving in {} (idempotency key {})\n", warehouse, info.idempotency_key);
    return int(warehouse.size());  // "units reserved"
  });
}

inline asio::awaitable<std::string> order(durable::context& ctx, std::vector<std::string> parcels) {
  // Fan-out over child workflows: both are started (ids "<order>/0" and "<order>/1"), then
  // awaited together. Each awaitable takes its step number when it is created.
  auto north = co_await ctx.start_child("reserve", std::string("north"));
  auto south = co_await ctx.start_child("reserve", std::string("south"));
  auto north_units = north.result<int>();
  auto south_units = south.result<int>();
  auto [n, s] = co_await ctx.all(std::move(north_units), std::move(south_units));

  // Tell the outside world where the order stands, then wait for a person.
  co_await ctx.set_event("stage", std::string("awaiting approval"));
  const auto approval = co_await ctx.recv<std::string>("approval", 30s);
  if (!approval) co_return "expired";

  // A bounded map: one journaled step per parcel, four at a time.
  const auto labels = co_await ctx.map("ship", std::move(parcels), 4,
                                       [](const std::string& p) { return "label-" + p; });
  co_await ctx.set_event("stage", std::string("shipped"));
  co_return fmt::format("{} units reserved, approved by {}, {} parcels shipped", n + s, *approval,
                        labels.size());
}

}  // namespace order_example
