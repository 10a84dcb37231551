// ctx.all, ctx.any and ctx.map: the join's scope and a map's state.
#pragma once

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
}  // namespace detail
}  // namespace durable
