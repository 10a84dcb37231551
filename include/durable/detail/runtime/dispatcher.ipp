// The dispatcher: claims queued workflows within their queues' limits and this engine's room.
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
      if (room == 0) break;  // a run that ends wakes the dispatcher (dispatch_lacked_room)
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
          run->traceparent = std::move(w.traceparent);
          if (w.deadline_in) run->deadline = s->clock.now() + *w.deadline_in;
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
    // No room now (this round's claims, or runs started meanwhile, filled it): whatever waits
    // in a queue starts only when a run here ends, and any run's end must then wake this loop.
    s->dispatch_lacked_room = s->room() == 0;
    timer->expires_after(s->options.poll_interval);
    asio::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

}  // namespace durable::detail
