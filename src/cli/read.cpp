// The `durable` program's verbs that read the database: list, show, queues, executors, stats.
// Each runs one operator statement of the store (rows as JSON objects) and prints a table,
// fields, or the rows as --json. And wait (show --wait): result() of the engine, told of the end;
// and stream: a workflow's stream, read by engine::read_stream.
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"

namespace durable_cli {

namespace {

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

}  // namespace

int cmd_list(session& s, const settings& g, const list_args& a) {
  durable::store::list_filter f;
  f.statuses = a.statuses;
  if (!a.name.empty()) f.name = a.name;
  if (!a.queue.empty()) f.queue = a.queue;
  if (!a.executor.empty()) f.executor = a.executor;
  if (!a.id_prefix.empty()) f.id_prefix = a.id_prefix;
  time_bound(a.since, f.since_s, f.since_at);
  time_bound(a.until, f.until_s, f.until_at);
  if (!a.changed_since.empty()) {
    f.changed_since_s = parse_duration(a.changed_since);
    if (!f.changed_since_s)
      throw failure(bad_usage, "--changed-since: '" + one_line(a.changed_since) +
                                   "' is not an age; give how long ago: 30m, 1h, 7d");
  }
  f.retrying = a.retrying;
  if (!a.text.empty()) {
    if (a.text.find('\0') != std::string::npos) throw failure(bad_usage, "--text holds a NUL");
    f.text = a.text;
  }
  f.scan = a.max_scan;
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
  // A last row {"scanned_to"}: a status had more than --max-scan rows, and every match is
  // listed down to that edge only; unless the page is full anyway, the next one starts there.
  ojson edge = nullptr;
  if (!rows.empty() && rows.back().contains("scanned_to")) {
    edge = std::move(rows.back()["scanned_to"]);
    rows.pop_back();
  }
  const bool more = std::int64_t(rows.size()) > a.limit;
  if (more) rows.pop_back();
  const bool searched = !more && !edge.is_null();
  std::string next;
  if (more) next = cursor_of(rows.back());
  if (searched) next = cursor_of(edge);
  if (g.json) {
    ojson out = ojson::object();
    out["workflows"] = rows;
    out["offset"] = a.offset;
    out["limit"] = a.limit;
    out["next_offset"] = more ? ojson(a.offset + a.limit) : ojson(nullptr);
    // Keyset paging: stable while workflows come and go (offsets shift).
    out["next_cursor"] = next.empty() ? ojson(nullptr) : ojson(next);
    out["searched"] =
        searched ? ojson{{"to", edge["created_at"]}, {"rows", a.max_scan}} : ojson(nullptr);
    print_json(out);
    return done;
  }
  const auto searched_note = [&] {
    if (searched)
      std::fprintf(stderr,
                   "(searched the workflows created down to %s, %lld of each status: every "
                   "match since then is listed; older ones: add --after %s)\n",
                   cell("created_at", edge["created_at"]).c_str(), (long long)a.max_scan,
                   shell_word(next).c_str());
  };
  if (rows.empty()) {
    std::puts(a.offset > 0 ? "no more workflows" : "no workflows match");
    searched_note();
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
  if (more) {
    // The cursor holds the id: printed as one shell word that gives it back when pasted, with
    // nothing raw in it for the terminal to act on.
    const std::string cursor = cursor_of(rows.back());
    const std::string word = shell_word(cursor);
    std::fprintf(stderr, "(more: add --after %s%s)\n", word.c_str(),
                 word.front() == '$'
                     ? "; the id holds characters a terminal would act on, so the cursor is "
                       "written as a bash/zsh $'...' string (or use --json: next_cursor)"
                     : "");
  }
  searched_note();
  return done;
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
  // workflows.last_error outlives the trouble: while the workflow is unfinished it says why it
  // is not moving; once it finished it is history, labelled as such (a failed workflow's own
  // error is under "error").
  if (w.contains("last_error") && !w["last_error"].is_null()) {
    const auto state = durable::parse_workflow_state(w["status"].get<std::string>());
    const bool finished = state && is_finished(*state);
    const bool same =
        w["error"].is_object() && w["last_error"].is_string() &&
        w["error"].value("message", std::string()) == w["last_error"].get<std::string>();
    if (!finished)
      fields.emplace_back("last error", field("last_error"));
    else if (!same)
      fields.emplace_back("earlier error", field("last_error") + " (not current: the workflow is " +
                                               field("status") + ")");
  }
  // Why it is where it is, while it has not ended (the view waiting).
  if (const auto& v = all.value("waiting", ojson()); v.is_object() && v["reason"].is_string()) {
    const bool blocked = v["blocked"].is_boolean() && v["blocked"].get<bool>();
    fields.emplace_back(blocked ? "stuck" : "waiting", cell("reason", v["reason"]));
    if (!v["next_at"].is_null()) fields.emplace_back("moves at", cell("next_at", v["next_at"]));
  }
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
  if (w.contains("traceparent") && w["traceparent"].is_string()) {
    const std::string tp = w["traceparent"].get<std::string>();
    fields.emplace_back("trace", tp.size() == 55 ? tp.substr(3, 32) : field("traceparent"));
    fields.emplace_back("traceparent", field("traceparent"));
    if (w["tracestate"].is_string()) fields.emplace_back("tracestate", field("tracestate"));
  }
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
  // The same steps as list's STEPS column: journal rows, and steps with attempts but no row.
  std::size_t journaled = 0;
  for (const auto& step : steps) journaled += step.value("journaled", true) ? 1 : 0;
  if (journaled == steps.size())
    std::printf("steps (%zu)\n", steps.size());
  else
    std::printf("steps (%zu: %zu journaled, %zu with attempts but no journal row yet)\n",
                steps.size(), journaled, steps.size() - journaled);
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
  // Every attempt of the steps that had more than one: each failure with its error and times,
  // the marks of retry() and resume(), and the attempt that succeeded.
  if (const auto attempts = all.value("attempts", ojson::array()); !attempts.empty()) {
    std::puts("");
    std::printf("attempts (%zu%s)\n", attempts.size(),
                attempts.size() >= 1000 ? ", the newest; --json has the same" : "");
    print_table(attempts.get<std::vector<ojson>>(),
                {{"seq", 6},
                 {"name", 24},
                 {"attempt", 7},
                 {"outcome", 9},
                 {"started_at", 19},
                 {"ended_at", 19},
                 {"duration_ms", 12},
                 {"next_attempt_at", 19},
                 {"error", 60}},
                "  ");
  }
  for (const char* part : {"children", "inbox", "events", "streams"}) {
    const auto items = all[part].get<std::vector<ojson>>();
    if (items.empty()) continue;
    std::puts("");
    std::printf("%s (%zu)\n", part, items.size());
    if (std::string(part) == "children")
      print_table(items, {{"id", 40}, {"name", 24}, {"status", 11}, {"completed_at", 19}}, "  ");
    else if (std::string(part) == "inbox")
      print_table(items, {{"id", 12}, {"topic", 24}, {"created_at", 19}, {"payload", 60}}, "  ");
    else if (std::string(part) == "streams")
      print_table(items, {{"key", 24}, {"values", 8}, {"closed", 6}, {"last_at", 19}}, "  ");
    else
      print_table(items, {{"key", 24}, {"updated_at", 19}, {"value", 60}}, "  ");
  }
  return done;
}

int cmd_stuck(session& s, const settings& g, std::int64_t limit) {
  if (limit < 1) throw failure(bad_usage, "--limit must be at least 1");
  const auto rows = s.rows(s.st().admin_stuck(limit));
  return print_rows(
      g, rows, "nothing is stuck: every workflow that has not ended can move on its own",
      {{"id", 36}, {"name", 20}, {"status", 9}, {"since", 19}, {"blocked", 7}, {"reason", 100}});
}

int cmd_queues(session& s, const settings& g) {
  const auto rows = s.rows(s.st().admin_queues());
  return print_rows(g, rows, "no queues (no queued workflows, no configured limits)",
                    {{"queue", 24},
                     {"queued", 8},
                     {"delayed", 8},
                     {"running", 8},
                     {"sleeping", 8},
                     {"paused", 6},
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
  for (const durable::workflow_state state : durable::all_workflow_states) {
    const std::string status(durable::to_string(state));
    const auto it = st["workflows"].find(status);
    // A large table's finished statuses are the planner's estimates (admin_stats.sql).
    bool estimated = false;
    if (const auto e = st.find("workflows_estimated"); e != st.end() && e->is_array())
      for (const auto& name : *e) estimated = estimated || name == status;
    fields.emplace_back(status,
                        (estimated ? "~" : "") +
                            (it == st["workflows"].end() ? std::string("0") : cell(status, *it)));
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

}  // namespace durable_cli

namespace durable_cli {

int cmd_audit(session& s, const settings& g, std::int64_t limit, const std::string& action) {
  if (limit < 1) throw failure(bad_usage, "--limit must be at least 1");
  std::optional<std::string> only;
  if (!action.empty()) only = action;
  const auto rows = s.rows(s.st().audit_list(limit, std::nullopt, only));
  return print_rows(g, rows,
                    "no audit rows (no action was taken through the console or this program)",
                    {{"id", 6},
                     {"at", 19},
                     {"actor", 16},
                     {"via", 8},
                     {"address", 15},
                     {"action", 16},
                     {"target", 40},
                     {"count", 6},
                     {"result", 8},
                     {"detail", 40}});
}

}  // namespace durable_cli

// ---- wait, show --wait -----------------------------------------------------------------------

namespace durable_cli {

namespace {

// Plain functions, not coroutine lambdas (GCC 12: see docs/concepts.md).

/// result() within `timeout_s` (< 0: no limit): nullopt once the workflow ended, else what the
/// timeout said (the status last read, or that the database has not served the reads).
asio::awaitable<std::optional<durable::result_timeout>> await_end_within(durable::workflow_handle h,
                                                                         double timeout_s) {
  const auto limit =
      timeout_s < 0
          ? durable::forever
          : std::chrono::ceil<std::chrono::milliseconds>(std::chrono::duration<double>(timeout_s));
  try {
    (void)co_await h.result<nlohmann::json>(limit);
  } catch (const durable::result_timeout& late) {
    co_return late;
  } catch (const durable::workflow_error&) {  // it ended otherwise than in success
  }
  co_return std::nullopt;
}

}  // namespace

void wait_for_end(session& s, const std::string& id, double timeout_s,
                  const std::string& timeout_text) {
  if (!s.record_of(id)) s.unknown(id);
  const auto late = run(s.io, await_end_within(s.eng.handle(id), timeout_s));
  if (!late) return;
  if (late->database_unreachable())  // result() waited through the outage until the timeout
    throw failure(database_trouble, "'" + one_line(id) + "' was awaited for " +
                                        one_line(timeout_text) + ", but " + one_line(late->what()));
  const auto status = s.status_of(id);
  if (!status) s.unknown(id);  // deleted while it was awaited
  throw failure(not_done, "'" + one_line(id) + "' is still " + *status + " after " +
                              one_line(timeout_text) + "; nothing was changed (wait again, or " +
                              "see 'durable show " + shell_word(id) + "')");
}

int cmd_wait(session& s, const settings& g, const std::string& id, double timeout_s,
             const std::string& timeout_text) {
  wait_for_end(s, id, timeout_s, timeout_text);
  const auto w = s.record_of(id);
  if (!w) s.unknown(id);
  const bool ok = w->status == "succeeded";
  const ojson output = w->output ? ojson::parse(*w->output) : ojson(nullptr);
  const ojson error = w->error ? ojson::parse(*w->error) : ojson(nullptr);
  if (g.json) {
    print_json({{"id", id},
                {"status", w->status},
                {"output", output},
                {"error", error},
                {"reason", w->reason ? ojson(*w->reason) : ojson(nullptr)}});
  } else if (ok) {
    std::puts(json_line(output).c_str());  // the output as compact JSON (for jq)
  }
  if (ok) return done;
  std::string why = w->reason.value_or("");
  if (error.is_object() && error.contains("message") && error["message"].is_string()) {
    const std::string type = error.value("type", std::string());
    why = (type.empty() ? "" : type + ": ") + error["message"].get<std::string>();
  }
  throw failure(not_done, "'" + one_line(id) + "' ended " + w->status +
                              (why.empty() ? std::string() : ": " + one_line(why)) +
                              "; see 'durable show " + shell_word(id) + "'");
}

// ---- stream ----------------------------------------------------------------------------------

namespace {

/// Prints the values of `r` as they come: until the stream ends, or (not `follow`) until none
/// is there now, or `timeout_s` passes (< 0: no limit; `timed_out` says so).
asio::awaitable<void> print_stream(durable::stream_reader<nlohmann::json>& r, bool follow,
                                   double timeout_s, bool offsets, bool json, bool& timed_out) {
  const auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::ceil<std::chrono::milliseconds>(
      std::chrono::duration<double>(timeout_s < 0 ? 0.0 : timeout_s));
  for (;;) {
    auto wait = std::chrono::milliseconds(0);  // not following: what is there now
    if (follow && timeout_s < 0) wait = durable::forever;
    if (follow && timeout_s >= 0) {
      wait = limit - std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - start);
      if (wait.count() <= 0) {
        timed_out = true;
        co_return;
      }
    }
    std::optional<durable::stream_value<nlohmann::json>> v = co_await r.next(wait);
    if (!v) {
      timed_out = follow && r.ended() == durable::stream_end::open;
      co_return;
    }
    if (json) {  // JSON lines: one compact object a line
      const nlohmann::json line{{"offset", v->offset}, {"value", std::move(v->value)}};
      std::puts(json_line(line).c_str());
    } else {
      const std::string line = json_line(v->value);
      if (offsets)
        std::printf("%lld\t%s\n", static_cast<long long>(v->offset), line.c_str());
      else
        std::puts(line.c_str());
    }
    std::fflush(stdout);
  }
}

}  // namespace

int cmd_stream(session& s, const settings& g, const stream_args& a) {
  if (a.from < 0)
    throw failure(bad_usage, "--from " + std::to_string(a.from) +
                                 " is negative; offsets count from 0 (the first value)");
  if (!s.record_of(a.id)) s.unknown(a.id);
  auto r = s.eng.read_stream<nlohmann::json>(a.id, a.key, a.from);
  bool timed_out = false;
  const std::string which = "stream '" + one_line(a.key) + "' of '" + one_line(a.id) + "'";
  if (!run(s.io, print_stream(r, a.follow, a.timeout_s, a.offsets, g.json, timed_out))) {
    std::fprintf(stderr, "%s: interrupted; go on with --from %lld\n", which.c_str(),
                 static_cast<long long>(r.offset()));
    return not_done;  // a signal
  }
  switch (r.ended()) {
    case durable::stream_end::closed:
      std::fprintf(stderr, "%s is closed: %lld values\n", which.c_str(),
                   static_cast<long long>(r.closed_at().value_or(r.offset())));
      return done;
    case durable::stream_end::finished:
      std::fprintf(stderr,
                   "%s ended with its workflow (%s) without a close; the next offset is %lld\n",
                   which.c_str(), r.finished_status().c_str(), static_cast<long long>(r.offset()));
      return done;
    case durable::stream_end::open:
      break;
  }
  if (timed_out)
    throw failure(not_done, which + " is still open after " + one_line(a.timeout_text) +
                                "; the next offset is " + std::to_string(r.offset()) +
                                " (go on with --from " + std::to_string(r.offset()) + ")");
  std::fprintf(stderr, "%s is open: the next offset is %lld; --follow waits for more\n",
               which.c_str(), static_cast<long long>(r.offset()));
  return done;
}

}  // namespace durable_cli
