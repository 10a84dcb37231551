// Calling a registered workflow with its journaled inputs: what an engine and the test kit's
// harness both do, in a header of its own so that the kit (durable/testing.hpp) need not include
// the engine.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>

#include "durable/codec.hpp"
#include "durable/context.hpp"
#include "durable/detail/encode_text.hpp"
#include "durable/detail/type_name.hpp"
#include "durable/error.hpp"

namespace durable {
namespace detail {

template <class... Args>
std::string signature_of() {
  std::string s = "(";
  ((s += (s.size() > 1 ? ", " : "") + std::string(type_name<std::decay_t<Args>>())), ...);
  return s + ")";
}

/// Decodes the journaled inputs and calls the workflow. The arguments live in this frame
/// while the workflow runs, so a workflow may take them by reference.
template <class R, class... Args, class Fn>
asio::awaitable<std::optional<std::string>> invoke_workflow(std::shared_ptr<Fn> fn, context& ctx,
                                                            nlohmann::json inputs) {
  std::tuple<std::decay_t<Args>...> args;
  try {
    args = durable::decode<std::tuple<std::decay_t<Args>...>>(inputs);
  } catch (const codec_error& e) {
    throw workflow_parked(ctx.workflow_id(),
                          "workflow '" + ctx.workflow_id() + "' (" + ctx.workflow_name() +
                              "): its journaled inputs no longer decode as " +
                              signature_of<Args...>() + ": " + e.what() +
                              "; the workflow's parameters changed while it was in flight");
  }
  auto call = [&](auto&... a) { return (*fn)(ctx, a...); };
  if constexpr (std::is_void_v<R>) {
    co_await std::apply(call, args);
    co_return std::nullopt;
  } else {
    R r = co_await std::apply(call, args);
    co_return co_await detail::journal_text(r);
  }
}

}  // namespace detail

}  // namespace durable
