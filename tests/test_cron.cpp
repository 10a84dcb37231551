// Cron expressions (durable/cron.hpp): the syntax, the next slots, the day-of-month/day-of-week
// rule, daylight saving time transitions, the 8-year bound, errors and format_slot().
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "durable/cron.hpp"

// The cases' own namespace: the files of one executable compile as one translation unit in
// scripts/test (docs/development.md, "Unity builds").
namespace cron_cases {

namespace {

using std::chrono::sys_seconds;

/// Parses "2026-03-29T01:00:00Z" (UTC).
sys_seconds utc(const std::string& text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  REQUIRE(std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%dZ", &y, &mo, &d, &h, &mi, &s) == 6);
  const std::chrono::year_month_day ymd{std::chrono::year{y}, std::chrono::month(unsigned(mo)),
                                        std::chrono::day(unsigned(d))};
  REQUIRE(ymd.ok());
  return sys_seconds{std::chrono::sys_days{ymd}} + std::chrono::hours{h} +
         std::chrono::minutes{mi} + std::chrono::seconds{s};
}

/// The inverse of utc(), written independently of the library's format_slot().
std::string utc_text(sys_seconds t) {
  const auto day = std::chrono::floor<std::chrono::days>(t);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss<std::chrono::seconds> tod{t - day};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02dZ", int(ymd.year()),
                unsigned(ymd.month()), unsigned(ymd.day()), int(tod.hours().count()),
                int(tod.minutes().count()), int(tod.seconds().count()));
  return buf;
}

/// The next `n` slots of `expression` in `zone` after `start`, as UTC text.
std::vector<std::string> slots(const std::string& expression, const std::string& zone,
                               const std::string& start, int n) {
  const auto e = durable::cron_expression::parse(expression);
  std::vector<std::string> out;
  auto t = utc(start);
  for (int i = 0; i < n; ++i) {
    const auto next = e.next_after(t, zone);
    if (!next) {
      out.push_back("none");
      break;
    }
    REQUIRE(*next > t);
    out.push_back(utc_text(*next));
    t = *next;
  }
  return out;
}

/// parse() refuses `expression`; returns its message.
std::string refusal(const std::string& expression) {
  try {
    (void)durable::cron_expression::parse(expression);
  } catch (const durable::invalid_schedule& e) {
    return e.what();
  }
  FAIL("parse(\"" << expression << "\") was accepted");
  return {};
}

struct row {
  const char* expression;
  const char* start;
  std::vector<std::string> next;
};

void check_table(const std::vector<row>& table, const std::string& zone = "UTC") {
  for (const auto& r : table) {
    INFO(r.expression << " after " << r.start << " in " << zone);
    CHECK(slots(r.expression, zone, r.start, int(r.next.size())) == r.next);
  }
}

}  // namespace

TEST_CASE("cron: every syntax form gives the right next slots", "[cron]") {
  check_table({
      {"* * * * *",
       "2026-01-01T00:00:00Z",
       {"2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z", "2026-01-01T00:03:00Z"}},
      {"5 * * * *",
       "2026-01-01T00:05:00Z",
       {"2026-01-01T01:05:00Z", "2026-01-01T02:05:00Z", "2026-01-01T03:05:00Z"}},
      {"*/15 * * * *",
       "2026-01-01T00:07:00Z",
       {"2026-01-01T00:15:00Z", "2026-01-01T00:30:00Z", "2026-01-01T00:45:00Z"}},
      {"10-12 3 * * *",
       "2026-01-01T00:00:00Z",
       {"2026-01-01T03:10:00Z", "2026-01-01T03:11:00Z", "2026-01-01T03:12:00Z"}},
      {"0-30/10 9 * * *",
       "2026-01-01T09:00:00Z",
       {"2026-01-01T09:10:00Z", "2026-01-01T09:20:00Z", "2026-01-01T09:30:00Z"}},
      {"50/4 23 * * *",
       "2026-01-01T00:00:00Z",
       {"2026-01-01T23:50:00Z", "2026-01-01T23:54:00Z", "2026-01-01T23:58:00Z"}},
      {"0 1,13,22 * * *",
       "2026-01-01T13:00:00Z",
       {"2026-01-01T22:00:00Z", "2026-01-02T01:00:00Z", "2026-01-02T13:00:00Z"}},
      {"0,30 8-9 * * *",
       "2026-01-01T08:00:00Z",
       {"2026-01-01T08:30:00Z", "2026-01-01T09:00:00Z", "2026-01-01T09:30:00Z"}},
      {"0 0 31 * *",
       "2026-01-31T00:00:00Z",  // months without a 31st are skipped
       {"2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z", "2026-07-31T00:00:00Z"}},
      {"0 12 1 */4 *",
       "2026-01-15T00:00:00Z",
       {"2026-05-01T12:00:00Z", "2026-09-01T12:00:00Z", "2027-01-01T12:00:00Z"}},
      {"59 23 31 12 *",
       "2026-06-01T00:00:00Z",
       {"2026-12-31T23:59:00Z", "2027-12-31T23:59:00Z", "2028-12-31T23:59:00Z"}},
      {"  0\t6  * *  1-5 ",
       "2026-01-02T06:00:00Z",  // Friday; spaces and tabs separate fields
       {"2026-01-05T06:00:00Z", "2026-01-06T06:00:00Z", "2026-01-07T06:00:00Z"}},
  });
}

TEST_CASE("cron: names, 7 is Sunday, macros and the seconds field", "[cron]") {
  check_table({
      {"0 9 * jan,Jul mon",
       "2026-01-26T09:00:00Z",
       {"2026-07-06T09:00:00Z", "2026-07-13T09:00:00Z", "2026-07-20T09:00:00Z"}},
      {"0 9 * * MON-FRI",
       "2026-01-09T09:00:00Z",  // a Friday
       {"2026-01-12T09:00:00Z", "2026-01-13T09:00:00Z", "2026-01-14T09:00:00Z"}},
      {"0 0 * FEB-mar Sat",
       "2026-03-28T00:00:00Z",
       {"2027-02-06T00:00:00Z", "2027-02-13T00:00:00Z", "2027-02-20T00:00:00Z"}},
      {"0 0 * * 7",
       "2026-01-01T00:00:00Z",  // Sundays
       {"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z", "2026-01-18T00:00:00Z"}},
      {"0 0 * * 0",
       "2026-01-01T00:00:00Z",
       {"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z", "2026-01-18T00:00:00Z"}},
      {"0 0 * * 5-7",
       "2026-01-01T00:00:00Z",  // Friday to Sunday
       {"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z"}},
      {"@yearly",
       "2026-01-01T00:00:00Z",
       {"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"}},
      {"@annually",
       "2026-05-01T00:00:00Z",
       {"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"}},
      {"@monthly",
       "2026-01-01T00:00:00Z",
       {"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"}},
      {"@weekly",
       "2026-01-01T00:00:00Z",
       {"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z", "2026-01-18T00:00:00Z"}},
      {"@daily",
       "2026-01-01T00:00:00Z",
       {"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z"}},
      {"@MIDNIGHT",
       "2026-01-01T12:00:00Z",
       {"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z"}},
      {"@hourly",
       "2026-01-01T00:00:00Z",
       {"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"}},
      {"*/20 * * * * *",
       "2026-01-01T00:00:00Z",
       {"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
      {"30 0 12 * * *",
       "2026-01-01T12:00:30Z",
       {"2026-01-02T12:00:30Z", "2026-01-03T12:00:30Z", "2026-01-04T12:00:30Z"}},
      {"15,45 59 23 31 12 *",
       "2026-12-31T23:59:15Z",
       {"2026-12-31T23:59:45Z", "2027-12-31T23:59:15Z", "2027-12-31T23:59:45Z"}},
  });
  const auto five = durable::cron_expression::parse("0 0 * * *");
  const auto six = durable::cron_expression::parse("0 0 0 * * *");
  const auto macro = durable::cron_expression::parse("@daily");
  CHECK_FALSE(five.has_seconds());
  CHECK(six.has_seconds());
  CHECK_FALSE(macro.has_seconds());
  CHECK(macro.text() == "@daily");
  CHECK(five.text() == "0 0 * * *");
}

TEST_CASE("cron: day-of-month and day-of-week, either when both are restricted", "[cron]") {
  check_table({
      // The 13th or a Friday: Fri 2 Jan, Fri 9 Jan, Tue 13 Jan.
      {"0 0 13 * 5",
       "2026-01-01T00:00:00Z",
       {"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z", "2026-01-13T00:00:00Z"}},
      // Day-of-week `*`: only the 13th counts.
      {"0 0 13 * *",
       "2026-01-01T00:00:00Z",
       {"2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z", "2026-03-13T00:00:00Z"}},
      // Day-of-month `*`: only Fridays count.
      {"0 0 * * 5",
       "2026-01-01T00:00:00Z",
       {"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z", "2026-01-16T00:00:00Z"}},
      // A step restricts: odd days or Mondays (Sun 11, Mon 12, Tue 13 of January 2026).
      {"0 0 */2 * 1",
       "2026-01-09T00:00:00Z",
       {"2026-01-11T00:00:00Z", "2026-01-12T00:00:00Z", "2026-01-13T00:00:00Z"}},
      {"0 0 1 * 1",
       "2026-01-27T00:00:00Z",
       {"2026-02-01T00:00:00Z", "2026-02-02T00:00:00Z", "2026-02-09T00:00:00Z"}},
  });
}

TEST_CASE("cron: spring forward and fall back in Europe/Berlin", "[cron]") {
  // 2026-03-29 02:00 CET becomes 03:00 CEST at 01:00 UTC; 2026-10-25 03:00 CEST becomes 02:00
  // CET at 01:00 UTC, so 02:00-03:00 local is lived twice (00:00-01:00 and 01:00-02:00 UTC).
  check_table(
      {
          {"30 2 * * *",
           "2026-03-27T12:00:00Z",
           {"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
          {"*/30 * * * *",
           "2026-03-29T00:00:00Z",  // 02:00 and 02:30 collapse into 03:00 CEST
           {"2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"}},
          {"30 2 * * *",
           "2026-10-23T12:00:00Z",
           {"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
          // The repeated hour fires once: 02:00 and 02:30 CEST, then 03:00 CET.
          {"*/30 * * * *",
           "2026-10-24T23:45:00Z",
           {"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z"}},
          // Every second: the last of the first pass (02:59:59 CEST), then 03:00:00 CET.
          {"* * * * * *", "2026-10-25T00:59:58Z", {"2026-10-25T00:59:59Z", "2026-10-25T02:00:00Z"}},
          // From inside the second pass (02:10 CET) the next slot is 03:00 CET.
          {"* * * * * *", "2026-10-25T01:10:00Z", {"2026-10-25T02:00:00Z", "2026-10-25T02:00:01Z"}},
          {"*/30 * * * *",
           "2026-10-25T01:10:00Z",
           {"2026-10-25T02:00:00Z", "2026-10-25T02:30:00Z"}},
      },
      "Europe/Berlin");
}

TEST_CASE("cron: spring forward and fall back in America/New_York", "[cron]") {
  // 2026-03-08 02:00 EST becomes 03:00 EDT at 07:00 UTC; 2026-11-01 02:00 EDT becomes 01:00
  // EST at 06:00 UTC, so 01:00-02:00 local is lived twice (05:00-06:00 and 06:00-07:00 UTC).
  check_table(
      {
          {"30 2 * * *",
           "2026-03-06T12:00:00Z",
           {"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
          {"*/30 * * * *",
           "2026-03-08T06:00:00Z",  // 02:00, 02:30 (and 03:00) fire once
           {"2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
          {"30 2 * * *",
           "2026-10-30T12:00:00Z",  // 02:30 is not repeated here
           {"2026-10-31T06:30:00Z", "2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z"}},
          {"30 1 * * *",
           "2026-10-30T12:00:00Z",  // 01:30 is, and fires in EDT only
           {"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
          {"*/30 * * * *",
           "2026-11-01T04:45:00Z",
           {"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T07:00:00Z"}},
      },
      "America/New_York");
}

TEST_CASE("cron: leap days, impossible dates and the 8-year bound", "[cron]") {
  check_table({
      {"0 0 29 2 *",
       "2026-01-01T00:00:00Z",
       {"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z"}},
      // 2100 is not a leap year: 2096 to 2104 is the longest wait, 8 years.
      {"0 0 29 2 *", "2096-03-01T00:00:00Z", {"2104-02-29T00:00:00Z"}},
      {"0 0 30 2 *", "2026-01-01T00:00:00Z", {"none"}},
      {"0 0 31 4,6,9,11 *", "2026-01-01T00:00:00Z", {"none"}},
  });
  // Skipping field by field: thousands of searches over 8 years take far less than a second,
  // where a scan minute by minute would take minutes.
  const auto never = durable::cron_expression::parse("0 0 30 2 *");
  const auto begin = std::chrono::steady_clock::now();
  for (int i = 0; i < 2000; ++i)
    CHECK_FALSE(never.next_after(utc("2026-01-01T00:00:00Z") + std::chrono::hours{i}, "UTC"));
  CHECK(std::chrono::steady_clock::now() - begin < std::chrono::seconds{2});
}

TEST_CASE("cron: bad expressions are refused, naming the field", "[cron]") {
  auto m = refusal("0 25 * * *");
  CHECK_THAT(m, Catch::Contains("0 25 * * *") && Catch::Contains("field 2 (hour)") &&
                    Catch::Contains("25") && Catch::Contains("0-23"));
  m = refusal("0 0 * *");
  CHECK_THAT(m, Catch::Contains("found 4") && Catch::Contains("expected 5 fields"));
  m = refusal("0 0 0 0 * * *");
  CHECK_THAT(m, Catch::Contains("found 7"));
  CHECK_THAT(refusal(""), Catch::Contains("found 0"));
  CHECK_THAT(refusal("@fortnightly"), Catch::Contains("unknown macro \"@fortnightly\""));
  CHECK_THAT(refusal("@daily 5"), Catch::Contains("@daily stands alone"));
  CHECK_THAT(refusal("0 0 * FOO *"), Catch::Contains("field 4 (month)") &&
                                         Catch::Contains("\"FOO\"") && Catch::Contains("JAN..DEC"));
  CHECK_THAT(refusal("0 0 * * MONDAY"),
             Catch::Contains("field 5 (day-of-week)") && Catch::Contains("\"MONDAY\""));
  CHECK_THAT(refusal("JAN 0 * * *"),
             Catch::Contains("field 1 (minute)") && Catch::Contains("\"JAN\" is not a number"));
  CHECK_THAT(refusal("*/0 * * * *"),
             Catch::Contains("field 1 (minute)") && Catch::Contains("step 0"));
  CHECK_THAT(refusal("5-1 * * * *"),
             Catch::Contains("field 1 (minute)") && Catch::Contains("\"5-1\" is reversed"));
  CHECK_THAT(refusal("1,,2 * * * *"),
             Catch::Contains("field 1 (minute)") && Catch::Contains("empty item"));
  CHECK_THAT(refusal("0 0 * * 1,"),
             Catch::Contains("field 5 (day-of-week)") && Catch::Contains("empty item"));
  CHECK_THAT(refusal("60 * * * * *"),
             Catch::Contains("field 1 (second)") && Catch::Contains("0-59"));
  CHECK_THAT(refusal("0 0 0 * * *x"), Catch::Contains("field 6 (day-of-week)"));
  CHECK_THAT(refusal("0 0 0 * *"),
             Catch::Contains("field 3 (day-of-month)") && Catch::Contains("1-31"));
  CHECK_THAT(refusal("0 0 * 13 *"), Catch::Contains("field 4 (month)"));
  CHECK_THAT(refusal("0 0 * * 8"),
             Catch::Contains("field 5 (day-of-week)") && Catch::Contains("0-7"));
  CHECK_THAT(refusal("1- * * * *"), Catch::Contains("is not a range"));
  CHECK_THAT(refusal("/5 * * * *"), Catch::Contains("needs a range and a step"));
  CHECK_THAT(refusal("*/x * * * *"), Catch::Contains("\"x\" is not a number"));
  CHECK_THAT(refusal("L * * * *"), Catch::Contains("field 1 (minute)"));
  CHECK_THAT(refusal("99999999999 * * * *"), Catch::Contains("out of range"));
}

TEST_CASE("cron: unknown time zones are refused, naming the zone", "[cron]") {
  CHECK_NOTHROW(durable::check_time_zone("Europe/Berlin"));
  CHECK_NOTHROW(durable::check_time_zone("UTC"));
  CHECK_NOTHROW(durable::check_time_zone("America/New_York"));
  for (const char* zone : {"Mars/Olympus_Mons", "", "europe/berlin", "../zoneinfo/UTC"}) {
    INFO(zone);
    try {
      durable::check_time_zone(zone);
      FAIL("check_time_zone accepted \"" << zone << "\"");
    } catch (const durable::invalid_schedule& e) {
      CHECK_THAT(e.what(), Catch::Contains("\"" + std::string(zone) + "\"") &&
                               Catch::Contains("/usr/share/zoneinfo"));
    }
  }
  const auto e = durable::cron_expression::parse("@hourly");
  CHECK_THROWS_AS(e.next_after(utc("2026-01-01T00:00:00Z"), "Mars/Olympus_Mons"),
                  durable::invalid_schedule);
  CHECK_THROWS_WITH(durable::format_slot(utc("2026-01-01T00:00:00Z"), "Nowhere"),
                    Catch::Contains("\"Nowhere\""));
}

TEST_CASE("cron: format_slot gives the local time and its offset", "[cron]") {
  CHECK(durable::format_slot(utc("2026-12-01T02:00:00Z"), "Europe/Berlin") ==
        "2026-12-01T03:00:00+01:00");
  CHECK(durable::format_slot(utc("2026-07-01T01:00:00Z"), "Europe/Berlin") ==
        "2026-07-01T03:00:00+02:00");
  // Both passes of the repeated hour, told apart by their offsets.
  CHECK(durable::format_slot(utc("2026-10-25T00:30:00Z"), "Europe/Berlin") ==
        "2026-10-25T02:30:00+02:00");
  CHECK(durable::format_slot(utc("2026-10-25T01:30:00Z"), "Europe/Berlin") ==
        "2026-10-25T02:30:00+01:00");
  CHECK(durable::format_slot(utc("2026-03-29T01:00:00Z"), "Europe/Berlin") ==
        "2026-03-29T03:00:00+02:00");
  CHECK(durable::format_slot(utc("2026-01-01T00:00:05Z"), "UTC") == "2026-01-01T00:00:05+00:00");
  CHECK(durable::format_slot(utc("2026-03-08T07:00:00Z"), "America/New_York") ==
        "2026-03-08T03:00:00-04:00");
  CHECK(durable::format_slot(utc("2026-12-31T23:59:59Z"), "America/New_York") ==
        "2026-12-31T18:59:59-05:00");
  CHECK(durable::format_slot(utc("2026-06-01T00:00:00Z"), "Asia/Kolkata") ==
        "2026-06-01T05:30:00+05:30");
}

}  // namespace cron_cases
