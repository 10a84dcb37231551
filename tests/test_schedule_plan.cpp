// Firing plans of schedules (durable/detail/schedule_plan.hpp), without a server: which slots
// run after an outage under each catch-up policy, what counts as missed or late, and that the
// next slot follows from the slots, not from the moment of looking.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "durable/detail/schedule_plan.hpp"

using namespace durable;
using durable::detail::due_schedule;
using durable::detail::plan_firing;

namespace {

constexpr std::int64_t t0 = 1796083200;  // 2026-12-01T00:00:00Z, a Tuesday

due_schedule hourly(catch_up policy, std::int64_t next = t0) {
  due_schedule d;
  d.id = "sync";
  d.cron = "0 * * * *";
  d.time_zone = "UTC";
  d.policy = policy;
  d.catch_up_max = 100;
  d.late_after_ms = 60000;
  d.next_fire_at = next;
  return d;
}

std::string ids(const detail::schedule_plan& p) {
  std::string out;
  for (const auto& s : p.run) out += (out.empty() ? "" : " ") + s.workflow_id;
  return out;
}

}  // namespace

TEST_CASE("schedule plan: a slot found in time runs, and the next one follows it", "[schedule]") {
  for (auto policy : {catch_up::skip, catch_up::latest, catch_up::all}) {
    const auto p = plan_firing(hourly(policy), double(t0) + 0.4);
    REQUIRE(p.run.size() == 1);
    CHECK(p.run[0].workflow_id == "sync@2026-12-01T00:00:00+00:00");
    CHECK(p.run[0].local == "2026-12-01T00:00:00+00:00");
    CHECK_FALSE(p.run[0].late);
    CHECK(p.run[0].wake == double(t0));
    CHECK(p.missed == 0);
    CHECK(p.late == 0);
    REQUIRE(p.next);
    CHECK(*p.next == t0 + 3600);
    CHECK(p.last_slot == t0);
  }
}

TEST_CASE("schedule plan: after a 3-hour outage each policy does what it says", "[schedule]") {
  // Down from 00:00 to 03:00:30: slots 00:00, 01:00 and 02:00 are missed, 03:00 is in time.
  const double now = double(t0 + 3 * 3600 + 30);
  SECTION("skip: only the slot in time") {
    const auto p = plan_firing(hourly(catch_up::skip), now);
    CHECK(ids(p) == "sync@2026-12-01T03:00:00+00:00");
    CHECK(p.missed == 3);
    CHECK(p.late == 0);
    CHECK(*p.next == t0 + 4 * 3600);
  }
  SECTION("latest: a slot in time supersedes the missed ones") {
    const auto p = plan_firing(hourly(catch_up::latest), now);
    CHECK(ids(p) == "sync@2026-12-01T03:00:00+00:00");
    CHECK(p.missed == 3);
  }
  SECTION("all: every missed slot, oldest first, then the one in time") {
    const auto p = plan_firing(hourly(catch_up::all), now);
    CHECK(ids(p) ==
          "sync@2026-12-01T00:00:00+00:00 sync@2026-12-01T01:00:00+00:00 "
          "sync@2026-12-01T02:00:00+00:00 sync@2026-12-01T03:00:00+00:00");
    CHECK(p.missed == 0);
    CHECK(p.late == 3);
    CHECK(p.run[0].late);
    CHECK_FALSE(p.run[3].late);
    CHECK(*p.next == t0 + 4 * 3600);
  }
}

TEST_CASE("schedule plan: back between two slots, latest runs the most recent missed one",
          "[schedule]") {
  // Down from 00:00 to 02:30: 00:00, 01:00 and 02:00 missed, none in time.
  const double now = double(t0 + 2 * 3600 + 1800);
  const auto latest = plan_firing(hourly(catch_up::latest), now);
  CHECK(ids(latest) == "sync@2026-12-01T02:00:00+00:00");
  CHECK(latest.late == 1);
  CHECK(latest.missed == 2);
  CHECK(*latest.next == t0 + 3 * 3600);
  const auto skip = plan_firing(hourly(catch_up::skip), now);
  CHECK(skip.run.empty());
  CHECK(skip.missed == 3);
  CHECK(*skip.last_slot == t0 + 2 * 3600);
  CHECK(*skip.next == t0 + 3 * 3600);
}

TEST_CASE("schedule plan: all is bounded by catch_up_max, keeping the most recent", "[schedule]") {
  auto d = hourly(catch_up::all);
  d.catch_up_max = 2;
  const auto p = plan_firing(d, double(t0 + 10 * 3600 + 1800));  // 00:00..10:00 missed
  CHECK(ids(p) == "sync@2026-12-01T09:00:00+00:00 sync@2026-12-01T10:00:00+00:00");
  CHECK(p.missed == 9);
  CHECK(p.late == 2);
}

TEST_CASE("schedule plan: a slot at or after end_at does not run, and none follows", "[schedule]") {
  auto d = hourly(catch_up::all);
  d.end_at = t0 + 2 * 3600;  // 00:00 and 01:00 only
  const auto p = plan_firing(d, double(t0 + 5 * 3600));
  CHECK(ids(p) == "sync@2026-12-01T00:00:00+00:00 sync@2026-12-01T01:00:00+00:00");
  CHECK_FALSE(p.next);
}

TEST_CASE("schedule plan: jitter delays a slot the same way on every executor", "[schedule]") {
  auto d = hourly(catch_up::skip);
  d.jitter_ms = 30000;
  const auto a = plan_firing(d, double(t0) + 1);
  const auto b = plan_firing(d, double(t0) + 2);
  REQUIRE(a.run.size() == 1);
  CHECK(a.run[0].wake == b.run[0].wake);
  CHECK(a.run[0].wake >= double(t0));
  CHECK(a.run[0].wake < double(t0) + 30);
  // Another slot gets another delay (FNV-1a of the id).
  CHECK(detail::slot_jitter_ms("sync@2026-12-01T00:00:00+00:00", 30000) !=
        detail::slot_jitter_ms("sync@2026-12-01T01:00:00+00:00", 30000));
}

TEST_CASE("schedule plan: two days of every-second slots are walked within a bound", "[schedule]") {
  due_schedule d = hourly(catch_up::skip);
  d.cron = "* * * * * *";
  const std::int64_t now = t0 + 2 * 86400;
  const auto p = plan_firing(d, double(now));
  // The walk stops at max_slots_walked and starts again near now: the 61 slots within
  // late_after (60 s) run; every other one of the 172 801 is counted missed, none twice.
  CHECK(p.run.size() == 61);
  CHECK(p.run.front().at.time_since_epoch().count() == now - 60);
  CHECK(p.missed == 172801 - 61);
  CHECK(*p.next == now + 1);
  CHECK(*p.last_slot == now);
  // catch_up::all runs the most recent catch_up_max missed ones, not the oldest.
  d.policy = catch_up::all;
  const auto all = plan_firing(d, double(now));
  REQUIRE(all.run.size() == 100 + 61);
  CHECK(all.run.front().at.time_since_epoch().count() == now - 60 - 100);
  CHECK(all.run.front().late);
  CHECK(all.late == 100);
  CHECK(all.missed == 172801 - 161);
}

TEST_CASE("schedule plan: slots of a local time zone carry its offset", "[schedule]") {
  due_schedule d = hourly(catch_up::skip);
  d.cron = "0 3 * * *";
  d.time_zone = "Europe/Berlin";
  d.next_fire_at = t0 + 2 * 3600;  // 03:00 CET = 02:00 UTC
  const auto p = plan_firing(d, double(t0 + 2 * 3600 + 5));
  CHECK(ids(p) == "sync@2026-12-01T03:00:00+01:00");
  CHECK(*p.next == t0 + 2 * 3600 + 86400);
}
