// Durations as operators type them ("90s", "15m", "2h", "7d"): the `durable` program's options
// and the console's filters read them with this, and an application's own tools may too.
#pragma once

#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>
#include <system_error>

namespace durable {

/// "500ms", "90s", "15m" (or "15min"), "2h", "7d", "1w" as seconds; with `bare_seconds`, a plain
/// number is seconds too ("30"). Nullopt for anything else: no unit where one is needed, an
/// unknown unit, a negative, infinite or missing number.
inline std::optional<double> parse_duration(std::string_view text, bool bare_seconds) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end == text.data() || !std::isfinite(v) || v < 0) return std::nullopt;
  const std::string_view unit(end, std::size_t(text.data() + text.size() - end));
  if (unit.empty()) return bare_seconds ? std::optional<double>(v) : std::nullopt;
  if (unit == "s") return v;
  if (unit == "ms") return v / 1000;
  if (unit == "m" || unit == "min") return v * 60;
  if (unit == "h") return v * 3600;
  if (unit == "d") return v * 86400;
  if (unit == "w") return v * 7 * 86400;
  return std::nullopt;
}

}  // namespace durable
