// durable: the operator's command-line program. It reads the database (list, show, queues,
// executors, stats), steers workflows through the engine's own operations (cancel, resume,
// retry, fork, send), and maintains the schema (migrate, gc). See docs/operations.md.
//
// Exit status: 0 done; 1 not done (unknown id, a status that does not allow it, a conflict);
// 2 bad usage (arguments, a value the server cannot parse); 3 the database (unreachable,
// schema missing or too new, a refusal). Ordinary mistakes print one line on stderr.

#include <CLI/CLI.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "durable.hpp"
#include "durable/metrics_server.hpp"
#include "durable/prometheus.hpp"
#include "durable/store.hpp"

namespace {

using ojson = nlohmann::ordered_json;

enum exit_status : int { done = 0, not_done = 1, bad_usage = 2, database_trouble = 3 };

/// An ordinary failure: one line on stderr and an exit status.
struct failure : std::runtime_error {
  int status;
  failure(int s, const std::string& what) : std::runtime_error(what), status(s) {}
};

const std::vector<std::string> all_statuses = {"pending", "running", "sleeping",  "succeeded",
                                               "failed",  "parked",  "cancelled", "dead_letter"};
const std::vector<std::string> finished_statuses = {"succeeded", "failed", "cancelled"};

// ---- running the engine's coroutines ---------------------------------------------------------

/// Runs `a` until it completes or the io_context is stopped (a signal): false then.
inline bool run(asio::io_context& io, asio::awaitable<void> a) {
  std::exception_ptr error;
  bool finished = false;
  asio::co_spawn(io, std::move(a), [&](std::exception_ptr e) {
    error = e;
    finished = true;
    io.stop();  // what else waits (a signal set) does not keep the program alive
  });
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  return finished;
}

template <class T>
T run(asio::io_context& io, asio::awaitable<T> a) {
  std::exception_ptr error;
  std::optional<T> out;
  asio::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
    error = e;
    if (!e) out.emplace(std::move(v));
  });
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  return std::move(*out);
}

// ---- durations -------------------------------------------------------------------------------

/// "90s", "15m", "2h", "7d", "500ms" or a plain number of seconds; nullopt otherwise.
std::optional<double> parse_duration(const std::string& text) {
  if (text.empty()) return std::nullopt;
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (v < 0) return std::nullopt;
  const std::string unit = text.substr(used);
  if (unit.empty() || unit == "s") return v;
  if (unit == "ms") return v / 1000;
  if (unit == "m" || unit == "min") return v * 60;
  if (unit == "h") return v * 3600;
  if (unit == "d") return v * 86400;
  if (unit == "w") return v * 7 * 86400;
  return std::nullopt;
}

double require_duration(const std::string& option, const std::string& text) {
  if (auto d = parse_duration(text)) return *d;
  throw failure(bad_usage, option + ": '" + text +
                               "' is not a duration; write a number with a unit: 90s, 15m, 2h, "
                               "7d (or 500ms)");
}

// ---- output ----------------------------------------------------------------------------------

/// Code points in `s` (UTF-8), for column widths.
std::size_t width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

/// At most `max` code points, with "…" when cut.
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

/// One line: newlines and tabs shown as \n and \t, other control characters as \xNN (as the
/// library shows names in its messages).
std::string one_line(const std::string& s) {
  std::string out;
  for (const char& c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else
      out += durable::detail::printable_name(std::string_view(&c, 1));
  }
  return out;
}

/// Columns that hold timestamps (the program's sessions run in UTC: see main()).
bool timestamp_column(std::string_view key) {
  return key == "at" || key == "deadline" || (key.size() > 3 && key.ends_with("_at"));
}

/// A value as a table shows it: "-" for null, timestamps (by column) to the second, JSON
/// compact, control characters escaped.
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

std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
  return s;
}

struct column {
  std::string key;
  std::size_t max = 40;
};

void print_table(const std::vector<ojson>& rows, const std::vector<column>& columns,
                 const std::string& indent = "") {
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
  std::puts(v.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

/// "key  value" lines, keys padded to one width.
void print_fields(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::size_t w = 0;
  for (const auto& f : fields) w = std::max(w, width(f.first));
  for (const auto& [k, v] : fields) std::puts((k + std::string(w - width(k) + 2, ' ') + v).c_str());
}

// ---- the commands ----------------------------------------------------------------------------

struct settings {
  std::string database;
  std::string schema = "durable";
  bool json = false;
};

/// An engine that is never opened: it registers no executor and runs no workflow; its
/// operations (cancel, resume, retry, fork, send, migrate) and its pool are what we use.
struct session {
  asio::io_context io;
  durable::engine eng;
  explicit session(const settings& s) : eng(io.get_executor(), options(s)) {}
  static durable::engine_options options(const settings& s) {
    durable::engine_options o;
    o.conninfo = s.database;
    o.schema = s.schema;
    o.pool_size = 2;
    o.min_severity = durable::severity::warning;
    return o;
  }
  /// The schema's statements (the CLI is one of the library's own tools).
  [[nodiscard]] const durable::store& st() const noexcept { return durable::detail::store_of(eng); }

  // A plain function forwarding to the coroutine (GCC 12: see docs/concepts.md).
  asio::awaitable<std::vector<ojson>> rows_of(durable::query<durable::store::json_value> q) {
    return rows_of_impl(std::move(q.st));
  }
  asio::awaitable<std::vector<ojson>> rows_of_impl(durable::pg::statement st) {
    std::vector<durable::store::json_value> rows;
    {
      durable::query<durable::store::json_value> q{std::move(st)};
      auto c = co_await eng.pool().acquire();
      rows = co_await durable::store::fetch(*c, std::move(q));
    }
    std::vector<ojson> out;
    out.reserve(rows.size());
    for (const auto& r : rows) out.push_back(ojson::parse(r.json));
    co_return out;
  }
  std::vector<ojson> rows(durable::query<durable::store::json_value> q) {
    return run(io, rows_of(std::move(q)));
  }
  /// The workflow's status, or nullopt when no workflow has the id.
  std::optional<std::string> status_of(const std::string& id) {
    auto get = [&]() -> asio::awaitable<std::optional<durable::store::workflow_record>> {
      auto q = st().workflow_get(id);
      auto c = co_await eng.pool().acquire();
      co_return co_await durable::store::fetch_one(*c, std::move(q));
    };
    auto w = run(io, get());
    if (!w) return std::nullopt;
    return w->status;
  }
  [[noreturn]] void unknown(const std::string& id) {
    throw failure(not_done, "no workflow has the id '" + one_line(id) + "' in schema '" +
                                one_line(eng.schema_name()) + "'; see 'durable list'");
  }
};

struct list_args {
  std::vector<std::string> statuses;
  std::string name, queue, executor, since, until, after;
  std::int64_t limit = 50, offset = 0;
};

/// A list cursor: "<created_at>|<id>" of the last row of a page.
std::string cursor_of(const ojson& row) {
  return row["created_at"].get<std::string>() + "|" + row["id"].get<std::string>();
}

/// --since/--until: a duration ago or a timestamp the server parses.
void time_bound(const std::string& text, std::optional<double>& ago,
                std::optional<std::string>& at) {
  if (text.empty()) return;
  if (auto d = parse_duration(text))
    ago = d;
  else
    at = text;
}

// A date or time the server cannot read (22007, 22008), from --since, --until or --after.
[[noreturn]] void bad_time(const durable::pg::data_exception& e) {
  throw failure(bad_usage,
                "--since/--until take a duration (90s, 15m, 2h, 7d) or a timestamp "
                "('2026-11-30 17:00', '2026-11-30T17:00:00Z'), --after a cursor: " +
                    e.server_message());
}

int cmd_list(session& s, const settings& g, const list_args& a) {
  durable::store::list_filter f;
  f.statuses = a.statuses;
  if (!a.name.empty()) f.name = a.name;
  if (!a.queue.empty()) f.queue = a.queue;
  if (!a.executor.empty()) f.executor = a.executor;
  time_bound(a.since, f.since_s, f.since_at);
  time_bound(a.until, f.until_s, f.until_at);
  f.limit = a.limit + 1;  // one more: is there a next page?
  f.offset = a.offset;
  if (!a.after.empty()) {
    const auto bar = a.after.find('|');
    if (bar == std::string::npos)
      throw failure(bad_usage, "--after: '" + one_line(a.after) +
                                   "' is not a cursor; pass the next_cursor of the previous "
                                   "page (--json) or what the table's footer says");
    f.after_created_at = a.after.substr(0, bar);
    f.after_id = a.after.substr(bar + 1);
  }
  std::vector<ojson> rows;
  try {
    rows = s.rows(s.st().admin_list(f));
  } catch (const durable::pg::invalid_datetime_format& e) {  // from --since, --until or --after
    bad_time(e);
  } catch (const durable::pg::datetime_field_overflow& e) {
    bad_time(e);
  }
  const bool more = std::int64_t(rows.size()) > a.limit;
  if (more) rows.pop_back();
  if (g.json) {
    ojson out = ojson::object();
    out["workflows"] = rows;
    out["offset"] = a.offset;
    out["limit"] = a.limit;
    out["next_offset"] = more ? ojson(a.offset + a.limit) : ojson(nullptr);
    // Keyset paging: stable while workflows come and go (offsets shift).
    out["next_cursor"] = more ? ojson(cursor_of(rows.back())) : ojson(nullptr);
    print_json(out);
    return done;
  }
  if (rows.empty()) {
    std::puts(a.offset > 0 ? "no more workflows" : "no workflows match");
    return done;
  }
  print_table(rows, {{"id", 36},
                     {"name", 24},
                     {"status", 11},
                     {"queue", 16},
                     {"steps", 8},
                     {"created_at", 19},
                     {"updated_at", 19},
                     {"reason", 60}});
  if (more) std::fprintf(stderr, "(more: add --after '%s')\n", cursor_of(rows.back()).c_str());
  return done;
}

std::string text_of(const ojson& v) {
  if (v.is_null()) return "-";
  return one_line(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

int cmd_show(session& s, const settings& g, const std::string& id, std::size_t last_steps) {
  auto found = s.rows(s.st().admin_show(id));
  if (found.empty()) s.unknown(id);
  const ojson& all = found[0];
  if (g.json) {
    print_json(all);
    return done;
  }
  const ojson& w = all["workflow"];
  auto field = [&](const char* key) {
    auto it = w.find(key);
    return it == w.end() ? std::string("-") : cell(key, *it);
  };
  std::vector<std::pair<std::string, std::string>> fields = {
      {"workflow", field("id")},
      {"name", field("name")},
      {"status", field("status")},
  };
  if (!w["status_reason"].is_null()) fields.emplace_back("reason", field("status_reason"));
  if (w.contains("last_error") && !w["last_error"].is_null())
    fields.emplace_back("last error", field("last_error"));
  fields.emplace_back("queue", field("queue"));
  const std::string claims = field("attempts");
  fields.emplace_back("executor", field("executor_id") + " (epoch " + field("epoch") +
                                      ", claimed " + claims +
                                      (claims == "1" ? " time)" : " times)"));
  fields.emplace_back("created", field("created_at"));
  fields.emplace_back("started", field("started_at"));
  fields.emplace_back("updated", field("updated_at"));
  fields.emplace_back("completed", field("completed_at"));
  if (!w["wake_at"].is_null()) fields.emplace_back("wakes at", field("wake_at"));
  if (w.contains("wait_for") && !w["wait_for"].is_null())
    fields.emplace_back("waits for", field("wait_for"));
  if (!w["deadline"].is_null()) fields.emplace_back("deadline", field("deadline"));
  if (!w["parent_id"].is_null()) fields.emplace_back("parent", field("parent_id"));
  if (w.contains("forked_from") && !w["forked_from"].is_null())
    fields.emplace_back("forked from", field("forked_from"));
  if (!w["app_version"].get<std::string>().empty())
    fields.emplace_back("app version", field("app_version"));
  constexpr std::size_t long_value = 300;  // --json shows them whole
  fields.emplace_back("inputs", cut(text_of(w["inputs"]), long_value));
  if (!w["output"].is_null()) fields.emplace_back("output", cut(text_of(w["output"]), long_value));
  if (!w["error"].is_null()) fields.emplace_back("error", cut(text_of(w["error"]), long_value));
  print_fields(fields);

  std::puts("");
  std::puts("history");
  print_table(all["history"].get<std::vector<ojson>>(),
              {{"at", 19},
               {"previous", 11},
               {"status", 11},
               {"executor_id", 30},
               {"previous_executor", 30},
               {"reason", 70}},
              "  ");

  auto steps = all["steps"].get<std::vector<ojson>>();
  std::puts("");
  std::printf("steps (%zu)\n", steps.size());
  if (steps.size() > last_steps) {
    std::printf("  ... %zu earlier steps (--steps N shows more, --json all)\n",
                steps.size() - last_steps);
    steps.erase(steps.begin(), steps.end() - std::ptrdiff_t(last_steps));
  }
  print_table(steps,
              {{"seq", 6},
               {"name", 28},
               {"kind", 9},
               {"status", 9},
               {"attempts", 8},
               {"duration_ms", 12},
               {"completed_at", 19},
               {"next_attempt_at", 19},
               {"last_error", 60}},
              "  ");
  for (const char* part : {"children", "inbox", "events"}) {
    const auto items = all[part].get<std::vector<ojson>>();
    if (items.empty()) continue;
    std::puts("");
    std::printf("%s (%zu)\n", part, items.size());
    if (std::string(part) == "children")
      print_table(items, {{"id", 40}, {"name", 24}, {"status", 11}, {"completed_at", 19}}, "  ");
    else if (std::string(part) == "inbox")
      print_table(items, {{"id", 12}, {"topic", 24}, {"created_at", 19}, {"payload", 60}}, "  ");
    else
      print_table(items, {{"key", 24}, {"updated_at", 19}, {"value", 60}}, "  ");
  }
  return done;
}

void print_action(const settings& g, const std::string& verb, const std::string& id,
                  const std::string& message, ojson extra = ojson::object()) {
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

int cmd_cancel(session& s, const settings& g, const std::string& id) {
  if (run(s.io, s.eng.cancel(id))) {
    print_action(g, "cancel", id,
                 "cancelled '" + one_line(id) +
                     "' (and its unfinished child workflows); a process running it stops it at "
                     "its next step");
    return done;
  }
  const auto status = s.status_of(id);
  if (!status) s.unknown(id);
  throw failure(not_done, "'" + one_line(id) + "' is " + *status +
                              ": only unfinished workflows (pending, running, sleeping, parked, "
                              "dead_letter) can be cancelled");
}

int cmd_resume(session& s, const settings& g, const std::string& id, bool retry) {
  bool ok = false;
  try {
    ok = run(s.io, retry ? s.eng.retry(id) : s.eng.resume(id));
  } catch (const durable::workflow_conflict& e) {
    throw failure(not_done, e.what());
  }
  const char* verb = retry ? "retry" : "resume";
  if (ok) {
    print_action(
        g, verb, id,
        std::string(retry ? "retrying" : "resumed") + " '" + one_line(id) +
            "': due now; an executor that registers its workflow claims it and replays "
            "its journal" +
            (retry ? ", running the failed step again with a fresh count of attempts" : ""));
    return done;
  }
  const auto status = s.status_of(id);
  if (!status) s.unknown(id);
  if (retry)
    throw failure(not_done,
                  "'" + one_line(id) + "' is " + *status +
                      ": retry runs the failed step of a dead-lettered workflow again" +
                      (*status == "parked" || *status == "cancelled"
                           ? "; use 'durable resume " + one_line(id) + "' for a " + *status + " one"
                           : std::string()));
  throw failure(not_done, "'" + one_line(id) + "' is " + *status +
                              ": resume continues a cancelled, parked or dead-lettered workflow");
}

int cmd_fork(session& s, const settings& g, const std::string& id, int from_step,
             const std::string& new_id) {
  durable::workflow_handle h;
  try {
    h = run(s.io, s.eng.fork(id, from_step, new_id));
  } catch (const durable::workflow_conflict& e) {
    throw failure(not_done, e.what());
  } catch (const durable::pg::sql_error&) {
    throw;
  } catch (const durable::pg::connection_error&) {
    throw;
  } catch (const durable::error& e) {
    throw failure(not_done, e.what());
  }
  ojson extra = ojson::object();
  extra["new_id"] = h.id();
  extra["from_step"] = from_step;
  print_action(g, "fork", id,
               "forked '" + one_line(id) + "' from step " + std::to_string(from_step) + " as '" +
                   one_line(h.id()) + "'; an executor that registers its workflow runs it",
               extra);
  return done;
}

int cmd_send(session& s, const settings& g, const std::string& id, const std::string& topic,
             const std::string& value, bool as_text, const std::string& key) {
  nlohmann::json payload;
  if (as_text) {
    payload = value;
  } else {
    try {
      payload = nlohmann::json::parse(value);
    } catch (const nlohmann::json::exception& e) {
      throw failure(bad_usage, "VALUE is not JSON (" + std::string(e.what()) +
                                   "); quote a string as '\"text\"', or pass --text to send it "
                                   "as a string");
    }
  }
  // A finished workflow receives nothing more: refuse instead of storing a message for ever.
  const auto status = s.status_of(id);
  if (!status) s.unknown(id);
  if (*status == "succeeded" || *status == "failed" || *status == "cancelled")
    throw failure(not_done, "'" + one_line(id) + "' is " + *status +
                                ": a finished workflow receives no more messages; nothing was "
                                "sent");
  bool sent = false;
  try {
    sent = run(s.io, s.eng.send(id, topic, payload, key));
  } catch (const durable::pg::sql_error&) {
    throw;
  } catch (const durable::pg::connection_error&) {
    throw;
  } catch (const durable::error& e) {
    throw failure(not_done, e.what());
  }
  ojson extra = ojson::object();
  extra["topic"] = topic;
  extra["sent"] = sent;
  print_action(g, "send", id,
               sent ? "sent to '" + one_line(id) + "' on topic '" + one_line(topic) + "'"
                    : "not sent again: a message with the idempotency key '" + one_line(key) +
                          "' was sent to '" + one_line(id) + "' before",
               extra);
  return done;
}

/// Rows as --json, a table, or `none` when there are none.
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

int cmd_queues(session& s, const settings& g) {
  const auto rows = s.rows(s.st().admin_queues());
  return print_rows(g, rows, "no queues (no queued workflows, no configured limits)",
                    {{"queue", 24},
                     {"queued", 8},
                     {"delayed", 8},
                     {"running", 8},
                     {"sleeping", 8},
                     {"oldest_queued_s", 16},
                     {"concurrency", 11},
                     {"worker_concurrency", 18},
                     {"rate_limit", 10},
                     {"rate_period_ms", 14}});
}

int cmd_executors(session& s, const settings& g, double lease_s) {
  const auto rows = s.rows(s.st().admin_executors(lease_s));
  return print_rows(g, rows, "no executors have registered",
                    {{"id", 40},
                     {"state", 8},
                     {"host", 24},
                     {"pid", 8},
                     {"heartbeat_age_s", 15},
                     {"owned", 8},
                     {"app_version", 16},
                     {"started_at", 19}});
}

int cmd_stats(session& s, const settings& g, double lease_s) {
  const auto rows = s.rows(s.st().admin_stats(lease_s));
  const ojson& st = rows.at(0);
  if (g.json) {
    print_json(st);
    return done;
  }
  std::vector<std::pair<std::string, std::string>> fields;
  fields.emplace_back("schema version", cell("schema_version", st["schema_version"]));
  for (const auto& status : all_statuses) {
    const auto it = st["workflows"].find(status);
    fields.emplace_back(status, it == st["workflows"].end() ? "0" : cell(status, *it));
  }
  for (const char* key :
       {"journal_rows_estimate", "steps_retrying", "finished_last_hour", "failed_last_hour",
        "failed_last_day", "queued", "oldest_queued_s", "messages_unconsumed", "executors_alive"}) {
    std::string label = key;
    for (char& c : label)
      if (c == '_') c = ' ';
    fields.emplace_back(label, cell(key, st[key]));
  }
  print_fields(fields);
  return done;
}

int cmd_gc(session& s, const settings& g, const std::string& older_than,
           std::vector<std::string> statuses, std::int64_t batch, bool dry_run) {
  const double age_s = require_duration("--older-than", older_than);
  if (statuses.empty()) statuses = finished_statuses;
  for (const auto& st : statuses)
    if (std::find(finished_statuses.begin(), finished_statuses.end(), st) ==
        finished_statuses.end())
      throw failure(bad_usage, "--status " + one_line(st) +
                                   ": gc deletes finished workflows only (succeeded, failed, "
                                   "cancelled); cancel a parked or dead-lettered workflow first "
                                   "if it should go");
  if (batch < 1) throw failure(bad_usage, "--batch must be at least 1");
  const std::string list = durable::detail::text_array(statuses);
  std::int64_t n = 0;
  if (dry_run) {
    auto count = [&]() -> asio::awaitable<std::int64_t> {
      auto q = s.st().admin_gc_count(age_s, list);
      auto c = co_await s.eng.pool().acquire();
      auto r = co_await durable::store::fetch_one(*c, std::move(q));
      co_return r ? r->n : 0;
    };
    n = run(s.io, count());
  } else {
    // Small batches, each its own statement (SKIP LOCKED): no long locks on a busy table.
    for (;;) {
      auto one_batch = [&]() -> asio::awaitable<std::size_t> {
        auto q = s.st().workflows_delete_finished(std::int64_t(age_s * 1000), batch, list);
        auto c = co_await s.eng.pool().acquire();
        auto r = co_await durable::store::fetch(*c, std::move(q));
        co_return r.size();
      };
      const std::size_t deleted = run(s.io, one_batch());
      n += std::int64_t(deleted);
      if (std::int64_t(deleted) < batch) break;
    }
  }
  std::string joined;
  for (const auto& st : statuses) joined += (joined.empty() ? "" : ", ") + st;
  if (g.json) {
    ojson out = ojson::object();
    out["action"] = "gc";
    out["dry_run"] = dry_run;
    out["older_than_s"] = age_s;
    out["statuses"] = statuses;
    out[dry_run ? "would_delete" : "deleted"] = n;
    print_json(out);
  } else {
    std::printf("%s %lld workflows (%s) finished more than %s ago%s\n",
                dry_run ? "would delete" : "deleted", static_cast<long long>(n), joined.c_str(),
                older_than.c_str(),
                dry_run ? "" : ", with their journal, attempts, history, messages and events");
  }
  return done;
}

int cmd_migrate(session& s, const settings& g) {
  const int applied = run(s.io, s.eng.migrate());
  auto version = [&]() -> asio::awaitable<int> {
    auto c = co_await s.eng.pool().acquire();
    co_return co_await s.st().version(*c);
  };
  const int v = run(s.io, version());
  if (g.json) {
    ojson out = ojson::object();
    out["schema"] = s.eng.schema_name();
    out["version"] = v;
    out["applied"] = applied;
    print_json(out);
  } else {
    std::printf("schema '%s' is at version %d (%d migration%s applied now)\n",
                one_line(s.eng.schema_name()).c_str(), v, applied, applied == 1 ? "" : "s");
  }
  return done;
}

// ---- metrics ---------------------------------------------------------------------------------

double number(const ojson& v) { return v.is_number() ? v.get<double>() : 0.0; }

/// The database's gauges (what every executor shares: workflows by status, queues, executors,
/// inboxes) as a Prometheus exposition. The engine's own metrics (steps, journal write latency,
/// group commits) are per process: the application serves them (docs/metrics.md).
asio::awaitable<std::string> database_exposition(session& s, double lease_s) {
  auto stats_q = s.st().admin_stats(lease_s);
  const auto stats_rows = co_await s.rows_of(std::move(stats_q));
  auto queues_q = s.st().admin_queues();
  const auto queues = co_await s.rows_of(std::move(queues_q));
  auto executors_q = s.st().admin_executors(lease_s);
  const auto executors = co_await s.rows_of(std::move(executors_q));
  const ojson& st = stats_rows.at(0);
  durable::prometheus_writer w;
  const std::string schema = s.eng.schema_name();
  {
    const durable::metric_label l[] = {{"schema", schema}};
    w.gauge("durable_store_schema_version", "Schema version of durable's tables.",
            number(st["schema_version"]), l);
    for (const auto& status : all_statuses) {
      const auto it = st["workflows"].find(status);
      const durable::metric_label ls[] = {{"schema", schema}, {"status", status}};
      w.gauge("durable_store_workflows", "Workflows in the database, by status.",
              it == st["workflows"].end() ? 0.0 : number(*it), ls);
    }
    if (!st["journal_rows_estimate"].is_null())
      w.gauge("durable_store_journal_rows_estimate",
              "Journal rows (steps) in the database, as the planner estimates them.",
              number(st["journal_rows_estimate"]), l);
    w.gauge("durable_store_steps_retrying", "Steps waiting for their next attempt.",
            number(st["steps_retrying"]), l);
    w.gauge("durable_store_failed_last_hour",
            "Workflows that failed or were dead-lettered in the last hour.",
            number(st["failed_last_hour"]), l);
    w.gauge("durable_store_messages_unconsumed", "Messages sent and not yet received.",
            number(st["messages_unconsumed"]), l);
  }
  const std::pair<const char*, const char*> per_queue[] = {
      {"queued", "Workflows queued and due, waiting for room."},
      {"delayed", "Workflows queued with a delay that has not passed."},
      {"running", "Workflows of the queue that run now."},
      {"sleeping", "Workflows of the queue that sleep or wait."},
      {"oldest_queued_s", "Age of the oldest queued workflow (0: none)."}};
  for (const auto& [key, help] : per_queue) {
    const std::string name =
        std::string("durable_store_queue_") +
        (std::string(key) == "oldest_queued_s" ? "oldest_queued_seconds" : std::string(key));
    for (const auto& q : queues) {
      const std::string queue = q["queue"].get<std::string>();
      const durable::metric_label l[] = {{"schema", schema}, {"queue", queue}};
      w.gauge(name, help, number(q[key]), l);
    }
  }
  for (const char* state : {"alive", "dead", "released"}) {
    double n = 0;
    for (const auto& e : executors)
      if (e["state"] == state) ++n;
    const durable::metric_label l[] = {{"schema", schema}, {"state", state}};
    w.gauge("durable_store_executors",
            "Registered executors, by state (alive: heartbeat within "
            "the lease).",
            n, l);
  }
  for (const char* state : {"alive", "dead", "released"}) {
    double owned = 0;
    for (const auto& e : executors)
      if (e["state"] == state) owned += number(e["owned"]);
    const durable::metric_label l[] = {{"schema", schema}, {"state", state}};
    w.gauge("durable_store_owned_workflows",
            "Unfinished workflows owned by executors, by the executor's state.", owned, l);
  }
  co_return w.take();
}

/// "HOST:PORT" ("[::1]:9464" for IPv6) as an endpoint.
asio::ip::tcp::endpoint parse_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw failure(bad_usage, "--listen: '" + one_line(text) +
                                 "' is not HOST:PORT (127.0.0.1:9464, [::1]:9464)");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port_text = text.substr(colon + 1);
  unsigned long port = 0;
  std::size_t used = 0;
  try {
    port = std::stoul(port_text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != port_text.size() || port > 65535)
    throw failure(bad_usage, "--listen: '" + one_line(port_text) + "' is not a port (0 to 65535)");
  asio::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec)
    throw failure(bad_usage,
                  "--listen: '" + one_line(host) + "' is not an IP address: " + ec.message());
  return {address, static_cast<unsigned short>(port)};
}

int cmd_metrics(session& s, double lease_s, const std::string& listen) {
  if (listen.empty()) {
    const std::string text = run(s.io, database_exposition(s, lease_s));
    std::fputs(text.c_str(), stdout);
    return done;
  }
  const auto where = parse_listen(listen);
  durable::metrics_server_options o;
  o.on_listening = [](const asio::ip::tcp::endpoint& at) {
    std::fprintf(
        stderr, "durable: serving the database's metrics at http://%s/metrics\n",
        (at.address().is_v6() ? "[" + at.address().to_string() + "]" : at.address().to_string())
            .append(":" + std::to_string(at.port()))
            .c_str());
  };
  o.exposition = [&s, lease_s]() { return database_exposition(s, lease_s); };
  asio::signal_set stop(s.io, SIGINT, SIGTERM);
  stop.async_wait([&s](const asio::error_code&, int) { s.io.stop(); });
  try {
    (void)run(s.io, durable::serve_metrics(s.eng, where, std::move(o)));
  } catch (const asio::system_error& e) {
    throw failure(not_done, "--listen " + one_line(listen) + ": " + e.what());
  }
  return done;
}

// ---- errors ----------------------------------------------------------------------------------

int report(int status, std::string message) {
  // One line: libpq's messages continue on indented lines.
  for (std::size_t at; (at = message.find("\n\t")) != std::string::npos;)
    message.replace(at, 2, " ");
  for (char& c : message)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "durable: %s\n", one_line(message).c_str());
  return status;
}

// An undefined table, schema or function (42P01, 3F000, 42883): the schema is not there yet.
int schema_missing(const settings& g, const durable::pg::sql_error& e) {
  return report(database_trouble,
                "schema '" + one_line(g.schema) + "' is missing or older than this program (" +
                    e.server_message() + "); run 'durable migrate', or pass the right --schema");
}

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "durable: see and steer durable workflows in PostgreSQL.\n"
      "Connects like libpq: --database (a conninfo string or a postgresql:// URL), else "
      "DURABLE_DATABASE_URL, else the PG* environment variables."};
  app.name("durable");
  app.footer(
      "Exit status: 0 done, 1 not done (unknown id, status does not allow it), 2 bad usage, "
      "3 database unreachable or schema missing.\nRun 'durable VERB --help' for a verb's "
      "options. Guide: docs/operations.md.");
  app.require_subcommand(1);
  app.fallthrough();

  settings g;
  if (const char* url = std::getenv("DURABLE_DATABASE_URL")) g.database = url;
  if (const char* schema = std::getenv("DURABLE_SCHEMA"); schema && *schema) g.schema = schema;
  app.add_option("-d,--database", g.database,
                 "conninfo or URL (default: $DURABLE_DATABASE_URL, else PG* variables)");
  app.add_option("-s,--schema", g.schema,
                 "schema holding durable's tables (default: $DURABLE_SCHEMA, else durable)");
  app.add_flag("--json", g.json, "print JSON for scripts instead of tables");

  std::string id, new_id, topic, value, key, older_than;
  int from_step = -1;
  bool as_text = false, dry_run = false;
  std::size_t last_steps = 50;
  std::vector<std::string> gc_statuses;
  std::int64_t batch = 500;
  std::string lease = "5s", listen;

  list_args la;
  auto* list = app.add_subcommand("list", "list workflows, newest first");
  list->add_option("--status", la.statuses, "only these statuses (repeat or comma-separate)")
      ->delimiter(',')
      ->check(CLI::IsMember(all_statuses));
  list->add_option("--name", la.name, "only workflows of this name");
  list->add_option("--queue", la.queue, "only workflows of this queue");
  list->add_option("--executor", la.executor, "only workflows owned by this executor id");
  list->add_option("--since", la.since, "created within this long (2h, 7d) or since a timestamp");
  list->add_option("--until", la.until, "created at least this long ago, or before a timestamp");
  list->add_option("--limit", la.limit, "rows per page")->check(CLI::Range(1, 100000));
  list->add_option("--offset", la.offset, "rows to skip")->check(CLI::Range(0, 1000000000));
  list->add_option("--after", la.after,
                   "the next page: rows after this cursor (next_cursor, or the table's footer)");

  auto* show = app.add_subcommand(
      "show", "a workflow: inputs, output or error, status history, steps, children, inbox");
  show->add_option("ID", id, "workflow id")->required();
  show->add_option("--steps", last_steps, "show the last N steps in the table (default 50)");

  auto* cancel = app.add_subcommand("cancel", "cancel a workflow and its unfinished children");
  cancel->add_option("ID", id, "workflow id")->required();
  auto* resume =
      app.add_subcommand("resume", "continue a cancelled, parked or dead-lettered workflow");
  resume->add_option("ID", id, "workflow id")->required();
  auto* retry = app.add_subcommand(
      "retry", "run a dead-lettered workflow's failed step again, with fresh attempts");
  retry->add_option("ID", id, "workflow id")->required();
  auto* fork = app.add_subcommand(
      "fork", "copy a workflow's journal before a step into a new workflow that runs the rest");
  fork->add_option("ID", id, "workflow id")->required();
  fork->add_option("--from-step", from_step, "first step to run again (0 = from the start)")
      ->required()
      ->check(CLI::NonNegativeNumber);
  fork->add_option("--id", new_id, "the new workflow's id (default: ID:fork:<random>)");

  auto* send = app.add_subcommand("send", "send a message to a workflow (its ctx.recv(TOPIC))");
  send->add_option("ID", id, "recipient workflow id")->required();
  send->add_option("TOPIC", topic, "topic")->required();
  send->add_option("VALUE", value, "the message as JSON (e.g. '{\"ok\":true}', '\"text\"', 42)")
      ->required();
  send->add_flag("--text", as_text, "send VALUE as a JSON string, not parsed");
  send->add_option("--key", key, "idempotency key: a second send with it sends nothing");

  auto* queues = app.add_subcommand("queues", "queues: depth, running, limits");
  auto* executors =
      app.add_subcommand("executors", "executors: alive or not, last heartbeat, workflows owned");
  executors->add_option("--lease", lease, "heartbeat age under which an executor is alive")
      ->capture_default_str();

  auto* gc = app.add_subcommand("gc", "delete finished workflows older than an age");
  gc->add_option("--older-than", older_than, "age since completion: 30d, 12h, ...")->required();
  gc->add_option("--status", gc_statuses,
                 "only these (succeeded, failed, cancelled; default all three)")
      ->delimiter(',');
  gc->add_option("--batch", batch, "workflows deleted per statement")->capture_default_str();
  gc->add_flag("--dry-run", dry_run, "count what would be deleted, delete nothing");

  auto* migrate = app.add_subcommand("migrate", "create or upgrade the schema");
  auto* stats = app.add_subcommand("stats", "counts: workflows by status, failures, queue, inbox");
  stats->add_option("--lease", lease, "heartbeat age under which an executor is alive")
      ->capture_default_str();

  auto* metrics = app.add_subcommand(
      "metrics", "the database's gauges in Prometheus text format (stdout, or served)");
  metrics->add_option("--listen", listen, "serve GET /metrics on HOST:PORT instead of printing");
  metrics->add_option("--lease", lease, "heartbeat age under which an executor is alive")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "durable: %s\n", e.what());
    std::fprintf(stderr, "Run 'durable --help' or 'durable VERB --help'.\n");
    return bad_usage;
  }

  // Every timestamp the program shows is in UTC, whatever the server's or PGTZ's time zone.
  ::setenv("PGTZ", "UTC", 1);
  try {
    durable::detail::check_schema_name(g.schema);
  } catch (const durable::error& e) {
    return report(bad_usage, std::string("--schema: ") + e.what());
  }
  try {
    session s(g);
    const double lease_s = require_duration("--lease", lease);
    if (list->parsed()) return cmd_list(s, g, la);
    if (show->parsed()) return cmd_show(s, g, id, last_steps);
    if (cancel->parsed()) return cmd_cancel(s, g, id);
    if (resume->parsed()) return cmd_resume(s, g, id, false);
    if (retry->parsed()) return cmd_resume(s, g, id, true);
    if (fork->parsed()) return cmd_fork(s, g, id, from_step, new_id);
    if (send->parsed()) return cmd_send(s, g, id, topic, value, as_text, key);
    if (queues->parsed()) return cmd_queues(s, g);
    if (executors->parsed()) return cmd_executors(s, g, lease_s);
    if (gc->parsed()) return cmd_gc(s, g, older_than, gc_statuses, batch, dry_run);
    if (migrate->parsed()) return cmd_migrate(s, g);
    if (stats->parsed()) return cmd_stats(s, g, lease_s);
    if (metrics->parsed()) return cmd_metrics(s, lease_s, listen);
  } catch (...) {
    return explain(g);
  }
  return bad_usage;
}
