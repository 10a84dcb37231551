// The supervisor: every background part of the engine runs under it, and a part that ends with
// an exception is reported and started again after a growing pause (never `detached` with an
// empty catch). Also the pause that shutdown cuts short, and the reporter of repeated failures.
#pragma once

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/redirect_error.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "durable/detail/engine_state.hpp"
#include "durable/detail/runtime/identity.ipp"

namespace durable::detail {

// ---- sleeping that shutdown can cut short ---------------------------------------------------

/// Waits `d` unless the engine stops first (shutdown cancels every such timer).
inline asio::awaitable<void> pause(std::shared_ptr<engine_state> s, std::chrono::milliseconds d) {
  if (s->stopping) co_return;
  auto t = std::make_shared<asio::steady_timer>(s->ex, d);
  s->sleepers.insert(t);
  asio::error_code ec;
  co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  s->sleepers.erase(t);
}

// ---- the supervisor -------------------------------------------------------------------------

using part_fn = asio::awaitable<void> (*)(std::shared_ptr<engine_state>);

/// Runs a background part of the engine. If it ends with an exception, the supervisor
/// reports it and starts it again after a pause that grows with each restart (up to 30 s);
/// shutdown cancels it.
inline void supervise(std::shared_ptr<engine_state> s, std::string_view component, part_fn body,
                      int restarts = 0) {
  auto sig = std::make_shared<asio::cancellation_signal>();
  s->tasks.insert(sig);
  asio::co_spawn(
      s->ex, body(s),
      asio::bind_cancellation_slot(
          sig->slot(), [s, sig, component, body, restarts](std::exception_ptr e) {
            s->tasks.erase(sig);
            if (!e) return;
            if (s->stopping) {
              s->report(severity::debug, component, "", "ended at shutdown: " + describe(e));
              return;
            }
            s->counters.background_failures.add(s->counters.background_failures.index(component));
            const auto delay = std::chrono::milliseconds(
                std::min<std::int64_t>(30000, 1000LL << std::min(restarts, 5)));
            s->report(severity::error, "supervisor", "",
                      std::string(component) + " stopped with an error: " + describe(e) +
                          "; restarting it in " + std::to_string(delay.count()) + " ms");
            auto t = std::make_shared<asio::steady_timer>(s->ex, delay);
            s->sleepers.insert(t);
            t->async_wait([s, t, component, body, restarts](const asio::error_code&) {
              s->sleepers.erase(t);
              if (!s->stopping) supervise(s, component, body, restarts + 1);
            });
          }));
}

/// Reports a part's repeated failures once when they start (and again at most every
/// minute), and once when the part works again.
class failure_reporter {
public:
  explicit failure_reporter(std::string_view component) : component_(component) {}
  void failed(engine_state& s, const std::string& what) {
    s.counters.background_failures.add(s.counters.background_failures.index(component_));
    const auto now = std::chrono::steady_clock::now();
    if (!failing_ || now - last_ > std::chrono::minutes(1)) {
      s.report(severity::warning, component_, "", what);
      last_ = now;
    }
    failing_ = true;
  }
  void ok(engine_state& s) {
    if (failing_) s.report(severity::info, component_, "", "works again");
    failing_ = false;
  }

private:
  std::string_view component_;
  bool failing_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace durable::detail
