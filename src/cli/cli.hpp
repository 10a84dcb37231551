// The `durable` program's parts (durable.cpp: main and its options): what they share. The
// output helpers (output.cpp), the verbs that read (read.cpp, metrics.cpp) and the verbs that
// act through the engine (actions.cpp) all take a session and the global settings.
#pragma once

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <cstdint>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "durable.hpp"
#include "durable/store.hpp"

namespace durable {
struct console_options;
}

namespace durable_cli {

using ojson = nlohmann::ordered_json;

enum exit_status : int { done = 0, not_done = 1, bad_usage = 2, database_trouble = 3 };

/// An ordinary failure: one line on stderr and an exit status.
struct failure : std::runtime_error {
  int status;
  failure(int s, const std::string& what) : std::runtime_error(what), status(s) {}
};

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

// ---- durations and statuses (output.cpp) -----------------------------------------------------

/// "90s", "15m", "2h", "7d", "500ms" or a plain number of seconds; nullopt otherwise.
std::optional<double> parse_duration(const std::string& text);
/// The duration `text` given to `option`; a failure (bad usage) when it is none.
double require_duration(const std::string& option, const std::string& text);
/// "" when `text` is a workflow status (durable/states.hpp), else "unknown status 'x'; one of:
/// pending, ...": what the --status options check each value with.
std::string check_status(const std::string& text);

// ---- output (output.cpp) ---------------------------------------------------------------------

/// Code points in `s` (UTF-8), for column widths.
std::size_t width(const std::string& s);
/// At most `max` code points, with "…" when cut.
std::string cut(const std::string& s, std::size_t max);
/// One line, safe on a terminal: control characters (C0, DEL, C1), bidirectional controls and
/// bytes that are not UTF-8 escaped (durable::detail::printable_name, which the library's
/// messages use too). Everything the program prints from the database or its arguments goes
/// through it (print_json through its JSON form).
std::string one_line(const std::string& s);
/// `s` as one shell word that gives `s` back when pasted into bash or zsh: '...' when one_line
/// leaves it as is, else $'...' with every other byte as \xNN (nothing raw for the terminal).
std::string shell_word(const std::string& s);
/// A value as a table shows it: "-" for null, timestamps (by column) to the second, JSON
/// compact, control characters escaped.
std::string cell(std::string_view key, const ojson& v);
/// A JSON value on one line ("-" for null).
std::string text_of(const ojson& v);

struct column {
  std::string key;
  std::size_t max = 40;
};

void print_table(const std::vector<ojson>& rows, const std::vector<column>& columns,
                 const std::string& indent = "");
void print_json(const ojson& v);
/// `v` as one line of compact JSON, escaped for a terminal as print_json escapes (for jq, and
/// for JSON lines).
template <class Json>
std::string json_line(const Json& v) {
  return durable::detail::printable_name(v.dump(-1, ' ', false, Json::error_handler_t::replace),
                                         durable::detail::printable_style::json);
}
/// "key  value" lines, keys padded to one width.
void print_fields(const std::vector<std::pair<std::string, std::string>>& fields);

// ---- the session -----------------------------------------------------------------------------

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
    o.push_results = true;  // wait, show --wait: told of the end, not polled
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
  /// The workflow's row, or nullopt when no workflow has the id.
  std::optional<durable::store::workflow_record> record_of(const std::string& id) {
    auto get = [&]() -> asio::awaitable<std::optional<durable::store::workflow_record>> {
      auto q = st().workflow_get(id);
      auto c = co_await eng.pool().acquire();
      co_return co_await durable::store::fetch_one(*c, std::move(q));
    };
    return run(io, get());
  }
  /// The workflow's status, or nullopt when no workflow has the id.
  std::optional<std::string> status_of(const std::string& id) {
    auto w = record_of(id);
    if (!w) return std::nullopt;
    return w->status;
  }
  [[noreturn]] void unknown(const std::string& id) {
    throw failure(not_done, "no workflow has the id '" + one_line(id) + "' in schema '" +
                                one_line(eng.schema_name()) + "'; see 'durable list'");
  }
};

/// Rows as --json, a table, or `none` when there are none (output.cpp).
int print_rows(const settings& g, const std::vector<ojson>& rows, const char* none,
               const std::vector<column>& columns);
/// What an action did: --json {"id", "action", "done", ...extra} or `message` (output.cpp).
void print_action(const settings& g, const std::string& verb, const std::string& id,
                  const std::string& message, ojson extra = ojson::object());

// ---- the verbs that read (read.cpp, metrics.cpp) ---------------------------------------------

struct list_args {
  std::vector<std::string> statuses;
  std::string name, queue, executor, id_prefix, since, until, after;
  std::string changed_since, text;  // an age; a text to find in ids, inputs and errors
  bool retrying = false;
  std::int64_t limit = 50, offset = 0;
  std::int64_t max_scan = 100000;  // rows read per status at most (as the console's)
};

int cmd_list(session& s, const settings& g, const list_args& a);
int cmd_show(session& s, const settings& g, const std::string& id, std::size_t last_steps);
/// Waits until workflow `id` has ended (read.cpp): told by a notification (the session's engine
/// has push_results on), polled where none can arrive. At most `timeout_s` seconds (< 0: no
/// limit; `timeout_text` is how it was given); a failure (not done) when it runs out, and when
/// no workflow has the id.
void wait_for_end(session& s, const std::string& id, double timeout_s,
                  const std::string& timeout_text);
/// durable wait: waits as wait_for_end, then prints the output (exit 0) or says how the
/// workflow ended otherwise (exit 1); --json prints {id, status, output, error, reason} either way.
int cmd_wait(session& s, const settings& g, const std::string& id, double timeout_s,
             const std::string& timeout_text);
/// durable stream ID KEY: the values of a workflow's stream, one per line (--json: objects
/// {offset, value}); with follow, as they are written until the stream ends.
struct stream_args {
  std::string id, key;
  std::int64_t from = 0;
  bool follow = false, offsets = false;
  double timeout_s = -1;     ///< with follow: give up after this long (< 0: no limit)
  std::string timeout_text;  ///< as given
};
int cmd_stream(session& s, const settings& g, const stream_args& a);
int cmd_queues(session& s, const settings& g);
/// The workflows that do not move (the view stuck), longest stuck first, with why.
int cmd_stuck(session& s, const settings& g, std::int64_t limit);
int cmd_executors(session& s, const settings& g, double lease_s);
int cmd_stats(session& s, const settings& g, double lease_s);
int cmd_metrics(session& s, double lease_s, const std::string& listen);
/// "HOST:PORT" ("[::1]:9464" for IPv6) as an endpoint; a failure (bad usage) otherwise.
asio::ip::tcp::endpoint parse_listen(const std::string& text);
/// What `durable ui` (and `durable dev`) take for the console.
struct ui_args {
  std::string listen = "127.0.0.1:8080";
  std::vector<std::string> allowed_hosts;
  std::string token_file;  // "": no actions
  bool read_only = false;
  bool secure_cookie = false;        // the session cookie is Secure (reached through HTTPS)
  std::int64_t max_scan = 100000;    // rows read per status at most (console_options::max_scan)
  std::string query_timeout = "5s";  // console_options::query_timeout, as a duration
};
/// The token in `path` (ui.cpp): its text without surrounding white space; a failure (bad
/// usage) when it cannot be read or is too short. Warns on stderr when others may read the file.
std::string read_token_file(const std::string& path);
/// The console's options from `a` (ui.cpp; only where the console is built): the listen address
/// parsed and the token read, so that bad usage is said before anything starts.
durable::console_options console_options_of(const ui_args& a, double lease_s);
/// Runs `verb`, one of the program's actions (cancel, retry, a schedule's pause, ...), and writes
/// its row in the audit table (actions.cpp), as the console does for its own: via 'cli', who the
/// login name, where the host name, `target` the ids, result done, refused (not done: exit
/// status 1) or failed, with the message. Bad usage is rethrown unrecorded (nothing was tried).
/// A row that cannot be written is a warning on stderr; the action's own outcome stands. `count`:
/// what a done action changed (1; 0 for gc and backfill, whose output says how many).
int audited(session& s, const std::string& action, const ojson& target,
            const std::function<int()>& verb, std::int64_t count = 1);
/// Serves the web console (ui.cpp) until SIGINT or SIGTERM.
int cmd_ui(session& s, double lease_s, const ui_args& a);
/// Audit rows of the console's actions, newest first (read.cpp).
int cmd_audit(session& s, const settings& g, std::int64_t limit, const std::string& action);

struct dev_args {
  std::string dir;  // "": $XDG_DATA_HOME/durable-dev, ~/.local/share/durable-dev, as root /tmp/...
  std::uint16_t port = 0;  // 0: the last run's when free, else any free one
  bool fresh = false;
  ui_args console;  // --listen, --token-file, --read-only, --allow-host: as for durable ui
};
/// durable dev (dev.cpp): starts a PostgreSQL of its own in `a.dir`, migrates it (schema
/// `g.schema`; `g.database` is not used), prints the URL to export and serves the console until
/// SIGINT or SIGTERM, then stops both.
int cmd_dev(const settings& g, const dev_args& a, double lease_s);

// ---- the verbs that act (actions.cpp) --------------------------------------------------------

int cmd_cancel(session& s, const settings& g, const std::string& id);
/// resume, or retry: says that nothing runs until an executor registering the workflow claims
/// it, and how many executors are alive (heartbeat within `lease_s`).
int cmd_resume(session& s, const settings& g, const std::string& id, bool retry, double lease_s);
int cmd_fork(session& s, const settings& g, const std::string& id, int from_step,
             const std::string& new_id);
/// The message `durable send` sends: VALUE, or the whole of --file PATH or of standard input
/// ("-"), as JSON or (--text) as a string. Bad input is a failure (bad usage) before anything
/// is tried, so it leaves no audit row.
nlohmann::json read_message(const std::string& value_arg, const std::string& file, bool as_text);
int cmd_send(session& s, const settings& g, const std::string& id, const std::string& topic,
             const nlohmann::json& payload, const std::string& key);
/// gc's arguments, checked before its audit row is written: a failure (bad usage) otherwise.
void check_gc(const std::string& older_than, const std::vector<std::string>& statuses,
              std::int64_t batch);
/// backfill's --from and --to, checked likewise.
void check_backfill(const std::string& from, const std::string& to);
int cmd_gc(session& s, const settings& g, const std::string& older_than,
           std::vector<std::string> statuses, std::int64_t batch, bool dry_run);
int cmd_migrate(session& s, const settings& g);

// ---- schedules (schedules.cpp) ----------------------------------------------------------------

int cmd_schedules(session& s, const settings& g);
/// show, pause, resume, trigger, backfill (`from`, `to`: times; at most `limit` slots) or
/// delete schedule `id`.
int cmd_schedule(session& s, const settings& g, const std::string& verb, const std::string& id,
                 const std::string& from, const std::string& to, std::size_t limit);
/// pause or resume queue `name`; unless `create`, refused (not_done) when no queue of that name
/// has settings or a workflow.
int cmd_queue(session& s, const settings& g, const std::string& verb, const std::string& name,
              bool create);

// ---- the verbs that move journals (transfer.cpp) ---------------------------------------------

/// Writes workflow `id`'s journal (with its descendants when `children`) to `output` (empty or
/// "-": standard output).
int cmd_export(session& s, const settings& g, const std::string& id, bool children,
               const std::string& output);
/// A document of cmd_export read from `file` ("-": standard input) and checked (bad_usage when it
/// is not one, or `new_id` holds a '/'), before the import's audit row is written.
ojson read_import(const std::string& file, const std::string& new_id);
/// Loads `doc` (read_import) as new workflows, the root as `new_id` if not empty.
int cmd_import(session& s, const settings& g, const ojson& doc, const std::string& new_id);

// ---- errors (output.cpp) ---------------------------------------------------------------------

/// The passwords of `conninfo` (a --database value, an argument) never appear in a message
/// report() prints, however the message quotes them.
void hide_secrets_of(std::string conninfo);
/// `message` without the passwords of URLs, password= settings, PGPASSWORD and what
/// hide_secrets_of was given (each becomes ***).
std::string redacted(std::string message);
/// Prints `message` as one line on stderr, redacted and escaped; returns `status`.
int report(int status, std::string message);
/// Inside a catch block: reports the exception being handled; returns the exit status.
int explain(const settings& g);

}  // namespace durable_cli
