// The workflows and helpers of the primitives' cases (test_primitives.cpp: messages, events,
// children, fan-out and fan-in; test_continue.cpp: the journal limit and continue_as_new).
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>

#include "support/workflows.hpp"

namespace primitive_cases {

using namespace durable;
using namespace std::chrono_literals;
using test::probe;
using test::row_of;
using test::wait_status;

using test::q;  // tests/support/workflows.hpp

// What the workflows under test do, set by each test (a forked process inherits it).
struct knobs {
  int a_ms = 0, b_ms = 0;   // how long branches "a" and "b" take
  bool b_fails = false;     // branch "b" fails for good
  int a_after_steps = 0;    // branch "a" starts once this many steps are journaled (below)
  int steps_journaled = 0;  // counted by journal_counter, when a case installs it
  int in_flight_now = 0, in_flight_max = 0;
};
inline knobs k;

// ---- messages

inline asio::awaitable<std::string> waiter_wf(context& ctx, int timeout_ms) {
  co_await ctx.step("before", [] { ++probe.calls["before"]; });
  const auto m = co_await ctx.recv<std::string>("go", std::chrono::milliseconds(timeout_ms));
  const std::string got = m.value_or("(timeout)");
  co_await ctx.step("after", [&] {
    ++probe.calls["after"];
    probe.seen.push_back(got);
  });
  co_return got;
}

// Fails with what it is sent.
inline asio::awaitable<std::string> refuser_wf(context& ctx) {
  const auto m = co_await ctx.recv<std::string>("go", std::chrono::minutes(10));
  throw std::runtime_error("refused " + m.value_or("(timeout)"));
}

inline asio::awaitable<int> pinger_wf(context& ctx, std::string peer, int rounds) {
  int last = 0;
  for (int i = 0; i < rounds; ++i) {
    co_await ctx.send(peer, "ping", i);
    const auto r = co_await ctx.recv<int>("pong", 10s);
    last = r.value_or(-1);
  }
  co_return last;
}

inline asio::awaitable<int> ponger_wf(context& ctx, std::string peer, int rounds) {
  int sum = 0;
  for (int i = 0; i < rounds; ++i) {
    const auto v = co_await ctx.recv<int>("ping", 10s);
    sum += v.value_or(-1000);
    co_await ctx.send(peer, "pong", v.value_or(-1) * 10);
  }
  co_return sum;
}

// The same exchange with receives that wait as long as it takes (no deadline row).
inline asio::awaitable<int> patient_pinger_wf(context& ctx, std::string peer, int rounds) {
  int last = 0;
  for (int i = 0; i < rounds; ++i) {
    co_await ctx.send(peer, "ping", i);
    last = (co_await ctx.recv<int>("pong")).value_or(-1);
  }
  co_return last;
}

inline asio::awaitable<int> patient_ponger_wf(context& ctx, std::string peer, int rounds) {
  int sum = 0;
  for (int i = 0; i < rounds; ++i) {
    const int v = (co_await ctx.recv<int>("ping")).value_or(-1000);
    sum += v;
    co_await ctx.send(peer, "pong", v * 10);
  }
  co_return sum;
}

// Receives `count` messages of topic "n", each waiting as long as it takes; returns their sum.
inline asio::awaitable<int> collector_wf(context& ctx, int count) {
  int sum = 0;
  for (int i = 0; i < count; ++i) sum += (co_await ctx.recv<int>("n")).value_or(-1000);
  co_return sum;
}

// Finds topic "t" empty, then sends itself a message and receives it at once with no timeout,
// and another with a timeout shorter than any round trip: both must be taken, although the
// notification of each send may not have reached the listener yet. Returns what it received.
inline asio::awaitable<std::string> self_sender_wf(context& ctx) {
  const auto none = co_await ctx.recv<int>("t", std::chrono::milliseconds(1));
  co_await ctx.send(ctx.workflow_id(), "t", 5);
  const auto now = co_await ctx.recv<int>("t", std::chrono::milliseconds(0));
  co_await ctx.send(ctx.workflow_id(), "t", 6);
  const auto soon = co_await ctx.recv<int>("t", std::chrono::milliseconds(1));
  co_return std::to_string(none.value_or(-1)) + " " + std::to_string(now.value_or(-1)) + " " +
      std::to_string(soon.value_or(-1));
}

inline asio::awaitable<void> send_nowhere_wf(context& ctx) {
  co_await ctx.send("nobody-here", "topic", 1);
}

// ---- events

inline asio::awaitable<int> publisher_wf(context& ctx) {
  co_await ctx.set_event("stage", std::string("started"));
  const auto go = co_await ctx.recv<int>("go", 30s);
  co_await ctx.set_event("stage", std::string("done"));
  co_return go.value_or(-1);
}

inline asio::awaitable<std::string> reader_wf(context& ctx, std::string publisher) {
  const auto v = co_await ctx.get_event<std::string>(publisher, "stage", 20s);
  const auto none = co_await ctx.get_event<std::string>(publisher, "never", 50ms);
  co_return v.value_or("?") + (none ? "!" : "/none");
}

// ---- child workflows

inline asio::awaitable<int> child_wf(context& ctx, int x) {
  const int v = co_await ctx.step("work", [x] {
    ++probe.calls["child-work"];
    return x * 2;
  });
  // A workflow that fails (a dead-lettered one would keep its parent waiting for an operator).
  if (x < 0) throw std::invalid_argument("negative input");
  const auto hold = co_await ctx.recv<int>("release", std::chrono::milliseconds(k.a_ms));
  co_return v + hold.value_or(0);
}

inline asio::awaitable<int> parent_wf(context& ctx, int x) {
  co_await ctx.step("before", [] { ++probe.calls["parent-before"]; });
  auto child = co_await ctx.start_child("child", x);
  probe.seen.push_back(child.id());
  int v = 0;
  try {
    v = co_await child.result<int>();
  } catch (const step_failed& e) {
    probe.seen.push_back(std::string("failed: ") + e.what());
    v = -1;
  }
  co_await ctx.step("after", [] { ++probe.calls["parent-after"]; });
  co_return v;
}

// ---- fan-out and fan-in

inline asio::awaitable<int> branch(const char* name, int ms, bool fail, int value) {
  ++probe.calls[name];
  if (ms > 0) co_await test::sleep_ms(ms);
  if (fail) throw permanent_error(std::string(name) + " cannot");
  co_return value;
}

/// engine_options::on_metric for a case that orders branches by commits, not by the clock: it
/// counts the steps journaled (durable_steps_executed_total is counted after the commit).
inline void journal_counter(engine_options& o) {
  o.on_metric = [](const metric_observation& m) {
    if (m.name == "durable_steps_executed_total") k.steps_journaled += int(m.value);
  };
}

inline asio::awaitable<int> fan_wf(context& ctx) {
  auto a = ctx.step("a", []() -> asio::awaitable<int> {
    while (k.steps_journaled < k.a_after_steps) co_await test::sleep_ms(2);
    co_return co_await branch("a", k.a_ms, false, 1);
  });
  auto b = ctx.step("b", [] { return branch("b", k.b_ms, k.b_fails, 2); });
  auto [x, y] = co_await ctx.all(std::move(a), std::move(b));
  const int c = co_await ctx.step("c", [] { return 100; });
  co_return x * 10 + y + c;
}

inline asio::awaitable<int> race_wf(context& ctx) {
  auto a = ctx.step("a", [] { return branch("a", k.a_ms, false, 1); });
  auto b = ctx.step("b", [] { return branch("b", k.b_ms, false, 2); });
  const auto w = co_await ctx.any(std::move(a), std::move(b));
  const int after = co_await ctx.step("after", [] { return 1000; });
  co_return int(w.index()) * 100 + std::visit([](int v) { return v; }, w) + after;
}

inline asio::awaitable<long> map_wf(context& ctx, int n, int in_flight) {
  std::vector<int> items(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) items[std::size_t(i)] = i;
  const auto squares = co_await ctx.map(
      "sq", std::move(items), std::size_t(in_flight), [](const int& v) -> asio::awaitable<long> {
        ++probe.calls["sq"];
        k.in_flight_max = std::max(k.in_flight_max, ++k.in_flight_now);
        co_await test::sleep_ms(0);
        --k.in_flight_now;
        co_return long(v) * v;
      });
  long sum = 0;
  for (std::size_t i = 0; i < squares.size(); ++i)
    if (squares[i] == long(i) * long(i)) sum += squares[i];
  co_return sum;
}

// ---- misuse and joins under failure (from a review)

inline asio::awaitable<std::string> any_recv_wf(context& ctx) {
  auto a = ctx.recv<std::string>("approve");
  auto b = ctx.recv<std::string>("reject");
  auto w = co_await ctx.any(std::move(a), std::move(b));
  co_return std::to_string(w.index());
}

inline asio::awaitable<int> slow_side(int ms) {
  ++probe.calls["slow"];
  co_await test::sleep_ms(ms);
  co_return 1;
}

inline asio::awaitable<int> all_retry_wf(context& ctx) {
  auto a = ctx.step("slow", [] { return slow_side(2500); });
  auto b = ctx.step(
      "flaky",
      [] {
        ++probe.calls["flaky"];
        if (probe.calls["flaky"] <= 2) throw std::runtime_error("flaky");
        return 2;
      },
      retry{.max_attempts = 10, .initial = 1000ms, .factor = 1});
  auto [x, y] = co_await ctx.all(std::move(a), std::move(b));
  co_return x + y;
}

inline asio::awaitable<long> map_fail_wf(context& ctx, int n) {
  std::vector<int> items(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) items[std::size_t(i)] = i;
  const auto r = co_await ctx.map("it", std::move(items), 50, [](const int& v) -> long {
    ++probe.calls["it"];
    if (v == 300) throw permanent_error("item 300 cannot");
    return v;
  });
  co_return long(r.size());
}

inline asio::awaitable<std::string> colon_reader_wf(context& ctx) {
  auto v = co_await ctx.get_event<std::string>("a", "b:c");
  co_return v.value_or("none");
}
inline asio::awaitable<void> colon_publisher_wf(context& ctx, std::string key) {
  co_await ctx.set_event(key, key);
}

inline asio::awaitable<int> quarter_wf(context& ctx) {
  co_await ctx.sleep_for(std::chrono::hours(24 * 90));
  co_return co_await ctx.step("after", [] {
    ++probe.calls["after-quarter"];
    return 90;
  });
}

// ---- journal limit, continue as new

// `steps` steps, a durable sleep of `sleep_ms` (none if 0), then `extra` more steps.
inline asio::awaitable<int> long_wf(context& ctx, int steps, int sleep_ms, int extra) {
  int sum = 0;
  for (int i = 0; i < steps; ++i)
    sum += co_await ctx.step("s", [&] {
      ++probe.calls["long"];
      return i;
    });
  if (sleep_ms > 0) co_await ctx.sleep_for(std::chrono::milliseconds(sleep_ms));
  for (int i = 0; i < extra; ++i)
    sum += co_await ctx.step("extra", [&] {
      ++probe.calls["long-extra"];
      return 1000;
    });
  co_return sum;
}

// A poller: per generation three steps and one look for a "tick" message; it continues as new
// with its running count and sum until it has run `rounds` generations and received `expect`
// messages. Its journal never holds more than 5 rows (3 steps, a recv's deadline and value).
inline asio::awaitable<long> poller_wf(context& ctx, int round, int rounds, int expect, int got,
                                       long sum) {
  if (ctx.generation() != round) ++probe.calls["wrong-generation"];
  for (int i = 0; i < 3; ++i)
    co_await ctx.step("poll", [&](const step_info& info) {
      ++probe.calls["poll"];
      const std::string tag = round == 0 ? std::to_string(info.seq)
                                         : std::to_string(round) + "." + std::to_string(info.seq);
      if (info.idempotency_key != ctx.workflow_id() + ":" + tag) ++probe.calls["wrong-key"];
    });
  const auto tick = co_await ctx.recv<int>("tick", 20ms);
  if (tick) {
    ++got;
    sum += *tick;
  }
  const int size = int(ctx.journal_size());
  probe.calls["max-journal"] = std::max(probe.calls["max-journal"], size);
  if (round + 1 >= rounds && got >= expect) co_return sum;
  co_return co_await ctx.continue_as_new<&poller_wf>(round + 1, rounds, expect, got, sum);
}

// Per generation: a child at step 0, its result at step 1, a send to itself at step 2 (the
// same step numbers in every generation), then continue as new until `rounds` ran.
inline asio::awaitable<int> cycler_wf(context& ctx, int round, int rounds, int total) {
  auto child = co_await ctx.start_child("child", round + 1);
  const int v = co_await child.result<int>();
  const std::string self = ctx.workflow_id();
  co_await ctx.send(self, "note", round);
  total += v;
  if (round + 1 >= rounds) co_return total;
  co_return co_await ctx.continue_as_new<int>(round + 1, rounds, total);
}

// continue_as_new misused: from inside a ctx.all branch, or with arguments of other types.
inline asio::awaitable<int> continue_branch(context& ctx, int round) {
  co_await ctx.continue_as_new(round + 1);
  co_return 2;
}
inline asio::awaitable<void> cont_in_join_wf(context& ctx, int round) {
  if (round > 0) co_return;
  auto a = ctx.step("a", [] { return 1; });
  auto b = continue_branch(ctx, round);
  (void)co_await ctx.all(std::move(a), std::move(b));
}
inline asio::awaitable<void> cont_wrong_wf(context& ctx, int round) {
  if (round > 0) co_return;
  const std::string wrong = "not an int";
  co_await ctx.continue_as_new(wrong);
}

// Generation 0 receives one "pay" message and continues; generation 1 waits up to `wait_ms`
// for another and returns it (-1 if none came).
inline asio::awaitable<int> keyed_inbox_wf(context& ctx, int wait_ms) {
  const std::chrono::milliseconds wait = ctx.generation() == 0 ? 10000ms : 1ms * wait_ms;
  const auto got = co_await ctx.recv<int>("pay", wait);
  if (ctx.generation() == 0) {
    probe.seen.push_back(std::to_string(got.value_or(-1)));
    co_return co_await ctx.continue_as_new<int>(wait_ms);
  }
  co_return got.value_or(-1);
}

// Its step names depend on the generation: replayed under another generation, it would
// diverge from its journal.
inline asio::awaitable<int> by_generation_wf(context& ctx, int round) {
  const std::string name = ctx.generation() == 0 ? "first" : "later";
  const int a = co_await ctx.step(name, [&] { return round * 10; });
  const int b = co_await ctx.step("b", [&](const step_info& info) {
    const std::string tag = ctx.generation() == 0
                                ? std::to_string(info.seq)
                                : std::to_string(ctx.generation()) + "." + std::to_string(info.seq);
    if (info.idempotency_key != ctx.workflow_id() + ":" + tag) ++probe.calls["wrong-key"];
    return 1;
  });
  if (ctx.generation() == 0) co_return co_await ctx.continue_as_new<int>(round + 1);
  co_return a + b;
}

// Catches a misuse of continue_as_new, then continues properly.
inline asio::awaitable<int> cont_after_misuse_wf(context& ctx, int round) {
  if (round > 0) co_return round;
  const std::string wrong = "not an int";
  try {
    (void)co_await ctx.continue_as_new<int>(wrong);
  } catch (const durable::error&) {
    ++probe.calls["misuse-caught"];
  }
  co_return co_await ctx.continue_as_new<int>(round + 1);
}

// `before` steps, then `branches` concurrent awaitable steps that each take 50 ms.
inline asio::awaitable<int> all_near_limit_wf(context& ctx, int before) {
  for (int i = 0; i < before; ++i) (void)co_await ctx.step("pre", [] { return 0; });
  auto a = ctx.step("a", [] { return branch("near", 50, false, 1); });
  auto b = ctx.step("b", [] { return branch("near", 50, false, 2); });
  auto c = ctx.step("c", [] { return branch("near", 50, false, 3); });
  auto d = ctx.step("d", [] { return branch("near", 50, false, 4); });
  auto [w, x, y, z] = co_await ctx.all(std::move(a), std::move(b), std::move(c), std::move(d));
  co_return w + x + y + z;
}

// For the crash test: two transactional effects per generation, then continue as new; the
// process kills itself (SIGKILL) just before continuing in generation `die_before`, or at the
// very start of generation `die_at_start` (after the continue committed).
inline std::string effects_table;
inline int die_before = -1, die_at_start = -1;
inline asio::awaitable<int> crash_poller_wf(context& ctx, int round, int rounds) {
  if (round == die_at_start) ::raise(SIGKILL);
  for (int i = 0; i < 2; ++i)
    co_await ctx.transaction("effect", [&](pg::transaction& tx) -> asio::awaitable<void> {
      const std::string sql = "INSERT INTO " + effects_table + " VALUES ($1, $2)";
      co_await tx.exec(sql, round, i);
    });
  if (round + 1 >= rounds) co_return round;
  if (round == die_before) ::raise(SIGKILL);
  co_return co_await ctx.continue_as_new<&crash_poller_wf>(round + 1, rounds);
}

inline void register_all(engine& eng) {
  eng.register_workflow("long", &long_wf);
  eng.register_workflow("poller", &poller_wf);
  eng.register_workflow("cycler", &cycler_wf);
  eng.register_workflow("cont-in-join", &cont_in_join_wf);
  eng.register_workflow("cont-wrong", &cont_wrong_wf);
  eng.register_workflow("keyed-inbox", &keyed_inbox_wf);
  eng.register_workflow("by-generation", &by_generation_wf);
  eng.register_workflow("cont-after-misuse", &cont_after_misuse_wf);
  eng.register_workflow("all-near-limit", &all_near_limit_wf);
  eng.register_workflow("crash-poller", &crash_poller_wf);
  eng.register_workflow("counter", &test::counter_wf);
  eng.register_workflow("quarter", &quarter_wf);
  eng.register_workflow("any-recv", &any_recv_wf);
  eng.register_workflow("all-retry", &all_retry_wf);
  eng.register_workflow("map-fail", &map_fail_wf);
  eng.register_workflow("colon-reader", &colon_reader_wf);
  eng.register_workflow("colon-publisher", &colon_publisher_wf);
  eng.register_workflow("waiter", &waiter_wf);
  eng.register_workflow("refuser", &refuser_wf);
  eng.register_workflow("pinger", &pinger_wf);
  eng.register_workflow("ponger", &ponger_wf);
  eng.register_workflow("patient_pinger", &patient_pinger_wf);
  eng.register_workflow("patient_ponger", &patient_ponger_wf);
  eng.register_workflow("collector", &collector_wf);
  eng.register_workflow("self_sender", &self_sender_wf);
  eng.register_workflow("send-nowhere", &send_nowhere_wf);
  eng.register_workflow("publisher", &publisher_wf);
  eng.register_workflow("reader", &reader_wf);
  eng.register_workflow("child", &child_wf);
  eng.register_workflow("parent", &parent_wf);
  eng.register_workflow("fan", &fan_wf);
  eng.register_workflow("race", &race_wf);
  eng.register_workflow("map", &map_wf);
}

const test::engine_fixture fx{
    .base = &test::preset::live, .add = &register_all, .executor = "exec-p"};

using test::scalar;

/// The journal of workflow `id` as "seq:name/kind,...".
inline asio::awaitable<std::string> journal_of(engine& eng, std::string_view id_view) {
  const std::string id(id_view);
  const std::string sql =
      "SELECT coalesce(string_agg(seq || ':' || name || '/' || kind, ',' ORDER BY seq), '') FROM " +
      q(eng.schema_name()) + ".steps WHERE workflow_id = $1";
  co_return co_await scalar(eng, sql, id);
}

/// An executor in a process of its own, killed (SIGKILL) by kill() or at the latest when this
/// goes out of scope; it also dies with the test process.
struct executor_process {
  pid_t pid = -1;
  executor_process() = default;
  executor_process(const executor_process&) = delete;
  executor_process& operator=(const executor_process&) = delete;
  void kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
  }
  ~executor_process() { kill(); }
};

/// Forks a process that opens an engine (executor `executor`, lease 300 ms) and runs `body`;
/// it never returns on its own (the test kills it).
template <class Body>
inline void spawn_executor(executor_process& p, const std::string& schema,
                           const std::string& executor, Body body) {
  const pid_t pid = ::fork();
  if (pid != 0) {
    p.pid = pid;
    return;
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  try {
    test::run([&]() -> asio::awaitable<void> {
      auto o = test::options(schema, executor);
      o.lease_timeout = 300ms;
      o.heartbeat_interval = 50ms;
      o.poll_interval = 50ms;
      engine eng(co_await asio::this_coro::executor, o);
      register_all(eng);
      (void)co_await eng.open();
      co_await body(eng);
      for (;;) co_await test::sleep_ms(1000);
    }());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "executor %s: %s\n", executor.c_str(), e.what());
  }
  ::_exit(1);
}

/// Polls (from the test process) until `sql` with `param` returns a row whose first column is
/// true.
inline void wait_until(const std::string& sql, const std::string& param) {
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    for (int i = 0; i < 3000; ++i) {
      auto r = co_await c->exec(sql, param);
      if (r.rows() > 0 && r[0].get<bool>(0)) co_return;
      co_await test::sleep_ms(10);
    }
    throw std::runtime_error("timed out waiting for: " + sql);
  }());
}

}  // namespace primitive_cases
