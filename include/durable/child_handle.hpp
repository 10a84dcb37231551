// A child workflow started by ctx.start_child(), as the parent sees it.
#pragma once

#include <asio/awaitable.hpp>
#include <string>

namespace durable {

class context;

/// A child workflow started by ctx.start_child(): its id (derived from the parent's id and the
/// step, "<parent id>/<step>"), and its result, awaited as a journaled step of the parent.
class child_handle {
public:
  child_handle() = default;
  [[nodiscard]] const std::string& id() const noexcept { return id_; }
  /// Waits for the child to end (its end wakes the parent, which unloads while it waits
  /// long) and returns its output, journaled. A child that failed or was cancelled raises
  /// step_failed (journaled too); one that is parked or dead-lettered keeps the parent
  /// waiting until an operator resumes, retries or cancels it.
  template <class R = void>
  [[nodiscard]] asio::awaitable<R> result() const;

private:
  friend class context;
  child_handle(context* c, std::string id) : ctx_(c), id_(std::move(id)) {}
  context* ctx_ = nullptr;
  std::string id_;
};

}  // namespace durable
