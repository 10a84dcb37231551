// Workflows under test and the probes they report to. A "crash" is simulated in-process by
// abandoning the io_context while a workflow waits outside any step; the next engine (a new
// io_context, the same executor id) sees exactly what a new process would see in the database.
#pragma once

#include <asio/steady_timer.hpp>
#include <durable.hpp>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/db.hpp"
#include "support/pg_cases.hpp"

namespace test {

struct probe_state {
  std::map<std::string, int> calls;  // real executions per step name
  std::vector<std::string> seen;     // values a workflow observed, in order
  std::string hang_before;           // name of the step before which the workflow stalls
  std::string stalled_at;            // set by maybe_hang when a workflow stalls there
  int version = 1;                   // which shape of a changing workflow runs

  void reset() { *this = probe_state{}; }
};
inline probe_state probe;

/// Stalls (outside any step) while the probe says so, like a process that stops here.
/// Clearing probe.hang_before lets it go on.
inline asio::awaitable<void> maybe_hang(std::string before) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  if (probe.hang_before == before) probe.stalled_at = before;
  while (probe.hang_before == before) {
    t.expires_after(std::chrono::milliseconds(2));
    co_await t.async_wait(asio::use_awaitable);
  }
}

/// Waits until a workflow stalls before the step named `before` (maybe_hang): everything before
/// it, the engine's bookkeeping of the last step included, is done.
inline asio::awaitable<void> wait_stalled(std::string before) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  for (int i = 0; probe.stalled_at != before; ++i) {
    if (i == 10000) throw std::runtime_error("no workflow stalled before step " + before);
    t.expires_after(std::chrono::milliseconds(2));
    co_await t.async_wait(asio::use_awaitable);
  }
}

/// n steps "s0".."s<n-1>", each returning its index; stalls before a step named in
/// probe.hang_before. Returns the sum.
inline asio::awaitable<int> counter_wf(durable::context& ctx, int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) {
    std::string name = "s" + std::to_string(i);
    co_await maybe_hang(name);
    sum += co_await ctx.step(name, [i, &name] {
      ++probe.calls[name];
      return i;
    });
  }
  co_return sum;
}

/// A schema name quoted as an SQL identifier, for the tests' own statements (the one quoter).
inline std::string q(std::string_view schema) { return durable::detail::quote_identifier(schema); }

/// The engine options every test starts from; a test states what it changes.
inline durable::engine_options options(const std::string& schema,
                                       const std::string& executor = "exec-a") {
  durable::engine_options o;
  o.conninfo = conninfo();
  o.schema = schema;
  o.executor_id = executor;
  o.pool_size = 4;
  // No background heartbeat unless a test asks for one: round-trip counts stay exact.
  o.heartbeat_interval = std::chrono::hours(1);
  return o;
}

/// The first column of the first row of `st` as T; T{} when there is no row or it is NULL.
template <class T>
asio::awaitable<T> scalar_of(durable::engine& eng, durable::pg::statement st) {
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->run(std::move(st));
  if (r.rows() == 0 || r[0].is_null(0)) co_return T{};
  co_return r[0].template get<T>(0);
}
template <class T>
asio::awaitable<T> scalar_of(durable::pg::connection& c, durable::pg::statement st) {
  auto r = co_await c.run(std::move(st));
  if (r.rows() == 0 || r[0].is_null(0)) co_return T{};
  co_return r[0].template get<T>(0);
}

/// One value the test reads itself, on one of the engine's connections or on its own:
/// scalar<long>(eng, "SELECT count(*) FROM ... WHERE id = $1", id) (text unless T says
/// otherwise). A plain function that binds its arguments before the coroutine starts, so a
/// temporary string in the caller's co_await is safe (GCC 12: docs/architecture.md#compiler-notes).
template <class T = std::string, class... Args>
asio::awaitable<T> scalar(durable::engine& eng, std::string sql, const Args&... args) {
  return scalar_of<T>(eng, durable::pg::sql(std::move(sql), args...));
}
template <class T = std::string, class... Args>
asio::awaitable<T> scalar(durable::pg::connection& c, std::string sql, const Args&... args) {
  return scalar_of<T>(c, durable::pg::sql(std::move(sql), args...));
}

/// Rows of a workflow in `table` (steps: its journal; step_attempts: its failed attempts and
/// operator retries), read by the test itself.
inline asio::awaitable<long> journal_rows(durable::engine& eng, const std::string& id,
                                          const char* table = "steps") {
  return scalar<long>(
      eng, "SELECT count(*) FROM " + q(eng.schema_name()) + "." + table + " WHERE workflow_id = $1",
      id);
}

inline asio::awaitable<void> sleep_ms(int ms) {
  asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(ms));
  co_await t.async_wait(asio::use_awaitable);
}

/// Waits until the workflow has `n` journal rows (the in-process stand-in for "the process
/// got this far").
inline asio::awaitable<void> wait_rows(durable::engine& eng, const std::string& id, long n,
                                       const char* table = "steps") {
  for (int i = 0; i < 10000; ++i) {
    if (co_await journal_rows(eng, id, table) >= n) co_return;
    co_await sleep_ms(2);
  }
  throw std::runtime_error("workflow " + id + " never reached " + std::to_string(n) + " rows in " +
                           table);
}

struct workflow_row {
  std::string status;
  std::string reason;
  std::string error;
  int stalled_claims = 0;
};

// Parameters are string_views (trivially copyable): GCC 12 corrupts a std::string prvalue
// passed to a coroutine inside co_await.
inline asio::awaitable<workflow_row> row_of(durable::engine& eng, std::string_view id_view) {
  const std::string id(id_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec(
      "SELECT status, coalesce(status_reason, ''), coalesce(error::text, ''), "
      "stalled_claims FROM " +
          q(eng.schema_name()) + ".workflows WHERE id = $1",
      id);
  if (r.empty()) throw std::runtime_error("no workflow " + id);
  co_return workflow_row{r[0].get<std::string>(0), r[0].get<std::string>(1),
                         r[0].get<std::string>(2), r[0].get<int>(3)};
}

/// Waits until workflow `id` has status `status` (or fails after `polls` polls: ~20 s by default).
inline asio::awaitable<workflow_row> wait_status(durable::engine& eng, std::string_view id_view,
                                                 std::string_view status_view, int polls = 4000) {
  const std::string id(id_view), status(status_view);
  for (int i = 0; i < polls; ++i) {
    // A poll cancelled by a short statement_timeout that the case gave its engine (on a loaded
    // server, the poll's own SELECT can exceed it) is a poll missed, not a failure.
    std::optional<workflow_row> row;
    try {
      row = co_await row_of(eng, id);
    } catch (const durable::pg::query_canceled&) {
    }
    if (row && row->status == status) co_return *row;
    co_await test::sleep_ms(5);
  }
  auto row = co_await row_of(eng, id);
  throw std::runtime_error("workflow " + id + " is " + row.status + " (" + row.reason +
                           "), never " + status);
}

template <class Register, class Body>
/// The one engine fixture: an engine with options `o` (explicit: no default hides here) and the
/// workflows `add` registers, opened on a fresh io_context; `body(engine)` runs, then the
/// io_context is abandoned with whatever still runs there, like a process that died.
void with_open_engine(const durable::engine_options& o, Register add, Body body) {
  run([&]() -> asio::awaitable<void> {
    durable::engine eng(co_await asio::this_coro::executor, o);
    add(eng);
    (void)co_await eng.open();
    co_await body(eng);
  }());
}

/// Named option presets: what a test file's engines start from. Each is test::options() with
/// what the name says; a case states anything else it changes (engine_fixture's tweak).
namespace preset {
using fn = durable::engine_options (*)(const std::string& schema, const std::string& executor);

/// test::options(): no heartbeat (so no maintenance tick either), round-trip counts exact.
inline durable::engine_options quiet(const std::string& schema, const std::string& executor) {
  return options(schema, executor);
}
/// Heartbeat, maintenance tick and polling every 100 ms: cases about leases, waits and timers.
inline durable::engine_options live(const std::string& schema, const std::string& executor) {
  auto o = options(schema, executor);
  o.heartbeat_interval = std::chrono::milliseconds(100);
  o.poll_interval = std::chrono::milliseconds(100);
  return o;
}
/// I/O failures retried after 10 ms and polling every 50 ms: cases about failures and recovery.
inline durable::engine_options impatient(const std::string& schema, const std::string& executor) {
  auto o = options(schema, executor);
  o.io_retry_delay = std::chrono::milliseconds(10);
  o.poll_interval = std::chrono::milliseconds(50);
  return o;
}
/// No queue dispatcher and no listener: nothing but the case's own calls talks to the server.
inline void no_dispatch(durable::engine_options& o) {
  o.queues.clear();
  o.listen = false;
}
}  // namespace preset

/// What a case changes in its file's preset (nothing, here).
struct no_tweak {
  void operator()(durable::engine_options&) const {}
};

/// A test file's engines: its preset (`base`), its workflows (`add`), the executor id its cases
/// use unless one names another, and what the whole file adds to the preset (an event hook,
/// say). with_engine(schema, body, tweak, executor) opens one engine on a fresh io_context
/// (with_open_engine) and abandons it after `body(engine&)`, like a process that died.
struct engine_fixture {
  preset::fn base = &preset::quiet;
  void (*add)(durable::engine&) = nullptr;
  std::string executor = "exec-a";
  void (*file_tweak)(durable::engine_options&) = nullptr;

  [[nodiscard]] durable::engine_options options(const std::string& schema,
                                                const std::string& executor_id = {}) const {
    auto o = base(schema, executor_id.empty() ? executor : executor_id);
    if (file_tweak) file_tweak(o);
    return o;
  }
  template <class Body, class Tweak = no_tweak>
  void with_engine(const std::string& schema, Body body, Tweak tweak = {},
                   const std::string& executor_id = {}) const {
    auto o = options(schema, executor_id);
    tweak(o);
    with_open_engine(
        o, add ? add : +[](durable::engine&) {}, body);
  }
};

/// Ends `executor`'s lease now (its last heartbeat an hour ago), as if its process had died long
/// ago: the engine takes its workflows over at its next maintenance tick. The taker can then keep
/// a lease that no load lapses (a 300 ms one did, under the sanitizers on a busy machine: the
/// taker's own heartbeat was late, it stopped its run and recovered it again).
inline asio::awaitable<void> lapse_lease(durable::engine& eng, std::string_view executor_view) {
  const std::string executor(executor_view);
  auto c = co_await eng.pool().acquire();
  (void)co_await c->exec(
      "UPDATE " + q(eng.schema_name()) +
          ".executors SET heartbeat_at = now() - interval '1 hour' WHERE id = $1",
      executor);
}

/// test::wait_lock_waiter (support/pg_cases.hpp) on a connection of the engine's pool.
inline asio::awaitable<void> wait_lock_waiter(durable::engine& eng, std::string table,
                                              std::string verb = {}) {
  auto c = co_await eng.pool().acquire();
  co_await wait_lock_waiter(*c, std::move(table), std::move(verb));
}

/// Waits (without database I/O) until this engine runs no workflow.
inline asio::awaitable<void> wait_idle(durable::engine& eng) {
  while (eng.running() > 0) co_await sleep_ms(1);
}

}  // namespace test
