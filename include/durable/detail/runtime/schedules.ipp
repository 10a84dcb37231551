// Firing schedules (docs/schedules.md), from the maintenance tick: one transaction locks the
// due schedules with SKIP LOCKED (executors that tick together take different ones), the plan
// of each is made here (detail/schedule_plan.hpp: slots, catch-up, the next slot), and one
// statement sent with the COMMIT advances them and enqueues their slots' workflows. Nothing is
// held per schedule between ticks: no timer, no coroutine, no memory.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "durable/detail/engine_state.hpp"
#include "durable/detail/schedule_plan.hpp"
#include "durable/store.hpp"

namespace durable::detail {

/// Schedules one tick fires at most (the rest stay due for the next tick).
inline constexpr std::int64_t schedules_per_tick = 500;

/// The firing's arrays for `plans` (a schedule whose plan failed is advanced to no next slot,
/// so it stops firing instead of failing at every tick; the report says why).
inline store::schedule_firing schedule_firing_of(
    const std::vector<std::pair<store::due_schedule_row, schedule_plan>>& plans) {
  store::schedule_firing f;
  for (const auto& [row, plan] : plans) {
    f.ids.push_back(row.id);
    f.expected.push_back(row.next_fire_at);
    f.next.push_back(plan.next);
    f.last_slot.push_back(plan.last_slot);
    f.fired.push_back(int(plan.run.size()));
    f.missed.push_back(int(plan.missed));
    f.late.push_back(int(plan.late));
    f.last_workflow.push_back(plan.run.empty() ? std::nullopt
                                               : std::optional(plan.run.back().workflow_id));
    for (const auto& slot : plan.run) {
      f.slot_schedules.push_back(row.id);
      f.slot_ids.push_back(slot.workflow_id);
      f.slot_locals.push_back(slot.local);
      f.slot_wake.push_back(slot.wake);
    }
  }
  return f;
}

/// What a firing round reports at most once a minute (a schedule that cannot fire stays due
/// and is looked at every tick).
struct schedule_reports {
  std::chrono::steady_clock::time_point last_plan_error{};
};

/// The plans of the due schedules `due`. A schedule whose plan fails (its zone is missing from
/// this host's tz database, say) is left out: it stays due, unchanged, for an executor that can
/// fire it or for a fix; the failure is reported (once a minute).
inline std::vector<std::pair<store::due_schedule_row, schedule_plan>> plan_schedules(
    engine_state& s, std::vector<store::due_schedule_row> due, schedule_reports& reports) {
  std::vector<std::pair<store::due_schedule_row, schedule_plan>> plans;
  plans.reserve(due.size());
  for (auto& row : due) {
    due_schedule d;
    d.id = row.id;
    d.cron = row.cron;
    d.time_zone = row.time_zone;
    d.policy = row.catch_up == "all"      ? catch_up::all
               : row.catch_up == "latest" ? catch_up::latest
                                          : catch_up::skip;
    d.catch_up_max = row.catch_up_max;
    d.late_after_ms = row.late_after_ms;
    d.jitter_ms = row.jitter_ms;
    d.end_at = row.end_at;
    d.next_fire_at = row.next_fire_at;
    schedule_plan plan;
    try {
      plan = plan_firing(d, row.now);
    } catch (const std::exception& e) {
      const auto now = std::chrono::steady_clock::now();
      if (now - reports.last_plan_error > std::chrono::minutes(1)) {
        reports.last_plan_error = now;
        s.report(severity::error, "schedules", "",
                 "schedule '" + row.id + "' cannot fire on this executor and stays due: " +
                     e.what() + "; fix it with engine::schedule(), or install the time zone");
      }
      continue;
    }
    if (plan.missed > 0)
      s.report(severity::warning, "schedules", "",
               "schedule '" + row.id + "': " + std::to_string(plan.missed) +
                   " slots were missed (found later than late_after; catch-up policy " +
                   row.catch_up + ")");
    plans.emplace_back(std::move(row), std::move(plan));
  }
  return plans;
}

/// One round of firing: up to schedules_per_tick due schedules, in one transaction. Completes
/// with the number of due schedules it locked (a full round means more may be due).
inline asio::awaitable<std::size_t> fire_round(std::shared_ptr<engine_state> s,
                                               schedule_reports& reports) {
  auto q = s->st.schedules_due(schedules_per_tick);  // named: GCC 12 (docs/concepts.md)
  auto c = co_await s->pool.acquire();
  pg::transaction tx(*c);
  auto due = co_await store::fetch(tx, std::move(q));
  const std::size_t locked = due.size();
  if (due.empty()) co_return 0;  // the ROLLBACK travels with the connection's next statement
  const auto plans = plan_schedules(*s, std::move(due), reports);
  if (plans.empty()) co_return locked;
  std::uint64_t missed = 0, late = 0;
  for (const auto& p : plans) {
    missed += std::uint64_t(p.second.missed);
    late += std::uint64_t(p.second.late);
  }
  // (A named vector: GCC 12 rejects a braced list inside this co_await, "array used as
  // initializer".)
  std::vector<pg::statement> fire;
  fire.push_back(s->st.schedules_fire(schedule_firing_of(plans)).st);
  auto r = co_await tx.commit(std::move(fire));
  const auto started = store::rows<store::taken_workflow>(r.at(0)).size();
  s->counters.schedule_slots_fired.add(started);
  s->counters.schedule_slots_missed.add(missed);
  s->counters.schedule_slots_late.add(late);
  co_return locked;
}

/// Fires what is due: rounds while they come back full, for at most half a tick (at least
/// 100 ms), so that a minute with thousands of slots fires within about a tick while the
/// takeover check of the next tick is delayed by half a tick at most. Other executors take the
/// rest meanwhile (SKIP LOCKED).
inline asio::awaitable<void> fire_schedules(std::shared_ptr<engine_state> s,
                                            schedule_reports& reports) {
  using clock = std::chrono::steady_clock;
  const auto budget =
      std::max<clock::duration>(s->options.heartbeat_interval / 2, std::chrono::milliseconds(100));
  const auto until = clock::now() + budget;
  do {
    if (co_await fire_round(s, reports) < std::size_t(schedules_per_tick)) co_return;
  } while (!s->stopping && clock::now() < until);
}

}  // namespace durable::detail
