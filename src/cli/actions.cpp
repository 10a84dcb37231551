// The `durable` program's verbs that act: cancel, resume, retry, fork and send go through the
// engine's own operations (the same checks and statements as an application's calls); gc and
// migrate maintain the schema. audited() writes the audit row of each (durable.cpp says which).
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"

namespace durable_cli {

namespace {

using durable::workflow_state;

/// Whether `status` (as the database spells it) is `state`.
bool is(const std::string& status, workflow_state state) {
  return status == durable::to_string(state);
}

/// "pending, running, sleeping, parked, dead_letter": the statuses a cancel applies to.
std::string unfinished_spellings() {
  std::string out;
  for (const workflow_state s : durable::all_workflow_states)
    if (!is_finished(s)) out += (out.empty() ? "" : ", ") + std::string(durable::to_string(s));
  return out;
}

/// Who runs the program, for the audit: the login name of the effective user (getpwuid), else
/// $USER, else the numeric uid. Self-declared like the console's names: what the machine says.
std::string login_name() {
  if (const passwd* pw = ::getpwuid(::geteuid()); pw && pw->pw_name && *pw->pw_name)
    return pw->pw_name;
  if (const char* user = std::getenv("USER"); user && *user) return user;
  return "uid " + std::to_string(::geteuid());
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// The action's audit row, written before it runs (result 'started', migration 16): its id.
asio::awaitable<std::int64_t> begin_audit(session& s, std::string action, std::string target) {
  auto q = s.st().audit_insert(login_name(), "cli", host_name(), action, target, 0, "started", "");
  auto c = co_await s.eng.pool().acquire();
  const auto row = co_await durable::store::fetch_one(*c, std::move(q));
  co_return row ? row->id : 0;
}

asio::awaitable<void> finish_audit(session& s, std::int64_t id, std::string target,
                                   std::int64_t count, std::string result, std::string detail) {
  auto q = s.st().audit_finish(id, target, count, result, detail);
  auto c = co_await s.eng.pool().acquire();
  (void)co_await durable::store::fetch(*c, std::move(q));
}

}  // namespace

int audited(session& s, const std::string& action, const ojson& target,
            const std::function<int()>& verb, std::int64_t count) {
  // An id that is not UTF-8 keeps its row, with U+FFFD where its bytes were (as the console).
  const auto text = target.dump(-1, ' ', false, ojson::error_handler_t::replace);
  // The row comes first: an action the audit cannot record is not done.
  std::int64_t id = 0;
  try {
    id = run(s.io, begin_audit(s, action, text));
  } catch (const durable::pg::check_violation&) {
    throw failure(database_trouble,
                  "nothing was done: the audit table of schema '" + s.eng.schema_name() +
                      "' is older than migration 16 (it cannot record an action before it "
                      "runs); run `durable migrate`, then try again");
  } catch (const std::exception& e) {
    throw failure(database_trouble, "nothing was done: the audit row of " + action +
                                        " could not be written: " + one_line(e.what()));
  }
  std::string result = "done", detail;
  std::exception_ptr error;
  int status = done;
  try {
    status = verb();
    if (status != done) result = "refused";
  } catch (const failure& f) {
    // Input found wrong once the verb ran (its row is written already): refused, nothing done.
    result = f.status == not_done || f.status == bad_usage ? "refused" : "failed";
    detail = f.what();
    error = std::current_exception();
  } catch (const std::exception& e) {
    result = "failed";
    detail = e.what();
    error = std::current_exception();
  }
  try {
    run(s.io, finish_audit(s, id, text, result == "done" ? count : 0, result, detail));
  } catch (const std::exception& e) {
    if (error) std::rethrow_exception(error);  // the action's own error says more
    // The action was done: its exit status stays 0, and the row left 'started' is said.
    std::fprintf(stderr,
                 "durable: warning: %s was done, but its audit row %lld still says 'started': "
                 "its result could not be written: %s\n",
                 action.c_str(), static_cast<long long>(id), one_line(e.what()).c_str());
  }
  if (error) std::rethrow_exception(error);
  return status;
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
  throw failure(not_done, "'" + one_line(id) + "' is " + *status + ": only unfinished workflows (" +
                              unfinished_spellings() + ") can be cancelled");
}

int cmd_resume(session& s, const settings& g, const std::string& id, bool retry, double lease_s) {
  bool ok = false;
  try {
    ok = run(s.io, retry ? s.eng.retry(id) : s.eng.resume(id));
  } catch (const durable::workflow_conflict& e) {
    throw failure(not_done, e.what());
  }
  const char* verb = retry ? "retry" : "resume";
  if (ok) {
    // The CLI runs nothing itself: say who will, and whether anyone is there to.
    const auto w = s.record_of(id);
    const std::string name = w ? w->name : std::string("?");
    std::int64_t alive = 0;
    for (const auto& e : s.rows(s.st().admin_executors(lease_s)))
      alive += e["state"] == "alive" ? 1 : 0;
    const std::string who =
        alive == 0 ? "no executor is alive now, so nothing runs until one that registers '" +
                         one_line(name) + "' starts"
                   : std::to_string(alive) + (alive == 1 ? " executor is" : " executors are") +
                         " alive now; one that registers '" + one_line(name) +
                         "' claims it (see 'durable show " + one_line(id) + "')";
    ojson extra = ojson::object();
    extra["name"] = name;
    extra["executors_alive"] = alive;
    print_action(g, verb, id,
                 std::string(retry ? "retrying" : "resumed") + " '" + one_line(id) + "': due now" +
                     (retry ? ", its failed step with a fresh count of attempts" : "") +
                     ". It runs only in an executor that registers its workflow; " + who,
                 extra);
    return done;
  }
  const auto status = s.status_of(id);
  if (!status) s.unknown(id);
  if (retry)
    throw failure(not_done,
                  "'" + one_line(id) + "' is " + *status +
                      ": retry runs the failed step of a dead-lettered workflow again" +
                      (is(*status, workflow_state::parked) || is(*status, workflow_state::cancelled)
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

nlohmann::json read_message(const std::string& value_arg, const std::string& file, bool as_text) {
  // VALUE, or the whole of a file or of standard input (no argument-size limit there).
  const std::string from = !file.empty() ? file : value_arg;
  const bool read_input = from == "-";
  std::string value = value_arg;
  std::string where = "VALUE";
  if (!file.empty() || read_input) {
    where = read_input ? "standard input" : "--file " + one_line(file);
    std::ifstream in;
    if (!read_input) {
      in.open(file, std::ios::binary);
      if (!in)
        throw failure(bad_usage, "--file: cannot read '" + one_line(file) +
                                     "': " + std::strerror(errno) + "; nothing was sent");
    }
    std::istream* source = &in;
    if (read_input) source = &std::cin;
    std::ostringstream text;
    text << source->rdbuf();
    if (source->bad())
      throw failure(bad_usage, "cannot read the message from " + where + "; nothing was sent");
    value = std::move(text).str();
  }
  nlohmann::json payload;
  if (as_text) {
    payload = value;
    // A JSON string holds UTF-8 only: refuse other bytes here, not in the engine's encoder.
    try {
      (void)payload.dump();
    } catch (const nlohmann::json::exception&) {
      throw failure(bad_usage, "the message from " + where +
                                   " is not UTF-8 text, which --text needs; nothing was sent");
    }
  } else {
    try {
      payload = nlohmann::json::parse(value);
    } catch (const nlohmann::json::exception& e) {
      throw failure(bad_usage, "the message from " + where + " is not JSON (" +
                                   std::string(e.what()) +
                                   "); quote a string as '\"text\"', or pass --text to send it "
                                   "as a string; nothing was sent");
    }
  }
  return payload;
}

int cmd_send(session& s, const settings& g, const std::string& id, const std::string& topic,
             const nlohmann::json& payload, const std::string& key) {
  // A finished workflow receives nothing more: refuse instead of storing a message for ever.
  const auto status = s.status_of(id);
  if (!status) s.unknown(id);
  if (const auto state = durable::parse_workflow_state(*status); state && is_finished(*state))
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

void check_gc(const std::string& older_than, const std::vector<std::string>& statuses,
              std::int64_t batch) {
  (void)require_duration("--older-than", older_than);
  for (const auto& st : statuses)
    if (const auto state = durable::parse_workflow_state(st); !state || !is_finished(*state))
      throw failure(bad_usage, "--status " + one_line(st) +
                                   ": gc deletes finished workflows only (succeeded, failed, "
                                   "cancelled); cancel a parked or dead-lettered workflow first "
                                   "if it should go");
  if (batch < 1) throw failure(bad_usage, "--batch must be at least 1");
}

int cmd_gc(session& s, const settings& g, const std::string& older_than,
           std::vector<std::string> statuses, std::int64_t batch, bool dry_run) {
  check_gc(older_than, statuses, batch);
  const double age_s = require_duration("--older-than", older_than);
  if (statuses.empty())
    for (const workflow_state st : durable::finished_workflow_states)
      statuses.emplace_back(durable::to_string(st));
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
                one_line(older_than).c_str(),
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

}  // namespace durable_cli
