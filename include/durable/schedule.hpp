// Schedules: a cron expression in a time zone that starts a workflow at each of its slots
// (docs/schedules.md). A schedule is a row of the `schedules` table; executors fire the due ones
// from their maintenance tick, and each slot's workflow id is "<schedule id>@<slot>", so a slot
// starts at most one workflow whatever the number of executors, kills and restarts.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace durable {

/// What a schedule does with the slots that passed while no executor fired it (an outage, a
/// schedule created with a start time in the past). A slot is *missed* when it is found more
/// than `late_after` after its time; slots found in time always run.
enum class catch_up {
  skip,    ///< missed slots do not run (they are counted)
  latest,  ///< the most recent missed slot runs, unless a slot in time runs anyway
  all,     ///< every missed slot runs, the most recent `catch_up_max` of them
};

[[nodiscard]] constexpr std::string_view to_string(catch_up c) noexcept {
  switch (c) {
    case catch_up::skip:
      return "skip";
    case catch_up::latest:
      return "latest";
    case catch_up::all:
      return "all";
  }
  return "skip";
}

/// Options of engine::schedule(). `id`, `cron` and `workflow` are required. Like the other
/// option structs (durable/options.hpp) it holds views, not strings: GCC 12 corrupts class
/// temporaries with owning members created inside a co_await expression. schedule() copies
/// them before it returns.
struct schedule_options {
  /// The schedule's name; its slots' workflows are "<id>@<slot>". No '@'.
  std::string_view id{};
  /// Five fields (minute hour day month weekday), or six with seconds first, or @hourly,
  /// @daily, @weekly, @monthly, @yearly (durable/cron.hpp).
  std::string_view cron{};
  /// IANA time zone whose wall clock the expression follows ("Europe/Berlin"); see
  /// docs/schedules.md for what happens at daylight-saving changes.
  std::string_view time_zone = "UTC";
  /// The registered workflow name each slot starts.
  std::string_view workflow{};
  /// The queue the slots' workflows are enqueued in, and their priority there.
  std::string_view queue = "default";
  int priority = 0;
  /// The slot (local ISO 8601 with its offset, "2026-12-01T03:00:00+01:00", a std::string)
  /// becomes the workflow's first argument, before the schedule's arguments.
  bool pass_slot = false;
  catch_up policy = catch_up::skip;
  /// With catch_up::all, at most this many missed slots run (the most recent ones).
  int catch_up_max = 100;
  /// A slot fired later than this after its time counts as missed (and, if it runs, as late).
  std::chrono::milliseconds late_after{60000};
  /// Each slot's workflow is due at its slot plus a delay in [0, jitter), the same for every
  /// executor (it derives from the workflow id): spreads the load of many schedules.
  std::chrono::milliseconds jitter{0};
  /// Each slot's workflow's deadline, this long after it is due (0: none).
  std::chrono::milliseconds timeout{0};
  /// No slot before `start_at` or at or after `end_at` (Unix time; unset: no bound).
  std::optional<std::chrono::sys_seconds> start_at{};
  std::optional<std::chrono::sys_seconds> end_at{};
  /// Created paused (an update keeps the schedule's current pause).
  bool paused = false;
};

static_assert(std::is_trivially_copyable_v<schedule_options>);

/// A schedule as the database holds it (engine::list_schedules, engine::get_schedule).
struct schedule_info {
  std::string id, cron, time_zone, workflow, queue;
  std::string inputs;  ///< the arguments, a JSON array
  catch_up policy = catch_up::skip;
  bool paused = false;
  std::optional<std::chrono::sys_seconds> next_fire_at, last_slot_at, start_at, end_at;
  std::optional<std::string> last_workflow_id, last_status;
  std::int64_t fired = 0, missed = 0, late = 0;
};

}  // namespace durable
