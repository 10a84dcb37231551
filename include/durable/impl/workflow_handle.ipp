// Implementation of workflow_handle (durable/workflow_handle.hpp; included by impl/engine.ipp):
// reading a workflow's status and waiting for its end.
#pragma once

#include "durable/detail/runtime/parts.ipp"

namespace durable {

DURABLE_DECL asio::awaitable<workflow_status> workflow_handle::status_impl() const {
  auto get = s_->st.workflow_get(id_);
  auto c = co_await s_->pool.acquire();
  auto r = co_await store::fetch_one(*c, std::move(get));
  if (!r) throw error("workflow '" + id_ + "' does not exist");
  co_return workflow_status{std::move(r->status), std::move(r->reason), r->epoch, r->attempts,
                            std::move(r->executor_id)};
}

DURABLE_DECL asio::awaitable<std::string> workflow_handle::wait_output_impl() const {
  auto s = s_;
  for (int round = 0;; ++round) {
    std::string status;
    std::optional<std::string> reason, output, err;
    {
      auto get = s->st.workflow_get(id_);
      auto c = co_await s->pool.acquire();
      auto r = co_await store::fetch_one(*c, std::move(get));
      if (!r) throw error("workflow '" + id_ + "' does not exist");
      status = std::move(r->status);
      reason = std::move(r->reason);
      output = std::move(r->output);
      err = std::move(r->error);
    }
    if (status == "succeeded") co_return output.value_or("null");
    if (status == "failed" || status == "parked" || status == "cancelled" ||
        status == "dead_letter") {
      auto j = nlohmann::json::parse(err.value_or("{}"), nullptr, false);
      if (!j.is_object()) j = nlohmann::json::object();
      const std::string type = j.value("type", "unknown");
      const std::string message = j.value("message", reason.value_or(""));
      if (status == "parked" && type == "durable::nondeterminism_error")
        throw nondeterminism_error(id_, j.value("seq", -1), j.value("journaled", ""),
                                   j.value("requested", ""), message);
      if (status == "parked") throw workflow_parked(id_, reason.value_or(message));
      if (status == "cancelled")
        throw workflow_cancelled(
            id_, "workflow '" + id_ + "' was cancelled: " + reason.value_or(message));
      if (status == "dead_letter")
        throw workflow_dead_letter(
            id_, j.value("seq", -1), j.value("step", ""), type, message, j.value("attempts", 0),
            "workflow '" + id_ + "' is dead-lettered: " + reason.value_or(message));
      throw workflow_failed(id_, type, message);
    }
    if (auto it = s->running.find(id_); it != s->running.end()) {
      auto done = it->second.done;
      asio::error_code ec;
      co_await done->async_wait(asio::redirect_error(asio::use_awaitable, ec));
      // A run that ended and was followed at once by another one here (the next generation
      // of ctx.continue_as_new, a recover()) has nothing to read yet: wait for that one.
      for (auto next = s->running.find(id_); next != s->running.end() && next->second.done != done;
           next = s->running.find(id_)) {
        done = next->second.done;
        co_await done->async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
    } else {
      co_await detail::sleep_for(std::chrono::milliseconds(std::min(1 << std::min(round, 9), 500)));
    }
  }
}

DURABLE_DECL asio::awaitable<workflow_status> workflow_handle::status_hop() const {
  return detail::on_strand(s_, status_impl());
}

DURABLE_DECL asio::awaitable<std::string> workflow_handle::wait_output() const {
  return detail::on_strand(s_, wait_output_impl());
}

}  // namespace durable
