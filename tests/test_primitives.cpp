// The durable primitives of issue 10 against the real server: messages (send from outside, from
// a workflow and in the application's own transaction; recv with a timeout, unloaded while it
// waits), events, child workflows (reattached after the parent's process is killed, cancelled
// with their parent), fan-out and fan-in (all, any, a bounded map of 10 000 items), and real
// SIGKILLs between a send and its recv and in the middle of a fan-out.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>

#include "support/workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::probe;
using test::row_of;
using test::wait_status;

namespace {

using test::q;  // tests/support/workflows.hpp

// What the workflows under test do, set by each test (a forked process inherits it).
struct knobs {
  int a_ms = 0, b_ms = 0;  // how long branches "a" and "b" take
  bool b_fails = false;    // branch "b" fails for good
  int in_flight_now = 0, in_flight_max = 0;
};
knobs k;

// ---- messages

asio::awaitable<std::string> waiter_wf(context& ctx, int timeout_ms) {
  co_await ctx.step("before", [] { ++probe.calls["before"]; });
  const auto m = co_await ctx.recv<std::string>("go", std::chrono::milliseconds(timeout_ms));
  const std::string got = m.value_or("(timeout)");
  co_await ctx.step("after", [&] {
    ++probe.calls["after"];
    probe.seen.push_back(got);
  });
  co_return got;
}

asio::awaitable<int> pinger_wf(context& ctx, std::string peer, int rounds) {
  int last = 0;
  for (int i = 0; i < rounds; ++i) {
    co_await ctx.send(peer, "ping", i);
    const auto r = co_await ctx.recv<int>("pong", 10s);
    last = r.value_or(-1);
  }
  co_return last;
}

asio::awaitable<int> ponger_wf(context& ctx, std::string peer, int rounds) {
  int sum = 0;
  for (int i = 0; i < rounds; ++i) {
    const auto v = co_await ctx.recv<int>("ping", 10s);
    sum += v.value_or(-1000);
    co_await ctx.send(peer, "pong", v.value_or(-1) * 10);
  }
  co_return sum;
}

asio::awaitable<void> send_nowhere_wf(context& ctx) {
  co_await ctx.send("nobody-here", "topic", 1);
}

// ---- events

asio::awaitable<int> publisher_wf(context& ctx) {
  co_await ctx.set_event("stage", std::string("started"));
  const auto go = co_await ctx.recv<int>("go", 30s);
  co_await ctx.set_event("stage", std::string("done"));
  co_return go.value_or(-1);
}

asio::awaitable<std::string> reader_wf(context& ctx, std::string publisher) {
  const auto v = co_await ctx.get_event<std::string>(publisher, "stage", 20s);
  const auto none = co_await ctx.get_event<std::string>(publisher, "never", 50ms);
  co_return v.value_or("?") + (none ? "!" : "/none");
}

// ---- child workflows

asio::awaitable<int> child_wf(context& ctx, int x) {
  const int v = co_await ctx.step("work", [x] {
    ++probe.calls["child-work"];
    return x * 2;
  });
  // A workflow that fails (a dead-lettered one would keep its parent waiting for an operator).
  if (x < 0) throw std::invalid_argument("negative input");
  const auto hold = co_await ctx.recv<int>("release", std::chrono::milliseconds(k.a_ms));
  co_return v + hold.value_or(0);
}

asio::awaitable<int> parent_wf(context& ctx, int x) {
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

asio::awaitable<int> branch(const char* name, int ms, bool fail, int value) {
  ++probe.calls[name];
  if (ms > 0) co_await test::sleep_ms(ms);
  if (fail) throw permanent_error(std::string(name) + " cannot");
  co_return value;
}

asio::awaitable<int> fan_wf(context& ctx) {
  auto a = ctx.step("a", [] { return branch("a", k.a_ms, false, 1); });
  auto b = ctx.step("b", [] { return branch("b", k.b_ms, k.b_fails, 2); });
  auto [x, y] = co_await ctx.all(std::move(a), std::move(b));
  const int c = co_await ctx.step("c", [] { return 100; });
  co_return x * 10 + y + c;
}

asio::awaitable<int> race_wf(context& ctx) {
  auto a = ctx.step("a", [] { return branch("a", k.a_ms, false, 1); });
  auto b = ctx.step("b", [] { return branch("b", k.b_ms, false, 2); });
  const auto w = co_await ctx.any(std::move(a), std::move(b));
  const int after = co_await ctx.step("after", [] { return 1000; });
  co_return int(w.index()) * 100 + std::visit([](int v) { return v; }, w) + after;
}

asio::awaitable<long> map_wf(context& ctx, int n, int in_flight) {
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

asio::awaitable<std::string> any_recv_wf(context& ctx) {
  auto a = ctx.recv<std::string>("approve");
  auto b = ctx.recv<std::string>("reject");
  auto w = co_await ctx.any(std::move(a), std::move(b));
  co_return std::to_string(w.index());
}

asio::awaitable<int> slow_side(int ms) {
  ++probe.calls["slow"];
  co_await test::sleep_ms(ms);
  co_return 1;
}

asio::awaitable<int> all_retry_wf(context& ctx) {
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

asio::awaitable<long> map_fail_wf(context& ctx, int n) {
  std::vector<int> items(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) items[std::size_t(i)] = i;
  const auto r = co_await ctx.map("it", std::move(items), 50, [](const int& v) -> long {
    ++probe.calls["it"];
    if (v == 300) throw permanent_error("item 300 cannot");
    return v;
  });
  co_return long(r.size());
}

asio::awaitable<std::string> colon_reader_wf(context& ctx) {
  auto v = co_await ctx.get_event<std::string>("a", "b:c");
  co_return v.value_or("none");
}
asio::awaitable<void> colon_publisher_wf(context& ctx, std::string key) {
  co_await ctx.set_event(key, key);
}

asio::awaitable<int> quarter_wf(context& ctx) {
  co_await ctx.sleep_for(std::chrono::hours(24 * 90));
  co_return co_await ctx.step("after", [] {
    ++probe.calls["after-quarter"];
    return 90;
  });
}

// ---- journal limit, continue as new

// `steps` steps, a durable sleep of `sleep_ms` (none if 0), then `extra` more steps.
asio::awaitable<int> long_wf(context& ctx, int steps, int sleep_ms, int extra) {
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
asio::awaitable<long> poller_wf(context& ctx, int round, int rounds, int expect, int got,
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
asio::awaitable<int> cycler_wf(context& ctx, int round, int rounds, int total) {
  auto child = co_await ctx.start_child("child", round + 1);
  const int v = co_await child.result<int>();
  const std::string self = ctx.workflow_id();
  co_await ctx.send(self, "note", round);
  total += v;
  if (round + 1 >= rounds) co_return total;
  co_return co_await ctx.continue_as_new<int>(round + 1, rounds, total);
}

// continue_as_new misused: from inside a ctx.all branch, or with arguments of other types.
asio::awaitable<int> continue_branch(context& ctx, int round) {
  co_await ctx.continue_as_new(round + 1);
  co_return 2;
}
asio::awaitable<void> cont_in_join_wf(context& ctx, int round) {
  if (round > 0) co_return;
  auto a = ctx.step("a", [] { return 1; });
  auto b = continue_branch(ctx, round);
  (void)co_await ctx.all(std::move(a), std::move(b));
}
asio::awaitable<void> cont_wrong_wf(context& ctx, int round) {
  if (round > 0) co_return;
  const std::string wrong = "not an int";
  co_await ctx.continue_as_new(wrong);
}

// Generation 0 receives one "pay" message and continues; generation 1 waits up to `wait_ms`
// for another and returns it (-1 if none came).
asio::awaitable<int> keyed_inbox_wf(context& ctx, int wait_ms) {
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
asio::awaitable<int> by_generation_wf(context& ctx, int round) {
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
asio::awaitable<int> cont_after_misuse_wf(context& ctx, int round) {
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
asio::awaitable<int> all_near_limit_wf(context& ctx, int before) {
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
std::string effects_table;
int die_before = -1, die_at_start = -1;
asio::awaitable<int> crash_poller_wf(context& ctx, int round, int rounds) {
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

void register_all(engine& eng) {
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
  eng.register_workflow("pinger", &pinger_wf);
  eng.register_workflow("ponger", &ponger_wf);
  eng.register_workflow("send-nowhere", &send_nowhere_wf);
  eng.register_workflow("publisher", &publisher_wf);
  eng.register_workflow("reader", &reader_wf);
  eng.register_workflow("child", &child_wf);
  eng.register_workflow("parent", &parent_wf);
  eng.register_workflow("fan", &fan_wf);
  eng.register_workflow("race", &race_wf);
  eng.register_workflow("map", &map_wf);
}

template <class Body, class Tweak>
void with_engine(const std::string& schema, Body body, Tweak tweak,
                 const std::string& id = "exec-p") {
  auto o = test::options(schema, id);
  o.heartbeat_interval = 100ms;
  o.poll_interval = 100ms;
  tweak(o);
  test::with_open_engine(o, &register_all, body);
}
template <class Body>
void with_engine(const std::string& schema, Body body) {
  with_engine(schema, body, [](engine_options&) {});
}

/// A query's first column of its first row, as text ("" if none). (string_views: GCC 12
/// corrupts a std::string prvalue passed to a coroutine inside co_await.)
asio::awaitable<std::string> scalar(engine& eng, std::string_view sql_view,
                                    std::string_view param_view) {
  const std::string sql(sql_view), param(param_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec(sql, param);
  if (r.rows() == 0 || r[0].is_null(0)) co_return std::string();
  co_return r[0].get<std::string>(0);
}

/// The journal of workflow `id` as "seq:name/kind,...".
asio::awaitable<std::string> journal_of(engine& eng, std::string_view id_view) {
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
void spawn_executor(executor_process& p, const std::string& schema, const std::string& executor,
                    Body body) {
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
void wait_until(const std::string& sql, const std::string& param) {
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

}  // namespace

TEST_CASE("recv returns a message sent before or during the wait, and nothing at its timeout",
          "[messages]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("msgs");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // Sent before the workflow waits: taken at once.
    auto early = co_await eng.start("waiter", "w-early", 5000);
    const bool sent = co_await eng.send("w-early", "go", std::string("first"));
    CHECK(sent);
    // Sent while it waits in its run: the notification wakes it.
    auto late = co_await eng.start("waiter", "w-late", 20000);
    co_await test::wait_rows(eng, "w-late", 2);  // "before" and the recv's deadline
    (void)co_await eng.send("w-late", "go", std::string("second"));
    // Never sent: the timeout.
    auto none = co_await eng.start("waiter", "w-none", 200);
    const std::string a = co_await early.result<std::string>();
    const std::string b = co_await late.result<std::string>();
    const std::string c = co_await none.result<std::string>();
    CHECK(a == "first");
    CHECK(b == "second");
    CHECK(c == "(timeout)");
    // The recv's step consumed the message: one row, stamped with the step.
    const auto consumed = co_await scalar(
        eng,
        "SELECT count(*)::text || '/' || min(consumed_seq)::text FROM " + q(schema) +
            ".messages WHERE workflow_id = $1 AND consumed_at IS NOT NULL",
        std::string("w-late"));
    CHECK(consumed == "1/2");
    const auto journal = co_await journal_of(eng, "w-late");
    CHECK(journal == "0:before/step,1:go/deadline,2:go/recv,3:after/step");
    // A replay (a fork from the end) consumes nothing more and returns the same.
    auto f = co_await eng.fork("w-late", 4, "w-late-replayed");
    const std::string again = co_await f.result<std::string>();
    CHECK(again == "second");
  });
  CHECK(probe.calls["after"] == 3);
}

TEST_CASE("messages: oldest first, sent once per key, refused for an unknown id", "[messages]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("msgorder");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("ponger", "w-pong", std::string("nobody"),
                                0);  // exists, receives nothing
    (void)co_await h.result<int>();
    const bool one = co_await eng.send("w-pong", "t", 1, "key-1");
    const bool dup = co_await eng.send("w-pong", "t", 99, "key-1");
    CHECK(one);
    CHECK_FALSE(dup);
    bool refused = false;
    std::string why;
    try {
      (void)co_await eng.send("no-such-workflow", "t", 1);
    } catch (const durable::error& e) {
      refused = true;
      why = e.what();
    }
    CHECK(refused);
    CHECK(why.find("no-such-workflow") != std::string::npos);
    const auto n = co_await scalar(
        eng, "SELECT count(*)::text FROM " + q(schema) + ".messages WHERE workflow_id = $1",
        std::string("w-pong"));
    CHECK(n == "1");
    // Sent inside the application's own transaction: exists only if it commits.
    {
      auto c = co_await eng.pool().acquire();
      {
        auto tx = c->begin();
        co_await tx.run(eng.send_statement("w-pong", "t", 2));
        // rolled back: tx goes out of scope without commit
      }
      auto tx = c->begin();
      co_await tx.run(eng.send_statement("w-pong", "t", 3));
      co_await tx.commit();
    }
    const auto payloads =
        co_await scalar(eng,
                        "SELECT string_agg(payload::text, ',' ORDER BY id) FROM " + q(schema) +
                            ".messages WHERE workflow_id = $1",
                        std::string("w-pong"));
    CHECK(payloads == "1,3");
    // A workflow that sends to nobody fails for good, with the reason.
    auto bad = co_await eng.start("send-nowhere", "w-bad");
    std::string error;
    try {
      co_await bad.result<void>();
    } catch (const workflow_failed& e) {
      error = e.what();
    }
    CHECK(error.find("nobody-here") != std::string::npos);
  });
}

TEST_CASE("two workflows exchange messages, and a long recv unloads until a send",
          "[messages][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("pingpong");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto pong = co_await eng.start("ponger", "w-ponger", std::string("w-pinger"), 20);
        auto ping = co_await eng.start("pinger", "w-pinger", std::string("w-ponger"), 20);
        const int last = co_await ping.result<int>();
        const int sum = co_await pong.result<int>();
        CHECK(last == 190);
        CHECK(sum == 190);
        const auto unconsumed =
            co_await scalar(eng,
                            "SELECT count(*)::text FROM " + q(schema) +
                                ".messages WHERE consumed_at IS NULL AND workflow_id LIKE $1",
                            std::string("w-p%"));
        CHECK(unconsumed == "0");
        // A recv that waits past unload_after unloads: no frame, status sleeping, what it
        // waits for recorded; the send wakes it at once (the recheck is an hour away).
        auto w = co_await eng.start("waiter", "w-unloaded", 3600 * 1000);
        (void)co_await wait_status(eng, "w-unloaded", "sleeping");
        co_await test::wait_idle(eng);
        const auto waits =
            co_await scalar(eng, "SELECT wait_for FROM " + q(schema) + ".workflows WHERE id = $1",
                            std::string("w-unloaded"));
        CHECK(waits == "msg:go");
        (void)co_await eng.send("w-unloaded", "go", std::string("wake up"));
        const std::string got = co_await w.result<std::string>();
        CHECK(got == "wake up");
      },
      [](engine_options& o) {
        o.unload_after = 200ms;
        o.wait_recheck = 1h;
      });
}

TEST_CASE("a kill between a send and its recv: the message is consumed once",
          "[messages][crash][process]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("msgkill");
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "setup"));
    (void)co_await eng.migrate();
  }());
  // A process starts the workflow, which waits for "go" in its run; it is killed while it waits.
  executor_process first;
  spawn_executor(first, schema, "exec-dies", [](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("waiter", "w-killed", 60000);
  });
  wait_until("SELECT count(*) = 2 FROM " + q(schema) + ".steps WHERE workflow_id = $1", "w-killed");
  first.kill();
  // The message is sent while no process runs the workflow; another executor takes it over.
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        (void)co_await eng.send("w-killed", "go", std::string("after the kill"));
        (void)co_await eng.send("w-killed", "go", std::string("a second one"));
        const std::string got = co_await eng.handle("w-killed").result<std::string>();
        CHECK(got == "after the kill");
        const auto state = co_await scalar(
            eng,
            "SELECT string_agg(payload::text || ':' || (consumed_at IS NOT NULL), ',' ORDER BY id) "
            "FROM " +
                q(schema) + ".messages WHERE workflow_id = $1",
            std::string("w-killed"));
        CHECK(state == "\"after the kill\":true,\"a second one\":false");
        const auto recvs = co_await scalar(eng,
                                           "SELECT count(*)::text FROM " + q(schema) +
                                               ".steps WHERE workflow_id = $1 AND kind = 'recv'",
                                           std::string("w-killed"));
        CHECK(recvs == "1");
        const auto owner = co_await row_of(eng, "w-killed");
        CHECK(owner.status == "succeeded");
      },
      [](engine_options& o) { o.lease_timeout = 300ms; }, "exec-taker");
  CHECK(probe.calls["before"] == 0);  // it ran in the killed process, never again here
  CHECK(probe.calls["after"] == 1);
}

TEST_CASE("events: the latest value wins, read from outside and from another workflow",
          "[events]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("events");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const auto missing = co_await eng.get_event<std::string>("w-pub", "stage", 50ms);
    CHECK_FALSE(missing.has_value());
    auto reader =
        co_await eng.start("reader", "w-reader", std::string("w-pub"));  // waits for the event
    auto pub = co_await eng.start("publisher", "w-pub");
    const auto first = co_await eng.get_event<std::string>("w-pub", "stage", 10s);
    CHECK(first.value_or("") == "started");
    const std::string read = co_await reader.result<std::string>();
    CHECK(read == "started/none");
    (void)co_await eng.send("w-pub", "go", 7);
    const int v = co_await pub.result<int>();
    CHECK(v == 7);
    const auto last = co_await eng.get_event<std::string>("w-pub", "stage", 0ms);
    CHECK(last.value_or("") == "done");
    const auto journal = co_await journal_of(eng, "w-reader");
    CHECK(journal ==
          "0:w-pub:stage/deadline,1:w-pub:stage/get_event,2:w-pub:never/deadline,3:w-pub:never/"
          "get_event");
  });
}

TEST_CASE("a child workflow is started once, its result journaled, and the tree is in SQL",
          "[children]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("children");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto p = co_await eng.start("parent", "w-parent", 21);
    const int v = co_await p.result<int>();
    CHECK(v == 42);
    const auto tree = co_await scalar(
        eng,
        "SELECT string_agg(id || '<' || coalesce(parent_id, '-') || ':' || status, ',' ORDER BY "
        "id) FROM " +
            q(schema) + ".workflows WHERE id = $1 OR parent_id = $1",
        std::string("w-parent"));
    CHECK(tree == "w-parent<-:succeeded,w-parent/1<w-parent:succeeded");
    const auto journal = co_await journal_of(eng, "w-parent");
    CHECK(journal == "0:before/step,1:child/child,2:w-parent/1/child-result,3:after/step");
    // A child that fails for good: the parent sees step_failed, journaled.
    auto bad = co_await eng.start("parent", "w-parent-bad", -1);
    const int b = co_await bad.result<int>();
    CHECK(b == -1);
    const auto failed_row =
        co_await scalar(eng,
                        "SELECT status || ':' || (error->>'message') FROM " + q(schema) +
                            ".steps WHERE workflow_id = $1 AND kind = 'child-result'",
                        std::string("w-parent-bad"));
    CHECK(failed_row.find("failed:child workflow 'w-parent-bad/1' (child) failed") == 0);
  });
  CHECK(probe.calls["child-work"] == 2);
}

TEST_CASE("a waiting parent unloads, its child wakes it, and cancel cascades",
          "[children][unload][cancel]") {
  probe.reset();
  k = {};
  k.a_ms = 3600 * 1000;  // the child waits for "release"
  const auto schema = test::fresh_schema("childwait");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto p = co_await eng.start("parent", "w-p", 5);
        (void)co_await wait_status(eng, "w-p", "sleeping");
        const auto waits =
            co_await scalar(eng, "SELECT wait_for FROM " + q(schema) + ".workflows WHERE id = $1",
                            std::string("w-p"));
        CHECK(waits == "child:w-p/1");
        (void)co_await eng.send("w-p/1", "release", 1);
        const int v = co_await p.result<int>();
        CHECK(v == 11);
        // Cancelling a parent cancels its unfinished child.
        auto p2 = co_await eng.start("parent", "w-p2", 5);
        (void)co_await wait_status(eng, "w-p2", "sleeping");  // waits for its child
        const bool cancelled = co_await eng.cancel("w-p2");
        CHECK(cancelled);
        const auto child = co_await row_of(eng, "w-p2/1");
        CHECK(child.status == "cancelled");
        CHECK(child.reason.find("its parent workflow 'w-p2' was cancelled") != std::string::npos);
      },
      [](engine_options& o) {
        o.unload_after = 200ms;
        o.wait_recheck = 1h;
      });
}

TEST_CASE("a parent killed after starting its child reattaches to the same child on replay",
          "[children][crash][process]") {
  probe.reset();
  k = {};
  k.a_ms = 60000;  // the child waits for "release" (in its run)
  const auto schema = test::fresh_schema("childkill");
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "setup"));
    (void)co_await eng.migrate();
  }());
  executor_process first;
  spawn_executor(first, schema, "exec-dies", [](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("parent", "w-orphan", 4);
  });
  // The child ran its step in the killed process and waits there.
  wait_until("SELECT count(*) >= 1 FROM " + q(schema) + ".steps WHERE workflow_id = $1",
             "w-orphan/1");
  first.kill();
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        co_await test::sleep_ms(400);  // the lease runs out; both are taken over
        (void)co_await eng.send("w-orphan/1", "release", 100);
        const int v = co_await eng.handle("w-orphan").result<int>();
        CHECK(v == 108);
        const auto children = co_await scalar(
            eng, "SELECT count(*)::text FROM " + q(schema) + ".workflows WHERE parent_id = $1",
            std::string("w-orphan"));
        CHECK(children == "1");
        const auto child_steps =
            co_await scalar(eng,
                            "SELECT count(*)::text FROM " + q(schema) +
                                ".steps WHERE workflow_id = $1 AND name = 'work'",
                            std::string("w-orphan/1"));
        CHECK(child_steps == "1");
      },
      [](engine_options& o) { o.lease_timeout = 300ms; }, "exec-taker");
  CHECK(probe.calls["child-work"] == 0);  // ran once, in the killed process
  CHECK(probe.calls["parent-after"] == 1);
}

TEST_CASE("ctx.all numbers branches by position, a failure cancels the rest", "[fanout]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("all");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    k.a_ms = 200;  // "a" finishes last, "b" commits its row first
    auto h = co_await eng.start("fan", "w-all");
    const int v = co_await h.result<int>();
    CHECK(v == 112);
    const auto journal = co_await journal_of(eng, "w-all");
    CHECK(journal == "0:a/step,1:b/step,2:c/step");
    const auto order = co_await scalar(eng,
                                       "SELECT string_agg(name, ',' ORDER BY completed_at) FROM " +
                                           q(schema) + ".steps WHERE workflow_id = $1 AND seq < 2",
                                       std::string("w-all"));
    CHECK(order == "b,a");
    // "b" fails for good: "a" (slow) is cancelled, its attempt not recorded as a failure.
    k.a_ms = 5000;
    k.b_fails = true;
    auto bad = co_await eng.start("fan", "w-all-bad");
    std::string error;
    try {
      (void)co_await bad.result<int>();
    } catch (const workflow_dead_letter& e) {
      error = e.what();
    }
    CHECK(error.find("b cannot") != std::string::npos);
    const auto attempts =
        co_await scalar(eng,
                        "SELECT string_agg(name || ':' || outcome, ',' ORDER BY id) FROM " +
                            q(schema) + ".step_attempts WHERE workflow_id = $1",
                        std::string("w-all-bad"));
    CHECK(attempts == "b:failed");
  });
}

TEST_CASE("any journals the winner and a replay returns it whatever finishes first", "[fanout]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("any");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    k.a_ms = 2000;  // "b" wins
    auto h = co_await eng.start("race", "w-race");
    const int v = co_await h.result<int>();
    CHECK(v == 1102);
    const auto journal = co_await journal_of(eng, "w-race");
    CHECK(journal == "1:b/step,2:any/any,3:after/step");
    // Replayed with "a" now the faster: the journaled winner is returned, nothing runs.
    k.a_ms = 0;
    k.b_ms = 2000;
    auto f = co_await eng.fork("w-race", 4, "w-race-replayed");
    const int again = co_await f.result<int>();
    CHECK(again == 1102);
  });
  CHECK(probe.calls["a"] == 1);  // the loser, cancelled, in the first run only
  CHECK(probe.calls["b"] == 1);
}

TEST_CASE("a fan-out killed midway replays identically in another order",
          "[fanout][crash][process]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("fankill");
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "setup"));
    (void)co_await eng.migrate();
  }());
  // First process: "b" is fast and journals; "a" is slow; the process is killed meanwhile.
  k.a_ms = 60000;
  executor_process first;
  spawn_executor(first, schema, "exec-dies", [](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("fan", "w-fan");
  });
  wait_until("SELECT count(*) = 1 FROM " + q(schema) + ".steps WHERE workflow_id = $1 AND seq = 1",
             "w-fan");
  first.kill();
  // Second process: now "a" is the fast one and "b" would be slow; "b" is not run again.
  k.a_ms = 0;
  k.b_ms = 60000;
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int v = co_await eng.handle("w-fan").result<int>();
        CHECK(v == 112);
        const auto journal = co_await journal_of(eng, "w-fan");
        CHECK(journal == "0:a/step,1:b/step,2:c/step");
        // And the same workflow run in one go gives the same answer and the same journal.
        k.b_ms = 0;
        auto h = co_await eng.start("fan", "w-fan-whole");
        const int whole = co_await h.result<int>();
        CHECK(whole == v);
        const auto whole_journal = co_await journal_of(eng, "w-fan-whole");
        CHECK(whole_journal == journal);
      },
      [](engine_options& o) { o.lease_timeout = 300ms; }, "exec-taker");
  CHECK(probe.calls["b"] == 1);  // only w-fan-whole's: w-fan's ran in the killed process
  CHECK(probe.calls["a"] == 2);
}

TEST_CASE("a bounded map runs 10 000 items with at most 100 in flight, and a replay runs none",
          "[fanout][map]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("map");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("map", "w-map", 10000, 100);
    const long sum = co_await h.result<long>();
    long expected = 0;
    for (long i = 0; i < 10000; ++i) expected += i * i;
    CHECK(sum == expected);
    const auto rows =
        co_await scalar(eng,
                        "SELECT count(*)::text || ':' || min(seq) || ':' || max(seq) || ':' || "
                        "bool_and(name = 'sq[' || seq || ']') FROM " +
                            q(schema) + ".steps WHERE workflow_id = $1",
                        std::string("w-map"));
    CHECK(rows == "10000:0:9999:true");
    auto f = co_await eng.fork("w-map", 10000, "w-map-replayed");
    const long again = co_await f.result<long>();
    CHECK(again == expected);
  });
  CHECK(probe.calls["sq"] == 10000);
  CHECK(k.in_flight_max <= 100);
  CHECK(k.in_flight_max > 1);
}

TEST_CASE("wake-ups of a waiting workflow do not count as claims without progress (I9)",
          "[messages][unload][i9]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("waiti9");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // Woken at every recheck (150 ms) for 3 s, and unloaded again each time: far more
        // claims than max_claims_without_progress, none of them a failure.
        auto h = co_await eng.start("waiter", "w-patient", 3000);
        const std::string got = co_await h.result<std::string>();
        CHECK(got == "(timeout)");
        const auto row = co_await row_of(eng, "w-patient");
        CHECK(row.status == "succeeded");
        const auto claims = co_await scalar(
            eng, "SELECT (attempts > 3)::text FROM " + q(schema) + ".workflows WHERE id = $1",
            std::string("w-patient"));
        CHECK(claims == "true");
      },
      [](engine_options& o) {
        o.unload_after = 100ms;
        o.wait_recheck = 150ms;
        o.max_claims_without_progress = 2;
      });
}

TEST_CASE("a workflow waiting long for an event unloads and the event wakes it",
          "[events][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("eventwait");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto reader = co_await eng.start("reader", "w-reader2", std::string("w-pub2"));
        (void)co_await wait_status(eng, "w-reader2", "sleeping");
        const auto waits =
            co_await scalar(eng, "SELECT wait_for FROM " + q(schema) + ".workflows WHERE id = $1",
                            std::string("w-reader2"));
        CHECK(waits == "event:6:w-pub2:stage");  // the publisher id's length, then id and key
        (void)co_await eng.start("publisher", "w-pub2");
        const std::string read = co_await reader.result<std::string>();
        CHECK(read == "started/none");
      },
      [](engine_options& o) {
        o.unload_after = 100ms;
        o.wait_recheck = 1h;
      });
}

TEST_CASE("a recv as a branch of ctx.any is refused before it consumes anything",
          "[fanout][misuse]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("anyrecv");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("any-recv", "w-any-recv");
    (void)co_await eng.send("w-any-recv", "approve", std::string("A"));
    (void)co_await eng.send("w-any-recv", "reject", std::string("B"));
    const auto row = co_await wait_status(eng, "w-any-recv", "parked");
    CHECK(row.reason.find("is a branch of ctx.any") != std::string::npos);
    const auto consumed =
        co_await scalar(eng,
                        "SELECT count(*)::text FROM " + q(schema) +
                            ".messages WHERE workflow_id = $1 AND consumed_at IS NOT NULL",
                        std::string("w-any-recv"));
    CHECK(consumed == "0");
  });
}

TEST_CASE("a retry backoff inside ctx.all waits in the run and never re-runs a sibling",
          "[fanout][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("allretry");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("all-retry", "w-all-retry");
        const int v = co_await h.result<int>();
        CHECK(v == 3);
        const auto claims = co_await scalar(
            eng, "SELECT attempts::text FROM " + q(schema) + ".workflows WHERE id = $1",
            std::string("w-all-retry"));
        CHECK(claims == "1");
      },
      [](engine_options& o) { o.unload_after = 200ms; });
  CHECK(probe.calls["slow"] == 1);
  CHECK(probe.calls["flaky"] == 3);
}

TEST_CASE("a map item that fails for good dead-letters the workflow in one claim",
          "[fanout][map]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("mapfail");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("map-fail", "w-map-fail", 2000);
    std::string error;
    try {
      (void)co_await h.result<long>();
    } catch (const workflow_dead_letter& e) {
      error = e.what();
    }
    CHECK(error.find("item 300 cannot") != std::string::npos);
    const auto claims =
        co_await scalar(eng, "SELECT attempts::text FROM " + q(schema) + ".workflows WHERE id = $1",
                        std::string("w-map-fail"));
    CHECK(claims == "1");
  });
}

TEST_CASE("an event wait matches its workflow and key exactly, even with ':' in them",
          "[events][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("colons");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // Workflow "a:b" publishes key "c": not what "a"/"b:c" waits for.
        auto p = co_await eng.start("colon-publisher", "a:b", std::string("c"));
        co_await p.result<void>();
        auto h = co_await eng.start("colon-reader", "w-colon");
        (void)co_await wait_status(eng, "w-colon", "sleeping");
        co_await test::sleep_ms(1000);
        const auto claims = co_await scalar(
            eng, "SELECT attempts::text FROM " + q(schema) + ".workflows WHERE id = $1",
            std::string("w-colon"));
        CHECK(claims == "1");  // unloaded once, not woken by the other event
        auto a = co_await eng.start("colon-publisher", "a", std::string("b:c"));
        co_await a.result<void>();
        const std::string v = co_await h.result<std::string>();
        CHECK(v == "b:c");
      },
      [](engine_options& o) {
        o.unload_after = 200ms;
        o.wait_recheck = 1h;
      });
}

TEST_CASE("a recipient does not unload while a send to it is uncommitted, and gets it at once",
          "[messages][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("lateSend");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("waiter", "w-late-send", 3600 * 1000);
        co_await test::wait_rows(eng, "w-late-send", 2);  // waits in its run
        auto c = co_await eng.pool().acquire();
        {
          auto tx = c->begin();
          co_await tx.run(eng.send_statement("w-late-send", "go", std::string("hi")));
          // Past unload_after: the waiter tries to unload, finds a send in flight (its lock),
          // and stays in its run rather than miss it.
          co_await test::sleep_ms(800);
          const auto row = co_await row_of(eng, "w-late-send");
          CHECK(row.status == "running");
          co_await tx.commit();
        }
        const std::string got = co_await h.result<std::string>();  // the recheck is an hour away
        CHECK(got == "hi");
      },
      [](engine_options& o) {
        o.unload_after = 300ms;
        o.wait_recheck = 1h;
      });
}

TEST_CASE("a 90-day timer is journaled and indexed, and fires after an outage that spans it",
          "[sleep][unload]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("quarter");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("quarter", "w-quarter");
    (void)co_await wait_status(eng, "w-quarter", "sleeping");
    co_await test::wait_idle(eng);
    const auto due = co_await scalar(
        eng,
        "SELECT (wake_at BETWEEN now() + interval '89 days' AND now() + interval '91 days')::text "
        "FROM " +
            q(schema) + ".workflows WHERE id = $1",
        std::string("w-quarter"));
    CHECK(due == "true");
    // Ninety days pass while no executor runs (the journaled wake-up and wake_at are moved
    // into the past, as the clock would have): the next executor wakes it.
    co_await eng.shutdown(0ms);
  });
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    co_await c->exec("UPDATE " + q(schema) +
                         ".steps SET output = to_jsonb((extract(epoch FROM now() - interval '1 "
                         "day') * 1e6)::bigint) WHERE workflow_id = $1 AND kind = 'sleep'",
                     std::string("w-quarter"));
    co_await c->exec(
        "UPDATE " + q(schema) + ".workflows SET wake_at = now() - interval '1 day' WHERE id = $1",
        std::string("w-quarter"));
  }());
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int v = co_await eng.handle("w-quarter").result<int>();
        CHECK(v == 90);
      },
      [](engine_options&) {}, "exec-later");
  CHECK(probe.calls["after-quarter"] == 1);
}

TEST_CASE("operator views: recent failures, stuck workflows, slow steps, retries, queue depth",
          "[views]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("views");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // A failure, a slow step, retried attempts, and a queued workflow nobody serves.
    auto bad = co_await eng.start("send-nowhere", "w-v-bad");
    try {
      co_await bad.result<void>();
    } catch (const workflow_failed&) {
    }
    k.a_ms = 150;
    auto fan = co_await eng.start("fan", "w-v-fan");
    (void)co_await fan.result<int>();
    auto flaky = co_await eng.start("all-retry", "w-v-flaky");
    (void)co_await flaky.result<int>();
    (void)co_await eng.enqueue({.queue = "q-nobody"}, "fan", "w-v-queued");
    // Two workflows that do not move: owned by an executor that never existed, and due for
    // two minutes with no executor that runs their name.
    {
      auto c = co_await eng.pool().acquire();
      co_await c->exec("INSERT INTO " + q(schema) +
                           ".workflows (id, name, status, inputs, executor_id, epoch) VALUES "
                           "($1, 'fan', 'running', '[]', 'ghost', 1)",
                       std::string("w-v-ghost"));
      co_await c->exec("INSERT INTO " + q(schema) +
                           ".workflows (id, name, status, inputs, wake_at) VALUES "
                           "($1, 'unknown-name', 'sleeping', '[]', now() - interval '2 minutes')",
                       std::string("w-v-due"));
    }
    const auto failed =
        co_await scalar(eng,
                        "SELECT status || ':' || (error_message LIKE '%nobody-here%') FROM " +
                            q(schema) + ".recent_failures WHERE id = $1",
                        std::string("w-v-bad"));
    CHECK(failed == "failed:true");
    const auto stuck = co_await scalar(
        eng,
        "SELECT string_agg(id || ':' || split_part(reason, ' ', 1), ',' ORDER BY id) FROM " +
            q(schema) + ".stuck WHERE id LIKE $1",
        std::string("w-v-%"));
    CHECK(stuck == "w-v-due:due,w-v-ghost:running");
    const auto slow = co_await scalar(eng,
                                      "SELECT (p95_ms >= 140)::text FROM " + q(schema) +
                                          ".slowest_steps WHERE workflow = 'fan' AND step = $1",
                                      std::string("a"));
    CHECK(slow == "true");
    const auto retries =
        co_await scalar(eng,
                        "SELECT failed_attempts || ':' || workflows || ':' || error_type FROM " +
                            q(schema) + ".retry_hot_spots WHERE step = $1",
                        std::string("flaky"));
    CHECK(retries == "2:1:std::runtime_error");
    const auto depth =
        co_await scalar(eng,
                        "SELECT waiting::text FROM " + q(schema) +
                            ".queue_depth WHERE queue = $1 ORDER BY bucket DESC LIMIT 1",
                        std::string("q-nobody"));
    CHECK(depth == "1");
  });
}

TEST_CASE("retention deletes finished workflows under load and loses no unfinished one",
          "[retention]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("retention");
  constexpr int n = 300;
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        // A dead letter is never deleted, whatever its age.
        auto c = co_await eng.pool().acquire();
        co_await c->exec("INSERT INTO " + q(schema) +
                             ".workflows (id, name, status, inputs, completed_at) VALUES "
                             "($1, 'counter', 'dead_letter', '[3]', now() - interval '1 day')",
                         std::string("w-r-keep"));
        // Workflows start while retention deletes the ones that finished (every 50 ms tick).
        for (int i = 0; i < n; ++i) {
          const std::string id = "w-r-" + std::to_string(i);
          (void)co_await eng.start("counter", id, 3);
          if (i % 25 == 0) co_await test::sleep_ms(20);
        }
        for (int i = 0; i < 500 && probe.calls["s2"] < n; ++i) co_await test::sleep_ms(10);
        for (int i = 0; i < 500; ++i) {
          auto r =
              co_await c->exec("SELECT count(*) FROM " + q(schema) + ".workflows WHERE id LIKE $1",
                               std::string("w-r-%"));
          if (r[0].get<long>(0) == 1) break;
          co_await test::sleep_ms(20);
        }
        const auto left = co_await scalar(eng,
                                          "SELECT string_agg(id || ':' || status, ',') FROM " +
                                              q(schema) + ".workflows WHERE id LIKE $1",
                                          std::string("w-r-%"));
        CHECK(left == "w-r-keep:dead_letter");
        const auto rows = co_await scalar(
            eng,
            "SELECT (SELECT count(*) FROM " + q(schema) + ".steps WHERE workflow_id LIKE $1)::text",
            std::string("w-r-%"));
        CHECK(rows == "0");
      },
      [](engine_options& o) {
        o.retention = 1ms;
        o.retention_batch = 40;
        o.heartbeat_interval = 50ms;
      });
  // Every workflow ran each of its steps exactly once: none was deleted before it finished.
  CHECK(probe.calls["s0"] == n);
  CHECK(probe.calls["s1"] == n);
  CHECK(probe.calls["s2"] == n);
}

// ---- journal limit, continue as new

TEST_CASE("journal limit: warned once, parked before the step beyond it, resumed when raised",
          "[journal-limit]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("jlimit");
  std::vector<std::string> warnings;
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("long", "w-long", 30, 0, 0);
        std::string parked;
        try {
          (void)co_await h.result<int>();
        } catch (const workflow_parked& e) {
          parked = e.what();
        }
        INFO(parked);
        CHECK(parked.find("'w-long'") != std::string::npos);
        CHECK(parked.find("step 20 's'") != std::string::npos);
        CHECK(parked.find("limit of 20 rows") != std::string::npos);
        CHECK(parked.find("continue_as_new") != std::string::npos);
        CHECK(parked.find("raise journal_limit and resume") != std::string::npos);
        const auto rows = co_await scalar(
            eng, "SELECT count(*)::text FROM " + q(schema) + ".steps WHERE workflow_id = $1",
            std::string("w-long"));
        CHECK(rows == "20");
        const auto state = co_await scalar(eng,
                                           "SELECT status || ':' || (error->>'type') FROM " +
                                               q(schema) + ".workflows WHERE id = $1",
                                           std::string("w-long"));
        CHECK(state == "parked:durable::journal_limit_exceeded");
      },
      [&](engine_options& o) {
        o.journal_limit = 20;
        o.on_event = [&](const event& e) {
          if (e.level == severity::warning && e.message.find("of its limit") != std::string::npos)
            warnings.emplace_back(std::string(e.workflow_id) + ": " + std::string(e.message));
        };
      });
  CHECK(probe.calls["long"] == 20);  // the 21st step did not run
  REQUIRE(warnings.size() == 1);     // once, at 80 % (16 rows), not at every step after
  CHECK(warnings[0].find("w-long: workflow 'w-long' (long): its journal holds 16 rows, 80 % of "
                         "its limit of 20 rows") == 0);
  CHECK(warnings[0].find("ctx.continue_as_new") != std::string::npos);
  // An operator raises the limit and resumes it: it finishes, nothing ran twice.
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const std::string id = "w-long";
        const bool resumed = co_await eng.resume(id);
        CHECK(resumed);
        const int sum = co_await eng.handle("w-long").result<int>();
        CHECK(sum == 435);
      },
      [&](engine_options& o) { o.journal_limit = 40; });
  CHECK(probe.calls["long"] == 30);
}

TEST_CASE("a journal already over a lowered limit replays, and only a new step is refused",
          "[journal-limit]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("jlower");
  // 12 steps and a sleep row (13 rows) under the default limit; the engine stops during the
  // sleep.
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("long", "w-done", 12, 1500, 0);
    (void)co_await eng.start("long", "w-more", 12, 1500, 1);
    for (int i = 0; i < 500; ++i) {
      const auto n =
          co_await scalar(eng, "SELECT count(*)::text FROM " + q(schema) + ".steps WHERE kind = $1",
                          std::string("sleep"));
      if (n == "2") break;
      co_await test::sleep_ms(10);
    }
  });
  CHECK(probe.calls["long"] == 24);
  // The limit is lowered to 10: both journals (13 rows) are over it.
  std::vector<std::string> warnings;
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int sum = co_await eng.handle("w-done").result<int>();
        CHECK(sum == 66);  // replayed 13 rows and returned: nothing new to journal
        std::string parked;
        try {
          (void)co_await eng.handle("w-more").result<int>();
        } catch (const workflow_parked& e) {
          parked = e.what();
        }
        CHECK(parked.find("step 13 'extra' would be row 14 of its journal, beyond the limit of "
                          "10 rows") != std::string::npos);
      },
      [&](engine_options& o) {
        o.journal_limit = 10;
        o.on_event = [&](const event& e) {
          if (e.message.find("of its limit") != std::string::npos)
            warnings.emplace_back(e.workflow_id);
        };
      });
  CHECK(probe.calls["long"] == 24);       // replayed, not run again
  CHECK(probe.calls["long-extra"] == 0);  // refused at the limit
  CHECK(warnings.empty());                // a replay appends nothing; the park itself is the report
}

TEST_CASE("a poller continues as new 50 times, its journal bounded, every message received once",
          "[continue-as-new]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("poller");
  constexpr int messages = 40;
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // Messages sent before the start are refused (no such workflow): start first, then send
    // some at once and the rest while it runs through its generations.
    auto h = co_await eng.start("poller", "w-poll", 0, 50, messages, 0, 0L);
    for (int i = 1; i <= messages; ++i) {
      (void)co_await eng.send("w-poll", "tick", i);
      if (i > 10) co_await test::sleep_ms(15);
    }
    const long sum = co_await h.result<long>();
    CHECK(sum == long(messages) * (messages + 1) / 2);
    const auto row = co_await scalar(
        eng,
        "SELECT status || ':' || generation || ':' || (SELECT count(*) FROM " + q(schema) +
            ".steps WHERE workflow_id = w.id) FROM " + q(schema) + ".workflows w WHERE id = $1",
        std::string("w-poll"));
    const auto parts = row.substr(0, row.find(':'));
    CHECK(parts == "succeeded");
    const int generation = std::stoi(row.substr(row.find(':') + 1));
    CHECK(generation >= 49);
    const auto left = co_await scalar(eng,
                                      "SELECT count(*)::text || ':' || count(consumed_at)::text "
                                      "FROM " +
                                          q(schema) + ".messages WHERE workflow_id = $1",
                                      std::string("w-poll"));
    CHECK(left.substr(0, left.find(':')) == left.substr(left.find(':') + 1));  // none unconsumed
    CHECK(probe.calls["poll"] == 3 * (generation + 1));
  });
  CHECK(probe.calls["wrong-generation"] == 0);
  CHECK(probe.calls["wrong-key"] == 0);
  CHECK(probe.calls["max-journal"] <= 5);
  CHECK(probe.calls["max-journal"] >= 4);
}

TEST_CASE("a child or a send at the same step in two generations is a new child and a new message",
          "[continue-as-new][children][messages]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("cycler");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("cycler", "w-cyc", 0, 3, 0);
    const int total = co_await h.result<int>();
    CHECK(total == 2 + 4 + 6);  // each generation's own child: (round + 1) * 2
    const auto children = co_await scalar(eng,
                                          "SELECT string_agg(id || '=' || output::text, ',' "
                                          "ORDER BY id) FROM " +
                                              q(schema) + ".workflows WHERE parent_id = $1",
                                          std::string("w-cyc"));
    CHECK(children == "w-cyc/0=2,w-cyc/1.0=4,w-cyc/2.0=6");
    const auto notes =
        co_await scalar(eng,
                        "SELECT string_agg(idempotency_key || '=' || payload::text, ',' ORDER BY "
                        "id) FROM " +
                            q(schema) + ".messages WHERE workflow_id = $1 AND topic = 'note'",
                        std::string("w-cyc"));
    CHECK(notes == "w-cyc:2=0,w-cyc:1.2=1,w-cyc:2.2=2");
  });
  CHECK(probe.calls["child-work"] == 3);
}

TEST_CASE("continue_as_new inside a join or with arguments of the wrong type parks the workflow",
          "[continue-as-new]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("contbad");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto a = co_await eng.start("cont-in-join", "w-join", 0);
    auto b = co_await eng.start("cont-wrong", "w-wrong", 0);
    std::string in_join, wrong;
    try {
      co_await a.result<void>();
    } catch (const workflow_parked& e) {
      in_join = e.what();
    }
    try {
      co_await b.result<void>();
    } catch (const workflow_parked& e) {
      wrong = e.what();
    }
    CHECK(in_join.find("continue_as_new() was called inside a branch of ctx.all") !=
          std::string::npos);
    CHECK(wrong.find("got the arguments [\"not an int\"], which do not decode as the workflow's "
                     "parameters (int)") != std::string::npos);
    const auto generations =
        co_await scalar(eng,
                        "SELECT string_agg(generation::text, ',' ORDER BY id) FROM " + q(schema) +
                            ".workflows WHERE id LIKE $1",
                        std::string("w-%"));
    CHECK(generations == "0,0");  // nothing continued
  });
}

TEST_CASE("a keyed send retried after a continue sends nothing and is not received", "[messages]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("keyedcont");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const std::string id = "w-inbox", topic = "pay", key = "pay-1";
    auto h = co_await eng.start("keyed-inbox", id, 1500);
    // An error an earlier generation's run left (workflows.last_error) must not outlive it.
    auto c = co_await eng.pool().acquire();
    const std::string note = "UPDATE " + q(schema) + ".workflows SET last_error = $2 WHERE id = $1";
    const std::string old_error = "an error of generation 0";
    (void)co_await c->exec(note, id, old_error);
    const bool first = co_await eng.send(id, topic, 7, key);
    CHECK(first);
    std::string generation;
    for (int i = 0; i < 500 && generation != "1"; ++i) {
      generation = co_await scalar(
          eng, "SELECT generation::text FROM " + q(schema) + ".workflows WHERE id = $1", id);
      if (generation != "1") co_await test::sleep_ms(10);
    }
    REQUIRE(generation == "1");
    const auto last_error = co_await scalar(
        eng, "SELECT coalesce(last_error, '(none)') FROM " + q(schema) + ".workflows WHERE id = $1",
        id);
    CHECK(last_error == "(none)");
    // The sender retries (it did not see the first reply): the key was used, nothing is sent.
    const bool again = co_await eng.send(id, topic, 7, key);
    CHECK_FALSE(again);
    const int got = co_await h.result<int>();
    CHECK(got == -1);  // generation 1 received nothing
    const auto kept = co_await scalar(eng,
                                      "SELECT count(*)::text FROM " + q(schema) +
                                          ".messages WHERE workflow_id = $1 AND consumed_at IS NOT "
                                          "NULL",
                                      id);
    CHECK(kept == "1");  // the consumed keyed message stays, with its key
  });
  REQUIRE(probe.seen.size() == 1);
  CHECK(probe.seen[0] == "7");
}

TEST_CASE("a fork of a continued workflow replays under its generation and finishes", "[fork]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("forkgen");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("by-generation", "w-gen", 5);
    const int v = co_await h.result<int>();
    CHECK(v == 61);  // generation 1: round 6
    for (const int from : {2, 1}) {
      const std::string fork_id = "w-gen-fork-" + std::to_string(from);
      auto f = co_await eng.fork("w-gen", from, fork_id);
      std::string parked;
      int again = 0;
      try {
        again = co_await f.result<int>();
      } catch (const workflow_parked& e) {
        parked = e.what();
      }
      INFO(parked);
      CHECK(parked.empty());
      CHECK(again == 61);
      const auto generation = co_await scalar(
          eng, "SELECT generation::text FROM " + q(schema) + ".workflows WHERE id = $1", fork_id);
      CHECK(generation == "1");
    }
  });
  CHECK(probe.calls["wrong-key"] == 0);  // the fork's keys carry the generation too
}

TEST_CASE("a misuse caught before continue_as_new still parks the workflow", "[continue-as-new]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("contmisuse");
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("cont-after-misuse", "w-cam", 0);
    std::string parked;
    try {
      (void)co_await h.result<int>();
    } catch (const workflow_parked& e) {
      parked = e.what();
    }
    CHECK(parked.find("which do not decode as the workflow's parameters") != std::string::npos);
    const auto row = co_await scalar(
        eng, "SELECT status || ':' || generation FROM " + q(schema) + ".workflows WHERE id = $1",
        std::string("w-cam"));
    CHECK(row == "parked:0");  // nothing continued
  });
  CHECK(probe.calls["misuse-caught"] == 1);
}

TEST_CASE("ctx.all near the journal limit runs no step function beyond it", "[journal-limit]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("jlimitall");
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        auto h = co_await eng.start("all-near-limit", "w-near", 2);
        std::string parked;
        try {
          (void)co_await h.result<int>();
        } catch (const workflow_parked& e) {
          parked = e.what();
        }
        INFO(parked);
        CHECK(parked.find("step 4 'c' would be row 5 of its journal, beyond the limit of 4 rows") !=
              std::string::npos);
      },
      [](engine_options& o) { o.journal_limit = 4; });
  CHECK(probe.calls["near"] == 2);  // a and b ran (and were cut off); c and d did not start
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const std::string id = "w-near";
        const bool resumed = co_await eng.resume(id);
        CHECK(resumed);
        const int sum = co_await eng.handle(id).result<int>();
        CHECK(sum == 10);
      },
      [](engine_options& o) { o.journal_limit = 6; });
  CHECK(probe.calls["near"] == 6);
}

TEST_CASE("the journal warning gives the journal's actual share of the limit", "[journal-limit]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("jwarnshare");
  // 17 steps and a sleep row under the default limit; the engine stops during the sleep.
  with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("long", "w-share", 17, 1500, 1);
    for (int i = 0; i < 500; ++i) {
      const auto n = co_await scalar(
          eng, "SELECT count(*)::text FROM " + q(schema) + ".steps WHERE workflow_id = $1",
          std::string("w-share"));
      if (n == "18") break;
      co_await test::sleep_ms(10);
    }
  });
  // Under a limit of 20 the next row is row 19: 95 % of it, past the 80 % configured.
  std::vector<std::string> warnings;
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int sum = co_await eng.handle("w-share").result<int>();
        CHECK(sum == 136 + 1000);
      },
      [&](engine_options& o) {
        o.journal_limit = 20;
        o.on_event = [&](const event& e) {
          if (e.message.find("of its limit") != std::string::npos) warnings.emplace_back(e.message);
        };
      });
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("its journal holds 19 rows, 95 % of its limit of 20 rows") !=
        std::string::npos);
  // A warning fraction outside (0, 1] is refused when the engine is made.
  asio::io_context io;
  for (const double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    auto o = test::options(schema);
    o.journal_warning = bad;
    CHECK_THROWS_WITH(engine(io.get_executor(), o), Catch::Contains("journal_warning"));
  }
  auto o = test::options(schema);
  o.journal_warning = 1.0;
  CHECK_NOTHROW(engine(io.get_executor(), o));
}

TEST_CASE("killed just before and after continue_as_new, a poller resumes the right generation",
          "[continue-as-new][crash][process]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("contkill");
  effects_table = q(schema) + ".effects";
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "setup"));
    (void)co_await eng.migrate();
    auto c = co_await eng.pool().acquire();
    const std::string ddl = "CREATE TABLE " + effects_table + " (round integer, i integer)";
    (void)co_await c->exec(ddl);
  }());
  auto wait_exit = [](executor_process& p) {
    for (int i = 0; i < 3000 && p.pid > 0; ++i) {
      int status = 0;
      if (::waitpid(p.pid, &status, WNOHANG) == p.pid) {
        CHECK(WIFSIGNALED(status));
        CHECK(WTERMSIG(status) == SIGKILL);
        p.pid = -1;
        return;
      }
      ::usleep(10000);
    }
    FAIL("the executor process did not die");
  };
  // The first process dies in generation 3 after its effects, before continuing.
  die_before = 3;
  die_at_start = -1;
  executor_process first;
  spawn_executor(first, schema, "exec-1", [](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("crash-poller", "w-cp", 0, 10);
  });
  wait_exit(first);
  // The second takes it over (lease 300 ms), replays generation 3 (its effects are not
  // repeated), continues, and dies at the start of generation 6, after that continue
  // committed.
  die_before = -1;
  die_at_start = 6;
  executor_process second;
  spawn_executor(second, schema, "exec-2", [](engine&) -> asio::awaitable<void> { co_return; });
  wait_exit(second);
  die_at_start = -1;
  with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const auto at = co_await scalar(
            eng, "SELECT generation::text FROM " + q(schema) + ".workflows WHERE id = $1",
            std::string("w-cp"));
        CHECK(at == "6");  // the continue that the kill followed had committed
        const int last = co_await eng.handle("w-cp").result<int>();
        CHECK(last == 9);
        const auto effects = co_await scalar(
            eng,
            "SELECT count(*)::text || ':' || count(DISTINCT (round, i))::text || ':' || "
            "min(round)::text || ':' || max(round)::text FROM " +
                effects_table + " WHERE $1 = $1",
            std::string("x"));
        CHECK(effects == "20:20:0:9");  // every generation's two effects, each exactly once
        const auto row = co_await row_of(eng, "w-cp");
        CHECK(row.status == "succeeded");
      },
      [](engine_options& o) { o.lease_timeout = 300ms; }, "exec-3");
}
