// The SQL files (sql/, embedded by cmake/embed_sql.cmake) as the store runs them: psql variables
// filled in the way psql fills them, and a migration split into its statements.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace durable::detail {

/// Quotes an SQL string literal ('a''b'), as psql's :'name' does (standard_conforming_strings).
inline std::string quote_literal(std::string_view value) {
  std::string q = "'";
  for (char c : value) {
    if (c == '\'') q += '\'';
    q += c;
  }
  return q + '\'';
}

/// The psql variables of the SQL files and their values, quoted already: :"schema" (an
/// identifier), :'channel' and :'wait_channel' (literals). The name is written with its quotes.
using sql_variables = std::vector<std::pair<std::string, std::string>>;

/// The statements of `script` with `vars` filled in. Like psql, it replaces a variable only
/// outside string literals, quoted identifiers, dollar-quoted bodies and comments, leaves unknown
/// variables alone, and ends a statement at a semicolon outside those. Statements that hold only
/// comments are dropped. With `split` false the whole script is one statement.
inline std::vector<std::string> sql_statements(std::string_view script, const sql_variables& vars,
                                               bool split = true) {
  std::vector<std::string> out;
  std::string current;
  bool has_code = false;
  auto ident = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           static_cast<unsigned char>(c) >= 0x80;
  };
  auto finish = [&] {
    if (has_code) {
      const auto first = current.find_first_not_of(" \t\r\n");
      const auto last = current.find_last_not_of(" \t\r\n");
      out.push_back(current.substr(first, last - first + 1));
    }
    current.clear();
    has_code = false;
  };
  // Copies text[i, end) and returns end.
  auto copy = [&](std::size_t i, std::size_t end) {
    current.append(script.substr(i, end - i));
    return end;
  };
  std::size_t i = 0;
  const std::size_t n = script.size();
  while (i < n) {
    const char c = script[i];
    if (c == '-' && i + 1 < n && script[i + 1] == '-') {
      const auto eol = script.find('\n', i);
      i = copy(i, eol == std::string_view::npos ? n : eol);
      continue;
    }
    if (c == '/' && i + 1 < n && script[i + 1] == '*') {
      std::size_t j = i + 2;
      for (int depth = 1; j < n && depth > 0; ++j) {
        if (script.compare(j, 2, "/*") == 0)
          ++depth, ++j;
        else if (script.compare(j, 2, "*/") == 0)
          --depth, ++j;
      }
      i = copy(i, j < n ? j : n);
      continue;
    }
    has_code = has_code || (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != ';');
    if (c == '\'' || c == '"') {
      std::size_t j = i + 1;
      while (j < n) {
        if (script[j] == c) {
          if (j + 1 < n && script[j + 1] == c) {
            j += 2;
            continue;
          }
          break;
        }
        ++j;
      }
      i = copy(i, j < n ? j + 1 : n);
      continue;
    }
    if (c == '$' && (i == 0 || !ident(script[i - 1])) && i + 1 < n &&
        !(script[i + 1] >= '0' && script[i + 1] <= '9')) {
      // $tag$ ... $tag$, the tag empty or an identifier ($1, a parameter, is not one).
      std::size_t j = i + 1;
      while (j < n && ident(script[j])) ++j;
      if (j < n && script[j] == '$') {
        const std::string_view tag = script.substr(i, j + 1 - i);
        const auto close = script.find(tag, j + 1);
        i = copy(i, close == std::string_view::npos ? n : close + tag.size());
        continue;
      }
    }
    if (c == ':' && i + 1 < n && (script[i + 1] == '"' || script[i + 1] == '\'') &&
        (i == 0 || script[i - 1] != ':')) {
      bool replaced = false;
      for (const auto& [name, value] : vars) {
        if (script.compare(i + 1, name.size(), name) == 0) {
          current += value;
          i += 1 + name.size();
          replaced = true;
          break;
        }
      }
      if (replaced) continue;
    }
    if (c == ';' && split) {
      finish();
      ++i;
      continue;
    }
    current += c;
    ++i;
  }
  finish();
  return out;
}

}  // namespace durable::detail
