// Maintenance: takes over the workflows of executors whose lease ran out, re-claims this
// executor's own workflows that run nowhere here, wakes the due ones.
#pragma once

#include <asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "durable/detail/runtime/runner.ipp"
#include "durable/detail/runtime/schedules.ipp"
#include "durable/detail/runtime/within.ipp"

namespace durable::detail {

// ---- maintenance: takeover and orphans ------------------------------------------------------

inline asio::awaitable<void> maintenance(std::shared_ptr<engine_state> s) {
  auto timer = s->maintenance;
  failure_reporter problems("maintenance");
  failure_reporter schedule_problems("schedules");
  schedule_reports schedule_notes;
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
    // Schedules whose slot has come (runtime/schedules.ipp).
    if (s->options.fire_schedules && !s->stopping) {
      try {
        co_await fire_schedules(s, schedule_notes);
        schedule_problems.ok(*s);
      } catch (const std::exception& e) {
        schedule_problems.failed(*s, "firing schedules failed: " + describe_io_failure(e) +
                                         "; trying again at the next tick");
      }
    }
  }
}

}  // namespace durable::detail
