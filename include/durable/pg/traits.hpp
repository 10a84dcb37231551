// Conversions between C++ values and PostgreSQL's text format, for parameters and results.
// Values always travel as bound parameters; nothing here builds SQL text.
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "durable/pg/error.hpp"

namespace durable::pg {

/// Binary data, sent and read as `bytea`.
using bytea = std::vector<std::byte>;

/// A bound parameter in text format; std::nullopt is SQL NULL.
using param_value = std::optional<std::string>;

template <class T>
struct param_traits;  // static param_value to_param(const T&)

template <class T>
struct result_traits;  // static T from_text(std::string_view text); NULL handled by callers

namespace detail {
template <class T>
inline constexpr bool is_integer_v =
    std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char>;

template <class T>
std::string number_to_text(T v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  return std::string(buf, end);
}
}  // namespace detail

template <>
struct param_traits<bool> {
  static param_value to_param(bool v) { return std::string(v ? "t" : "f"); }
};

template <class T>
  requires detail::is_integer_v<T>
struct param_traits<T> {
  static param_value to_param(T v) { return detail::number_to_text(v); }
};

template <std::floating_point T>
struct param_traits<T> {
  static param_value to_param(T v) {
    if (std::isnan(v)) return std::string("NaN");
    if (std::isinf(v)) return std::string(v > 0 ? "Infinity" : "-Infinity");
    return detail::number_to_text(v);
  }
};

template <>
struct param_traits<std::string> {
  static param_value to_param(const std::string& v) { return v; }
};
template <>
struct param_traits<std::string_view> {
  static param_value to_param(std::string_view v) { return std::string(v); }
};
template <>
struct param_traits<const char*> {
  static param_value to_param(const char* v) {
    return v ? param_value(std::string(v)) : std::nullopt;
  }
};
template <std::size_t N>
struct param_traits<char[N]> {
  static param_value to_param(const char (&v)[N]) { return std::string(v); }
};
template <>
struct param_traits<std::nullopt_t> {
  static param_value to_param(std::nullopt_t) { return std::nullopt; }
};
template <>
struct param_traits<std::nullptr_t> {
  static param_value to_param(std::nullptr_t) { return std::nullopt; }
};
template <class T>
struct param_traits<std::optional<T>> {
  static param_value to_param(const std::optional<T>& v) {
    return v ? param_traits<T>::to_param(*v) : std::nullopt;
  }
};
template <>
struct param_traits<bytea> {
  static param_value to_param(const bytea& v) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string s = "\\x";
    s.reserve(2 + v.size() * 2);
    for (std::byte b : v) {
      s.push_back(hex[std::to_integer<unsigned>(b) >> 4]);
      s.push_back(hex[std::to_integer<unsigned>(b) & 0xf]);
    }
    return s;
  }
};

/// A one-dimensional array literal ({"a",NULL,"b"}), for binding a list as one parameter
/// (cast it in SQL: $1::text[], $2::bigint[]). Elements are always quoted; empty
/// optionals are NULL.
template <class T>
struct param_traits<std::vector<T>> {
  static param_value to_param(const std::vector<T>& items) {
    std::string out = "{";
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) out += ',';
      const param_value v = param_traits<T>::to_param(items[i]);
      if (!v) {
        out += "NULL";
        continue;
      }
      out += '"';
      for (char c : *v) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      out += '"';
    }
    return out + "}";
  }
};

/// Converts any supported value to a bound parameter.
template <class T>
param_value to_param(const T& v) {
  return param_traits<std::remove_cvref_t<T>>::to_param(v);
}

// ---- results ----------------------------------------------------------------------------

template <>
struct result_traits<std::string> {
  static std::string from_text(std::string_view s) { return std::string(s); }
};
template <>
struct result_traits<std::string_view> {
  static std::string_view from_text(std::string_view s) { return s; }
};
template <>
struct result_traits<bool> {
  static bool from_text(std::string_view s) {
    if (s == "t") return true;
    if (s == "f") return false;
    throw conversion_error("cannot read '" + std::string(s) + "' as bool");
  }
};

template <class T>
  requires(detail::is_integer_v<T> || std::floating_point<T>)
struct result_traits<T> {
  static T from_text(std::string_view s) {
    if constexpr (std::floating_point<T>) {
      if (s == "NaN") return std::numeric_limits<T>::quiet_NaN();
      if (s == "Infinity") return std::numeric_limits<T>::infinity();
      if (s == "-Infinity") return -std::numeric_limits<T>::infinity();
    }
    T v{};
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size())
      throw conversion_error("cannot read '" + std::string(s) + "' as a number of type " +
                             (std::floating_point<T> ? "floating point" : "integer") +
                             (ec == std::errc::result_out_of_range ? " (out of range)" : ""));
    return v;
  }
};

template <>
struct result_traits<bytea> {
  static bytea from_text(std::string_view s) {
    if (s.size() < 2 || s[0] != '\\' || s[1] != 'x' || s.size() % 2 != 0)
      throw conversion_error("cannot read bytea: expected hex format (bytea_output = 'hex')");
    auto nibble = [](char c) -> unsigned {
      if (c >= '0' && c <= '9') return unsigned(c - '0');
      if (c >= 'a' && c <= 'f') return unsigned(c - 'a' + 10);
      if (c >= 'A' && c <= 'F') return unsigned(c - 'A' + 10);
      throw conversion_error("cannot read bytea: invalid hex digit");
    };
    bytea out;
    out.reserve((s.size() - 2) / 2);
    for (std::size_t i = 2; i < s.size(); i += 2)
      out.push_back(std::byte(nibble(s[i]) << 4 | nibble(s[i + 1])));
    return out;
  }
};

}  // namespace durable::pg
