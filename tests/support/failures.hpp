// The workflows and helpers of the runtime's failure cases (test_failures.cpp: what the server
// refuses, transient errors, bad input; test_executors.cpp: executor ids, leases, heartbeats,
// bounds, shutdown, the supervisor).
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "support/conninfo.hpp"
#include "support/proxy.hpp"
#include "support/workflows.hpp"

namespace failure_cases {

using namespace durable;
using namespace std::chrono_literals;
using test::probe;

using test::q;  // tests/support/workflows.hpp

/// Events the engine reported, for assertions.
struct event_log {
  std::vector<std::string> lines;  // "level component workflow: message"
  void add(const event& e) {
    lines.push_back(std::string(to_string(e.level)) + " " + std::string(e.component) + " " +
                    std::string(e.workflow_id) + ": " + std::string(e.message));
  }
  [[nodiscard]] int count(const std::string& needle) const {
    int n = 0;
    for (const auto& l : lines) n += l.find(needle) != std::string::npos;
    return n;
  }
};
inline event_log events;

/// What every engine of this file adds to test::preset::quiet: fast I/O retries, and every
/// event (debug included) kept in `events`.
inline void file_options(engine_options& o) {
  o.io_retry_delay = 10ms;
  o.min_severity = severity::debug;
  o.on_event = [](const event& e) { events.add(e); };
}

using test::row_of;
using test::wait_status;

// ---- workflows under test -------------------------------------------------------------------

inline asio::awaitable<int> bad_name_wf(context& ctx) {
  std::string name = "step-\xff\xfe";
  co_return co_await ctx.step(name, [] {
    ++probe.calls["bad_name"];
    return 1;
  });
}

struct with_nul {
  std::string text;
  NLOHMANN_DEFINE_TYPE_INTRUSIVE(with_nul, text)
};

inline asio::awaitable<int> nul_value_wf(context& ctx) {
  auto v = co_await ctx.step("nul", [] {
    ++probe.calls["nul"];
    return with_nul{std::string("a\0b", 3)};
  });
  co_return int(v.text.size());
}

inline asio::awaitable<std::size_t> huge_value_wf(context& ctx) {
  // Over jsonb's limit of 256 MB for one value.
  auto v = co_await ctx.step("huge", [] {
    ++probe.calls["huge"];
    return std::vector<std::string>(300, std::string(1 << 20, 'x'));
  });
  co_return v.size();
}

/// `bytes` letters and digits from a fixed seed: a value that compresses little (TOAST). Made
/// once per size, so that a test can make it before its engine runs (making 48 MiB takes long
/// enough to stall the event loop that the step function runs on).
inline const std::string& letters(std::size_t bytes) {
  static std::map<std::size_t, std::string> made;
  auto& s = made[bytes];
  if (s.size() == bytes) return s;
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  s.assign(bytes, ' ');
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& c : s) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = alphabet[x % 62];
  }
  return s;
}

inline asio::awaitable<std::size_t> big_value_wf(context& ctx, std::size_t bytes) {
  auto v = co_await ctx.step("big", [&] {
    ++probe.calls["big"];
    return letters(bytes);
  });
  co_return v.size();
}

inline asio::awaitable<std::size_t> length_wf(context&, std::string text) { co_return text.size(); }

inline asio::awaitable<std::size_t> catches_big_value_wf(context& ctx, std::size_t bytes) {
  try {
    co_await ctx.step("big", [&] {
      ++probe.calls["big"];
      return letters(bytes);
    });
  } catch (const value_too_large&) {
    probe.seen.push_back("caught");
  }
  // The run is parked: no later step runs, whatever the code does.
  co_return co_await ctx.step("after", [] {
    ++probe.calls["after"];
    return std::size_t(1);
  });
}

/// `n` steps with 30 ms between them (outside the steps): a run that keeps writing.
inline asio::awaitable<int> paced_wf(context& ctx, int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) {
    co_await test::sleep_ms(30);
    const std::string name = "p" + std::to_string(i);
    sum += co_await ctx.step(name, [i] { return i; });
  }
  co_return sum;
}

inline asio::awaitable<int> simple_wf(context& ctx) {
  co_return co_await ctx.step("one", [] {
    ++probe.calls["one"];
    return 1;
  });
}

inline asio::awaitable<int> tx_counter_wf(context& ctx, std::string table) {
  co_return co_await ctx.transaction("insert", [&](pg::transaction& tx) -> asio::awaitable<int> {
    ++probe.calls["insert"];
    co_await tx.exec("INSERT INTO " + table + " (v) VALUES (1)");
    co_return 1;
  });
}

inline asio::awaitable<int> throws_bad_utf8_wf(context&) {
  throw std::runtime_error("bad \xff\xfe bytes");
  co_return 0;
}

inline asio::awaitable<std::string> step_throws_bad_utf8_wf(context& ctx) {
  try {
    co_await ctx.step("bad", []() -> int { throw std::runtime_error("step \xc3\x28 bytes"); });
  } catch (const step_failed& e) {
    co_return e.error_message();
  }
  co_return "";
}

inline asio::awaitable<int> nested_sync_wf(context& ctx) {
  co_return co_await ctx.step("outer", [&ctx] {
    ++probe.calls["outer"];
    (void)ctx.step("inner", [] { return 2; });
    return 1;
  });
}

/// A step whose name holds a NUL character: parked before its function runs.
inline asio::awaitable<int> nul_step_wf(context& ctx) {
  co_return co_await ctx.step(std::string("charge\0card", 11), [] {
    ++probe.calls["nul step"];
    return 1;
  });
}

inline asio::awaitable<int> nested_async_wf(context& ctx) {
  co_return co_await ctx.step("outer", [&ctx]() -> asio::awaitable<int> {
    ++probe.calls["outer"];
    co_return co_await ctx.step("inner", [] { return 2; });
  });
}

/// A step that waits long and records whether it saw cancellation.
inline asio::awaitable<int> long_step_wf(context& ctx) {
  co_return co_await ctx.step("long", []() -> asio::awaitable<int> {
    ++probe.calls["long"];
    try {
      co_await test::sleep_ms(60000);
    } catch (const std::system_error& e) {
      if (e.code() == asio::error::operation_aborted) probe.seen.push_back("cancelled");
      throw;
    }
    co_return 1;
  });
}

/// A step that takes a while, to keep runs in flight.
inline asio::awaitable<int> busy_wf(context& ctx) {
  co_return co_await ctx.step("busy", []() -> asio::awaitable<int> {
    ++probe.calls["busy"];
    co_await test::sleep_ms(20);
    co_return 1;
  });
}

/// A transactional step whose SQL fails once with the SQLSTATE in probe.seen[0] (raised by the
/// server), then succeeds.
inline asio::awaitable<int> tx_raises_once_wf(context& ctx, std::string raise_fn) {
  co_return co_await ctx.transaction("raise-once",
                                     [&](pg::transaction& tx) -> asio::awaitable<int> {
                                       if (probe.calls["raise-once"]++ == 0) {
                                         const std::string code = probe.seen.at(0);
                                         co_await tx.exec("SELECT " + raise_fn + "($1)", code);
                                       }
                                       co_return 7;
                                     });
}

/// Returns a value the server cannot store as the workflow's output.
inline asio::awaitable<with_nul> bad_output_wf(context& ctx) {
  co_await ctx.step("fine", [] { return 1; });
  co_return with_nul{std::string("x\0y", 3)};
}

/// Catches every exception of its second step and returns a fallback: a released run must
/// still end without a final state.
inline asio::awaitable<int> catches_all_wf(context& ctx) {
  co_await ctx.step("a", [] { return 1; });
  co_await test::maybe_hang("b");
  try {
    co_return co_await ctx.step("b", [] {
      ++probe.calls["b"];
      return 2;
    });
  } catch (const std::exception&) {
    co_return -1;
  }
}

/// Throws the nondeterminism_error of another workflow (as a handle's result() may): the
/// cursor never raised it, and the workflow must still be parked, not left running.
inline asio::awaitable<int> throws_nondeterminism_wf(context& ctx) {
  co_await ctx.step("one", [] { return 1; });
  throw nondeterminism_error("w-other", 3, "'a'", "'b'", "nondeterminism in workflow 'w-other'");
}

inline void register_all(engine& e) {
  e.register_workflow("throws_nondeterminism", &throws_nondeterminism_wf);
  e.register_workflow("catches_all", &catches_all_wf);
  e.register_workflow("tx_raises_once", &tx_raises_once_wf);
  e.register_workflow("bad_output", &bad_output_wf);
  e.register_workflow("bad_name", &bad_name_wf);
  e.register_workflow("nul_value", &nul_value_wf);
  e.register_workflow("huge_value", &huge_value_wf);
  e.register_workflow("big_value", &big_value_wf);
  e.register_workflow("catches_big_value", &catches_big_value_wf);
  e.register_workflow("length", &length_wf);
  e.register_workflow("simple", &simple_wf);
  e.register_workflow("tx_counter", &tx_counter_wf);
  e.register_workflow("throws_bad_utf8", &throws_bad_utf8_wf);
  e.register_workflow("step_throws_bad_utf8", &step_throws_bad_utf8_wf);
  e.register_workflow("nested_sync", &nested_sync_wf);
  e.register_workflow("nested_async", &nested_async_wf);
  e.register_workflow("nul_step", &nul_step_wf);
  e.register_workflow("hang", &test::counter_wf);
  e.register_workflow("paced", &paced_wf);
  e.register_workflow("long_step", &long_step_wf);
  e.register_workflow("busy", &busy_wf);
}

const test::engine_fixture fx{.base = &test::preset::quiet,
                              .add = &register_all,
                              .executor = "exec-f",
                              .file_tweak = &file_options};

/// Another session's lock on the journal table: every journal write waits until release().
struct journal_lock {
  std::unique_ptr<pg::connection> conn;
  std::optional<pg::transaction> tx;
  asio::awaitable<void> release() { co_await tx->rollback(); }
};

inline asio::awaitable<std::unique_ptr<journal_lock>> lock_journal(std::string_view schema_view) {
  const std::string schema(schema_view);
  auto lock = std::make_unique<journal_lock>();
  lock->conn = co_await pg::connection::connect(test::conninfo());
  lock->tx.emplace(lock->conn->begin());
  co_await lock->tx->exec("LOCK TABLE " + q(schema) + ".steps IN EXCLUSIVE MODE");
  co_return lock;
}

/// Watches an executor's heartbeat from a connection of the test's own.
struct heartbeat_watch {
  std::unique_ptr<pg::connection> conn;
  std::string sql;
  std::string executor_id;
  /// Milliseconds since the executor's last heartbeat.
  asio::awaitable<double> age() {
    auto r = co_await conn->exec(sql, executor_id);
    co_return r[0].get<double>(0);
  }
};

inline asio::awaitable<heartbeat_watch> watch_heartbeat(engine& eng) {
  heartbeat_watch w;
  w.conn = co_await pg::connection::connect(test::conninfo());
  w.sql = "SELECT extract(epoch FROM now() - heartbeat_at) * 1000 FROM " + q(eng.schema_name()) +
          ".executors WHERE id = $1";
  w.executor_id = eng.executor_id();
  co_return w;
}

/// Runs one workflow that the server refuses to journal; it must be parked with the
/// server's SQLSTATE, and its step must have run once.
inline void expect_refused(const std::string& workflow, const std::string& step,
                           const std::string& sqlstate) {
  probe.reset();
  events = {};
  const auto schema = test::fresh_schema("refuse");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const std::string id = "w-" + workflow;
    auto h = co_await eng.start(workflow, id);
    auto row = co_await wait_status(eng, h.id(), "parked");
    CHECK_THAT(row.reason, Catch::Contains("SQLSTATE " + sqlstate) && Catch::Contains("step 0 '") &&
                               Catch::Contains("refused by the server"));
    auto err = co_await test::error_of<workflow_parked>(h.result<int>());
    CHECK(err);
    // Give a retry loop time to show itself: it would run the step again.
    co_await test::sleep_ms(200);
    CHECK(eng.running() == 0);
    CHECK(co_await test::journal_rows(eng, h.id()) == 0);
  });
  CHECK(probe.calls[step] == 1);
  CHECK(events.count("parked") >= 1);
}

}  // namespace failure_cases
