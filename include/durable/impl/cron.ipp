// cron_expression, check_time_zone() and format_slot(): included at the end of durable/cron.hpp
// when header-only, by durable/src.hpp otherwise.
#pragma once

// Debian's libdate-tz is built to read the system's tz database (/usr/share/zoneinfo); the
// layout of date::time_zone depends on it, so a program compiled without the CMake target's
// definitions must agree with the library.
#if !defined(USE_OS_TZDB)
#define USE_OS_TZDB 1
#endif

#include <date/date.h>
#include <date/tz.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

#include "durable/cron.hpp"

namespace durable {
namespace detail {

struct cron_field {
  const char* name;
  int min, max;  // the values a field accepts
  int last;      // where `*` and `a/n` end (6 for day-of-week, whose 7 is Sunday again)
  const std::array<std::string_view, 12>* names;  // names[i] is the value min + i
};

inline constexpr std::array<std::string_view, 12> cron_month_names{
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
inline constexpr std::array<std::string_view, 12> cron_day_names{"SUN", "MON", "TUE", "WED",
                                                                 "THU", "FRI", "SAT"};

// In the order of a six-field expression; a five-field one starts at the minute.
inline constexpr std::array<cron_field, 6> cron_fields{{
    {"second", 0, 59, 59, nullptr},
    {"minute", 0, 59, 59, nullptr},
    {"hour", 0, 23, 23, nullptr},
    {"day-of-month", 1, 31, 31, nullptr},
    {"month", 1, 12, 12, &cron_month_names},
    {"day-of-week", 0, 7, 6, &cron_day_names},
}};

inline bool cron_iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'a' && x <= 'z') x = char(x - 'a' + 'A');
    if (y >= 'a' && y <= 'z') y = char(y - 'a' + 'A');
    if (x != y) return false;
  }
  return true;
}

/// Parses one field of an expression into the values it allows; the error names it.
class cron_field_parser {
public:
  cron_field_parser(std::string_view expression, int number, const cron_field& field)
      : expression_(expression), number_(number), field_(field) {}

  std::vector<int> parse(std::string_view text) const {
    std::vector<int> values;
    std::size_t pos = 0;
    for (;;) {
      const std::size_t comma = text.find(',', pos);
      const std::string_view item = text.substr(pos, comma == text.npos ? text.npos : comma - pos);
      if (item.empty()) fail("empty item in the list \"" + std::string(text) + "\"");
      parse_item(item, values);
      if (comma == text.npos) break;
      pos = comma + 1;
    }
    return values;
  }

private:
  [[noreturn]] void fail(const std::string& why) const {
    throw invalid_schedule("cron expression \"" + std::string(expression_) + "\": field " +
                           std::to_string(number_) + " (" + field_.name + "): " + why);
  }

  std::string range_text() const {
    std::string r = std::to_string(field_.min) + "-" + std::to_string(field_.max);
    if (field_.names) {
      const auto& n = *field_.names;
      r +=
          " or " + std::string(n[0]) + ".." + std::string(n[std::size_t(field_.last - field_.min)]);
    }
    return r;
  }

  /// A number (at most 9 digits) or, where the field has names, a name.
  int value(std::string_view text, bool names_allowed) const {
    if (text.find_first_not_of("0123456789") == text.npos) {
      if (text.size() > 9) fail("\"" + std::string(text) + "\" is out of range " + range_text());
      int v = 0;
      for (char c : text) v = v * 10 + (c - '0');
      return v;
    }
    if (names_allowed && field_.names) {
      for (std::size_t i = 0; i < field_.names->size(); ++i) {
        if (!(*field_.names)[i].empty() && cron_iequal((*field_.names)[i], text))
          return field_.min + int(i);
      }
      fail("\"" + std::string(text) + "\" is not a number or a name of " + range_text());
    }
    fail("\"" + std::string(text) + "\" is not a number (" + range_text() + ")");
  }

  int in_range(std::string_view text, bool names_allowed) const {
    const int v = value(text, names_allowed);
    if (v < field_.min || v > field_.max)
      fail("\"" + std::string(text) + "\" is out of range " + range_text());
    return v;
  }

  void parse_item(std::string_view item, std::vector<int>& values) const {
    std::string_view base = item;
    int step = 1;
    bool stepped = false;
    if (const auto slash = item.find('/'); slash != item.npos) {
      base = item.substr(0, slash);
      const std::string_view s = item.substr(slash + 1);
      if (s.empty() || base.empty())
        fail("\"" + std::string(item) + "\" needs a range and a step, as in */5 or 0-30/10");
      step = value(s, false);
      if (step == 0) fail("step 0 in \"" + std::string(item) + "\": a step must be at least 1");
      stepped = true;
    }
    int first = 0, last = 0;
    if (base == "*") {
      first = field_.min;
      last = field_.last;
    } else if (const auto dash = base.find('-'); dash != base.npos) {
      if (dash == 0 || dash + 1 == base.size())
        fail("\"" + std::string(base) + "\" is not a range a-b");
      first = in_range(base.substr(0, dash), true);
      last = in_range(base.substr(dash + 1), true);
      if (first > last)
        fail("range \"" + std::string(base) + "\" is reversed: its start must not exceed its end");
    } else {
      first = in_range(base, true);
      last = stepped ? std::max(first, field_.last) : first;
    }
    for (int v = first; v <= last; v += step) values.push_back(v);
  }

  std::string_view expression_;
  int number_;
  const cron_field& field_;
};

template <std::size_t N>
void cron_set(std::bitset<N>& bits, const std::vector<int>& values, int wrap = -1) {
  for (int v : values) bits.set(std::size_t(v == wrap ? 0 : v));
}

/// The first set bit at or after `from`, or -1.
template <std::size_t N>
int cron_next_set(const std::bitset<N>& bits, int from) {
  for (int i = from; i < int(N); ++i)
    if (bits.test(std::size_t(i))) return i;
  return -1;
}

inline const date::time_zone* cron_zone(std::string_view zone) {
  try {
    return date::locate_zone(zone);
  } catch (const std::exception& e) {
    throw invalid_schedule("unknown time zone \"" + std::string(zone) +
                           "\": time zones are IANA names from the tz database in "
                           "/usr/share/zoneinfo (Debian package tzdata), such as "
                           "\"Europe/Berlin\", \"America/New_York\" or \"UTC\" (" +
                           e.what() + ")");
  }
}

}  // namespace detail

DURABLE_DECL cron_expression cron_expression::parse(std::string_view text) {
  std::vector<std::string_view> words;
  for (std::size_t pos = 0;;) {
    pos = text.find_first_not_of(" \t", pos);
    if (pos == text.npos) break;
    const std::size_t end = std::min(text.find_first_of(" \t", pos), text.size());
    words.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  const auto prefix = "cron expression \"" + std::string(text) + "\": ";

  if (!words.empty() && words[0].front() == '@') {
    static constexpr std::pair<std::string_view, std::string_view> macros[] = {
        {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
        {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
        {"@hourly", "0 * * * *"}};
    for (const auto& [name, expansion] : macros) {
      if (!detail::cron_iequal(name, words[0])) continue;
      if (words.size() != 1)
        throw invalid_schedule(prefix + "the macro " + std::string(name) + " stands alone, yet " +
                               std::to_string(words.size() - 1) + " more field(s) follow it");
      cron_expression e = parse(expansion);
      e.text_ = std::string(text);
      return e;
    }
    throw invalid_schedule(prefix + "unknown macro \"" + std::string(words[0]) +
                           "\" (known: @yearly @annually @monthly @weekly @daily @midnight "
                           "@hourly)");
  }
  if (words.size() != 5 && words.size() != 6)
    throw invalid_schedule(prefix +
                           "expected 5 fields (minute hour day-of-month month "
                           "day-of-week) or 6 (second minute hour day-of-month month "
                           "day-of-week), found " +
                           std::to_string(words.size()));

  cron_expression e;
  e.text_ = std::string(text);
  e.has_seconds_ = words.size() == 6;
  const std::size_t skip = e.has_seconds_ ? 0 : 1;  // a five-field expression has no seconds
  if (!e.has_seconds_) e.seconds_.set(0);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::size_t f = i + skip;
    const auto values =
        detail::cron_field_parser(text, int(i + 1), detail::cron_fields[f]).parse(words[i]);
    switch (f) {
      case 0:
        detail::cron_set(e.seconds_, values);
        break;
      case 1:
        detail::cron_set(e.minutes_, values);
        break;
      case 2:
        detail::cron_set(e.hours_, values);
        break;
      case 3:
        detail::cron_set(e.days_, values);
        e.dom_restricted_ = words[i] != "*";
        break;
      case 4:
        detail::cron_set(e.months_, values);
        break;
      default:
        detail::cron_set(e.weekdays_, values, 7);
        e.dow_restricted_ = words[i] != "*";
        break;
    }
  }
  return e;
}

DURABLE_DECL std::optional<std::chrono::sys_seconds> cron_expression::next_after(
    std::chrono::sys_seconds after, std::string_view zone) const {
  const date::time_zone* tz = detail::cron_zone(zone);
  using date::days;
  const auto begin = tz->to_local(after);
  const date::local_days limit = date::floor<days>(begin) + days{8 * 366};

  const auto day_matches = [this](const date::year_month_day& ymd) {
    const bool dom = days_.test(unsigned(ymd.day()));
    const bool dow = weekdays_.test(date::weekday{date::local_days{ymd}}.c_encoding());
    if (dom_restricted_ && dow_restricted_) return dom || dow;
    return dom && dow;  // an unrestricted field has every bit set
  };

  // Searches the local wall clock strictly after `from`, skipping field by field: an unmatched
  // month moves to the next month, an unmatched day to the next day, and so on.
  const auto next_local = [&](date::local_seconds from) -> std::optional<date::local_seconds> {
    from += std::chrono::seconds{1};
    const date::local_days from_day = date::floor<days>(from);
    const date::year_month_day ymd{from_day};
    const date::hh_mm_ss<std::chrono::seconds> tod{from - from_day};
    int y = int(ymd.year());
    unsigned mo = unsigned(ymd.month()), d = unsigned(ymd.day());
    int h = int(tod.hours().count()), mi = int(tod.minutes().count()),
        s = int(tod.seconds().count());
    for (;;) {
      if (s >= 60) s = 0, ++mi;
      if (mi >= 60) mi = 0, ++h;
      if (h >= 24) h = 0, ++d;
      if (mo > 12) mo = 1, ++y;
      if (d > unsigned((date::year{y} / date::month{mo} / date::last).day())) {
        d = 1;
        if (++mo > 12) mo = 1, ++y;
      }
      const date::year_month_day day{date::year{y}, date::month{mo}, date::day{d}};
      if (date::local_days{day} > limit) return std::nullopt;
      if (!months_.test(mo)) {
        ++mo, d = 1, h = mi = s = 0;
        continue;
      }
      if (!day_matches(day)) {
        ++d, h = mi = s = 0;
        continue;
      }
      if (const int nh = detail::cron_next_set(hours_, h); nh < 0) {
        ++d, h = mi = s = 0;
        continue;
      } else if (nh != h) {
        h = nh, mi = s = 0;
      }
      if (const int nm = detail::cron_next_set(minutes_, mi); nm < 0) {
        ++h, mi = s = 0;
        continue;
      } else if (nm != mi) {
        mi = nm, s = 0;
      }
      if (const int ns = detail::cron_next_set(seconds_, s); ns < 0) {
        ++mi, s = 0;
        continue;
      } else {
        s = ns;
      }
      return date::local_days{day} + std::chrono::hours{h} + std::chrono::minutes{mi} +
             std::chrono::seconds{s};
    }
  };

  // A local time in a gap maps to the transition (to_sys with choose::earliest returns it); one
  // that occurs twice maps to its first occurrence, which is not after `after` when `after` is
  // in the second pass: then the search goes on from the end of the repeated interval, whose
  // slots have all fired in the first pass.
  for (auto from = begin;;) {
    const auto local = next_local(from);
    if (!local) return std::nullopt;
    const auto at = tz->to_sys(*local, date::choose::earliest);
    if (at > after) return std::chrono::sys_seconds{at.time_since_epoch()};
    const auto info = tz->get_info(*local);
    from = *local;
    if (info.result == date::local_info::ambiguous) {
      const date::local_seconds repeated_end{
          (info.first.end + info.first.offset).time_since_epoch()};
      from = std::max(from, repeated_end - std::chrono::seconds{1});
    }
  }
}

DURABLE_DECL void check_time_zone(std::string_view zone) { (void)detail::cron_zone(zone); }

DURABLE_DECL std::string format_slot(std::chrono::sys_seconds slot, std::string_view zone) {
  const date::time_zone* tz = detail::cron_zone(zone);
  const auto offset = tz->get_info(slot).offset;
  const date::local_seconds local{slot.time_since_epoch() + offset};
  const date::local_days day = date::floor<date::days>(local);
  const date::year_month_day ymd{day};
  const date::hh_mm_ss<std::chrono::seconds> tod{local - day};
  const long long off = offset.count() < 0 ? -offset.count() : offset.count();
  char buf[80];
  int n = std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d%c%02lld:%02lld",
                        int(ymd.year()), unsigned(ymd.month()), unsigned(ymd.day()),
                        int(tod.hours().count()), int(tod.minutes().count()),
                        int(tod.seconds().count()), offset.count() < 0 ? '-' : '+', off / 3600,
                        off / 60 % 60);
  if (off % 60 != 0) n += std::snprintf(buf + n, sizeof buf - std::size_t(n), ":%02lld", off % 60);
  return std::string(buf, std::size_t(n));
}

}  // namespace durable
