// The engine's schedule operations (docs/schedules.md): create or update, pause, resume,
// trigger, backfill, delete, list. Firing is the maintenance tick's (runtime/schedules.ipp).
#pragma once

#include <nlohmann/json.hpp>

#include "durable/cron.hpp"
#include "durable/detail/runtime/parts.ipp"
#include "durable/detail/schedule_plan.hpp"

namespace durable {
namespace detail {

inline catch_up catch_up_from(const std::string& s) {
  if (s == "latest") return catch_up::latest;
  if (s == "all") return catch_up::all;
  return catch_up::skip;
}

inline std::optional<std::chrono::sys_seconds> unix_time(const nlohmann::json& v) {
  if (v.is_null()) return std::nullopt;
  return std::chrono::sys_seconds(std::chrono::seconds(v.get<std::int64_t>()));
}

inline schedule_info schedule_info_from(const std::string& json) {
  const auto j = nlohmann::json::parse(json);
  schedule_info i;
  i.id = j.at("id").get<std::string>();
  i.cron = j.at("cron").get<std::string>();
  i.time_zone = j.at("time_zone").get<std::string>();
  i.workflow = j.at("workflow_name").get<std::string>();
  i.queue = j.at("queue").get<std::string>();
  i.inputs = j.at("inputs").dump();
  i.policy = catch_up_from(j.at("catch_up").get<std::string>());
  i.paused = j.at("paused").get<bool>();
  i.next_fire_at = unix_time(j.at("next_fire_at"));
  i.last_slot_at = unix_time(j.at("last_slot_at"));
  i.start_at = unix_time(j.at("start_at"));
  i.end_at = unix_time(j.at("end_at"));
  if (!j.at("last_workflow_id").is_null())
    i.last_workflow_id = j.at("last_workflow_id").get<std::string>();
  if (!j.at("last_status").is_null()) i.last_status = j.at("last_status").get<std::string>();
  i.fired = j.at("fired").get<std::int64_t>();
  i.missed = j.at("missed").get<std::int64_t>();
  i.late = j.at("late").get<std::int64_t>();
  return i;
}

/// Checks `o` and makes the row it defines; throws invalid_schedule naming what is wrong.
inline store::schedule_definition schedule_definition_of(const schedule_options& o,
                                                         const nlohmann::json& inputs,
                                                         const std::string& app_version,
                                                         std::int64_t now) {
  const auto bad = [&](const std::string& what) {
    throw invalid_schedule("schedule '" + std::string(o.id) + "': " + what);
  };
  if (o.id.empty()) throw invalid_schedule("schedule: the id must not be empty");
  if (o.id.find('@') != std::string_view::npos)
    bad("the id must not contain '@' (a slot's workflow id is '<id>@<slot>')");
  if (o.workflow.empty()) bad("the workflow name must not be empty");
  if (o.queue.empty()) bad("the queue must not be empty");
  using std::chrono::hours;
  if (o.catch_up_max <= 0 || o.catch_up_max > 100000) bad("catch_up_max must be in 1-100000");
  if (o.late_after.count() <= 0 || o.late_after > hours(24 * 366))
    bad("late_after must be positive and at most a year");
  if (o.jitter.count() < 0 || o.jitter > hours(24)) bad("jitter must be in 0-24 h");
  if (o.timeout.count() < 0 || o.timeout > hours(24 * 3660))
    bad("timeout must be in 0 (none) to 10 years");
  if (o.start_at && o.end_at && *o.end_at <= *o.start_at) bad("end_at must be after start_at");
  const cron_expression expr = cron_expression::parse(o.cron);  // names the bad field
  check_time_zone(o.time_zone);
  const std::string zone(o.time_zone);
  store::schedule_definition d;
  d.id = o.id;
  d.cron = o.cron;
  d.time_zone = zone;
  d.workflow = o.workflow;
  d.inputs = inputs.dump();
  d.queue = o.queue;
  d.priority = o.priority;
  d.timeout_ms = o.timeout.count();
  d.app_version = app_version;
  d.catch_up = std::string(to_string(o.policy));
  d.catch_up_max = o.catch_up_max;
  d.late_after_ms = o.late_after.count();
  d.jitter_ms = o.jitter.count();
  if (o.start_at) d.start_at = o.start_at->time_since_epoch().count();
  if (o.end_at) d.end_at = o.end_at->time_since_epoch().count();
  d.next_fire_at = first_slot_from(expr, zone, std::max(now + 1, d.start_at.value_or(0)), d.end_at);
  d.paused = o.paused;
  d.pass_slot = o.pass_slot;
  return d;
}

/// A schedule, and the server's clock when it was read.
struct fetched_schedule {
  schedule_info info;
  double now = 0;
};

inline asio::awaitable<std::optional<fetched_schedule>> fetch_schedule(engine_state& s,
                                                                       const std::string& id) {
  // Every query is named before its co_await (GCC 12, docs/concepts.md#gcc-12).
  auto q = s.st.schedule_get(id);
  auto c = co_await s.pool.acquire();
  auto row = co_await store::fetch_one(*c, std::move(q));
  if (!row) co_return std::nullopt;
  co_return fetched_schedule{schedule_info_from(row->json),
                             nlohmann::json::parse(row->json).at("now").get<double>()};
}

/// The server's clock now (Unix seconds): schedules count from it, not from this host's.
inline asio::awaitable<double> server_now(engine_state& s) {
  auto q = s.st.server_now();
  auto c = co_await s.pool.acquire();
  auto row = co_await store::fetch_one(*c, std::move(q));
  co_return std::stod(row->json);
}

}  // namespace detail

DURABLE_DECL asio::awaitable<void> engine::schedule_impl(std::string id, std::string cron,
                                                         std::string time_zone,
                                                         std::string workflow, std::string queue,
                                                         schedule_options opts,
                                                         nlohmann::json inputs) {
  auto s = s_;
  opts.id = id;  // the caller's views may be gone: use this frame's copies
  opts.cron = cron;
  opts.time_zone = time_zone;
  opts.workflow = workflow;
  opts.queue = queue;
  detail::refuse_nul("schedule()", "schedule id", id);
  detail::refuse_nul("schedule()", "workflow name", workflow);
  detail::refuse_nul("schedule()", "queue name", queue);
  detail::refuse_nul("schedule()", "time zone", time_zone);
  const double now = co_await detail::server_now(*s);
  const auto def =
      detail::schedule_definition_of(opts, inputs, s->options.app_version, std::int64_t(now));
  auto q = s->st.schedule_upsert(def);
  auto c = co_await s->pool.acquire();
  co_await c->run(std::move(q.st));
}

DURABLE_DECL asio::awaitable<bool> engine::set_schedule_paused_impl(std::string id, bool paused) {
  auto s = s_;
  detail::refuse_nul(paused ? "pause_schedule()" : "resume_schedule()", "schedule id", id);
  std::optional<std::int64_t> next;
  if (!paused) {
    const auto fetched = co_await detail::fetch_schedule(*s, id);
    if (!fetched) co_return false;
    const schedule_info* info = &fetched->info;
    // The first slot after now on the server's clock: the slots of the pause do not run.
    const auto from = std::max(std::int64_t(fetched->now) + 1,
                               info->start_at ? info->start_at->time_since_epoch().count() : 0);
    std::optional<std::int64_t> end;
    if (info->end_at) end = info->end_at->time_since_epoch().count();
    next = detail::first_slot_from(cron_expression::parse(info->cron), info->time_zone, from, end);
  }
  auto q = s->st.schedule_set_paused(id, paused, next);
  auto c = co_await s->pool.acquire();
  const auto rows = co_await store::fetch(*c, std::move(q));
  co_return !rows.empty();
}

DURABLE_DECL asio::awaitable<std::string> engine::trigger_schedule_impl(std::string id) {
  auto s = s_;
  detail::refuse_nul("trigger_schedule()", "schedule id", id);
  const auto fetched = co_await detail::fetch_schedule(*s, id);
  if (!fetched) throw error("trigger_schedule: there is no schedule '" + id + "'");
  const schedule_info* info = &fetched->info;
  // Named after the moment on the server's clock, to the millisecond.
  const double now = fetched->now;
  const auto secs = std::chrono::sys_seconds(std::chrono::seconds(std::int64_t(now)));
  const auto ms = std::int64_t((now - double(secs.time_since_epoch().count())) * 1000);
  const std::string local = format_slot(secs, info->time_zone);
  const std::string wid = id + "@trigger:" + local.substr(0, 19) + "." + (ms < 100 ? "0" : "") +
                          (ms < 10 ? "0" : "") + std::to_string(ms) + local.substr(19);
  auto c = co_await s->pool.acquire();
  const std::vector<std::string> ids{wid}, slots{local};
  const std::vector<double> wake{now};
  auto q = s->st.schedule_start(id, ids, slots, wake);
  const auto started = co_await store::fetch(*c, std::move(q));
  if (started.empty())
    throw error("trigger_schedule('" + id +
                "'): nothing was started: the schedule was deleted "
                "meanwhile, or another trigger took the same millisecond; try again");
  co_return wid;
}

DURABLE_DECL asio::awaitable<std::size_t> engine::backfill_schedule_impl(
    std::string id, std::chrono::sys_seconds from, std::chrono::sys_seconds to, std::size_t limit) {
  auto s = s_;
  if (to < from) throw error("backfill_schedule('" + id + "'): `to` is before `from`");
  const auto fetched = co_await detail::fetch_schedule(*s, id);
  if (!fetched) throw error("backfill_schedule: there is no schedule '" + id + "'");
  const schedule_info* info = &fetched->info;
  const auto expr = cron_expression::parse(info->cron);
  std::vector<std::string> ids, locals;
  std::vector<double> wake;
  for (auto at = expr.next_after(from - std::chrono::seconds(1), info->time_zone); at && *at <= to;
       at = expr.next_after(*at, info->time_zone)) {
    if (ids.size() == limit)
      throw error("backfill_schedule('" + id + "'): more than " + std::to_string(limit) +
                  " slots between the two times; nothing was started. Backfill a shorter "
                  "range, or pass a larger limit");
    auto slot = detail::make_slot(id, info->time_zone, *at, 0);
    ids.push_back(std::move(slot.workflow_id));
    locals.push_back(std::move(slot.local));
    wake.push_back(slot.wake);
  }
  if (ids.empty()) co_return 0;
  auto q = s->st.schedule_start(id, ids, locals, wake);
  auto c = co_await s->pool.acquire();
  const auto started = co_await store::fetch(*c, std::move(q));
  co_return started.size();
}

DURABLE_DECL asio::awaitable<bool> engine::delete_schedule_impl(std::string id) {
  auto s = s_;
  auto q = s->st.schedule_delete(id);
  auto c = co_await s->pool.acquire();
  const auto rows = co_await store::fetch(*c, std::move(q));
  co_return !rows.empty();
}

DURABLE_DECL asio::awaitable<std::vector<schedule_info>> engine::list_schedules_impl(
    std::string prefix) {
  auto s = s_;
  std::vector<store::json_value> rows;
  {
    auto q = s->st.schedules_list(prefix);
    auto c = co_await s->pool.acquire();
    rows = co_await store::fetch(*c, std::move(q));
  }
  std::vector<schedule_info> out;
  for (const auto& r : rows) out.push_back(detail::schedule_info_from(r.json));
  co_return out;
}

}  // namespace durable
