// The store's handling of names: the schema name checked and quoted as an SQL identifier, a
// list of strings as one text[] parameter, and the hash that keys the migration lock and long
// channel names. Machinery of durable/store.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "durable/error.hpp"
#include "durable/pg/connection.hpp"

namespace durable::detail {

/// The schema name for a message: control characters (NUL included) shown as \xNN.
inline std::string printable_name(std::string_view id) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : id) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
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
inline std::int64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return static_cast<std::int64_t>(h);
}

}  // namespace durable::detail
