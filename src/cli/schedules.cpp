// The `durable` program's flow-control verbs (docs/schedules.md): `schedules` lists them;
// `schedule show|pause|resume|trigger|backfill|delete ID` reads or acts on one, and
// `queue pause|resume NAME` stops or restarts a queue's dispatch, through the engine's own
// operations.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli.hpp"

namespace durable_cli {

namespace {

/// "2026-12-01T03:00:00Z", "2026-12-01T03:00:00+01:00", "2026-12-01 03:00" or "2026-12-01"
/// (UTC when no offset is given), or Unix seconds.
std::chrono::sys_seconds parse_time(const std::string& option, const std::string& text) {
  using namespace std::chrono;
  const auto bad = [&] {
    return failure(bad_usage, option + ": cannot read '" + one_line(text) +
                                  "' as a time; give 2026-12-01T03:00:00Z, "
                                  "2026-12-01T03:00:00+01:00, 2026-12-01 or Unix seconds");
  };
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos)
    return sys_seconds(seconds(std::stoll(text)));
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, n = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3) throw bad();
  std::size_t at = std::size_t(n);
  if (at < text.size() && (text[at] == 'T' || text[at] == ' ')) {
    int m = 0;
    if (std::sscanf(text.c_str() + at + 1, "%2d:%2d%n", &h, &mi, &m) != 2) throw bad();
    at += 1 + std::size_t(m);
    if (at < text.size() && text[at] == ':') {
      if (std::sscanf(text.c_str() + at + 1, "%2d%n", &s, &m) != 1) throw bad();
      at += 1 + std::size_t(m);
    }
  }
  int offset_min = 0;
  if (at < text.size()) {
    const std::string rest = text.substr(at);
    int oh = 0, om = 0;
    if (rest == "Z" || rest == "z") {
    } else if ((rest[0] == '+' || rest[0] == '-') &&
               std::sscanf(rest.c_str() + 1, "%2d:%2d", &oh, &om) == 2 && rest.size() == 6) {
      offset_min = (rest[0] == '-' ? -1 : 1) * (oh * 60 + om);
    } else {
      throw bad();
    }
  }
  const year_month_day ymd{year(y), month(unsigned(mo)), day(unsigned(d))};
  if (!ymd.ok() || h > 23 || mi > 59 || s > 59) throw bad();
  return sys_days(ymd) + hours(h) + minutes(mi) + seconds(s) - minutes(offset_min);
}

std::vector<column> schedule_columns() {
  return {{"id", 24},          {"cron", 16},         {"time_zone", 16}, {"workflow_name", 16},
          {"paused", 6},       {"next_fire_at", 19}, {"overdue", 10},   {"last_slot_at", 19},
          {"last_status", 11}, {"fired", 6},         {"missed", 6},     {"late", 5}};
}

/// The rows of schedules_list with their Unix times as UTC text.
std::vector<ojson> readable(std::vector<ojson> rows) {
  for (auto& r : rows)
    for (const char* key : {"next_fire_at", "last_slot_at", "start_at", "end_at"}) {
      if (!r.contains(key) || !r[key].is_number_integer()) continue;
      const std::time_t t = r[key].get<std::int64_t>();
      char buf[32];
      std::tm tm{};
      gmtime_r(&t, &tm);
      std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
      r[key] = buf;
    }
  return rows;
}

std::vector<ojson> one(session& s, const std::string& id) {
  auto rows = s.rows(s.st().schedule_get(id));
  if (rows.empty())
    throw failure(not_done, "no schedule has the id '" + one_line(id) + "' in schema '" +
                                one_line(s.eng.schema_name()) + "'; see 'durable schedules'");
  return readable(std::move(rows));
}

}  // namespace

void check_backfill(const std::string& from, const std::string& to) {
  if (from.empty() || to.empty())
    throw failure(bad_usage, "schedule backfill: give --from and --to");
  (void)parse_time("--from", from);
  (void)parse_time("--to", to);
}

int cmd_schedules(session& s, const settings& g) {
  return print_rows(g, readable(s.rows(s.st().schedules_list(""))),
                    "no schedules (engine::schedule() creates them; docs/schedules.md)",
                    schedule_columns());
}

int cmd_schedule(session& s, const settings& g, const std::string& verb, const std::string& id,
                 const std::string& from, const std::string& to, std::size_t limit) {
  if (verb == "show") {
    const auto rows = one(s, id);
    if (g.json) {
      print_json(rows.at(0));
      return done;
    }
    std::vector<std::pair<std::string, std::string>> fields;
    for (const auto& [k, v] : rows.at(0).items()) fields.emplace_back(k, text_of(v));
    print_fields(fields);
    return done;
  }
  if (verb == "pause" || verb == "resume") {
    const bool pause = verb == "pause";
    if (!run(s.io, pause ? s.eng.pause_schedule(id) : s.eng.resume_schedule(id))) (void)one(s, id);
    const auto row = one(s, id).at(0);
    print_action(g, verb, id,
                 pause ? "paused schedule '" + one_line(id) + "': no slot fires until it is resumed"
                       : "resumed schedule '" + one_line(id) + "'; its next slot is " +
                             text_of(row.at("next_fire_at")) +
                             " UTC (the slots of the pause do not run)",
                 {{"next_fire_at", row.at("next_fire_at")}});
    return done;
  }
  if (verb == "trigger") {
    (void)one(s, id);
    const std::string wid = run(s.io, s.eng.trigger_schedule(id));
    print_action(g, verb, id, "started '" + one_line(wid) + "' (queue of the schedule)",
                 {{"workflow_id", wid}});
    return done;
  }
  if (verb == "backfill") {
    check_backfill(from, to);
    (void)one(s, id);
    const auto n = run(s.io, s.eng.backfill_schedule(id, parse_time("--from", from),
                                                     parse_time("--to", to), limit));
    print_action(g, verb, id,
                 "started " + std::to_string(n) +
                     " workflows for the slots between the two times (slots whose workflow "
                     "exists were left alone)",
                 {{"started", n}});
    return done;
  }
  if (verb == "delete") {
    if (!run(s.io, s.eng.delete_schedule(id))) (void)one(s, id);
    print_action(g, verb, id,
                 "deleted schedule '" + one_line(id) + "'; the workflows it started stay");
    return done;
  }
  throw failure(bad_usage, "schedule: unknown verb '" + one_line(verb) +
                               "'; use show, pause, resume, trigger, backfill or delete");
}

int cmd_queue(session& s, const settings& g, const std::string& verb, const std::string& name,
              bool create) {
  const bool pause = verb == "pause";
  if (!create) {
    auto known = [&]() -> asio::awaitable<bool> {
      auto q = s.st().admin_queue_known(name);
      auto c = co_await s.eng.pool().acquire();
      auto r = co_await durable::store::fetch_one(*c, std::move(q));
      co_return r && r->n > 0;
    };
    if (!run(s.io, known()))
      throw failure(not_done, "no queue is named '" + one_line(name) + "' in schema '" +
                                  s.eng.schema_name() +
                                  "': it has no settings and no workflow was ever enqueued on "
                                  "it, so nothing was " +
                                  (pause ? "paused" : "resumed") +
                                  ". Check the name ('durable queues' lists them); to pause a "
                                  "queue before its first workflow, add --create");
  }
  (void)run(s.io, pause ? s.eng.pause_queue(name) : s.eng.resume_queue(name));
  print_action(g, verb, name,
               pause ? "paused queue '" + one_line(name) +
                           "' for every executor: nothing more is dispatched from it (what runs "
                           "finishes); 'durable queue resume " +
                           one_line(name) + "' restarts it"
                     : "resumed queue '" + one_line(name) + "'; its executors dispatch again");
  return done;
}

}  // namespace durable_cli
