// One run of a workflow's code, whatever journal it runs on: the code is called with a context
// over the run, and what it returned (I5: after every journaled step was reached) or let
// escape is noted as its verdict. The engine's runner and the in-memory runs share it.
#pragma once

#include <asio/awaitable.hpp>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "durable/context.hpp"
#include "durable/detail/run_state.hpp"

namespace durable::detail {

/// `body(ctx)` returns the workflow's output as JSON (nullopt for a void workflow).
template <class Body>
asio::awaitable<void> run_body(run_state& run, Body body) {
  try {
    context ctx(run);
    std::optional<std::string> output = co_await body(ctx);
    check_fully_replayed(run);
    if (output)
      check_value_size(run, output->size(), "the workflow's result",
                       "the workflow runs from its last journaled step");
    run.outcome.note(verdict::succeeded(output.value_or("null")));
  } catch (...) {
    run.outcome.note(escaped(run, std::current_exception()));
  }
}

}  // namespace durable::detail
