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

/// The end of a workflow that a result() here awaits (migration 15): its outcome ('s' and the
/// output, 'f' and the error, or nothing: result() reads it), a newline, and its id.
inline void result_notified(engine_state& s, std::string_view payload) {
  const auto newline = payload.find('\n');
  if (newline == std::string_view::npos) return;  // not ours: the fallback poll covers it
  const std::string key = "r:" + std::string(payload.substr(newline + 1));
  if (newline == 0) {
    s.waiters.poke(key);
  } else {
    const std::string outcome(payload.substr(0, newline));
    s.waiters.poke(key, &outcome);
  }
}

/// Listens until shutdown, or until `*cut` is set (a listener of waits: remote_wait).
inline asio::awaitable<void> listen_loop(std::shared_ptr<engine_state> s,
                                         std::shared_ptr<bool> cut) {
  failure_reporter problems("listener");
  const auto over = [&] { return s->stopping || (cut && *cut); };
  while (!over()) {
    try {
      auto c = co_await pg::connection::connect(s->options.conninfo);
      if (listener_connected_hook) co_await listener_connected_hook();
      const std::string channel = s->st.channel();
      const std::string cancels = s->st.cancel_channel();
      co_await c->listen(channel);
      co_await c->listen(cancels);
      const std::string waits = s->st.wait_channel();
      co_await c->listen(waits);
      const std::string results = s->st.result_channel();
      // Only an engine whose result() waits are pushed hears the ends of awaited workflows
      // (up to 8 000 bytes each); the others would only discard them.
      if (s->options.push_results) co_await c->listen(results);
      if (over()) co_return;
      s->listening = true;
      s->waiters.set_hears_all(true);
      problems.ok(*s);
      s->wake_due();          // catch up with whatever was queued or woken while nobody listened
      s->waiters.poke_all();  // and the waiters, who may have missed some: they look again
      while (!over()) {
        const pg::notification n = co_await c->wait_notification();
        if (n.channel == waits)
          s->waiters.poke(n.payload);  // a message, an event, a child's end
        else if (n.channel == results)
          result_notified(*s, n.payload);
        else if (n.channel == cancels)
          cancel_notified(*s, n.payload);
        else if (n.payload.empty())
          s->wake_due();  // a resume, retry or fork: a workflow is due now
        else
          s->wake_dispatcher();
      }
      co_return;
    } catch (const std::exception& e) {
      if (over()) co_return;  // shutdown or the last wait cancelled it: nothing failed
      // Until it listens again the waits poll; a wait in a long poll looks again now.
      s->listening = false;
      s->waiters.set_hears_all(false);
      s->waiters.poke_all();
      problems.failed(*s, "LISTEN connection failed: " + describe_io_failure(e) +
                              "; polling covers for it, reconnecting in 1 s");
    }
    co_await pause(s, std::chrono::seconds(1));
  }
}

inline asio::awaitable<void> listener(std::shared_ptr<engine_state> s) {
  co_await listen_loop(std::move(s), nullptr);
}

/// Forgets the listener that waits started (remote_wait), which has ended or is being cut, and
/// wakes the waits, which poll until another listener listens.
inline void forget_wait_listener(engine_state& s) {
  s.wait_listener.reset();
  s.wait_cut.reset();
  s.listening = false;
  s.waiters.set_hears_all(false);
  s.waiters.poke_all();
}

/// Stops the listener that waits started (remote_wait).
inline void cut_wait_listener(engine_state& s) {
  if (!s.wait_listener) return;
  *s.wait_cut = true;
  const auto sig = s.wait_listener;
  forget_wait_listener(s);
  sig->emit(asio::cancellation_type::terminal);
}

/// open()'s listener (engine_options::listen), for the engine's life, under the supervisor. A
/// listener that waits started (remote_wait) gives way to it.
inline void start_listener(const std::shared_ptr<engine_state>& s) {
  if (!s->options.listen || s->listener_started || s->stopping) return;
  s->listener_started = true;
  cut_wait_listener(*s);
  supervise(s, "listener", &listener);
}

/// Held by a wait for another process's workflow (result(), get_event). An opened engine's
/// listener serves it already; in an engine never opened the first such wait starts a
/// listener and the last one's end stops it (lifecycle_state).
class remote_wait {
public:
  explicit remote_wait(std::shared_ptr<engine_state> s) : s_(std::move(s)) {
    if (!s_->options.listen || !s_->options.push_results || s_->stopping || s_->opened ||
        s_->listener_started) {
      s_.reset();
      return;
    }
    if (s_->remote_waits++ > 0 || s_->wait_listener) return;
    auto sig = std::make_shared<asio::cancellation_signal>();
    auto cut = std::make_shared<bool>(false);
    s_->tasks.insert(sig);
    s_->wait_listener = sig;
    s_->wait_cut = cut;
    auto st = s_;
    asio::co_spawn(st->ex, listen_loop(st, cut),
                   asio::bind_cancellation_slot(sig->slot(), [st, sig](std::exception_ptr e) {
                     st->tasks.erase(sig);
                     if (st->wait_listener != sig) return;  // cut: what cut it cleaned up
                     // Ended by itself (it only ends by a cut or shutdown otherwise): its
                     // waits poll, and the next wait after the last one starts another.
                     forget_wait_listener(*st);
                     if (!st->stopping)
                       st->report(severity::warning, "listener", "",
                                  "the listener of this engine's waits stopped: " +
                                      (e ? describe(e) : std::string("it returned")) +
                                      "; they poll until the next wait starts another");
                   }));
  }
  remote_wait(const remote_wait&) = delete;
  remote_wait& operator=(const remote_wait&) = delete;
  ~remote_wait() {
    if (!s_ || --s_->remote_waits > 0 || !s_->wait_listener) return;
    cut_wait_listener(*s_);  // nothing waits: nobody to wake
  }

private:
  std::shared_ptr<engine_state> s_;
};

}  // namespace durable::detail
