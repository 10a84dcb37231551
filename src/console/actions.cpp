// The console's actions (actions.hpp): single and bulk, each through the engine's operations,
// each written in the audit before it runs ('started') and given its result when it ends (done,
// refused, failed).
#include "actions.hpp"

#include <algorithm>
#include <charconv>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "durable.hpp"
#include "durable/store.hpp"
#include "request.hpp"

namespace durable::console_detail {
namespace {

std::string text_field(const ojson& body, const char* key, bool required = true) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) {
    if (required) throw bad_request(std::string("the field '") + key + "' is required");
    return {};
  }
  if (!it->is_string()) throw bad_request(std::string("the field '") + key + "' must be a string");
  auto text = it->get<std::string>();
  if (required && text.empty())
    throw bad_request(std::string("the field '") + key + "' must not be empty");
  return text;
}

bool unfinished(const std::string& status) {
  const auto s = parse_workflow_state(status);
  return s && !is_finished(*s);
}

// The workflow's status now, for the message of an action that did not apply.
asio::awaitable<std::string> status_of(engine& eng, std::chrono::milliseconds limit,
                                       const std::string& id) {
  const auto& st = detail::store_of(eng);
  auto q = st.workflow_get(id);
  auto c = co_await bounded_connection::acquire(eng, limit);
  auto w = co_await store::fetch_one(*c, std::move(q));
  if (!w) throw not_found("no workflow has the id '" + id + "'");
  co_return w->status;
}

std::string target_text(const ojson& target) {
  return target.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// The action's audit row, written before it runs (result 'started', migration 16): its id.
// Throws audit_unwritten when the row cannot be written: the action is then not done.
asio::awaitable<std::int64_t> begin_audit(engine& eng, std::chrono::milliseconds limit,
                                          const actor& who, const std::string& action,
                                          const ojson& target) {
  const auto& st = detail::store_of(eng);
  try {
    auto q = st.audit_insert(who.who, who.via, who.address, action, target_text(target), 0,
                             "started", "");
    auto c = co_await bounded_connection::acquire(eng, limit);
    auto row = co_await store::fetch_one(*c, std::move(q));
    if (!row) throw std::runtime_error("the insert returned no row");
    co_return row->id;
  } catch (const pg::check_violation&) {
    throw audit_unwritten(
        "the audit table of schema '" + eng.schema_name() +
        "' is older than migration 16 (it cannot record an action before it runs): nothing was "
        "done; run `durable migrate`, then try again");
  } catch (const std::exception& e) {
    throw audit_unwritten(std::string("the action's audit row could not be written, so nothing "
                                      "was done: ") +
                          e.what());
  }
}

// Runs `act` between its audit row's start and its end: done, refused (conflict, not found) or
// failed (anything else); the exception goes on to the caller after the row is ended. Input
// that is not valid (bad_request) is refused before anything is attempted and leaves no row; an
// action whose row cannot be written is not done (audit_unwritten).
template <class Act>
asio::awaitable<ojson> audited(engine& eng, std::chrono::milliseconds limit, const actor& who,
                               const std::string& action, ojson& target, Act act) {
  const std::int64_t id = co_await begin_audit(eng, limit, who, action, target);
  ojson out;
  std::string result = "done", detail;
  std::int64_t count = 0;
  std::exception_ptr failure;
  try {
    out = co_await act(count);
    detail = out.value("message", std::string());
  } catch (const std::exception& e) {
    // A conflict, an unknown target, or input found wrong once the action ran: it did nothing
    // (refused); anything else failed.
    const bool refusal = dynamic_cast<const conflict*>(&e) || dynamic_cast<const not_found*>(&e) ||
                         dynamic_cast<const bad_request*>(&e);
    result = refusal ? "refused" : "failed";
    detail = e.what();
    failure = std::current_exception();
  }
  std::string audit_error;
  try {
    const auto& st = detail::store_of(eng);
    auto q = st.audit_finish(id, target_text(target), count, result, detail);
    auto c = co_await bounded_connection::acquire(eng, limit);
    (void)co_await store::fetch_one(*c, std::move(q));
  } catch (const std::exception& e) {
    if (failure) std::rethrow_exception(failure);  // the action's own error says more
    // The action was done: say so, and that its row still says 'started', rather than an
    // error that invites a second try.
    audit_error = "the action was done, but its audit row " + std::to_string(id) +
                  " still says 'started': its result could not be written: " + e.what();
  }
  if (failure) std::rethrow_exception(failure);
  out["audit_id"] = id;
  if (!audit_error.empty()) out["audit_error"] = audit_error;
  co_return out;
}

// One workflow action; true when it applied.
asio::awaitable<bool> act_on(engine& eng, const std::string& action, const std::string& id) {
  if (action == "cancel") co_return co_await eng.cancel(id);
  if (action == "resume") co_return co_await eng.resume(id);
  co_return co_await eng.retry(id);
}

// Whether `action` can apply to a workflow in `status` now (what act_on's statement checks).
bool applies(const std::string& action, const std::string& status) {
  const auto s = parse_workflow_state(status);
  if (!s) return false;
  if (action == "cancel") return !is_finished(*s);
  if (action == "retry") return *s == workflow_state::dead_letter;
  return std::find(resumable_workflow_states.begin(), resumable_workflow_states.end(), *s) !=
         resumable_workflow_states.end();
}

// The statuses `action` can apply to (what applies() accepts), as the list's status filter.
std::vector<std::string> applicable_statuses(const std::string& action) {
  std::vector<std::string> out;
  for (const auto s : all_workflow_states)
    if (applies(action, std::string(to_string(s)))) out.emplace_back(to_string(s));
  return out;
}

std::string applies_to(const std::string& action) {
  if (action == "cancel")
    return "only an unfinished workflow (pending, running, sleeping, parked, dead_letter) can be "
           "cancelled";
  if (action == "resume") return "resume continues a cancelled, parked or dead-lettered workflow";
  return "retry runs the failed step of a dead-lettered workflow again";
}

// Whether queue `name` has settings or ever had a workflow (admin_queue_known.sql).
asio::awaitable<bool> queue_known(engine& eng, std::chrono::milliseconds limit,
                                  const std::string& name) {
  const auto& st = detail::store_of(eng);
  auto q = st.admin_queue_known(name);
  auto c = co_await bounded_connection::acquire(eng, limit);
  auto row = co_await store::fetch_one(*c, std::move(q));
  co_return row && row->n > 0;
}

asio::awaitable<ojson> workflow_action(engine& eng, std::chrono::milliseconds limit,
                                       const std::string& action, const std::string& id,
                                       std::int64_t& count) {
  bool ok = false;
  try {
    ok = co_await act_on(eng, action, id);
  } catch (const workflow_conflict& e) {
    throw conflict(e.what());
  }
  if (!ok) {
    const auto status = co_await status_of(eng, limit, id);
    throw conflict("'" + id + "' is " + status + ": " + applies_to(action));
  }
  count = 1;
  const char* done = action == "cancel"   ? "cancelled (with its unfinished children)"
                     : action == "resume" ? "resumed: due now"
                                          : "retrying its failed step: due now";
  co_return ojson{{"ok", true}, {"message", "'" + id + "' " + done}};
}

}  // namespace

asio::awaitable<bounded_connection> bounded_connection::acquire(engine& eng,
                                                                std::chrono::milliseconds limit) {
  auto lease = co_await eng.pool().acquire();
  co_return bounded_connection(std::move(lease), limit);
}

std::string fingerprint(const std::vector<std::string>& sorted_ids) {
  std::string all;
  for (const auto& id : sorted_ids) all.append(id).push_back('\n');
  const auto h = static_cast<std::uint64_t>(detail::fnv1a(all));
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = std::to_string(sorted_ids.size()) + "-";
  for (int shift = 60; shift >= 0; shift -= 4) out.push_back(hex[(h >> shift) & 15]);
  return out;
}

asio::awaitable<void> audit_sign_in(engine& eng, std::chrono::milliseconds limit, actor who,
                                    std::string result, std::string detail) {
  const auto& st = detail::store_of(eng);
  try {
    auto q = st.audit_insert(who.who, who.via, who.address, "sign_in", "{}", 0, result, detail);
    auto c = co_await bounded_connection::acquire(eng, limit);
    (void)co_await store::fetch_one(*c, std::move(q));
  } catch (const std::exception& e) {
    throw audit_unwritten(std::string("the sign-in's audit row could not be written, so no "
                                      "session was opened: ") +
                          e.what());
  }
}

asio::awaitable<ojson> run_action(engine& eng, const ojson& body, const actor& who,
                                  std::chrono::milliseconds limit) {
  if (!body.is_object()) throw bad_request("the body must be a JSON object");
  const auto action = text_field(body, "action");
  ojson target = ojson::object();
  if (action == "cancel" || action == "resume" || action == "retry") {
    const auto id = text_field(body, "id");
    target["id"] = id;
    co_return co_await audited(eng, limit, who, action, target, [&](std::int64_t& n) {
      return workflow_action(eng, limit, action, id, n);
    });
  }
  if (action == "fork") {
    const auto id = text_field(body, "id");
    const auto step = body.find("from_step");
    if (step == body.end() || !step->is_number_integer() || step->get<std::int64_t>() < 0 ||
        step->get<std::int64_t>() > 1000000000)
      throw bad_request("the field 'from_step' must be a step number (0 or more)");
    const int from = step->get<int>();
    const auto new_id = text_field(body, "new_id", false);
    target = ojson{{"id", id}, {"from_step", from}};
    if (!new_id.empty()) target["new_id"] = new_id;
    co_return co_await audited(
        eng, limit, who, action, target, [&](std::int64_t& n) -> asio::awaitable<ojson> {
          workflow_handle h;
          try {
            h = co_await eng.fork(id, from, new_id);
          } catch (const pg::sql_error&) {
            throw;
          } catch (const pg::connection_error&) {
            throw;
          } catch (const error& e) {  // unknown id, a step past the journal, a taken new id
            throw conflict(e.what());
          }
          n = 1;
          target["new_id"] = h.id();
          co_return ojson{{"ok", true},
                          {"new_id", h.id()},
                          {"message", "forked '" + id + "' from step " + std::to_string(from) +
                                          " as '" + h.id() + "'"}};
        });
  }
  if (action == "send") {
    const auto id = text_field(body, "id");
    const auto topic = text_field(body, "topic");
    const auto key = text_field(body, "key", false);
    if (!body.contains("value")) throw bad_request("the field 'value' (any JSON) is required");
    const nlohmann::json value = nlohmann::json::parse(body.at("value").dump());
    target = ojson{{"id", id}, {"topic", topic}};
    if (!key.empty()) target["key"] = key;
    co_return co_await audited(
        eng, limit, who, action, target, [&](std::int64_t& n) -> asio::awaitable<ojson> {
          const auto status = co_await status_of(eng, limit, id);
          if (!unfinished(status))
            throw conflict("'" + id + "' is " + status +
                           ": a finished workflow receives no more messages; nothing was sent");
          bool sent = false;
          try {
            sent = co_await eng.send(id, topic, value, key);
          } catch (const pg::sql_error&) {
            throw;
          } catch (const pg::connection_error&) {
            throw;
          } catch (const error& e) {
            throw conflict(e.what());
          }
          n = sent ? 1 : 0;
          co_return ojson{{"ok", true},
                          {"sent", sent},
                          {"message", sent ? "sent to '" + id + "' on topic '" + topic + "'"
                                           : "not sent again: a message with the key '" + key +
                                                 "' was sent before"}};
        });
  }
  if (action == "pause_queue" || action == "resume_queue") {
    const auto queue = text_field(body, "queue");
    target["queue"] = queue;
    const bool pause = action == "pause_queue";
    const auto c = body.find("create");
    if (c != body.end() && !c->is_boolean())
      throw bad_request("the field 'create' must be true or false");
    const bool create = c != body.end() && c->get<bool>();
    if (create) target["create"] = true;
    co_return co_await audited(
        eng, limit, who, action, target, [&](std::int64_t& n) -> asio::awaitable<ojson> {
          if (!create && !co_await queue_known(eng, limit, queue))
            throw not_found("no queue is named '" + queue +
                            "': it has no settings and no workflow was ever enqueued on it, so "
                            "nothing was " +
                            (pause ? "paused" : "resumed") +
                            ". Check the name; to pause a queue before its first workflow, send "
                            "\"create\": true");
          if (pause)
            co_await eng.pause_queue(queue);
          else
            co_await eng.resume_queue(queue);
          n = 1;
          co_return ojson{
              {"ok", true},
              {"message", "queue '" + queue + "' " +
                              (pause ? "paused: nothing more is dispatched from it" : "resumed")}};
        });
  }
  if (action == "pause_schedule" || action == "resume_schedule" || action == "trigger_schedule") {
    const auto id = text_field(body, "schedule");
    target["schedule"] = id;
    co_return co_await audited(
        eng, limit, who, action, target, [&](std::int64_t& n) -> asio::awaitable<ojson> {
          if (action == "trigger_schedule") {
            std::string run;
            try {
              run = co_await eng.trigger_schedule(id);
            } catch (const pg::sql_error&) {
              throw;
            } catch (const pg::connection_error&) {
              throw;
            } catch (const error& e) {
              throw not_found(e.what());
            }
            n = 1;
            target["workflow_id"] = run;
            co_return ojson{{"ok", true},
                            {"workflow_id", run},
                            {"message", "schedule '" + id + "' started '" + run + "'"}};
          }
          const bool pause = action == "pause_schedule";
          const bool found =
              pause ? co_await eng.pause_schedule(id) : co_await eng.resume_schedule(id);
          if (!found) throw not_found("no schedule has the id '" + id + "'");
          n = 1;
          co_return ojson{
              {"ok", true},
              {"message", "schedule '" + id + "' " +
                              (pause ? "paused" : "resumed from its next slot after now")}};
        });
  }
  throw bad_request("unknown action '" + action +
                    "'; one of: cancel, resume, retry, fork, send, pause_queue, resume_queue, "
                    "pause_schedule, resume_schedule, trigger_schedule");
}

asio::awaitable<ojson> run_bulk(engine& eng, const ojson& body, const actor& who,
                                std::chrono::milliseconds limit, std::int64_t max_page,
                                std::int64_t max_scan, std::function<void()> check) {
  if (!body.is_object()) throw bad_request("the body must be a JSON object");
  const auto action = text_field(body, "action");
  if (action != "cancel" && action != "resume" && action != "retry")
    throw bad_request("unknown bulk action '" + action + "'; one of: cancel, resume, retry");
  const auto f = body.find("filter");
  if (f == body.end() || !f->is_object())
    throw bad_request("the field 'filter' (the workflow list's filter, an object) is required");
  params p;
  for (const auto& [k, v] : f->items()) {
    if (k == "cursor" || k == "limit") continue;  // paging, not the set
    if (!v.is_string()) throw bad_request("the filter's '" + k + "' must be a string");
    if (k != "status" && k != "name" && k != "queue" && k != "executor" && k != "since" &&
        k != "until" && k != "id_prefix" && k != "changed_since" && k != "retrying" && k != "text")
      throw bad_request("the filter has no field '" + k +
                        "'; it takes status, name, queue, executor, since, until, id_prefix, "
                        "changed_since, retrying, text");
    p.emplace(k, v.get<std::string>());
  }
  auto filter = list_filter_of(p, max_page);
  filter.limit = bulk_limit + 1;
  filter.scan = max_scan;
  // A filter without a status reads only the statuses the action applies to: the finished ones
  // of a large table would exceed max_scan, and the action skips them anyway.
  const bool narrowed = filter.statuses.empty();
  if (narrowed) filter.statuses = applicable_statuses(action);
  const auto& st = detail::store_of(eng);
  // The matches the action applies to now (by id), and how many of the others, by status.
  std::vector<std::string> ids;
  std::map<std::string, std::int64_t> skipped_by_status;
  std::int64_t matched = 0;
  {
    auto q = st.admin_ids(filter);
    auto c = co_await bounded_connection::acquire(eng, limit);
    auto rows = co_await store::fetch(*c, std::move(q));
    if (!rows.empty() && rows.front().edge)
      throw bad_request("this filter cannot be counted exactly: a status it covers has more than " +
                        std::to_string(max_scan) +
                        " workflows in its time range to look through (the console's max_scan); "
                        "narrow it with a status or a time range (since, until)");
    matched = std::int64_t(rows.size());
    for (auto& r : rows) {
      if (applies(action, r.status))
        ids.push_back(std::move(r.id));
      else
        ++skipped_by_status[r.status];
    }
  }
  if (matched > bulk_limit)
    throw bad_request("more than " + std::to_string(bulk_limit) +
                      " workflows match this filter; a bulk action takes at most " +
                      std::to_string(bulk_limit) + ": narrow the filter");
  const auto count = std::int64_t(ids.size());
  const auto print = fingerprint(ids);
  ojson skips = ojson::array();
  for (const auto& [status, n] : skipped_by_status)
    skips.push_back(ojson{{"status", status}, {"count", n}});
  // What a dry run (or a refused run) says: how many it acts on, of how many matches, and why
  // the others are skipped.
  const ojson plan{{"count", count},
                   {"fingerprint", print},
                   {"matched", matched},
                   {"skipped", skips},
                   {"skip_reason", skips.empty() ? std::string() : applies_to(action)},
                   {"statuses_read", narrowed ? ojson(filter.statuses) : ojson(nullptr)}};
  ojson echo = ojson::object();
  for (const auto& [k, v] : p) echo[k] = v;
  const auto confirm = body.find("confirm");
  if (confirm == body.end() || confirm->is_null()) {
    ojson sample = ojson::array();
    for (std::size_t i = 0; i < ids.size() && i < 20; ++i) sample.push_back(ids[i]);
    ojson out{{"dry_run", true}, {"action", action}, {"filter", echo}};
    out.update(plan);
    out["sample"] = sample;
    out["limit"] = bulk_limit;
    co_return out;
  }
  if (!confirm->is_object() || !confirm->contains("count") || !confirm->contains("fingerprint") ||
      !confirm->at("count").is_number_integer() || !confirm->at("fingerprint").is_string())
    throw bad_request("'confirm' must be {count, fingerprint} from the dry run");
  // The row written before the run names the set it acts on, so that a run stopped partway is
  // known by its row alone.
  ojson target{{"filter", echo}, {"ids", ids}};
  const auto confirmed = confirm->at("count").get<std::int64_t>();
  co_return co_await audited(
      eng, limit, who, "bulk_" + action, target, [&](std::int64_t& n) -> asio::awaitable<ojson> {
        if (confirmed != count || confirm->at("fingerprint").get<std::string>() != print) {
          target["confirmed_count"] = confirmed;
          target["count_now"] = count;
          throw conflict(confirmed == count
                             ? "the set of workflows the action applies to changed since the "
                               "count (still " +
                                   std::to_string(count) + "): nothing was done; confirm it again"
                             : "the action applies to " + std::to_string(count) +
                                   " of the filter's workflows now, not the " +
                                   std::to_string(confirmed) +
                                   " confirmed: nothing was done; confirm the new count",
                         plan);
        }
        ojson skipped = ojson::array();
        ojson done_ids = ojson::array();
        for (const auto& id : ids) {
          bool ok = false;
          std::string why;
          try {
            if (check) check();
            ok = co_await act_on(eng, action, id);
            if (!ok) why = "no longer applies: " + applies_to(action);
          } catch (const workflow_conflict& e) {
            why = e.what();
          } catch (...) {  // stopped partway (the console, the database): the audit says how far
            target["done_ids"] = done_ids;
            throw;
          }
          if (ok) {
            ++n;
            done_ids.push_back(id);
          } else
            skipped.push_back(ojson{{"id", id}, {"reason", why}});
        }
        const auto skips = std::int64_t(skipped.size());
        co_return ojson{
            {"ok", true},
            {"count", count},
            {"done", n},
            {"skipped", std::move(skipped)},
            {"message", action + ": " + std::to_string(n) + " of " + std::to_string(count) +
                            " done, " + std::to_string(skips) + " skipped"}};
      });
}

asio::awaitable<ojson> audit_page(engine& eng, std::chrono::milliseconds query_limit,
                                  const params& p, std::int64_t max_page) {
  std::int64_t limit = 50;
  if (auto l = optional_param(p, "limit")) {
    const auto [end, ec] = std::from_chars(l->data(), l->data() + l->size(), limit);
    if (ec != std::errc() || end != l->data() + l->size() || limit < 1 || limit > max_page)
      throw bad_request("limit: '" + *l + "' is not a number of rows from 1 to " +
                        std::to_string(max_page));
  }
  std::optional<std::int64_t> before;
  if (auto b = optional_param(p, "before")) {
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(b->data(), b->data() + b->size(), n);
    if (ec != std::errc() || end != b->data() + b->size())
      throw bad_request("before: '" + *b + "' is not an audit row's id");
    before = n;
  }
  const auto action = optional_param(p, "action");
  const auto& st = detail::store_of(eng);
  auto q = st.audit_list(limit + 1, before, action);
  std::vector<store::json_value> got;
  {
    auto c = co_await bounded_connection::acquire(eng, query_limit);
    got = co_await store::fetch(*c, std::move(q));
  }
  ojson rows = ojson::array();
  for (const auto& r : got) rows.push_back(ojson::parse(r.json));
  ojson next = nullptr;
  if (std::int64_t(rows.size()) > limit) {
    rows.erase(rows.end() - 1);
    next = rows.back().at("id");
  }
  co_return ojson{{"rows", std::move(rows)}, {"next", std::move(next)}};
}

}  // namespace durable::console_detail
