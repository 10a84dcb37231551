// Cron expressions for schedules: parsing, and the next time one fires on the wall clock of an
// IANA time zone (read from the tz database of the system, /usr/share/zoneinfo).
//
// Syntax. Five fields, `minute hour day-of-month month day-of-week`, or six with a leading
// `second` field; fields are separated by spaces or tabs. Each field is a list of items
// separated by ',' (no empty item); an item is
//   *        every value of the field          a        one value
//   a-b      a to b (a <= b)                   */n      every n-th value from the first
//   a-b/n    every n-th value from a to b      a/n      every n-th value from a to the last
// with n >= 1. Ranges: second 0-59, minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or
// JAN..DEC, day-of-week 0-7 or SUN..SAT, where 0 and 7 are both Sunday (names are
// case-insensitive and may be range ends: MON-FRI; for day-of-week, `*` and `a/n` run to
// Saturday, 6, and `5-7` is Friday to Sunday). Or one macro alone: @yearly and @annually
// (0 0 1 1 *), @monthly (0 0 1 * *), @weekly (0 0 * * 0), @daily and @midnight (0 0 * * *),
// @hourly (0 * * * *). Without a seconds field a slot is at second 0.
//
// Days. When both day-of-month and day-of-week are restricted (neither field is exactly `*`), a
// day matches if EITHER matches, as in classic cron: "0 0 13 * 5" fires on every 13th and on
// every Friday. When one of them is `*`, only the other counts. (A step such as `*/2` is a
// restriction: only the bare `*` leaves a field unrestricted.)
//
// Time zones. Fields match the local wall clock of the zone. A local time that does not exist
// (the gap when clocks spring forward) fires at the next valid instant, the transition itself:
// in Europe/Berlin on 2026-03-29, "30 2 * * *" fires at 03:00 CEST (01:00 UTC); several slots in
// one gap (02:00 and 02:30 of "*/30 * * * *") fire once, at that instant. A local time that
// occurs twice (clocks fall back) fires once, at its first occurrence: on 2026-10-25 in Berlin
// "30 2 * * *" fires at 02:30 CEST (00:30 UTC), and the slots of the repeated hour are not fired
// again in its second pass. The zone's rules are those of its file in /usr/share/zoneinfo:
// Debian's libdate-tz reads the transitions listed there (through 2037) and not the rule at the
// end of the file, so after 2037 a zone keeps its last offset (no daylight saving time).
#pragma once

#include <bitset>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "durable/detail/config.hpp"
#include "durable/error.hpp"

namespace durable {

/// A cron expression or time zone that cannot be used; what() names the expression, the field
/// (number and name), the bad text and why.
class invalid_schedule : public error {
public:
  using error::error;
};

/// A parsed cron expression (syntax and meaning at the top of this header).
class cron_expression {
public:
  /// Five fields (minute hour day-of-month month day-of-week) or six with a leading seconds
  /// field; or a macro @yearly @annually @monthly @weekly @daily @midnight @hourly. Ranges a-b,
  /// steps */n a-b/n a/n, lists a,b,c, names JAN..DEC and SUN..SAT (case-insensitive), 0 or 7 =
  /// Sunday. Throws invalid_schedule.
  [[nodiscard]] static DURABLE_DECL cron_expression parse(std::string_view text);

  /// The expression as given to parse().
  [[nodiscard]] const std::string& text() const noexcept { return text_; }
  /// Whether it has a seconds field (otherwise every slot is at second 0).
  [[nodiscard]] bool has_seconds() const noexcept { return has_seconds_; }

  /// The first slot strictly after `after` on the wall clock of `zone` (IANA name, e.g.
  /// "Europe/Berlin", or "UTC"). nullopt when no slot exists within 8 years (e.g.
  /// "0 0 30 2 *"). Throws invalid_schedule for an unknown zone. Skips field by field (month,
  /// day, hour, minute, second): microseconds, not a scan.
  [[nodiscard]] DURABLE_DECL std::optional<std::chrono::sys_seconds> next_after(
      std::chrono::sys_seconds after, std::string_view zone) const;

private:
  cron_expression() = default;

  std::bitset<60> seconds_{}, minutes_{};
  std::bitset<24> hours_{};
  std::bitset<32> days_{};       // 1-31
  std::bitset<13> months_{};     // 1-12
  std::bitset<7> weekdays_{};    // 0 = Sunday
  bool dom_restricted_ = false;  // day-of-month is not `*`
  bool dow_restricted_ = false;  // day-of-week is not `*`
  bool has_seconds_ = false;
  std::string text_;
};

/// Throws invalid_schedule if `zone` is not a known IANA zone name (the names are those of the
/// tz database in /usr/share/zoneinfo).
DURABLE_DECL void check_time_zone(std::string_view zone);

/// The slot as local ISO 8601 with its offset in `zone`, e.g. "2026-12-01T03:00:00+01:00"
/// ("+00:00" for UTC, never "Z"); used in workflow ids: nightly@2026-12-01T03:00:00+01:00.
/// Throws invalid_schedule for an unknown zone.
[[nodiscard]] DURABLE_DECL std::string format_slot(std::chrono::sys_seconds slot,
                                                   std::string_view zone);

}  // namespace durable

#if defined(DURABLE_HEADER_ONLY)
#include "durable/impl/cron.ipp"
#endif
