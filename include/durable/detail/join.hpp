// ctx.all, ctx.any and ctx.map: the join's scope and a map's state.
#pragma once

#include <array>
#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <variant>

#include "durable/detail/step.hpp"

namespace durable {
namespace detail {
/// Counts a join (ctx.all/any/map) as running while it is in scope: the run does not unload.
class join_scope {
public:
  explicit join_scope(run_state& s, bool any = false) : s_(s), any_(any) {
    ++s_.joins_running;
    if (any_) ++s_.anys_running;
  }
  join_scope(const join_scope&) = delete;
  join_scope& operator=(const join_scope&) = delete;
  ~join_scope() {
    --s_.joins_running;
    if (any_) --s_.anys_running;
  }

private:
  run_state& s_;
  bool any_;
};

/// One item of ctx.map as a step function: refers to the map's copy of the function and of
/// the item (trivially copyable, GCC 12; the map outlives its steps).
template <class F, class Item>
struct map_item_call {
  F* fn;
  const Item* item;
  decltype(auto) operator()(const step_info& info) const {
    if constexpr (std::is_invocable_v<F&, const Item&, const step_info&>)
      return std::invoke(*fn, *item, info);
    else
      return std::invoke(*fn, *item);
  }
};

template <class F, class Item>
struct map_state {
  using call = map_item_call<F, Item>;
  using value = step_value_t<call>;
  using stored = stored_t<value>;
  map_state(std::string n, std::vector<Item> i, F f, retry p)
      : name(std::move(n)),
        items(std::move(i)),
        fn(std::move(f)),
        policy(p),
        results(items.size()) {}
  std::string name;
  std::vector<Item> items;
  F fn;
  retry policy;
  std::vector<std::optional<stored>> results;
  std::size_t next = 0;
};

// The branches of ctx.all and ctx.any, each a coroutine of its own on the join.
template <std::size_t I, class Values, class T>
asio::awaitable<void> all_branch(std::shared_ptr<join_state> j, std::shared_ptr<Values> values,
                                 asio::awaitable<T> a) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await std::move(a);
      std::get<I>(*values).emplace();
    } else {
      std::get<I>(*values).emplace(co_await std::move(a));
    }
  } catch (...) {
    j->fail(I, std::current_exception());
  }
}
template <class Values, class Branches, std::size_t... I>
void spawn_all(const asio::any_io_executor& ex, const std::shared_ptr<join_state>& j,
               const std::shared_ptr<Values>& values, Branches& branches,
               std::index_sequence<I...>) {
  (j->spawn(ex, j, all_branch<I>(j, values, std::move(std::get<I>(branches)))), ...);
}
template <class... T>
struct any_values {
  std::tuple<std::optional<stored_t<T>>...> values;
  std::array<std::exception_ptr, sizeof...(T)> failures{};
};
template <std::size_t I, class Values, class T>
asio::awaitable<void> any_branch(std::shared_ptr<join_state> j, std::shared_ptr<Values> v,
                                 asio::awaitable<T> a) {
  std::exception_ptr failure;
  try {
    if constexpr (std::is_void_v<T>) {
      co_await std::move(a);
      std::get<I>(v->values).emplace();
    } else {
      std::get<I>(v->values).emplace(co_await std::move(a));
    }
  } catch (...) {
    failure = std::current_exception();
  }
  if (j->winner) co_return;  // lost (cancelled, or ended after the winner)
  if (failure && !is_step_failure(failure)) {
    j->fail(I, failure);  // not the step's own outcome: the join stops without a winner
    co_return;
  }
  j->winner = I;
  v->failures[I] = failure;
  j->halt(I);
}
template <class Values, class Branches, std::size_t... I>
void spawn_any(const asio::any_io_executor& ex, const std::shared_ptr<join_state>& j,
               const std::shared_ptr<Values>& v, Branches& branches,
               std::optional<std::size_t> only, std::index_sequence<I...>) {
  ((!only || *only == I ? j->spawn(ex, j, any_branch<I>(j, v, std::move(std::get<I>(branches))))
                        : void()),
   ...);
}
template <class Variant, class Values, std::size_t... I>
Variant pick(Values& v, std::size_t winner, std::index_sequence<I...>) {
  std::optional<Variant> out;
  ((winner == I ? (void)out.emplace(std::in_place_index<I>, std::move(*std::get<I>(v.values)))
                : void()),
   ...);
  return std::move(*out);
}
}  // namespace detail
}  // namespace durable
