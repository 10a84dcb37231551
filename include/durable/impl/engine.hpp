// Templates of durable/engine.hpp (registering workflows); included at its end.
#pragma once

#include "durable/detail/invoke_workflow.hpp"

namespace durable {
template <class F>
void engine::register_workflow(std::string name, F fn) {
  using sig = detail::workflow_signature_of<F>;
  static_assert(sig::valid,
                "register_workflow: the workflow must be callable as "
                "asio::awaitable<R>(durable::context&, Args...) with exactly one signature: a "
                "function, a lambda or a function object (not a generic lambda)");
  if constexpr (std::is_pointer_v<F> || std::is_member_pointer_v<F>) {
    if (!fn) throw error("register_workflow('" + name + "'): the function pointer is null");
  }
  [&]<class... Args>(std::tuple<Args...>*) {
    add_workflow<typename sig::result, Args...>(std::move(name),
                                                std::make_shared<std::decay_t<F>>(std::move(fn)));
  }(static_cast<typename sig::args*>(nullptr));
}

template <class R, class C, class... Args>
void engine::register_workflow(std::string name, asio::awaitable<R> (C::*fn)(context&, Args...),
                               C* object) {
  if (!fn) throw error("register_workflow('" + name + "'): the member function pointer is null");
  if (!object) throw error("register_workflow('" + name + "'): the object is null");
  auto call = [fn, object](context& ctx, auto&... a) { return (object->*fn)(ctx, a...); };
  add_workflow<R, Args...>(std::move(name), std::make_shared<decltype(call)>(call));
}

template <class R, class... Args, class Fn>
void engine::add_workflow(std::string name, std::shared_ptr<Fn> fn) {
  using inputs_t = std::tuple<std::decay_t<Args>...>;
  if (name.empty()) throw error("register_workflow: the workflow name must not be empty");
  if (s_->opened)
    throw error("register_workflow('" + name +
                "'): register every workflow before open(); the engine claims work by name");
  detail::registered_workflow w;
  w.name = name;
  w.signature = detail::signature_of<Args...>();
  w.check_inputs = [](const nlohmann::json& j) { (void)durable::decode<inputs_t>(j); };
  w.invoke = [fn](context& ctx, const nlohmann::json& j) {
    return detail::invoke_workflow<R, Args...>(fn, ctx, j);
  };
  if (!s_->registry.emplace(name, std::move(w)).second)
    throw error("register_workflow: a workflow named '" + name + "' is already registered");
  std::vector<std::string> names;
  for (const auto& entry : s_->registry) names.push_back(entry.first);
  s_->names = detail::text_array(names);
}

}  // namespace durable
