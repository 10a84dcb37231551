// The engine's background parts, each started by open() under the supervisor:
//   dispatcher   claims queued workflows within their queues' limits and this engine's room
//   listener     LISTEN for enqueues (polling in the dispatcher is the fallback)
//   lease keeper heartbeats on a connection of its own, never behind claims; stops the
//                runs at their next step when the lease could not be renewed in time
//   maintenance  takes over the workflows of executors whose lease ran out, and re-claims
//                this executor's own workflows that run nowhere here
#pragma once

#include <asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "durable/detail/runner.hpp"

namespace durable::detail {

template <class T>
asio::awaitable<std::optional<T>> within_impl(asio::awaitable<T> op,
                                              std::chrono::milliseconds limit) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, limit);
  auto wait = timer.async_wait(asio::use_awaitable);
  auto race = std::move(op) || std::move(wait);
  auto r = co_await std::move(race);
  if (r.index() == 0) co_return std::move(std::get<0>(r));
  co_return std::nullopt;
}

/// Runs `op` unless `limit` passes first; then `op` is cancelled and nullopt returned. (A
/// plain function: GCC 12 mishandles a prvalue passed straight to a coroutine in co_await.)
template <class T>
asio::awaitable<std::optional<T>> within(asio::awaitable<T> op, std::chrono::milliseconds limit) {
  return within_impl(std::move(op), limit);
}

// ---- registration ---------------------------------------------------------------------------

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
                                         s->instance, std::int64_t(o.lease_timeout.count()), force);
      auto c = co_await s->pool.acquire();
      const auto registered = co_await store::fetch_one(*c, std::move(reg));
      if (registered) co_return;
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
      // other executor away from workflows this one cannot advance.
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
        const pg::result r = co_await conn->run(std::move(beat_st));
        if (s->stopping) break;  // shutdown released the lease meanwhile
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
        if (s->lease_expired)
          s->report(severity::info, "lease", "", "lease renewed; this executor takes work again");
        s->lease_expired = false;
        s->counters.lease_expired.store(false, std::memory_order_relaxed);
        problems.ok(*s);
        continue;
      } catch (const std::exception& e) {
        trouble = "heartbeat failed: " + describe_io_failure(e);
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

// ---- maintenance: takeover and orphans ------------------------------------------------------

inline asio::awaitable<void> maintenance(std::shared_ptr<engine_state> s) {
  auto timer = s->maintenance;
  failure_reporter problems("maintenance");
  // Our own unfinished workflows that ran nowhere here at the previous tick.
  std::set<std::string, std::less<>> suspected;
  for (;;) {
    timer->expires_after(s->options.heartbeat_interval);
    asio::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (s->stopping) co_return;
    if (s->lease_expired) continue;  // no new work while the lease is in doubt
    try {
      std::vector<std::string> ids;
      std::size_t woken = 0;
      std::set<std::string, std::less<>> orphans;
      {
        std::vector<pg::statement> batch;
        const std::int64_t room = std::int64_t(std::min<std::size_t>(s->room(), claim_batch));
        batch.push_back(s->st
                            .workflows_take_over(s->options.executor_id,
                                                 std::int64_t(s->options.lease_timeout.count()),
                                                 s->names, room, s->versions)
                            .st);
        batch.push_back(s->st.workflows_owned(s->options.executor_id, s->versions).st);
        // Waiting workflows past their deadline end as cancelled.
        batch.push_back(s->st.workflows_expire(std::int64_t(claim_batch)).st);
        // The polling fallback of cancel()'s notification: runs here that were cancelled.
        const std::vector<std::string> here = s->busy_ids();
        batch.push_back(s->st.workflows_cancelled(here).st);
        // Sleepers whose wake-up is due: retries after a long backoff, resumed and forked
        // workflows (between ticks, notifications and local timers wake the dispatcher).
        batch.push_back(
            s->st.workflows_wake(s->options.executor_id, s->names, s->versions, room, here).st);
        // Retention: finished workflows past their age, a small batch per tick.
        const bool retain = s->options.retention.count() > 0;
        if (retain)
          batch.push_back(s->st
                              .workflows_delete_finished(std::int64_t(s->options.retention.count()),
                                                         std::int64_t(std::max<std::size_t>(
                                                             1, s->options.retention_batch)))
                              .st);
        auto c = co_await s->pool.acquire();
        auto r = co_await c->run_batch(std::move(batch));
        if (retain) {
          const auto deleted = store::rows<store::taken_workflow>(r[5]).size();
          if (deleted > 0)
            s->report(severity::info, "retention", "",
                      "deleted " + std::to_string(deleted) + " finished workflows older than " +
                          std::to_string(s->options.retention.count()) + " ms");
        }
        for (auto& w : store::rows<store::taken_workflow>(r[0])) ids.push_back(std::move(w.id));
        for (auto& w : store::rows<store::owned_workflow>(r[1]))
          if (s->claimable_here(w.id, w.name)) orphans.insert(std::move(w.id));
        for (auto& w : store::rows<store::taken_workflow>(r[2]))
          s->report(severity::info, "maintenance", w.id,
                    "cancelled: its deadline passed while it waited");
        for (auto& w : store::rows<store::cancelled_workflow>(r[3]))
          s->cancel_local(w.status, "cancelled by an operator (engine::cancel)", true, w.epoch);
        woken = store::rows<store::taken_workflow>(r[4]).size();
        for (auto& w : store::rows<store::taken_workflow>(r[4])) ids.push_back(std::move(w.id));
      }
      if (ids.size() > woken) s->counters.workflows_taken_over.add(ids.size() - woken);
      if (ids.size() > woken)
        s->report(severity::info, "maintenance", "",
                  "took over " + std::to_string(ids.size() - woken) +
                      " workflows of executors whose lease ran out");
      if (woken > 0)
        s->report(severity::info, "maintenance", "",
                  "woke " + std::to_string(woken) + " workflows whose wake-up was due");
      // An orphan is claimed only if the previous tick saw it too: one whose start or
      // dispatch has committed but whose launch here is a moment away (the reply not read
      // yet) is not an orphan, and claiming it would run it twice.
      // Ours, and running nowhere here: counted as recovered once the claim starts them.
      std::set<std::string, std::less<>> recovering;
      for (const auto& id : orphans)
        if (suspected.contains(id) && ids.size() < s->room() && !s->busy(id)) {
          ids.push_back(id);
          recovering.insert(id);
        }
      suspected = std::move(orphans);
      std::erase_if(ids, [&](const std::string& id) { return s->busy(id); });
      if (!ids.empty() && !s->stopping)
        (void)co_await claim_runs(s, std::move(ids), "maintenance", &recovering);
      problems.ok(*s);
    } catch (const std::exception& e) {
      problems.failed(*s, "takeover and orphan check failed: " + describe_io_failure(e) +
                              "; trying again at the next tick");
    }
  }
}

// ---- dispatcher -----------------------------------------------------------------------------

inline asio::awaitable<void> dispatcher(std::shared_ptr<engine_state> s) {
  auto timer = s->dispatch_timer;
  failure_reporter problems("dispatcher");
  for (;;) {
    if (s->stopping) co_return;
    s->wake_pending = false;
    bool more = false;
    if (s->wake_timers && !s->lease_expired && s->room() > 0) {
      // Due wake-ups this engine heard of (a local unload timer, a resume, retry or fork
      // notification); maintenance looks for the others at every heartbeat.
      s->wake_timers = false;
      try {
        std::vector<std::string> ids;
        {
          auto wake = s->st.workflows_wake(
              s->options.executor_id, s->names, s->versions,
              std::int64_t(std::min<std::size_t>(s->room(), claim_batch)), s->busy_ids());
          auto c = co_await s->pool.acquire();
          auto woken = co_await store::fetch(*c, std::move(wake));
          for (auto& w : woken) ids.push_back(std::move(w.id));
        }
        if (!ids.empty()) {
          more = true;
          // A full batch: more may be due; look again next round instead of at the next tick.
          if (ids.size() == std::min<std::size_t>(s->room(), claim_batch)) s->wake_timers = true;
          (void)co_await claim_runs(s, std::move(ids), "timers");
        }
        problems.ok(*s);
      } catch (const std::exception& e) {
        problems.failed(*s, "waking due workflows failed: " + describe_io_failure(e) +
                                "; trying again at the next poll");
      }
    }
    for (std::size_t i = 0; i < s->queues.size() && !s->stopping && !s->lease_expired; ++i) {
      const std::size_t room =
          std::min(s->room(), std::max<std::size_t>(1, s->options.dispatch_batch));
      if (room == 0) break;  // a run that ends wakes the dispatcher
      const std::string queue = s->queues[i];
      try {
        // Lock, claim and commit in one round trip: the claim runs in its own snapshot, taken
        // after the queue's lock is held, so its counts include every earlier claim.
        std::vector<pg::statement> batch;
        batch.push_back(s->st.queue_lock(queue).st);
        batch.push_back(
            s->st.queue_dispatch(s->options.executor_id, queue, s->names, int(room), s->versions)
                .st);
        std::vector<pg::result> r;
        {
          auto c = co_await s->pool.acquire();
          auto tx = c->begin();
          r = co_await tx.commit(std::move(batch));
        }
        auto claimed = store::rows<store::dispatched_workflow>(r[1]);
        if (!claimed.empty()) s->counters.workflows_started.add(1, claimed.size());
        for (auto& w : claimed) {
          auto run = std::make_shared<run_state>();
          run->id = std::move(w.id);
          run->name = std::move(w.name);
          run->epoch = w.epoch;
          run->generation = w.generation;
          if (w.deadline_in) run->deadline = unix_seconds() + *w.deadline_in;
          auto inputs = nlohmann::json::parse(w.inputs);
          launch(s, std::move(run), std::move(inputs));
        }
        more = more || claimed.size() == room;
        problems.ok(*s);
      } catch (const std::exception& e) {
        if (s->stopping) co_return;  // shutdown cancelled it: nothing failed
        problems.failed(*s, "dispatching queue '" + queue + "' failed: " + describe_io_failure(e) +
                                "; trying again at the next poll");
      }
    }
    if ((more || s->wake_pending) && s->room() > 0 && !s->lease_expired) continue;
    timer->expires_after(s->options.poll_interval);
    asio::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

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
