// The test kit (durable/testing.hpp) tested as a user would use it: workflows registered on a
// harness, run on the in-memory journal and a virtual clock, crashed at every step. No
// database: ctest runs these with none reachable.
#include <algorithm>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "durable.hpp"
#include "durable/testing.hpp"

using namespace durable;
using namespace std::chrono_literals;
namespace dt = durable::testing;

namespace {

/// What the "external service" of these workflows saw: calls per idempotency key.
std::map<std::string, int> calls;

asio::awaitable<std::string> classify(context& ctx, std::string text) {
  const int words = co_await ctx.step("count", [&] { return int(text.size() / 5 + 1); });
  const std::string label = co_await ctx.step("label", [&](const step_info& i) {
    ++calls[i.idempotency_key];
    return std::string(words > 2 ? "long" : "short");
  });
  co_await ctx.sleep_for(30 * 24h);
  co_await ctx.step("store", [&](const step_info& i) { ++calls[i.idempotency_key]; });
  co_return label + ":" + std::to_string(words);
}

}  // namespace

TEST_CASE("testing: a harness runs a workflow to its result, a 30-day sleep at once", "[testing]") {
  dt::harness h;
  h.register_workflow("classify", classify);
  const auto before = h.now();
  // Thirty days of virtual time: a real wait would outlast the test's timeout by far (its wall
  // time is measured in bench/bench_testing.cpp, not asserted here).
  h.start("classify", "c-1", std::string("a text of some words"));
  h.run();
  CHECK(h.status("c-1") == "succeeded");
  CHECK(h.result<std::string>("c-1") == "long:5");
  CHECK(h.now() - before >= 30 * 24h);
  const auto rows = h.journal("c-1");
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].name == "count");
  CHECK(rows[2].kind == "sleep");
  CHECK(rows[3].name == "store");
}

TEST_CASE("testing: bad input to the harness gets a clear error", "[testing]") {
  dt::harness h;
  h.register_workflow("classify", classify);
  CHECK_THROWS_WITH(h.start("nope", "x"), Catch::Contains("no workflow named 'nope'"));
  CHECK_THROWS_WITH(h.start("classify", "x", 42), Catch::Contains("do not convert"));
  h.start("classify", "x", std::string("t"));
  CHECK_THROWS_AS(h.start("classify", "x", std::string("t")), workflow_conflict);
  CHECK_THROWS_WITH(h.result<std::string>("x"), Catch::Contains("has no result: it is pending"));
}

TEST_CASE("testing: check_crashes passes a deterministic workflow and counts executions",
          "[testing]") {
  dt::harness h;
  h.register_workflow("classify", classify);
  const dt::crash_report r = dt::check_crashes(h, "classify", std::string("a text of words"));
  INFO(r.summary());
  CHECK(r.ok());
  CHECK(r.status == "succeeded");
  // 4 rows: after-row and lost-reply each; no step retries, so no backoff case; the end.
  CHECK(r.cases.size() == 4 * 2 + 1);
  for (const auto& c : r.cases) CHECK(c.how != dt::interruption::in_backoff);
  // The lost reply of 'label' ran it twice under one key; nothing ran three times.
  bool label_twice = false;
  for (const auto& s : r.steps) {
    CHECK(s.most <= 2);
    if (s.step == "label" && s.most == 2) {
      label_twice = true;
      // It is the lost reply that ran it twice ('label' has no retry policy, so no backoff
      // case can have).
      CHECK(s.in_case.rfind("lost reply at step 1 'label'", 0) == 0);
    }
  }
  CHECK(label_twice);
}

TEST_CASE("testing: check_crashes reports a nondeterministic workflow at its step", "[testing]") {
  static int runs = 0;
  dt::harness h;
  h.register_workflow("drifting", [](context& ctx) -> asio::awaitable<int> {
    // A step issued in a loop over a source that changes between runs.
    const int n = ++runs;
    co_await ctx.step("a", [] { return 1; });
    co_await ctx.step(n % 2 == 1 ? "b" : "c", [] { return 2; });
    co_return 3;
  });
  dt::crash_options o;
  o.throw_on_failure = false;
  const dt::crash_report r = dt::check_crashes(h, o, "drifting");
  CHECK_FALSE(r.ok());
  const std::string s = r.summary();
  INFO(s);
  CHECK_THAT(s, Catch::Contains("ended parked"));
  // The same code asked for another step: not "the code changed while in flight".
  // (Which of 'b' and 'c' is journaled depends on how many runs came before.)
  CHECK_THAT(s, Catch::Contains("step 1 is journaled as 'b' but its replay asks for 'c'. This "
                                "run and its replay asked for different steps with the same "
                                "code") ||
                    Catch::Contains("step 1 is journaled as 'c' but its replay asks for 'b'. This "
                                    "run and its replay asked for different steps with the same "
                                    "code"));
  CHECK_THAT(s, !Catch::Contains("changed while"));
  CHECK_THROWS_AS(dt::check_crashes(h, "drifting"), dt::check_failed);
}

namespace {

retry hourly_retries() {
  retry r;
  r.max_attempts = 8;
  r.initial = 1min;
  r.factor = 2.0;
  r.max = 2h;
  r.jitter = 0;
  return r;
}

asio::awaitable<int> flaky(context& ctx) {
  // Fails 7 times, then succeeds: 1 + 2 + ... + 64 minutes of backoff, over two hours.
  co_return co_await ctx.step(
      "call",
      [](const step_info& i) {
        if (i.attempt < 8) throw std::runtime_error("HTTP 503");
        return i.attempt;
      },
      hourly_retries());
}

}  // namespace

TEST_CASE("testing: retries back off on the virtual clock, and advance() stops in between",
          "[testing]") {
  dt::harness h;
  h.register_workflow("flaky", flaky);
  const auto t0 = h.now();
  h.start("flaky", "f-1");
  h.advance(2h);  // 1+2+4+8+16+32 = 63 min of backoff have passed; the 7th retry is due at 127
  CHECK(h.status("f-1") == "running");
  const auto tries = h.attempts("f-1");
  REQUIRE(tries.size() == 7);
  CHECK(tries[6].outcome == "retrying");
  CHECK(tries[6].error_message == "HTTP 503");
  REQUIRE(tries[6].next_attempt);
  CHECK(*tries[6].next_attempt - t0 == 127min);
  CHECK(h.now() - t0 == 2h);
  h.run();
  CHECK(h.result<int>("f-1") == 8);
  CHECK(h.now() - t0 == 127min);
  CHECK(h.journal("f-1").at(0).attempts == 8);
  CHECK(h.reports().size() == 7);  // each retry, as the engine's event hook would report it
}

TEST_CASE("testing: a step that hangs times out on the virtual clock, attempts exhausted",
          "[testing]") {
  dt::harness h;
  h.register_workflow("hangs", [](context& ctx) -> asio::awaitable<void> {
    retry r;
    r.max_attempts = 2;
    r.initial = 1s;
    r.timeout = 5min;
    co_await ctx.step(
        "call",
        []() -> asio::awaitable<void> {
          // Waits an hour of real time unless cancelled: the timeout must cancel it.
          asio::steady_timer t(co_await asio::this_coro::executor, 1h);
          co_await t.async_wait(asio::use_awaitable);
        },
        r);
  });
  const auto t0 = h.now();
  h.start("hangs", "h-1");
  h.run();
  CHECK(h.status("h-1") == "dead_letter");
  const auto tries = h.attempts("h-1");
  REQUIRE(tries.size() == 2);
  CHECK(tries[0].error_type == "durable::step_timeout");
  CHECK(tries[1].outcome == "failed");
  CHECK(h.now() - t0 == 10min + 1s);
}

TEST_CASE("testing: a workflow's deadline passes on the virtual clock", "[testing]") {
  dt::harness h;
  h.register_workflow("slow", [](context& ctx) -> asio::awaitable<void> {
    co_await ctx.sleep_for(2h);
    co_await ctx.step("after", [] {});
  });
  start_options o;
  o.timeout = 1h;
  const auto t0 = h.now();
  h.start_with(o, "slow", "s-1");
  h.run();
  CHECK(h.status("s-1") == "cancelled");
  CHECK(h.workflow("s-1").reason.value_or("").find("deadline") != std::string::npos);
  CHECK(h.now() - t0 >= 1h);  // stopped at the deadline, not at the end of the sleep
  CHECK(h.now() - t0 <= 1h + 1s);
  CHECK(h.journal("s-1").size() == 1);  // the sleep; "after" never ran
}

namespace {

asio::awaitable<std::string> approval(context& ctx, std::string who) {
  co_await ctx.set_event("stage", std::string("waiting"));
  const auto yes = co_await ctx.recv<std::string>("decision", 24h);
  co_await ctx.set_event("stage", std::string("decided"));
  co_return yes ? who + ":" + *yes : who + ":expired";
}

}  // namespace

TEST_CASE("testing: messages and events from outside, and a recv timeout on the virtual clock",
          "[testing]") {
  dt::harness h;
  h.register_workflow("approval", approval);
  h.start("approval", "a-1", std::string("bob"));
  h.start("approval", "a-2", std::string("eve"));
  h.advance(1h);  // both wait for their decision (run() would let the day pass)
  CHECK(h.status("a-1") == "running");
  CHECK(h.get_event<std::string>("a-1", "stage") == std::optional<std::string>("waiting"));
  CHECK_FALSE(h.get_event<std::string>("a-1", "nope"));
  h.send("a-1", "decision", std::string("yes"));
  h.run();  // a-1 finishes; a-2 waits out its day
  CHECK(h.result<std::string>("a-1") == "bob:yes");
  CHECK(h.result<std::string>("a-2") == "eve:expired");
  CHECK(h.get_event<std::string>("a-2", "stage") == std::optional<std::string>("decided"));
  CHECK_THROWS_WITH(h.send("nobody", "decision", 1), Catch::Contains("no workflow 'nobody'"));
}

TEST_CASE("testing: crash() abandons the process and the next run resumes by replay", "[testing]") {
  calls.clear();
  dt::harness h;
  h.register_workflow("classify", classify);
  h.start("classify", "c-2", std::string("words words words words"));
  h.advance(1h);  // in the 30-day sleep: count and label are journaled
  REQUIRE(h.journal("c-2").size() == 3);
  h.crash();
  CHECK(h.process() == 2);
  h.run();
  CHECK(h.result<std::string>("c-2") == "long:5");
  CHECK(calls["c-2:1"] == 1);  // the label was replayed, not asked again
  CHECK(calls["c-2:3"] == 1);
}

TEST_CASE("testing: children, all, any, map, patched and continue_as_new run as on the engine",
          "[testing]") {
  dt::harness h;
  h.register_workflow("square", [](context& ctx, int x) -> asio::awaitable<int> {
    co_return co_await ctx.step("sq", [x] { return x * x; });
  });
  h.register_workflow("parent", [](context& ctx, int rounds, int total) -> asio::awaitable<int> {
    auto a = co_await ctx.start_child("square", 3);
    auto b = co_await ctx.start_child("square", 4);
    auto ra = a.result<int>();
    auto rb = b.result<int>();
    auto [x, y] = co_await ctx.all(std::move(ra), std::move(rb));
    auto fast = ctx.step("fast", [] { return 1; });
    auto slow = ctx.sleep_for(1h);
    const auto won = co_await ctx.any(std::move(fast), std::move(slow));
    std::vector<int> items(3);  // 1, 2, 3 (no initializer list in a coroutine: GCC 12)
    for (int i = 0; i < 3; ++i) items[std::size_t(i)] = i + 1;
    const auto doubled =
        co_await ctx.map("double", std::move(items), 2, [](const int& v) { return 2 * v; });
    int sum = total + x + y + int(won.index()) + doubled[0] + doubled[1] + doubled[2];
    if (co_await ctx.patched("bonus")) sum += 100;
    if (rounds > 1) co_return co_await ctx.continue_as_new<int>(rounds - 1, sum);
    co_return sum;
  });
  h.start("parent", "p-1", 2, 0);
  h.run();
  // Each round: 9 + 16 + 0 (the step won) + 12 + 100 = 137.
  CHECK(h.result<int>("p-1") == 274);
  CHECK(h.workflow("p-1").generation == 1);
  CHECK(h.workflows().size() == 1 + 2 + 2);  // each generation's children have ids of their own
  for (const auto& id : h.workflows())
    if (id != "p-1") CHECK(h.workflow(id).parent == std::optional<std::string>("p-1"));
}

TEST_CASE("testing: a transactional step without a database is refused, not pretended",
          "[testing]") {
  dt::harness h;
  h.register_workflow("tx", [](context& ctx) -> asio::awaitable<void> {
    co_await ctx.transaction(
        "store", [](pg::transaction& t) -> asio::awaitable<void> { co_await t.exec("SELECT 1"); });
  });
  h.start("tx", "t-1");
  h.run();
  CHECK(h.status("t-1") == "parked");
  CHECK_THAT(h.workflow("t-1").reason.value_or(""),
             Catch::Contains("needs a database") && Catch::Contains("harness_options::database"));
  CHECK(h.journal("t-1").empty());
}

TEST_CASE("testing: a deadline holds across a crash of the process", "[testing]") {
  dt::harness h;
  h.register_workflow("slow", [](context& ctx) -> asio::awaitable<void> {
    co_await ctx.sleep_for(2h);
    co_await ctx.step("after", [] {});
  });
  start_options o;
  o.timeout = 1h;
  const auto t0 = h.now();
  h.start_with(o, "slow", "s-2");
  h.advance(30min);
  h.crash();  // the deadline's timer dies with the process; the deadline is the workflow's
  h.run();
  CHECK(h.status("s-2") == "cancelled");
  CHECK(h.now() - t0 >= 1h);
  CHECK(h.now() - t0 <= 1h + 1s);
}

TEST_CASE("testing: an endless loop through continue_as_new is progress, not a stall",
          "[testing]") {
  dt::harness h;
  h.register_workflow("loop", [](context& ctx, int n) -> asio::awaitable<int> {
    co_await ctx.step("tick", [n] { return n; });
    if (n < 150) co_return co_await ctx.continue_as_new<int>(n + 1);
    co_return n;
  });
  h.start("loop", "l-1", 0);
  h.run();  // 150 generations, more than max_claims_without_progress claims
  CHECK(h.result<int>("l-1") == 150);
  CHECK(h.workflow("l-1").generation == 150);
}

TEST_CASE("testing: the backoff case interrupts a retried step, which runs again under its key",
          "[testing]") {
  dt::harness h;
  h.register_workflow("pay", [](context& ctx) -> asio::awaitable<std::string> {
    retry r;
    r.max_attempts = 3;
    r.initial = 10s;
    const std::string id = co_await ctx.uuid();  // journaled: the same in every case
    co_await ctx.step(
        "charge", [](const step_info&) { return 1; }, r);
    co_return id;
  });
  const dt::crash_report rep = dt::check_crashes(h, "pay");
  INFO(rep.summary());
  CHECK(rep.ok());
  const auto backoff =
      std::find_if(rep.cases.begin(), rep.cases.end(), [](const dt::crash_case& c) {
        return c.step == "charge" && c.how == dt::interruption::in_backoff;
      });
  REQUIRE(backoff != rep.cases.end());
  CHECK(backoff->happened);
  CHECK(backoff->problem.empty());
  for (const auto& st : rep.steps)
    if (st.step == "charge") CHECK(st.most == 2);
  // It ran twice, by design; the kit saw no call it makes, so it claims nothing about them.
  CHECK_THAT(rep.summary(), Catch::Contains("no testing::service declared"));
}

TEST_CASE("testing: replay of a harness export names a result that changed after the last step",
          "[testing]") {
  dt::harness h;
  h.register_workflow("sum", [](context& ctx, int a) -> asio::awaitable<int> {
    co_return co_await ctx.step("add", [a] { return a + 1; });
  });
  h.start("sum", "s-9", 41);
  h.run();
  const nlohmann::json doc = h.export_journal("s-9");
  CHECK(doc["workflows"][0]["steps"].size() == 1);
  CHECK(dt::replay_document(doc, h).ok());

  dt::harness later;  // same step, but it now throws where it returned
  later.register_workflow("sum", [](context& ctx, int a) -> asio::awaitable<int> {
    const int v = co_await ctx.step("add", [a] { return a + 1; });
    if (v == 42) throw std::runtime_error("no longer accepted");
    co_return v;
  });
  const dt::replay_report r = dt::replay_document(doc, later);
  INFO(r.summary());
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.mismatch()->message,
             Catch::Contains("now ends failed") && Catch::Contains("where it ended succeeded"));

  dt::harness renamed;  // and the step renamed: named at its number, with the fix
  renamed.register_workflow("sum", [](context& ctx, int a) -> asio::awaitable<int> {
    co_return co_await ctx.step("increment", [a] { return a + 1; });
  });
  const dt::replay_report n = dt::replay_document(doc, renamed);
  REQUIRE_FALSE(n.ok());
  CHECK(n.mismatch()->seq == 0);
  CHECK(n.mismatch()->journaled == "'add'");
  CHECK(n.mismatch()->requested == "'increment'");
}

// ---- the examples' workflows, crashed at every step -----------------------------------------

#include "02_order_approval.hpp"

TEST_CASE("testing: example 02's order survives a crash at every step", "[testing][examples]") {
  dt::harness h;
  h.register_workflow("order", order_example::order);
  h.register_workflow("reserve", order_example::reserve);
  dt::crash_options o;
  o.id = "order-7";
  // The person's approval is waiting in the inbox before the order asks for it.
  o.setup = [](dt::harness& x) { x.send("order-7", "approval", std::string("alice")); };
  const std::vector<std::string> parcels{"p1", "p2", "p3"};
  const dt::crash_report r = dt::check_crashes(h, o, "order", parcels);
  INFO(r.summary());
  CHECK(r.ok());
  CHECK(r.status == "succeeded");
  CHECK(r.outcome == "\"10 units reserved, approved by alice, 3 parcels shipped\"");
  // The children's rows are interrupted too: both reserve steps appear among the cases (after
  // the row, the reply lost; no retry policy, so no backoff case), and both children's ends.
  CHECK(std::count_if(r.cases.begin(), r.cases.end(), [](const dt::crash_case& c) {
          return c.workflow_id != "order-7" && c.step == "reserve";
        }) == 2 * 2);
  CHECK(std::count_if(r.cases.begin(), r.cases.end(), [](const dt::crash_case& c) {
          return c.how == dt::interruption::before_end;
        }) == 3);
}
