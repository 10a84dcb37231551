// The `durable` program: durations, statuses, tables, fields and JSON on stdout, one-line errors
// on stderr (cli.hpp declares them).
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "durable/duration.hpp"

namespace durable_cli {

// ---- durations -------------------------------------------------------------------------------

/// "90s", "15m", "2h", "7d", "500ms" or a plain number of seconds; nullopt otherwise.
std::optional<double> parse_duration(const std::string& text) {
  return durable::parse_duration(text, true);
}

double require_duration(const std::string& option, const std::string& text) {
  if (auto d = parse_duration(text)) return *d;
  throw failure(bad_usage, option + ": '" + text +
                               "' is not a duration; write a number with a unit: 90s, 15m, 2h, "
                               "7d (or 500ms)");
}

std::string check_status(const std::string& text) {
  if (durable::parse_workflow_state(text)) return "";
  return "unknown status '" + one_line(text) + "'; one of: " + durable::workflow_state_spellings();
}

// ---- output ----------------------------------------------------------------------------------

std::size_t width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

std::string cut(const std::string& s, std::size_t max) {
  if (width(s) <= max) return s;
  std::string out;
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80 && ++n > max - 1) break;
    out += s[i];
  }
  return out + "…";
}

std::string one_line(const std::string& s) { return durable::detail::printable_name(s); }

std::string shell_word(const std::string& s) {
  if (one_line(s) == s) {  // nothing a terminal acts on: '...', each ' written as '\''
    std::string out = "'";
    for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  }
  // Bytes as \xNN inside $'...' (bash, zsh, ksh; POSIX sh since 2024): the same bytes whatever
  // the locale, and nothing on the line for the terminal to act on.
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "$'";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += ch;
    } else if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out + "'";
}

namespace {

/// Columns that hold timestamps (the program's sessions run in UTC: see main()).
bool timestamp_column(std::string_view key) {
  return key == "at" || key == "deadline" || key == "since" ||
         (key.size() > 3 && key.ends_with("_at"));
}

std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
  return s;
}

}  // namespace

std::string cell(std::string_view key, const ojson& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (timestamp_column(key) && s.size() >= 19 && s[10] == 'T') {
      s = s.substr(0, 19);
      s[10] = ' ';
      return s;
    }
    return one_line(s);
  }
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return one_line(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void print_table(const std::vector<ojson>& rows, const std::vector<column>& columns,
                 const std::string& indent) {
  std::vector<std::vector<std::string>> cells;
  std::vector<std::size_t> widths;
  for (const auto& c : columns) widths.push_back(width(c.key));
  for (const auto& row : rows) {
    auto& line = cells.emplace_back();
    for (std::size_t i = 0; i < columns.size(); ++i) {
      const auto it = row.find(columns[i].key);
      line.push_back(
          cut(it == row.end() ? std::string("-") : cell(columns[i].key, *it), columns[i].max));
      widths[i] = std::max(widths[i], width(line.back()));
    }
  }
  auto print_line = [&](const std::vector<std::string>& line) {
    std::string out = indent;
    for (std::size_t i = 0; i < line.size(); ++i) {
      out += line[i];
      if (i + 1 < line.size()) out += std::string(widths[i] - width(line[i]) + 2, ' ');
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    std::puts(out.c_str());
  };
  std::vector<std::string> header;
  for (const auto& c : columns) header.push_back(upper(c.key));
  print_line(header);
  for (const auto& line : cells) print_line(line);
}

void print_json(const ojson& v) {
  // nlohmann escapes C0 controls; the rest a terminal acts on (DEL, C1, bidi controls) is
  // escaped too, with JSON escapes: the same JSON value, safe on a terminal.
  std::puts(durable::detail::printable_name(
                v.dump(2, ' ', false, nlohmann::json::error_handler_t::replace),
                durable::detail::printable_style::json)
                .c_str());
}

void print_fields(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::size_t w = 0;
  for (const auto& f : fields) w = std::max(w, width(f.first));
  for (const auto& [k, v] : fields) std::puts((k + std::string(w - width(k) + 2, ' ') + v).c_str());
}

std::string text_of(const ojson& v) {
  if (v.is_null()) return "-";
  return one_line(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

int print_rows(const settings& g, const std::vector<ojson>& rows, const char* none,
               const std::vector<column>& columns) {
  if (g.json)
    print_json(ojson(rows));
  else if (rows.empty())
    std::puts(none);
  else
    print_table(rows, columns);
  return done;
}

void print_action(const settings& g, const std::string& verb, const std::string& id,
                  const std::string& message, ojson extra) {
  if (g.json) {
    ojson out = ojson::object();
    out["id"] = id;
    out["action"] = verb;
    out["done"] = true;
    for (auto& [k, v] : extra.items()) out[k] = v;
    print_json(out);
  } else {
    std::puts(message.c_str());
  }
}

// ---- errors ----------------------------------------------------------------------------------

namespace {
std::vector<std::string>& secret_sources() {
  static std::vector<std::string> sources;
  return sources;
}
}  // namespace

void hide_secrets_of(std::string conninfo) {
  if (!conninfo.empty()) secret_sources().push_back(std::move(conninfo));
}

std::string redacted(std::string message) {
  // redact() also hides any URL password and password= setting the message quotes, and
  // PGPASSWORD; each argument is read as a conninfo, so a password it holds is hidden however
  // the message quotes it (percent-decoded, a '/' or '@' in it).
  message = durable::pg::detail::redact(std::move(message), "");
  for (const auto& source : secret_sources())
    message = durable::pg::detail::redact(std::move(message), source);
  return message;
}

int report(int status, std::string message) {
  message = redacted(std::move(message));
  // One line: libpq's messages continue on indented lines.
  for (std::size_t at; (at = message.find("\n\t")) != std::string::npos;)
    message.replace(at, 2, " ");
  for (char& c : message)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "durable: %s\n", one_line(message).c_str());
  return status;
}

namespace {

// An undefined table, schema or function (42P01, 3F000, 42883): the schema is not there yet.
int schema_missing(const settings& g, const durable::pg::sql_error& e) {
  return report(database_trouble,
                "schema '" + one_line(g.schema) + "' is missing or older than this program (" +
                    e.server_message() + "); run 'durable migrate', or pass the right --schema");
}

}  // namespace

int explain(const settings& g) {
  try {
    throw;
  } catch (const failure& f) {
    return report(f.status, f.what());
  } catch (const durable::schema_too_new& e) {
    return report(database_trouble, e.what());
  } catch (const durable::pg::undefined_table& e) {
    return schema_missing(g, e);
  } catch (const durable::pg::invalid_schema_name& e) {
    return schema_missing(g, e);
  } catch (const durable::pg::undefined_function& e) {
    return schema_missing(g, e);
  } catch (const durable::pg::data_exception& e) {
    return report(bad_usage, "the database cannot use a value given: " + e.server_message());
  } catch (const durable::pg::sql_error& e) {
    return report(database_trouble, "the database refused: " + std::string(e.what()));
  } catch (const durable::pg::statement_timeout& e) {
    return report(database_trouble,
                  "the database did not answer in time (" + std::string(e.what()) +
                      "); a long transaction may hold the rows: see pg_stat_activity");
  } catch (const durable::pg::connection_error& e) {
    return report(database_trouble,
                  "cannot use the database: " + std::string(e.what()) +
                      " (set --database, DURABLE_DATABASE_URL or the PG* variables)");
  } catch (const durable::error& e) {
    return report(not_done, e.what());
  } catch (const durable::pg::error& e) {  // not derived from durable::error
    return report(not_done, e.what());
  } catch (const std::exception& e) {
    return report(not_done, std::string("unexpected error: ") + e.what());
  }
}

}  // namespace durable_cli
