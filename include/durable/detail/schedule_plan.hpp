// What firing a due schedule does, decided without I/O: which of the slots that have come run
// (by the catch-up policy), which are missed or late, and the next slot. The maintenance tick
// (detail/runtime/schedules.ipp) applies the plan in one statement; the tests check it without a
// server. Every next slot is computed from the previous slot, never from the moment an executor
// happened to look.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "durable/cron.hpp"
#include "durable/schedule.hpp"

namespace durable::detail {

/// A due schedule as schedules_due reads it (times in Unix seconds).
struct due_schedule {
  std::string id, cron, time_zone;
  catch_up policy = catch_up::skip;
  int catch_up_max = 100;
  std::int64_t late_after_ms = 60000, jitter_ms = 0;
  std::optional<std::int64_t> end_at;
  std::int64_t next_fire_at = 0;
};

struct planned_slot {
  std::chrono::sys_seconds at;
  std::string workflow_id;  ///< "<schedule>@<local ISO 8601 with offset>"
  std::string local;        ///< the slot as local ISO 8601 (the pass_slot argument)
  double wake = 0;          ///< when its workflow is due (Unix seconds: slot + jitter)
  bool late = false;        ///< fired more than late_after after its time
};

struct schedule_plan {
  std::vector<planned_slot> run;          ///< in slot order
  std::optional<std::int64_t> next;       ///< the next slot after now (none: no slot left)
  std::optional<std::int64_t> last_slot;  ///< the latest slot that came (run or missed)
  std::int64_t missed = 0;                ///< slots that came and do not run
  std::int64_t late = 0;                  ///< slots that run late
};

/// The most slots one firing walks through from the next slot (an every-second schedule down
/// for a day has 86 400): a few milliseconds at most. Beyond it the slots not walked are
/// counted missed from the walk's pace, and catch_up::all walks again from a point just before
/// the most recent missed slots it must run.
inline constexpr std::size_t max_slots_walked = 10000;

/// The workflow id of schedule `id`'s slot `local` (format_slot's text).
inline std::string slot_workflow_id(const std::string& id, const std::string& local) {
  return id + "@" + local;
}

/// A delay in [0, jitter_ms) milliseconds that depends on the workflow id only (FNV-1a).
inline std::int64_t slot_jitter_ms(const std::string& workflow_id, std::int64_t jitter_ms) {
  if (jitter_ms <= 0) return 0;
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : workflow_id) h = (h ^ c) * 1099511628211ull;
  return std::int64_t(h % std::uint64_t(jitter_ms));
}

inline planned_slot make_slot(const std::string& schedule_id, const std::string& zone,
                              std::chrono::sys_seconds at, std::int64_t jitter_ms) {
  planned_slot p;
  p.at = at;
  p.local = format_slot(at, zone);
  p.workflow_id = slot_workflow_id(schedule_id, p.local);
  p.wake = double(at.time_since_epoch().count()) +
           double(slot_jitter_ms(p.workflow_id, jitter_ms)) / 1000.0;
  return p;
}

/// The plan for schedule `d` at the server's time `now` (Unix seconds). Throws
/// invalid_schedule if its expression or zone cannot be used any more (a zone removed from
/// the system's tz database): the caller reports it and leaves the schedule as it is.
inline schedule_plan plan_firing(const due_schedule& d, double now) {
  using std::chrono::sys_seconds;
  const cron_expression expr = cron_expression::parse(d.cron);
  schedule_plan plan;
  const auto ends = [&](sys_seconds s) {
    return d.end_at && s.time_since_epoch().count() >= *d.end_at;
  };
  const auto secs = [](sys_seconds s) { return s.time_since_epoch().count(); };
  const double late_from = now - double(d.late_after_ms) / 1000.0;
  std::vector<sys_seconds> on_time, missed;
  // Walks from `from` (a slot) through the slots that have come, up to `limit` of them; true
  // if it stopped at the limit.
  const auto walk = [&](std::optional<sys_seconds> cur, std::size_t limit) {
    std::size_t walked = 0;
    for (; cur && double(secs(*cur)) <= now && !ends(*cur);
         cur = expr.next_after(*cur, d.time_zone)) {
      if (++walked > limit) return true;
      (double(secs(*cur)) >= late_from ? on_time : missed).push_back(*cur);
      plan.last_slot = secs(*cur);
    }
    return false;
  };
  const sys_seconds first{std::chrono::seconds(d.next_fire_at)};
  if (walk(first, max_slots_walked) && !missed.empty()) {
    // Too many slots came to look at each: the ones not walked are missed (counted from the
    // walk's pace), and the walk starts again near now, so that the slots in time and the most
    // recent missed ones are the ones seen.
    const double pace = std::max(1.0, double(secs(missed.back()) - secs(first)) /
                                          double(std::max<std::size_t>(1, missed.size() - 1)));
    const std::size_t before = missed.size();
    const double restart = late_from - pace * double(std::max(d.catch_up_max, 1) + 1);
    const auto again = expr.next_after(sys_seconds(std::chrono::seconds(std::int64_t(
                                           std::max(restart, double(secs(missed.back())))))),
                                       d.time_zone);
    plan.missed +=
        std::max<std::int64_t>(0, std::int64_t((restart - double(secs(missed.back()))) / pace));
    on_time.clear();
    missed.clear();
    (void)walk(again, max_slots_walked);
    plan.missed += std::int64_t(before);
  }
  std::optional<sys_seconds> cur =
      plan.last_slot
          ? expr.next_after(sys_seconds(std::chrono::seconds(*plan.last_slot)), d.time_zone)
          : std::optional<sys_seconds>(first);
  if (cur && !ends(*cur)) plan.next = secs(*cur);

  std::vector<sys_seconds> late_runs;
  switch (d.policy) {
    case catch_up::skip:
      break;
    case catch_up::latest:
      if (on_time.empty() && !missed.empty()) late_runs.push_back(missed.back());
      break;
    case catch_up::all: {
      const std::size_t keep = std::min(missed.size(), std::size_t(std::max(0, d.catch_up_max)));
      late_runs.assign(missed.end() - std::ptrdiff_t(keep), missed.end());
      break;
    }
  }
  plan.missed += std::int64_t(missed.size() - late_runs.size());
  plan.late = std::int64_t(late_runs.size());
  for (auto at : late_runs) {
    plan.run.push_back(make_slot(d.id, d.time_zone, at, d.jitter_ms));
    plan.run.back().late = true;
  }
  for (auto at : on_time) plan.run.push_back(make_slot(d.id, d.time_zone, at, d.jitter_ms));
  return plan;
}

/// The first slot of `expr` at or after `from` (Unix seconds), before `end_at`; none if none.
inline std::optional<std::int64_t> first_slot_from(const cron_expression& expr,
                                                   const std::string& zone, std::int64_t from,
                                                   std::optional<std::int64_t> end_at) {
  const auto s = expr.next_after(std::chrono::sys_seconds(std::chrono::seconds(from - 1)), zone);
  if (!s || (end_at && s->time_since_epoch().count() >= *end_at)) return std::nullopt;
  return s->time_since_epoch().count();
}

}  // namespace durable::detail
