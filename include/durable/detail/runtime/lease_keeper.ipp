// The lease keeper: registers this executor, then heartbeats on a connection of its own (never
// behind claims); when the lease could not be renewed in time, runs stop at their next step.
#pragma once

#include <asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "durable/detail/runtime/runner.ipp"
#include "durable/detail/runtime/within.ipp"

namespace durable::detail {

// ---- registration ---------------------------------------------------------------------------

/// Reports a host clock that is far from the server's: waits are measured against the server's
/// clock (server_clock), so nothing breaks, but an operator should know.
inline void report_clock(engine_state& s) {
  const double off = s.clock.offset();
  if (off < 1.0 && off > -1.0) return;
  s.report(severity::warning, "lease", "",
           "this host's clock is " + std::to_string(std::llround(off < 0 ? -off : off)) + " s " +
               (off < 0 ? "ahead of" : "behind") +
               " the database server's; every wake-up time is measured against the server's "
               "clock, but check this host's time synchronization (NTP)");
}

/// Registers this process under its executor id. If another live process holds the id, waits
/// (up to the lease timeout, plus a heartbeat) for its lease to run out, then refuses with a
/// clear error. A holder on this host whose process is gone is replaced at once.
inline asio::awaitable<void> register_executor(std::shared_ptr<engine_state> s) {
  const auto& o = s->options;
  const auto give_up = std::chrono::steady_clock::now() + o.lease_timeout + o.heartbeat_interval;
  const std::string host = host_name();
  const int pid = int(::getpid());
  bool force = false;
  for (;;) {
    {
      auto reg = s->st.executor_register(o.executor_id, host, pid, o.app_version, s->versions,
                                         s->instance, std::int64_t(o.lease_timeout.count()), force,
                                         s->names, detail::text_array(s->queues));
      auto c = co_await s->pool.acquire();
      const auto sent = std::chrono::steady_clock::now();
      const auto registered = co_await store::fetch_one(*c, std::move(reg));
      if (registered) {
        // The first reading of the server's clock, before any run measures a wait with it.
        s->clock.sample(sent, std::chrono::steady_clock::now(), registered->server_time);
        report_clock(*s);
        co_return;
      }
    }
    auto get = s->st.executor_get(o.executor_id);
    std::optional<store::executor_holder> holder;
    {
      auto c = co_await s->pool.acquire();
      holder = co_await store::fetch_one(*c, std::move(get));
    }
    if (!holder) continue;  // released meanwhile: try again
    const std::string their_host = holder->host;
    const int their_pid = holder->pid;
    const double age_ms = holder->heartbeat_age_ms;
    if (their_host == host && process_gone(their_pid)) {
      force = true;
      continue;
    }
    const std::string who = "executor id '" + o.executor_id + "' is held by a live process (host " +
                            their_host + ", pid " + std::to_string(their_pid) +
                            ", last heartbeat " + std::to_string(std::int64_t(age_ms)) + " ms ago)";
    if (std::chrono::steady_clock::now() >= give_up)
      throw error("open(): " + who +
                  ". Two processes must not share an executor id: give each process its own "
                  "engine_options::executor_id (or leave it unset for a unique default), or stop "
                  "the other process first");
    s->report(severity::warning, "lease", "",
              who + "; waiting for its lease (" + std::to_string(o.lease_timeout.count()) +
                  " ms) to run out");
    co_await sleep_for(std::min(o.heartbeat_interval, std::chrono::milliseconds(250)));
  }
}

// ---- lease keeper ---------------------------------------------------------------------------

/// After a heartbeat went through: once no I/O failure has been seen for three heartbeat
/// intervals, the runs waiting to claim their workflow again after an I/O error do so within
/// io_retry_delay, instead of sitting out a pause that doubled while the database was away.
/// (Shortened only after a quiet spell: while the database flaps, the pauses keep growing,
/// and I9 is not spent on claims that fail.)
inline void shorten_retry_pauses(engine_state& s) {
  using clock = std::chrono::steady_clock;
  if (s.retry_pauses.empty()) return;
  const auto now = clock::now();
  const auto quiet = 3 * s.options.heartbeat_interval;
  if (now - s.last_io_failure < quiet) return;
  const auto soon = now + s.options.io_retry_delay;
  std::size_t shortened = 0;
  for (const auto& t : s.retry_pauses) {
    if (t->expiry() <= soon) continue;
    t->expires_at(soon);
    ++shortened;
  }
  if (shortened == 0) return;
  s.report(severity::info, "runner", "",
           "the database has answered for " + std::to_string(quiet.count()) +
               " ms: " + std::to_string(shortened) +
               " runs waiting to claim their workflow again after an I/O error do so within "
               "io_retry_delay (" +
               std::to_string(s.options.io_retry_delay.count()) + " ms)");
}

inline asio::awaitable<void> lease_keeper(std::shared_ptr<engine_state> s) {
  const auto& o = s->options;
  using clock = std::chrono::steady_clock;
  auto renewed = clock::now();  // open() registered the executor just now
  failure_reporter problems("lease");
  std::unique_ptr<pg::connection> conn;
  // Each statement may take at most half the lease: a heartbeat that is late is no use.
  const auto limit = std::max(o.lease_timeout / 2, std::chrono::milliseconds(1));
  while (!s->stopping) {
    co_await pause(s, o.heartbeat_interval);
    if (s->stopping) break;
    std::string trouble;
    const auto oldest = s->committer.oldest_in_flight();
    if (oldest && clock::now() - *oldest > o.lease_timeout) {
      // Journal writes hang (a lock, a stuck server): a fresh heartbeat would keep every
      // other executor away from workflows this one cannot advance. (A large value is given
      // the time its size needs first: see oldest_in_flight.)
      trouble = "journal writes have been waiting for " +
                std::to_string(
                    std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - *oldest)
                        .count()) +
                " ms; the heartbeat is withheld so that the lease can run out";
    } else {
      try {
        if (!conn || !conn->is_open()) {
          conn.reset();
          // The heartbeat statement's deadline is the connection's own (and a late answer
          // cancels it on the server); only connecting needs a race, connect_timeout counts
          // in whole seconds.
          pg::connection_options deadline;
          deadline.statement_timeout = limit;
          deadline.cancel_grace = limit;
          auto connected = co_await within(
              pg::connection::connect(o.conninfo, s->st.catalog(), deadline), limit);
          if (!connected)
            throw error("connecting took longer than " + std::to_string(limit.count()) + " ms");
          conn = std::move(*connected);
        }
        fenced_write beat = s->st.executor_heartbeat(o.executor_id, s->instance);
        pg::statement beat_st = std::move(beat.st);
        const auto sent = clock::now();
        const pg::result r = co_await conn->run(std::move(beat_st));
        if (s->stopping) break;  // shutdown released the lease meanwhile
        if (const auto answer = store::first<store::heartbeat_answer>(r))
          s->clock.sample(sent, clock::now(), answer->server_time);
        if (beat.verdict(r).fenced_out()) {
          s->id_taken = true;
          s->lease_expired = true;
          s->counters.lease_expired.store(true, std::memory_order_relaxed);
          s->report(severity::error, "lease", "",
                    "another process registered under executor id '" + o.executor_id +
                        "': this engine stops its runs at their next step and takes no more work");
          co_return;
        }
        renewed = clock::now();
        shorten_retry_pauses(*s);
        if (s->lease_expired)
          s->report(severity::info, "lease", "", "lease renewed; this executor takes work again");
        s->lease_expired = false;
        s->counters.lease_expired.store(false, std::memory_order_relaxed);
        problems.ok(*s);
        continue;
      } catch (const std::exception& e) {
        trouble = "heartbeat failed: " + describe_io_failure(e);
        s->last_io_failure = clock::now();
      }
    }
    problems.failed(*s, trouble);
    if (!s->lease_expired && clock::now() - renewed > o.lease_timeout) {
      s->lease_expired = true;
      s->counters.lease_expired.store(true, std::memory_order_relaxed);
      s->report(severity::warning, "lease", "",
                "the lease could not be renewed for longer than lease_timeout (" +
                    std::to_string(o.lease_timeout.count()) +
                    " ms): runs stop at their next step, and another executor may take "
                    "their workflows over");
    }
  }
}

}  // namespace durable::detail
