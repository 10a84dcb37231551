// The store's handling of names: the schema name checked and quoted as an SQL identifier, a
// list of strings as one text[] parameter, and the hash that keys the migration lock and long
// channel names. Machinery of durable/store.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "durable/detail/fnv.hpp"
#include "durable/error.hpp"
#include "durable/pg/connection.hpp"

namespace durable::detail {

/// How printable_name writes what it escapes: as text for a terminal (`\x1b`, `\u202e`), or
/// inside an already encoded JSON text (`\u001b`: the JSON value stays the same).
enum class printable_style { text, json };

/// `s` made safe to print on a terminal, on one line: what a terminal would act on instead of
/// showing is escaped. C0 controls and DEL as \xNN (newline, tab and carriage return as \n,
/// \t, \r); C1 controls (U+0080..U+009F), the bidirectional controls (U+061C, U+200E, U+200F,
/// U+202A..U+202E, U+2066..U+2069), the line and paragraph separators (U+2028, U+2029) and the
/// characters that show nothing (U+115F, U+1160, U+180E, U+200B..U+200D, U+2060..U+2065,
/// U+3164, U+FEFF) as \uXXXX; bytes that are not UTF-8 as \xNN. Everything else, backslashes
/// included, is kept. With printable_style::json, `s` is JSON text (as nlohmann dumps it) and every
/// escape is a JSON one; invalid UTF-8 becomes \ufffd. The CLI's output and the library's messages
/// about names use it.
inline std::string printable_name(std::string_view s,
                                  printable_style style = printable_style::text) {
  static constexpr char hex[] = "0123456789abcdef";
  const bool json = style == printable_style::json;
  std::string out;
  out.reserve(s.size());
  auto u_escape = [&](std::uint32_t cp) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += hex[(cp >> shift) & 15];
  };
  auto x_escape = [&](unsigned char c) {
    if (json) {
      u_escape(c < 0x80 ? c : 0xfffd);
      return;
    }
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c >= 0x20 && c != 0x7f)
        out += char(c);
      else if (json && (c == '\n' || c == '\t' || c == '\r'))
        out += char(c);  // whitespace between tokens (nlohmann escapes them inside strings)
      else if (c == '\n')
        out += "\\n";
      else if (c == '\t')
        out += "\\t";
      else if (c == '\r')
        out += "\\r";
      else
        x_escape(c);
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, then the code point, refusing overlong
    // forms, surrogates and values past U+10FFFF (each byte of a bad one is escaped alone).
    const std::size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    std::uint32_t cp = n == 4 ? c & 0x07u : n == 3 ? c & 0x0fu : c & 0x1fu;
    bool valid = n != 0 && c < 0xf5 && i + n <= s.size();
    for (std::size_t k = 1; valid && k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      valid = (b & 0xc0) == 0x80;
      cp = (cp << 6) | (b & 0x3fu);
    }
    static constexpr std::uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (valid) valid = cp >= smallest[n] && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
    if (!valid) {
      x_escape(c);
      ++i;
      continue;
    }
    // Controls, and what shows nothing: two ids that differ only by one read the same.
    const bool control = (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x115f ||
                         cp == 0x1160 || cp == 0x180e || (cp >= 0x200b && cp <= 0x200f) ||
                         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) ||
                         cp == 0x3164 || cp == 0xfeff;
    if (control)
      u_escape(cp);
    else
      out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

/// Throws unless `id` is a valid schema name: 1 to 63 bytes (PostgreSQL's identifier limit,
/// beyond which the server silently truncates) and no NUL character.
inline void check_schema_name(std::string_view id) {
  if (id.empty()) throw error("invalid schema name: it is empty; it must have 1 to 63 bytes");
  if (id.size() > 63)
    throw error("invalid schema name '" + printable_name(id) + "': it has " +
                std::to_string(id.size()) +
                " bytes, but PostgreSQL identifiers have at most 63 bytes");
  if (id.find('\0') != std::string_view::npos)
    throw error("invalid schema name '" + printable_name(id) +
                "': it contains a NUL character, which PostgreSQL does not allow in a name");
}

/// Quotes an SQL identifier ("a""b"); used for the schema name only.
inline std::string quote_identifier(std::string_view id) {
  check_schema_name(id);
  std::string q = "\"";
  for (char c : id) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + '"';
}

/// A text[] literal ({"a","b"}) for binding a list of strings as one parameter.
inline std::string text_array(const std::vector<std::string>& items) {
  return *pg::to_param(items);
}

/// 64-bit FNV-1a; keys the migration advisory lock per schema.
inline std::int64_t fnv1a(std::string_view s) { return static_cast<std::int64_t>(fnv1a64(s)); }

}  // namespace durable::detail
