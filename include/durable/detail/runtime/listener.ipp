// The listener: LISTEN for enqueues, wake-ups and cancels (polling in the dispatcher and the
// waits is the fallback).
#pragma once

#include <asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "durable/detail/runtime/runner.ipp"
#include "durable/detail/runtime/within.ipp"

namespace durable::detail {

// ---- listener -------------------------------------------------------------------------------

/// A cancel() announced "<epoch>:<workflow id>": stops a run here under an older epoch.
inline void cancel_notified(engine_state& s, const std::string& payload) {
  const auto colon = payload.find(':');
  if (colon == std::string::npos) return;
  std::int64_t epoch = 0;
  try {
    epoch = std::stoll(payload.substr(0, colon));
  } catch (const std::exception&) {
    s.report(severity::warning, "listener", "", "ignored a malformed cancel notice: " + payload);
    return;
  }
  s.cancel_local(std::string_view(payload).substr(colon + 1),
                 "cancelled by an operator (engine::cancel)", true, epoch);
}

inline asio::awaitable<void> listener(std::shared_ptr<engine_state> s) {
  failure_reporter problems("listener");
  while (!s->stopping) {
    try {
      auto c = co_await pg::connection::connect(s->options.conninfo);
      const std::string channel = s->st.channel();
      const std::string cancels = s->st.cancel_channel();
      co_await c->listen(channel);
      co_await c->listen(cancels);
      const std::string waits = s->st.wait_channel();
      co_await c->listen(waits);
      problems.ok(*s);
      s->wake_due();  // catch up with whatever was queued or woken while nobody listened
      for (auto& [key, w] : s->waiters.waiting) {  // and the waiters, who may have missed some
        w->poked = true;
        w->timer.cancel();
      }
      while (!s->stopping) {
        const pg::notification n = co_await c->wait_notification();
        if (n.channel == waits)
          s->waiters.poke(n.payload);  // a message, an event, a child's end
        else if (n.channel == cancels)
          cancel_notified(*s, n.payload);
        else if (n.payload.empty())
          s->wake_due();  // a resume, retry or fork: a workflow is due now
        else
          s->wake_dispatcher();
      }
      co_return;
    } catch (const std::exception& e) {
      if (s->stopping) co_return;  // shutdown cancelled the wait: nothing failed
      problems.failed(*s, "LISTEN connection failed: " + describe_io_failure(e) +
                              "; polling covers for it, reconnecting in 1 s");
    }
    co_await pause(s, std::chrono::seconds(1));
  }
}

}  // namespace durable::detail
