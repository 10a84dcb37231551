// The workflows and helpers of the recovery cases (test_recovery.cpp: retries, backoffs,
// timeouts, deadlines; test_lifecycle.cpp: cancel, resume, fork, durable sleeps, patches).
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#pragma once

#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "support/workflows.hpp"

namespace recovery_cases {

using namespace durable;
using namespace std::chrono_literals;
using test::probe;
using test::row_of;
using test::wait_status;

using test::q;  // tests/support/workflows.hpp

// What the workflows under test do, set by each test.
struct knobs {
  int fail = 0;            // attempts that throw std::runtime_error before one succeeds
  bool permanent = false;  // throw durable::permanent_error instead
  bool logic = false;      // throw std::logic_error (not in retry_on's list)
  bool slow_first = true;  // only the first attempt of "slow" is slow
  int serial_reads = 0;    // transactions of "serial" that have read the counter
};
inline knobs k;

inline asio::awaitable<int> flaky_wf(context& ctx, int max_attempts, int initial_ms) {
  const retry policy{.max_attempts = max_attempts,
                     .initial = std::chrono::milliseconds(initial_ms)};
  const int v = co_await ctx.step(
      "call",
      [](const step_info& info) {
        ++probe.calls["call"];
        probe.seen.push_back(std::to_string(info.attempt));
        if (k.permanent) throw permanent_error("HTTP 400: the document is empty");
        if (k.fail > 0) {
          --k.fail;
          throw std::runtime_error("HTTP 503 on attempt " + std::to_string(info.attempt));
        }
        return 40 + info.attempt;
      },
      policy);
  const int w = co_await ctx.step("after", [] { return 1; });
  co_return v + w;
}

inline asio::awaitable<int> picky_wf(context& ctx) {
  const retry policy{.max_attempts = 5,
                     .initial = 5ms,
                     .retry_if = &retry_on<std::range_error, std::length_error>};
  co_return co_await ctx.step(
      "call",
      [] {
        ++probe.calls["call"];
        if (k.logic) throw std::logic_error("a bug, not an outage");
        if (k.fail > 0) {
          --k.fail;
          throw std::range_error("out of range, for now");
        }
        return 7;
      },
      policy);
}

inline asio::awaitable<int> handles_wf(context& ctx) {
  int v = 0;
  try {
    v = co_await ctx.step("call", []() -> int {
      ++probe.calls["call"];
      throw permanent_error("no such customer");
    });
  } catch (const step_failed& e) {
    probe.seen.push_back(e.error_type() + "|" + e.error_message());
    v = -1;
  }
  const int after = co_await ctx.step("after", [] { return 100; });
  co_return v + after;
}

/// Its first attempt sleeps 30 s, or ignores cancellation for 400 ms when `ignore`.
inline asio::awaitable<int> slow_wf(context& ctx, int timeout_ms, int max_attempts, bool ignore) {
  const retry policy{.max_attempts = max_attempts,
                     .initial = 5ms,
                     .timeout = std::chrono::milliseconds(timeout_ms)};
  co_return co_await ctx.step(
      "slow",
      [ignore](const step_info& info) -> asio::awaitable<int> {
        ++probe.calls["slow"];
        if (ignore) probe.seen.push_back("attempt " + std::to_string(info.attempt));
        if (info.attempt == 1 || !k.slow_first) {
          if (ignore) {
            co_await asio::this_coro::reset_cancellation_state(
                [](asio::cancellation_type) { return asio::cancellation_type::none; });
            co_await test::sleep_ms(400);
            ++probe.calls["slow-finished-anyway"];
            probe.seen.push_back("abandoned ended");
            co_return -1;
          }
          co_await test::sleep_ms(30000);
        }
        co_return info.attempt;
      },
      policy);
}

/// A step that waits `ms` (cancellable), after a first step.
inline asio::awaitable<int> nap_wf(context& ctx, int ms) {
  co_await ctx.step("first", [] { ++probe.calls["first"]; });
  co_return co_await ctx.step("nap", [ms]() -> asio::awaitable<int> {
    ++probe.calls["nap"];
    co_await test::sleep_ms(ms);
    co_return 1;
  });
}

/// A step blocked on a socket that never delivers a byte.
inline asio::awaitable<int> blocked_wf(context& ctx, int port) {
  co_await ctx.step("first", [] { ++probe.calls["first"]; });
  co_return co_await ctx.step("read", [port]() -> asio::awaitable<int> {
    ++probe.calls["read"];
    asio::ip::tcp::socket sock(co_await asio::this_coro::executor);
    const asio::ip::tcp::endpoint to(asio::ip::make_address("127.0.0.1"),
                                     static_cast<unsigned short>(port));
    co_await sock.async_connect(to, asio::use_awaitable);
    char byte = 0;
    try {
      co_await asio::async_read(sock, asio::buffer(&byte, 1), asio::use_awaitable);
    } catch (const std::system_error& e) {
      probe.seen.push_back("read ended: " + e.code().message());
      throw;
    }
    co_return int(byte);
  });
}

/// A read-modify-write of one counter row in a SERIALIZABLE transaction; the two runs of the
/// test both read before either writes, so one of them loses the race (SQLSTATE 40001).
inline asio::awaitable<int> serial_wf(context& ctx, std::string table) {
  co_return co_await ctx.transaction("bump", [&](pg::transaction& tx) -> asio::awaitable<int> {
    ++probe.calls["bump"];
    co_await tx.exec("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE");
    auto r = co_await tx.exec("SELECT v FROM " + table + " WHERE id = 1");
    const int v = r[0].get<int>(0);
    if (++k.serial_reads <= 2)  // the first two attempts wait for each other (up to 2 s)
      for (int i = 0; i < 400 && k.serial_reads < 2; ++i) co_await test::sleep_ms(5);
    co_await tx.exec("UPDATE " + table + " SET v = $1 WHERE id = 1", v + 1);
    co_return v + 1;
  });
}

/// A synchronous step with a timeout: refused, it cannot be interrupted.
inline asio::awaitable<int> sync_timeout_wf(context& ctx) {
  co_return co_await ctx.step(
      "sync",
      [] {
        ++probe.calls["sync"];
        return 1;
      },
      retry{.timeout = 100ms});
}

/// Handles a step's final failure by catching the library's base class, which also catches
/// the unload of a long backoff (a run_released): the run must still stop there.
inline asio::awaitable<int> catcher_wf(context& ctx) {
  int v = 0;
  bool failed = false;
  try {
    v = co_await ctx.step(
        "call",
        [] {
          if (++probe.calls["call"] == 1) throw std::runtime_error("HTTP 503");
          return 1;
        },
        retry{.max_attempts = 3, .initial = 1000ms});
  } catch (const durable::error& e) {
    probe.seen.push_back(std::string("caught: ") + e.what());
    failed = true;
  }
  if (failed)
    v = co_await ctx.step("fallback", [] {
      ++probe.calls["fallback"];
      return -1;
    });
  co_return v;
}

/// The abandoned first attempt ignores cancellation and reads ctx afterwards.
/// Its first attempt ignores cancellation for 600 ms and then writes a local of the workflow;
/// the backoff after it is 300 ms, in the run.
inline asio::awaitable<int> stubborn_wf(context& ctx) {
  int written_late = 0;
  const int v = co_await ctx.step(
      "stubborn",
      [&written_late](const step_info& info) -> asio::awaitable<int> {
        if (info.attempt == 1) {
          co_await asio::this_coro::reset_cancellation_state(
              [](asio::cancellation_type) { return asio::cancellation_type::none; });
          co_await test::sleep_ms(600);
          written_late = 1;  // the workflow's frame must still be there (ASan checks)
          probe.seen.push_back("abandoned attempt ended");
        }
        co_return info.attempt;
      },
      retry{.max_attempts = 3, .initial = 300ms, .timeout = 100ms});
  co_return v + written_late;
}

/// A step, a durable sleep of `ms`, a step.
inline asio::awaitable<int> sleeper_wf(context& ctx, int ms) {
  co_await ctx.step("before", [] { ++probe.calls["before"]; });
  co_await ctx.sleep_for(std::chrono::milliseconds(ms));
  co_return co_await ctx.step("after", [] {
    ++probe.calls["after"];
    return 1;
  });
}

/// Version 1: a, b, c. Version 2 changes b into b2 behind patched("b2"). Version 3 keeps only
/// b2 and retires the patch with deprecate_patch. Stalls before c when the probe says so.
inline asio::awaitable<int> versioned_wf(context& ctx) {
  co_await ctx.step("a", [] { ++probe.calls["a"]; });
  int v = 0;
  bool new_path = false;
  if (probe.version == 2) {
    new_path = co_await ctx.patched("b2");
  } else if (probe.version >= 3) {
    co_await ctx.deprecate_patch("b2");
    new_path = true;
  }
  if (new_path) {
    v = co_await ctx.step("b2", [] {
      ++probe.calls["b2"];
      return 20;
    });
  } else {
    v = co_await ctx.step("b", [] {
      ++probe.calls["b"];
      return 10;
    });
  }
  co_await test::maybe_hang("c");
  co_return v + co_await ctx.step("c", [] {
    ++probe.calls["c"];
    return 1;
  });
}

inline asio::awaitable<std::string> keys_wf(context& ctx) {
  auto key = co_await ctx.step(
      "charge",
      [&](const step_info& info) -> asio::awaitable<std::string> {
        if (info.attempt == 1) {
          co_await asio::this_coro::reset_cancellation_state(
              [](asio::cancellation_type) { return asio::cancellation_type::none; });
          co_await test::sleep_ms(300);
          probe.seen.push_back("abandoned: " + ctx.workflow_id() + " " + ctx.idempotency_key());
        }
        co_return ctx.idempotency_key();
      },
      retry{.max_attempts = 2, .initial = 5ms, .timeout = 100ms});
  co_await ctx.step("next", [] { return 0; });
  co_return key;
}

inline int running_now = 0, running_max = 0;
/// Its first step fails once when `flaky` (a backoff that unloads it); the second runs `ms`,
/// counting the runs of the queue at that point.
inline asio::awaitable<int> queued_wf(context& ctx, std::string tag, bool flaky, int ms) {
  co_await ctx.step(
      "first",
      [&] {
        if (flaky && ++probe.calls["flaky-" + tag] == 1) throw std::runtime_error("503");
      },
      retry{.max_attempts = 2, .initial = 400ms});
  co_await ctx.step("work", [&]() -> asio::awaitable<void> {
    ++running_now;
    running_max = std::max(running_max, running_now);
    co_await test::sleep_ms(ms);
    --running_now;
  });
  co_return 0;
}

inline void register_all(engine& e) {
  e.register_workflow("catcher", &catcher_wf);
  e.register_workflow("keys", &keys_wf);
  e.register_workflow("versioned", &versioned_wf);
  e.register_workflow("sleeper", &sleeper_wf);
  e.register_workflow("stubborn", &stubborn_wf);
  e.register_workflow("queued", &queued_wf);
  e.register_workflow("sync_timeout", &sync_timeout_wf);
  e.register_workflow("flaky", &flaky_wf);
  e.register_workflow("picky", &picky_wf);
  e.register_workflow("handles", &handles_wf);
  e.register_workflow("slow", &slow_wf);
  e.register_workflow("nap", &nap_wf);
  e.register_workflow("blocked", &blocked_wf);
  e.register_workflow("serial", &serial_wf);
  e.register_workflow("counter", &test::counter_wf);
}

/// What every engine of this file adds to test::preset::impatient: only errors are reported.
inline void file_options(engine_options& o) { o.min_severity = severity::error; }

const test::engine_fixture fx{.base = &test::preset::impatient,
                              .add = &register_all,
                              .executor = "exec-r",
                              .file_tweak = &file_options};

/// Whether the step after the sleep of workflow `id` committed at or after the wake-up time the
/// sleep journaled (step 1, kind 'sleep', its output in microseconds since the epoch).
inline asio::awaitable<bool> woke_on_time(engine& eng, std::string_view id_view) {
  const std::string id(id_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec(
      "SELECT s.kind = 'sleep' AND a.completed_at >= to_timestamp(s.output::text::bigint / 1e6) "
      "FROM " +
          q(eng.schema_name()) + ".steps s JOIN " + q(eng.schema_name()) +
          ".steps a ON a.workflow_id = s.workflow_id AND a.seq = 2 "
          "WHERE s.workflow_id = $1 AND s.seq = 1",
      id);
  co_return r.rows() == 1 && r[0].get<bool>(0);
}

struct attempt_row {
  int seq, attempt;
  std::string outcome, error_type, message;
  bool has_next;  // next_attempt_at is set, and after the attempt ended
};

inline asio::awaitable<std::vector<attempt_row>> attempts_of(engine& eng,
                                                             std::string_view id_view) {
  const std::string id(id_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec(
      "SELECT seq, attempt, outcome, coalesce(error->>'type', ''), coalesce(error->>'message', "
      "''), coalesce(next_attempt_at > ended_at, false) FROM " +
          q(eng.schema_name()) + ".step_attempts WHERE workflow_id = $1 ORDER BY id",
      id);
  std::vector<attempt_row> out;
  for (const pg::row row : r)
    out.push_back({row.get<int>(0), row.get<int>(1), row.get<std::string>(2),
                   row.get<std::string>(3), row.get<std::string>(4), row.get<bool>(5)});
  co_return out;
}

/// The query docs/failures.md gives operators: a dead-lettered workflow's reason, attempts,
/// last error and next attempt, in one statement.
struct dead_letter_view {
  std::string status, reason, step, last_error;
  int failed_attempts = 0;
  bool next_attempt_set = false;
};
inline asio::awaitable<dead_letter_view> dead_letter_query(engine& eng, std::string_view id_view) {
  const std::string id(id_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec(
      "SELECT status, status_reason, step, last_error, failed_attempts, "
      "next_attempt_at IS NOT NULL FROM " +
          q(eng.schema_name()) + ".step_retries WHERE workflow_id = $1",
      id);
  if (r.rows() != 1) throw std::runtime_error("step_retries has no single row for " + id);
  co_return dead_letter_view{r[0].get<std::string>(0), r[0].get<std::string>(1),
                             r[0].get<std::string>(2), r[0].get<std::string>(3),
                             r[0].get<int>(4),         r[0].get<bool>(5)};
}

}  // namespace recovery_cases
