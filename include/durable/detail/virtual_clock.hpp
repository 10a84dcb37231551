// A clock that a test moves by hand: the clock of the test kit's runs (durable/testing.hpp).
// Every wait of a run (a sleep, a retry's backoff, a step's timeout, the pause between two
// looks of a recv or get_event, the workflow's deadline) arms its timer through arm_timer(); on
// the real clock that is expires_after(), on a virtual clock the timer is parked at "never" and
// fired (cancelled) when the clock reaches its due time. Whoever drives the runs moves the clock
// when nothing else can happen (fire_next), or to a point a test names (advance_to).
// Single-threaded, like a run.
#pragma once

#include <asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <limits>
#include <map>
#include <set>

namespace durable::detail {

class virtual_clock {
public:
  /// Starts at `unix_seconds` (Unix seconds).
  explicit virtual_clock(double unix_seconds) : now_(unix_seconds) {}
  virtual_clock(const virtual_clock&) = delete;
  virtual_clock& operator=(const virtual_clock&) = delete;

  [[nodiscard]] double now() const noexcept { return now_; }

  /// A wait at least this long is woken only by whatever cancels its timer (a poke), never by
  /// the clock: the test kit's waits for a message or an event poll no more than that.
  static constexpr std::chrono::milliseconds horizon = std::chrono::hours(24 * 365 * 100);

  /// `t` fires (is cancelled) when the clock reaches now() + `d` (never, from `horizon` on).
  void arm(asio::steady_timer& t, std::chrono::milliseconds d) {
    disarm(t);
    t.expires_at(asio::steady_timer::time_point::max());
    if (d < horizon) armed_.emplace(now_ + double(d.count()) / 1000.0, &t);
  }
  /// Forgets `t` (its wait ended, or it is about to be destroyed). True if the clock fired it:
  /// its wait ended with operation_aborted because its time came, not because it was cancelled.
  bool disarm(asio::steady_timer& t) noexcept {
    for (auto it = armed_.begin(); it != armed_.end(); ++it)
      if (it->second == &t) {
        armed_.erase(it);
        break;
      }
    return fired_.erase(&t) > 0;
  }

  /// Timers armed and not fired yet.
  [[nodiscard]] std::size_t armed() const noexcept { return armed_.size(); }
  /// The due time of the earliest armed timer; nullopt-like: +inf when none.
  [[nodiscard]] double next_due() const noexcept {
    return armed_.empty() ? std::numeric_limits<double>::infinity() : armed_.begin()->first;
  }

  /// Moves the clock to the earliest due time and fires every timer due then. False when no
  /// timer is armed (the clock stays).
  bool fire_next() {
    if (armed_.empty()) return false;
    advance_to(armed_.begin()->first);
    return true;
  }
  /// Moves the clock to `t` (never back) and fires every timer due by then. Returns how many.
  std::size_t advance_to(double t) {
    if (t > now_) now_ = t;
    std::size_t n = 0;
    while (!armed_.empty() && armed_.begin()->first <= now_) {
      asio::steady_timer* timer = armed_.begin()->second;
      armed_.erase(armed_.begin());
      fired_.insert(timer);
      timer->cancel();
      ++n;
    }
    return n;
  }

private:
  double now_;
  std::multimap<double, asio::steady_timer*> armed_;
  std::set<asio::steady_timer*> fired_;
};

/// Arms `t` for `d` on `clock`, or on the real clock when there is none.
inline void arm_timer(virtual_clock* clock, asio::steady_timer& t, std::chrono::milliseconds d) {
  if (clock)
    clock->arm(t, d);
  else
    t.expires_after(d);
}
/// Ends `t`'s wait on `clock`: true if the clock fired it (see virtual_clock::disarm).
inline bool disarm_timer(virtual_clock* clock, asio::steady_timer& t) noexcept {
  return clock && clock->disarm(t);
}

}  // namespace durable::detail
