// durable: the operator's command-line program. It reads the database (list, show, queues,
// executors, stats), steers workflows through the engine's own operations (cancel, resume,
// retry, fork, send), and maintains the schema (migrate, gc). See docs/operations.md.
//
// Exit status: 0 done; 1 not done (unknown id, a status that does not allow it, a conflict);
// 2 bad usage (arguments, a value the server cannot parse); 3 the database (unreachable,
// schema missing or too new, a refusal). Ordinary mistakes print one line on stderr.

// The parts: cli.hpp (what they share), output.cpp (durations, tables, JSON, errors), read.cpp
// (list, show, queues, executors, stats), metrics.cpp, actions.cpp (cancel, resume, retry, fork,
// send, gc, migrate), ui.cpp (the web console), dev.cpp (a throwaway PostgreSQL with the console);
// this file holds main: the verbs, their options, and the dispatch.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"

using namespace durable_cli;

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

  // Each --status value is a status of durable/states.hpp; the help lists them as CLI11 lists
  // a set ({a,b,c}).
  auto statuses_shown = [](const auto& states) {
    std::string out;
    for (const auto s : states) out += (out.empty() ? "{" : ",") + std::string(to_string(s));
    return out + "}";
  };
  const CLI::Validator status_validator(check_status, statuses_shown(durable::all_workflow_states));
  const CLI::Validator finished_validator(check_status,
                                          statuses_shown(durable::finished_workflow_states));

  settings g;
  if (const char* url = std::getenv("DURABLE_DATABASE_URL")) g.database = url;
  if (const char* schema = std::getenv("DURABLE_SCHEMA"); schema && *schema) g.schema = schema;
  app.add_option("-d,--database", g.database,
                 "conninfo or URL (default: $DURABLE_DATABASE_URL, else PG* variables)");
  app.add_option("-s,--schema", g.schema,
                 "schema holding durable's tables (default: $DURABLE_SCHEMA, else durable)");
  app.add_flag("--json", g.json, "print JSON for scripts instead of tables");

  std::string id, new_id, topic, value, value_file, key, older_than;
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
      ->check(status_validator);
  list->add_option("--name", la.name, "only workflows of this name");
  list->add_option("--queue", la.queue, "only workflows of this queue");
  list->add_option("--executor", la.executor, "only workflows owned by this executor id");
  list->add_option("--id-prefix", la.id_prefix,
                   "only ids that start with this (a schedule's runs: --id-prefix 'nightly@')");
  list->add_option("--since", la.since, "created within this long (2h, 7d) or since a timestamp");
  list->add_option("--until", la.until, "created at least this long ago, or before a timestamp");
  list->add_option("--changed-since", la.changed_since,
                   "changed (updated) within this long: 1h, 7d (failed in the last hour: "
                   "--status failed,dead_letter --changed-since 1h)");
  list->add_flag("--retrying", la.retrying, "only workflows retrying a step");
  list->add_option("--text", la.text,
                   "only workflows holding this text (any case) in their id, inputs, last error, "
                   "error or status reason: an order number, an email");
  list->add_option("--max-scan", la.max_scan,
                   "read at most this many workflows of each status per page; past it the page "
                   "says how far back it searched and --after goes on")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(100000000)))
      ->capture_default_str();
  list->add_option("--limit", la.limit, "rows per page")->check(CLI::Range(1, 100000));
  list->add_option("--offset", la.offset, "rows to skip")->check(CLI::Range(0, 1000000000));
  list->add_option("--after", la.after,
                   "the next page: rows after this cursor (next_cursor, or the table's footer)");

  auto* show = app.add_subcommand(
      "show", "a workflow: inputs, output or error, status history, steps, children, inbox");
  show->add_option("ID", id, "workflow id")->required();
  show->add_option("--steps", last_steps, "show the last N steps in the table (default 50)");

  bool show_wait = false;
  std::string wait_timeout;
  auto* show_wait_flag =
      show->add_flag("--wait", show_wait, "wait until the workflow has ended, then show it");
  show->add_option("--timeout", wait_timeout,
                   "with --wait: give up after this long (500ms, 90s, 15m; default no limit), "
                   "exit status 1")
      ->needs(show_wait_flag);
  auto* wait = app.add_subcommand(
      "wait",
      "wait until a workflow has ended: print its output (exit 0), or how it ended otherwise "
      "(exit 1)");
  wait->add_option("ID", id, "workflow id")->required();
  wait->add_option("--timeout", wait_timeout,
                   "give up after this long (500ms, 90s, 15m; default no limit): exit status 1, "
                   "nothing changed");

  stream_args sa;
  auto* stream = app.add_subcommand(
      "stream",
      "print a workflow's stream (ctx.write_stream), one value per line; --follow: as it is "
      "written, until it is closed or the workflow ends");
  stream->add_option("ID", sa.id, "workflow id")->required();
  stream->add_option("KEY", sa.key, "the stream's key")->required();
  stream->add_option("--from", sa.from, "the first offset to print (default 0)");
  auto* stream_follow =
      stream->add_flag("--follow,-f", sa.follow, "wait for values until the stream ends");
  stream->add_flag("--offsets", sa.offsets, "print each value's offset and a tab before it");
  stream
      ->add_option("--timeout", sa.timeout_text,
                   "with --follow: give up after this long (500ms, 90s, 15m; default no "
                   "limit), exit status 1")
      ->needs(stream_follow);

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
  auto* value_option = send->add_option(
      "VALUE", value,
      "the message as JSON (e.g. '{\"ok\":true}', '\"text\"', 42); - reads it from standard input");
  send->add_option("--file", value_file,
                   "read the message from this file instead of VALUE (- = standard input): for "
                   "values over the system's argument limit (about 128 KiB)")
      ->excludes(value_option);
  send->add_flag("--text", as_text, "send the value as a JSON string, not parsed");
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
      ->delimiter(',')
      ->check(finished_validator);
  gc->add_option("--batch", batch, "workflows deleted per statement")->capture_default_str();
  gc->add_flag("--dry-run", dry_run, "count what would be deleted, delete nothing");

  bool with_children = false;
  std::string output, file;
  auto* exporting = app.add_subcommand(
      "export", "write a workflow's journal as JSON (a fixture for durable::testing::replay)");
  exporting->add_option("ID", id, "workflow id")->required();
  exporting->add_flag("--children", with_children, "its child workflows too, and theirs");
  exporting->add_option("-o,--output", output, "write to this file (default: standard output)");
  auto* importing = app.add_subcommand(
      "import", "load an exported journal as a new workflow, parked until resumed");
  importing->add_option("FILE", file, "the export (- = standard input)")->required();
  importing->add_option("--id", new_id, "the workflow's id here (default: the exported id)");

  auto* schedules = app.add_subcommand(
      "schedules", "schedules: cron, time zone, next and last slot, last status, paused");
  std::string verb, from, to;
  std::size_t backfill_limit = 1000;
  auto* schedule = app.add_subcommand(
      "schedule", "a schedule: show, pause, resume, trigger (one run now), backfill, delete");
  schedule->add_option("VERB", verb, "show, pause, resume, trigger, backfill or delete")
      ->required()
      ->check(CLI::IsMember({"show", "pause", "resume", "trigger", "backfill", "delete"}));
  schedule->add_option("ID", id, "schedule id")->required();
  schedule->add_option("--from", from, "backfill: first time (2026-12-01T00:00:00Z, 2026-12-01)");
  schedule->add_option("--to", to, "backfill: last time, included");
  schedule
      ->add_option("--limit", backfill_limit,
                   "backfill: refuse (start nothing) beyond this many slots")
      ->capture_default_str();

  std::string queue_name;
  auto* queue = app.add_subcommand(
      "queue", "pause a queue (nothing more is dispatched; what runs finishes) or resume it");
  queue->add_option("VERB", verb, "pause or resume")
      ->required()
      ->check(CLI::IsMember({"pause", "resume"}));
  queue->add_option("NAME", queue_name, "queue name")->required();
  bool queue_create = false;
  queue->add_flag("--create", queue_create,
                  "act on a queue that has no settings and no workflow yet (else refused: a "
                  "mistyped name would pause nothing)");

  std::int64_t stuck_limit = 100;
  auto* stuck = app.add_subcommand(
      "stuck", "workflows that do not move, longest first, with why (the view stuck)");
  stuck->add_option("--limit", stuck_limit, "rows at most")->capture_default_str();

  auto* migrate = app.add_subcommand("migrate", "create or upgrade the schema");
  auto* stats = app.add_subcommand("stats", "counts: workflows by status, failures, queue, inbox");
  stats->add_option("--lease", lease, "heartbeat age under which an executor is alive")
      ->capture_default_str();

  auto* metrics = app.add_subcommand(
      "metrics", "the database's gauges in Prometheus text format (stdout, or served)");
  metrics->add_option("--listen", listen, "serve GET /metrics on HOST:PORT instead of printing");
  metrics->add_option("--lease", lease, "heartbeat age under which an executor is alive")
      ->capture_default_str();

  std::int64_t audit_limit = 50;
  std::string audit_action;
  auto* audit = app.add_subcommand(
      "audit",
      "what was done through the console (who, what, which ids or filter, how many, "
      "when, result), newest first");
  audit->add_option("--limit", audit_limit, "at most this many rows")->capture_default_str();
  audit->add_option("--action", audit_action,
                    "only this action (cancel, retry, bulk_cancel, pause_queue, ...)");

  ui_args ua;
  auto* ui = app.add_subcommand("ui", "serve the web console until Ctrl-C");
  ui->add_option("--listen", ua.listen, "HOST:PORT to serve on; port 0 picks a free one")
      ->capture_default_str();
  ui->add_option("--token-file", ua.token_file,
                 "a file holding the token that actions need (at least 16 characters; chmod "
                 "600); without it the pages are read-only");
  ui->add_flag("--secure-cookie", ua.secure_cookie,
               "mark the session cookie Secure: the console is reached through HTTPS (a proxy)");
  ui->add_flag("--read-only", ua.read_only,
               "serve the pages without any action, even with a token");
  ui->add_option("--allow-host", ua.allowed_hosts,
                 "a Host name the console answers for besides loopback (a reverse proxy's); "
                 "repeatable; * for any");
  ui->add_option("--max-scan", ua.max_scan,
                 "rows of each status a list page or bulk count reads at most; a sparse filter "
                 "pages on from where its search stopped")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t(1), std::int64_t(100000000)));
  ui->add_option("--query-timeout", ua.query_timeout,
                 "how long one of the console's statements may take before the request is "
                 "answered 503 and an open page shows its data as stale (500ms, 5s, 1m)")
      ->capture_default_str();
  ui->add_option("--lease", lease, "heartbeat age under which an executor is alive")
      ->capture_default_str();

  dev_args da;
  auto* dev = app.add_subcommand(
      "dev",
      "a first try: start a throwaway PostgreSQL of its own, migrate it, print the "
      "DURABLE_DATABASE_URL to export and serve the console; Ctrl-C stops both (--database is "
      "not used)");
  dev->add_option("--dir", da.dir,
                  "the cluster's directory, kept from one run to the next (default: "
                  "$XDG_DATA_HOME/durable-dev, else ~/.local/share/durable-dev; as root "
                  "/tmp/durable-dev-postgres, postgres being the user who runs the "
                  "server)");
  dev->add_option("--listen", da.console.listen,
                  "HOST:PORT of the console; port 0 picks a free one")
      ->capture_default_str();
  dev->add_option("--port", da.port,
                  "PostgreSQL's port on 127.0.0.1 (default: the last run's when free, else any "
                  "free one)")
      ->check(CLI::Range(1, 65535));
  dev->add_flag("--fresh", da.fresh, "delete the cluster first: start with an empty database");
  dev->add_option("--token-file", da.console.token_file,
                  "as for ui: the token the console's actions need; without it, read-only");
  dev->add_flag("--read-only", da.console.read_only, "as for ui: no action, even with a token");
  dev->add_option("--allow-host", da.console.allowed_hosts,
                  "as for ui: a Host name the console answers for besides loopback");
  dev->add_option("--max-scan", da.console.max_scan,
                  "as for ui: rows of each status a list page or bulk count reads at most")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t(1), std::int64_t(100000000)));
  dev->add_option("--query-timeout", da.console.query_timeout,
                  "as for ui: how long one of the console's statements may take")
      ->capture_default_str();
  dev->add_option("--lease", lease, "heartbeat age under which an executor is alive")
      ->capture_default_str();

  // Any argument may hold a password (a URL or conninfo in the wrong place, a --database
  // value): no message of the program shows it (report() redacts them all).
  for (int i = 1; i < argc; ++i) hide_secrets_of(argv[i]);
  if (const char* url = std::getenv("DURABLE_DATABASE_URL")) hide_secrets_of(url);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A URL or conninfo where an argument was expected: say where it goes.
    auto conninfo_like = [](std::string_view a) {
      return a.starts_with("postgresql://") || a.starts_with("postgres://") ||
             a.starts_with("host=") || a.starts_with("dbname=") ||
             a.find(" password=") != std::string_view::npos;
    };
    std::string hint = "run 'durable --help' or 'durable VERB --help'";
    for (int i = 1; i < argc; ++i)
      if (conninfo_like(argv[i]) && std::string_view(argv[i - 1]) != "-d" &&
          std::string_view(argv[i - 1]) != "--database") {
        hint =
            "a database URL or conninfo goes after --database, or in DURABLE_DATABASE_URL; " + hint;
        break;
      }
    return report(bad_usage, std::string(e.what()) + "; " + hint);
  }

  // Every timestamp the program shows is in UTC, whatever the server's or PGTZ's time zone.
  ::setenv("PGTZ", "UTC", 1);
  try {
    durable::detail::check_schema_name(g.schema);
  } catch (const durable::error& e) {
    return report(bad_usage, std::string("--schema: ") + e.what());
  }
  try {
    // Before the session: dev makes the database the others are given.
    if (dev->parsed()) return cmd_dev(g, da, require_duration("--lease", lease));
    session s(g);
    const double lease_s = require_duration("--lease", lease);
    if (list->parsed()) return cmd_list(s, g, la);
    const double timeout_s =
        wait_timeout.empty() ? -1.0 : require_duration("--timeout", wait_timeout);
    if (show->parsed()) {
      if (show_wait) wait_for_end(s, id, timeout_s, wait_timeout);
      return cmd_show(s, g, id, last_steps);
    }
    if (wait->parsed()) return cmd_wait(s, g, id, timeout_s, wait_timeout);
    if (stream->parsed()) {
      if (!sa.timeout_text.empty()) sa.timeout_s = require_duration("--timeout", sa.timeout_text);
      return cmd_stream(s, g, sa);
    }
    // The verbs that change workflows, queues or schedules leave an audit row, as the
    // console's actions do (durable audit).
    const ojson on_id{{"id", id}};
    if (cancel->parsed()) return audited(s, "cancel", on_id, [&] { return cmd_cancel(s, g, id); });
    if (resume->parsed())
      return audited(s, "resume", on_id, [&] { return cmd_resume(s, g, id, false, lease_s); });
    if (retry->parsed())
      return audited(s, "retry", on_id, [&] { return cmd_resume(s, g, id, true, lease_s); });
    if (fork->parsed())
      return audited(s, "fork", {{"id", id}, {"from_step", from_step}, {"new_id", new_id}},
                     [&] { return cmd_fork(s, g, id, from_step, new_id); });
    if (send->parsed()) {
      if (value_option->count() == 0 && value_file.empty())
        throw failure(bad_usage,
                      "send: give the message as VALUE, as - (standard input) or with --file PATH");
      const auto message = read_message(value, value_file, as_text);
      return audited(s, "send", {{"id", id}, {"topic", topic}, {"key", key}},
                     [&] { return cmd_send(s, g, id, topic, message, key); });
    }
    if (queues->parsed()) return cmd_queues(s, g);
    if (stuck->parsed()) return cmd_stuck(s, g, stuck_limit);
    if (executors->parsed()) return cmd_executors(s, g, lease_s);
    if (gc->parsed()) {
      if (dry_run) return cmd_gc(s, g, older_than, gc_statuses, batch, dry_run);
      check_gc(older_than, gc_statuses, batch);  // bad usage before the audit row
      return audited(
          s, "gc", {{"older_than", older_than}, {"statuses", gc_statuses}},
          [&] { return cmd_gc(s, g, older_than, gc_statuses, batch, dry_run); }, 0);
    }
    if (migrate->parsed()) return cmd_migrate(s, g);
    if (schedules->parsed()) return cmd_schedules(s, g);
    if (schedule->parsed()) {
      if (verb == "show") return cmd_schedule(s, g, verb, id, from, to, backfill_limit);
      ojson target{{"schedule", id}};
      if (verb == "backfill") {
        check_backfill(from, to);  // bad usage before the audit row
        target.update({{"from", from}, {"to", to}});
      }
      return audited(
          s, verb + "_schedule", target,
          [&] { return cmd_schedule(s, g, verb, id, from, to, backfill_limit); },
          verb == "backfill" ? 0 : 1);
    }
    if (queue->parsed())
      return audited(s, verb + "_queue", {{"queue", queue_name}},
                     [&] { return cmd_queue(s, g, verb, queue_name, queue_create); });
    if (exporting->parsed()) return cmd_export(s, g, id, with_children, output);
    if (importing->parsed()) {
      // Written in the audit like the other actions: it adds workflows to the schema.
      const ojson doc = read_import(file, new_id);  // bad usage before the audit row
      ojson target{{"file", file}, {"root", doc["root"]}};
      if (!new_id.empty()) target["new_id"] = new_id;
      return audited(
          s, "import", target, [&] { return cmd_import(s, g, doc, new_id); },
          std::int64_t(doc["workflows"].size()));
    }
    if (stats->parsed()) return cmd_stats(s, g, lease_s);
    if (metrics->parsed()) return cmd_metrics(s, lease_s, listen);
    if (ui->parsed()) return cmd_ui(s, lease_s, ua);
    if (audit->parsed()) return cmd_audit(s, g, audit_limit, audit_action);
  } catch (...) {
    return explain(g);
  }
  return bad_usage;
}
