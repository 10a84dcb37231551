// The database server's clock as this process sees it. Every wake-up time a run journals or
// compares (a sleep's wake-up, a wait's deadline, a retry's due time, the workflow's deadline)
// is a time on the server's clock, so that a host whose wall clock is wrong (hours off, or
// stepped by NTP) neither ends a wait early nor sleeps too long after it takes a workflow over.
//
// The engine reads the server's clock_timestamp() in statements it runs anyway, off the step
// path (registering the executor, every heartbeat): the reading is taken to belong to the
// middle of the round trip, measured on this host's steady clock. Between readings the server's
// time is the reading plus the steady time elapsed since, so this host's wall clock is never
// used once a reading exists.
#pragma once

#include <chrono>
#include <optional>

namespace durable::detail {

class server_clock {
public:
  using steady = std::chrono::steady_clock;

  /// A reading: `server` (Unix seconds) came back in the answer to a statement sent at `sent`
  /// and answered at `received`. Kept when it is at least as precise as the one held, allowing
  /// for how the held one ages (both clocks drift a little).
  void sample(steady::time_point sent, steady::time_point received, double server) noexcept {
    if (received < sent) return;
    const steady::time_point mid = sent + (received - sent) / 2;
    const double half_trip = seconds(received - sent) / 2;
    if (best_ && half_trip > uncertainty(*best_, received)) return;
    best_ = reading{mid, server, half_trip};
  }

  /// Now, in Unix seconds on the server's clock; this host's wall clock before any reading.
  [[nodiscard]] double now() const noexcept {
    if (!best_) return wall_now();
    return best_->server + seconds(steady::now() - best_->at);
  }

  /// The earliest the server's time can be now: now() less how far off the reading can be
  /// (half its round trip, and the drift since). A wait that ends when this reaches its wake-up
  /// time never ends early on the server's clock, even after a long round trip (a loaded server
  /// reads its clock late in the trip, and its middle is then too early a guess).
  [[nodiscard]] double earliest() const noexcept {
    return best_ ? now() - uncertainty(*best_, steady::now()) : wall_now();
  }

  /// The latest the server's time can be now: now() plus how far off the reading can be. A time
  /// the server set a moment ago (a wake-up it computed from its own now()) is at most this
  /// plus the interval, so a local timer aimed at it and measured by earliest() is never early.
  [[nodiscard]] double latest() const noexcept {
    return best_ ? now() + uncertainty(*best_, steady::now()) : wall_now();
  }

  /// How far the server's clock is ahead of this host's wall clock (seconds; 0 before any
  /// reading).
  [[nodiscard]] double offset() const noexcept { return best_ ? now() - wall_now() : 0.0; }

  [[nodiscard]] bool measured() const noexcept { return best_.has_value(); }

private:
  struct reading {
    steady::time_point at;  // the middle of its round trip
    double server = 0;      // the server's time then (Unix seconds)
    double half_trip = 0;   // how far off it can be (seconds)
  };
  // Generous: quartz drifts by tens of ppm; a server slewed by NTP by up to 500 ppm.
  static constexpr double drift = 1e-3;

  static double seconds(steady::duration d) noexcept {
    return std::chrono::duration<double>(d).count();
  }
  static double wall_now() noexcept {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  static double uncertainty(const reading& r, steady::time_point t) noexcept {
    return r.half_trip + drift * seconds(t - r.at);
  }

  std::optional<reading> best_;
};

}  // namespace durable::detail
