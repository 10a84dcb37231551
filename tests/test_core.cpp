// Workflows run through durable::context on the in-memory journal (detail/replay/
// memory_journal.hpp), as an engine's run would run them, without a server: step numbering and
// replay (I4, I5), fencing (I3), retries and their accounting across runs (I9), joins, the
// journal limit, continue_as_new, messages, events, children, and the run's verdict when the
// journal fails. ctest runs these with no database reachable.
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "durable.hpp"
#include "durable/detail/memory_run.hpp"

using namespace durable;
using namespace durable::detail;
using namespace std::chrono_literals;

namespace {

using output = std::optional<std::string>;
using body = std::function<asio::awaitable<output>(context&)>;

memory_run_result run(memory_journal& j, const std::string& id, body b, memory_run_options o = {}) {
  return run_in_memory(j, id, std::move(b), o);
}

asio::awaitable<void> pause_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

std::string json(const nlohmann::json& v) { return v.dump(); }

/// After `d`, what happens outside the run: a message arrives for `to` (spawned beside the run;
/// a named coroutine, so that nothing it uses lives in a temporary lambda).
asio::awaitable<void> deliver_later(memory_journal& j, std::chrono::milliseconds d, std::string to,
                                    std::string topic, std::string payload) {
  co_await pause_for(d);
  j.deliver(to, topic, std::move(payload));
}

/// After `d`, workflow `id` ends as succeeded with `out` (as its executor would write it).
asio::awaitable<void> succeed_later(memory_journal& j, std::chrono::milliseconds d, std::string id,
                                    std::string out, int& finished) {
  co_await pause_for(d);
  ++finished;
  j.finish(id, j.at(id).epoch, "succeeded", std::move(out), {}, {});
}

/// The step numbers journaled for workflow `id`, with their names.
std::vector<std::pair<int, std::string>> rows(const memory_journal& j, const std::string& id) {
  std::vector<std::pair<int, std::string>> out;
  for (const auto& [seq, r] : j.at(id).steps) out.emplace_back(seq, r.name);
  return out;
}

retry fast_retries(int attempts) {
  retry r;
  r.max_attempts = attempts;
  r.initial = 1ms;
  return r;
}

}  // namespace

// ---- steps and replay -----------------------------------------------------------------------

TEST_CASE("core: steps are journaled in program order with their kind and output", "[core]") {
  memory_journal j;
  j.create("wf", "demo");
  auto r = run(j, "wf", [](context& ctx) -> asio::awaitable<output> {
    const int a = co_await ctx.step("a", [] { return 1; });
    const int b = co_await ctx.step("b", [a] { return a + 1; });
    co_return json(a + b);
  });
  CHECK(r.outcome.what == verdict::kind::succeeded);
  const auto& w = j.at("wf");
  CHECK(w.status == "succeeded");
  CHECK(w.output == "3");
  REQUIRE(rows(j, "wf") == std::vector<std::pair<int, std::string>>{{0, "a"}, {1, "b"}});
  CHECK(w.steps.at(0).kind == "step");
  CHECK(w.steps.at(1).output == "2");
}

TEST_CASE("core: a replay returns journaled results without running the steps", "[core][I5]") {
  memory_journal j;
  j.create("wf", "demo");
  int calls = 0;
  const body b = [&calls](context& ctx) -> asio::awaitable<output> {
    const int a = co_await ctx.step("a", [&calls] { return ++calls; });
    const int c = co_await ctx.step("b", [&calls] { return ++calls * 10; });
    co_return json(a + c);
  };
  REQUIRE(run(j, "wf", b).outcome.what == verdict::kind::succeeded);
  REQUIRE(calls == 2);
  const auto again = run(j, "wf", b);
  CHECK(again.outcome.what == verdict::kind::succeeded);
  CHECK(again.outcome.output == "21");
  CHECK(calls == 2);
}

TEST_CASE("core: after a crash between steps only the outstanding steps run again", "[core]") {
  memory_journal j;
  j.create("wf", "demo");
  std::vector<std::string> ran;
  const body b = [&ran](context& ctx) -> asio::awaitable<output> {
    for (const char* n : {"a", "b", "c"}) co_await ctx.step(n, [&ran, n] { ran.push_back(n); });
    co_return std::nullopt;
  };
  REQUIRE(run(j, "wf", b).outcome.what == verdict::kind::succeeded);
  // The process died after step 0 committed: steps 1 and 2 never reached the journal.
  j.at("wf").steps.erase(1);
  j.at("wf").steps.erase(2);
  j.at("wf").status = "running";
  ran.clear();
  CHECK(run(j, "wf", b).outcome.what == verdict::kind::succeeded);
  CHECK(ran == std::vector<std::string>{"b", "c"});
  CHECK(j.at("wf").steps.size() == 3);
}

TEST_CASE("core: a run whose workflow was taken over journals nothing more (I3)", "[core][I3]") {
  memory_journal j;
  j.create("wf", "demo");
  auto r = run(j, "wf", [&j](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step("a", [] { return 1; });
    co_await ctx.step("b", [&j] {
      ++j.at("wf").epoch;  // another executor claimed it while this step ran
      return 2;
    });
    co_await ctx.step("c", [] { return 3; });
    co_return json(0);
  });
  CHECK(r.outcome.what == verdict::kind::released);
  CHECK(rows(j, "wf") == std::vector<std::pair<int, std::string>>{{0, "a"}});
  CHECK(j.at("wf").status == "running");  // the final state is the new owner's to write
  CHECK_FALSE(j.at("wf").output);
}

TEST_CASE("core: a renamed step parks the workflow as nondeterministic (I5)", "[core][I5]") {
  memory_journal j;
  j.create("wf", "demo");
  REQUIRE(run(j, "wf", [](context& ctx) -> asio::awaitable<output> {
            co_await ctx.step("a", [] { return 1; });
            co_await ctx.step("b", [] { return 2; });
            co_return std::nullopt;
          }).outcome.what == verdict::kind::succeeded);
  bool renamed_ran = false;
  auto r = run(j, "wf", [&renamed_ran](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step("a", [] { return 1; });
    co_await ctx.step("b2", [&renamed_ran] {
      renamed_ran = true;
      return 2;
    });
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::parked);
  CHECK(r.outcome.cause == park_cause::nondeterminism);
  CHECK(j.at("wf").status == "parked");
  CHECK_THAT(*j.at("wf").reason, Catch::Contains("'b'") && Catch::Contains("'b2'"));
  CHECK_FALSE(renamed_ran);
  CHECK(j.at("wf").steps.size() == 2);
}

TEST_CASE("core: code that returns before a journaled step parks the workflow (I5)", "[core][I5]") {
  memory_journal j;
  j.create("wf", "demo");
  REQUIRE(run(j, "wf", [](context& ctx) -> asio::awaitable<output> {
            co_await ctx.step("a", [] { return 1; });
            co_await ctx.step("b", [] { return 2; });
            co_return std::nullopt;
          }).outcome.what == verdict::kind::succeeded);
  auto r = run(j, "wf", [](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step("a", [] { return 1; });
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::parked);
  CHECK(r.outcome.cause == park_cause::nondeterminism);
}

TEST_CASE("core: a journal row the library never writes parks the workflow at its claim",
          "[core]") {
  memory_journal j;
  j.create("wf", "demo");
  j.at("wf").steps.emplace(1 << 20, step_row{1 << 20, "far", "step", "1", {}, 1, 0});
  bool ran = false;
  auto r = run(j, "wf", [&ran](context&) -> asio::awaitable<output> {
    ran = true;
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::parked);
  CHECK(j.at("wf").status == "parked");
  CHECK_FALSE(ran);
}

TEST_CASE("core: time, random numbers and uuids are journaled and replayed (I6)", "[core][I6]") {
  memory_journal j;
  j.create("wf", "demo");
  const body b = [](context& ctx) -> asio::awaitable<output> {
    const auto t = co_await ctx.now();
    const std::uint64_t n = co_await ctx.random();
    const std::string u = co_await ctx.uuid();
    co_return json({t.time_since_epoch().count(), n, u});
  };
  const auto first = run(j, "wf", b);
  REQUIRE(first.outcome.what == verdict::kind::succeeded);
  const auto second = run(j, "wf", b);
  CHECK(second.outcome.output == first.outcome.output);
  CHECK(j.at("wf").steps.size() == 3);
}

TEST_CASE("core: the idempotency key names the workflow and the step", "[core][keys]") {
  memory_journal j;
  j.create("wf-9", "demo");
  std::vector<std::string> keys;
  auto r = run(j, "wf-9", [&keys](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step("a", [&] { keys.push_back(ctx.idempotency_key()); });
    co_await ctx.step("b", [&](const step_info& i) { keys.push_back(i.idempotency_key); });
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::succeeded);
  CHECK(keys == std::vector<std::string>{"wf-9:0", "wf-9:1"});
}

// ---- retries --------------------------------------------------------------------------------

TEST_CASE("core: failed attempts are recorded and the step retried until it succeeds",
          "[core][retry]") {
  memory_journal j;
  j.create("wf", "demo");
  int calls = 0;
  auto r = run(j, "wf", [&calls](context& ctx) -> asio::awaitable<output> {
    const int v = co_await ctx.step(
        "flaky",
        [&calls] {
          if (++calls < 3) throw std::runtime_error("try again");
          return 7;
        },
        fast_retries(3));
    co_return json(v);
  });
  CHECK(r.outcome.what == verdict::kind::succeeded);
  CHECK(calls == 3);
  const auto& w = j.at("wf");
  REQUIRE(w.attempts.size() == 2);
  CHECK(w.attempts[0].row.attempt == 1);
  CHECK(w.attempts[1].row.attempt == 2);
  CHECK(w.attempts[0].row.outcome == "retrying");
  CHECK_THAT(w.attempts[0].row.error, Catch::Contains("try again"));
  CHECK(w.steps.at(0).attempts == 3);
  CHECK(r.retries.size() == 2);
}

TEST_CASE("core: a step that exhausts its attempts is dead-lettered, on every replay too (I7)",
          "[core][retry]") {
  memory_journal j;
  j.create("wf", "demo");
  int calls = 0;
  const body b = [&calls](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step(
        "charge",
        [&calls]() -> int {
          ++calls;
          throw std::runtime_error("card declined");
        },
        fast_retries(2));
    co_return std::nullopt;
  };
  auto r = run(j, "wf", b);
  CHECK(r.outcome.what == verdict::kind::dead_lettered);
  CHECK(j.at("wf").status == "dead_letter");
  CHECK_THAT(*j.at("wf").reason, Catch::Contains("'charge'") && Catch::Contains("card declined"));
  REQUIRE(j.at("wf").attempts.size() == 2);
  CHECK(j.at("wf").attempts.back().row.outcome == "failed");
  CHECK(calls == 2);
  auto again = run(j, "wf", b);
  CHECK(again.outcome.what == verdict::kind::dead_lettered);
  CHECK(calls == 2);
}

TEST_CASE("core: a permanent_error is not retried", "[core][retry]") {
  memory_journal j;
  j.create("wf", "demo");
  int calls = 0;
  auto r = run(j, "wf", [&calls](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step(
        "validate",
        [&calls]() -> int {
          ++calls;
          throw permanent_error("bad input");
        },
        fast_retries(5));
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::dead_lettered);
  CHECK(calls == 1);
}

TEST_CASE("core: attempts recorded before a crash count after it (I9)", "[core][retry][I9]") {
  memory_journal j;
  j.create("wf", "demo");
  // Two attempts failed in runs that died before the step succeeded.
  for (int a = 1; a <= 2; ++a)
    j.at("wf").attempts.push_back({attempt_row{0, a, "charge", "step", "retrying",
                                               R"({"type":"x","message":"m"})", 0, 0.0, false},
                                   std::nullopt});
  int calls = 0;
  auto r = run(j, "wf", [&calls](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step(
        "charge",
        [&calls]() -> int {
          ++calls;
          throw std::runtime_error("still down");
        },
        fast_retries(3));
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::dead_lettered);
  CHECK(calls == 1);  // the third attempt of three
  CHECK(j.at("wf").attempts.back().row.attempt == 3);
}

TEST_CASE("core: attempts recorded for another step are nondeterminism (I5)", "[core][retry][I5]") {
  memory_journal j;
  j.create("wf", "demo");
  j.at("wf").attempts.push_back(
      {attempt_row{0, 1, "old-name", "step", "retrying", "{}", 0, 0.0, false}, std::nullopt});
  auto r = run(j, "wf", [](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step("new-name", [] { return 1; });
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::parked);
  CHECK(r.outcome.cause == park_cause::nondeterminism);
}

// ---- joins ----------------------------------------------------------------------------------

TEST_CASE("core: concurrent steps are numbered by issue order, not completion order (I4)",
          "[core][join][I4]") {
  memory_journal j;
  j.create("wf", "demo");
  std::vector<std::string> finished;
  auto r = run(j, "wf", [&finished](context& ctx) -> asio::awaitable<output> {
    auto slow = ctx.step("slow", [&finished]() -> asio::awaitable<int> {
      co_await pause_for(30ms);
      finished.push_back("slow");
      co_return 1;
    });
    auto fast = ctx.step("fast", [&finished]() -> asio::awaitable<int> {
      finished.push_back("fast");
      co_return 2;
    });
    auto [a, b] = co_await ctx.all(std::move(slow), std::move(fast));
    co_return json({a, b});
  });
  CHECK(r.outcome.what == verdict::kind::succeeded);
  CHECK(r.outcome.output == "[1,2]");
  CHECK(finished == std::vector<std::string>{"fast", "slow"});
  CHECK(rows(j, "wf") == std::vector<std::pair<int, std::string>>{{0, "slow"}, {1, "fast"}});
}

TEST_CASE("core: a branch of all that fails for good cancels the others", "[core][join]") {
  memory_journal j;
  j.create("wf", "demo");
  bool slow_finished = false;
  auto r = run(j, "wf", [&slow_finished](context& ctx) -> asio::awaitable<output> {
    auto boom = ctx.step("boom", []() -> int { throw permanent_error("no"); });
    auto slow = ctx.step("slow", [&slow_finished]() -> asio::awaitable<int> {
      co_await pause_for(10s);
      slow_finished = true;
      co_return 1;
    });
    co_await ctx.all(std::move(boom), std::move(slow));
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::dead_lettered);
  CHECK_FALSE(slow_finished);
  CHECK_FALSE(j.at("wf").steps.contains(1));  // the cancelled branch is not recorded
}

TEST_CASE("core: any journals its winner and a replay returns the same branch", "[core][join]") {
  memory_journal j;
  j.create("wf", "demo");
  int calls = 0;
  const body b = [&calls](context& ctx) -> asio::awaitable<output> {
    auto slow = ctx.step("slow", [&calls]() -> asio::awaitable<int> {
      ++calls;
      co_await pause_for(10s);
      co_return 1;
    });
    auto fast = ctx.step("fast", [&calls]() -> asio::awaitable<int> {
      ++calls;
      co_return 2;
    });
    auto v = co_await ctx.any(std::move(slow), std::move(fast));
    co_return json({v.index(), v.index() == 1 ? std::get<1>(v) : std::get<0>(v)});
  };
  auto r = run(j, "wf", b);
  CHECK(r.outcome.what == verdict::kind::succeeded);
  CHECK(r.outcome.output == "[1,2]");
  CHECK(j.at("wf").steps.at(2).kind == "any");
  const int ran = calls;
  auto again = run(j, "wf", b);
  CHECK(again.outcome.output == "[1,2]");
  CHECK(calls == ran);
}

TEST_CASE("core: map runs at most in_flight items at once and numbers them in item order",
          "[core][join][I4]") {
  memory_journal j;
  j.create("wf", "demo");
  int running = 0, most = 0;
  auto r = run(j, "wf", [&](context& ctx) -> asio::awaitable<output> {
    std::vector<int> items{1, 2, 3, 4, 5, 6};
    auto squares =
        co_await ctx.map("sq", items, 2, [&running, &most](const int& i) -> asio::awaitable<int> {
          most = std::max(most, ++running);
          co_await pause_for(std::chrono::milliseconds(7 - i));
          --running;
          co_return i* i;
        });
    co_return json(squares);
  });
  CHECK(r.outcome.what == verdict::kind::succeeded);
  CHECK(r.outcome.output == "[1,4,9,16,25,36]");
  CHECK(most == 2);
  const auto journaled = rows(j, "wf");
  REQUIRE(journaled.size() == 6);
  for (int i = 0; i < 6; ++i)
    CHECK(journaled[std::size_t(i)].second == "sq[" + std::to_string(i) + "]");
}

TEST_CASE("core: a step issued inside another step's function parks the workflow", "[core]") {
  memory_journal j;
  j.create("wf", "demo");
  auto r = run(j, "wf", [](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step("outer", [&ctx] {
      auto inner = ctx.step("inner", [] { return 1; });  // issued from inside: refused
      (void)inner;
      return 0;
    });
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::parked);
  CHECK(r.outcome.cause == park_cause::misuse);
  CHECK_THAT(r.outcome.reason, Catch::Contains("'inner'") && Catch::Contains("'outer'"));
  CHECK(j.at("wf").steps.empty());
}

// ---- the journal limit ----------------------------------------------------------------------

TEST_CASE("core: the journal limit parks the workflow before the step beyond it runs",
          "[core][limit]") {
  memory_journal j;
  j.create("wf", "demo");
  std::vector<int> ran;
  memory_run_options o;
  o.journal_limit = 2;
  auto r = run(
      j, "wf",
      [&ran](context& ctx) -> asio::awaitable<output> {
        for (int i = 0; i < 3; ++i) co_await ctx.step("s", [&ran, i] { ran.push_back(i); });
        co_return std::nullopt;
      },
      o);
  CHECK(r.outcome.what == verdict::kind::parked);
  CHECK(r.outcome.cause == park_cause::journal_limit);
  CHECK(ran == std::vector<int>{0, 1});
  CHECK(j.at("wf").steps.size() == 2);
}

TEST_CASE("core: nearing the journal limit is reported once per run", "[core][limit]") {
  memory_journal j;
  j.create("wf", "demo");
  memory_run_options o;
  o.journal_limit = 10;
  o.journal_warning = 0.5;
  auto r = run(
      j, "wf",
      [](context& ctx) -> asio::awaitable<output> {
        for (int i = 0; i < 8; ++i) co_await ctx.step("s", [] {});
        co_return std::nullopt;
      },
      o);
  CHECK(r.outcome.what == verdict::kind::succeeded);
  CHECK(r.warnings.size() == 1);
}

TEST_CASE("core: a value over max_value_bytes is not journaled and parks the workflow",
          "[core][limit]") {
  memory_journal j;
  j.create("wf", "demo");
  std::vector<std::string> ran;
  memory_run_options o;
  o.max_value_bytes = 100;
  auto r = run(
      j, "wf",
      [&ran](context& ctx) -> asio::awaitable<output> {
        co_await ctx.step("small", [&ran] {
          ran.push_back("small");
          return std::string(50, 'a');
        });
        try {
          co_await ctx.step("big", [&ran] {
            ran.push_back("big");
            return std::string(200, 'b');
          });
        } catch (const value_too_large&) {
          ran.push_back("caught");
        }
        // Parked: a later step does not run, whatever the code does with the exception.
        try {
          co_await ctx.step("later", [&ran] { ran.push_back("later"); });
        } catch (const value_too_large&) {
          ran.push_back("refused");
        }
        co_return std::nullopt;
      },
      o);
  CHECK(r.outcome.what == verdict::kind::parked);
  CHECK(r.outcome.cause == park_cause::value_too_large);
  CHECK_THAT(r.outcome.reason, Catch::Contains("step 1 'big'") && Catch::Contains("202 bytes") &&
                                   Catch::Contains("max_value_bytes (100)"));
  CHECK(ran == std::vector<std::string>{"small", "big", "caught", "refused"});
  CHECK(rows(j, "wf") == std::vector<std::pair<int, std::string>>{{0, "small"}});
  CHECK(j.at("wf").status == "parked");
}

TEST_CASE("core: a workflow result over max_value_bytes parks the workflow", "[core][limit]") {
  memory_journal j;
  j.create("wf", "demo");
  memory_run_options o;
  o.max_value_bytes = 100;
  auto r = run(
      j, "wf",
      [](context& ctx) -> asio::awaitable<output> {
        co_await ctx.step("s", [] {});
        co_return json(std::string(300, 'r'));
      },
      o);
  CHECK(r.outcome.what == verdict::kind::parked);
  CHECK(r.outcome.cause == park_cause::value_too_large);
  CHECK_THAT(r.outcome.reason, Catch::Contains("the workflow's result"));
  // Counted under its own reason by the metrics.
  CHECK(park_reason(error_type(park_cause::value_too_large)) == "value_too_large");
}

// ---- continue_as_new ------------------------------------------------------------------------

TEST_CASE("core: continue_as_new empties the journal and starts the next generation",
          "[core][continue]") {
  memory_journal j;
  j.create("wf", "poll", "[0]");
  std::vector<std::string> keys;
  const body b = [&keys](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step("s", [&] { keys.push_back(ctx.idempotency_key()); });
    if (ctx.generation() == 0) co_return json(co_await ctx.continue_as_new<int>(5));
    co_return json(ctx.generation());
  };
  auto first = run(j, "wf", b);
  CHECK(first.outcome.what == verdict::kind::continued);
  CHECK(first.outcome.next.generation == 1);
  CHECK(j.at("wf").generation == 1);
  CHECK(j.at("wf").inputs == "[5]");
  CHECK(j.at("wf").steps.empty());
  auto second = run(j, "wf", b);
  CHECK(second.outcome.what == verdict::kind::succeeded);
  CHECK(second.outcome.output == "1");
  CHECK(keys == std::vector<std::string>{"wf:0", "wf:1.0"});  // no key repeats a generation's
}

TEST_CASE("core: continue_as_new keeps unconsumed messages for the next generation",
          "[core][continue]") {
  memory_journal j;
  j.create("wf", "poll");
  j.deliver("wf", "t", "1");
  j.deliver("wf", "t", "2");
  const body b = [](context& ctx) -> asio::awaitable<output> {
    auto m = co_await ctx.recv<int>("t");
    if (ctx.generation() == 0) co_await ctx.continue_as_new();
    co_return json(*m);
  };
  CHECK(run(j, "wf", b).outcome.what == verdict::kind::continued);
  auto second = run(j, "wf", b);
  CHECK(second.outcome.output == "2");
  REQUIRE(j.at("wf").inbox.size() == 1);  // the first generation's consumed message is gone
}

// ---- messages, events, children --------------------------------------------------------------

TEST_CASE("core: a send is journaled with its message, and a replay does not send again",
          "[core][messages]") {
  memory_journal j;
  j.create("wf", "demo");
  j.create("peer", "other");
  const body b = [](context& ctx) -> asio::awaitable<output> {
    co_await ctx.send("peer", "t", 42);
    co_return std::nullopt;
  };
  CHECK(run(j, "wf", b).outcome.what == verdict::kind::succeeded);
  const int writes = j.writes();
  CHECK(run(j, "wf", b).outcome.what == verdict::kind::succeeded);
  CHECK(j.writes() == writes + 1);  // the replay's final state only: no second send
  REQUIRE(j.at("peer").inbox.size() == 1);
  CHECK(j.at("peer").inbox[0].payload == "42");
  CHECK(j.at("peer").inbox[0].key == "wf:0");
  CHECK(j.at("wf").steps.at(0).kind == "send");
}

TEST_CASE("core: a send to a workflow that does not exist fails the step for good",
          "[core][messages]") {
  memory_journal j;
  j.create("wf", "demo");
  const body b = [](context& ctx) -> asio::awaitable<output> {
    try {
      co_await ctx.send("nobody", "t", 1);
    } catch (const step_failed& e) {
      co_return json(std::string(e.what()));
    }
    co_return json("sent");
  };
  auto r = run(j, "wf", b);
  CHECK_THAT(*r.outcome.output, Catch::Contains("'nobody'") && Catch::Contains("does not exist"));
  CHECK(j.at("wf").steps.at(0).error.has_value());
  CHECK(run(j, "wf", b).outcome.output == r.outcome.output);  // replayed alike
}

TEST_CASE("core: recv takes the oldest message of its topic, once", "[core][messages]") {
  memory_journal j;
  j.create("wf", "demo");
  j.deliver("wf", "t", "1");
  j.deliver("wf", "u", "3");
  j.deliver("wf", "t", "2");
  const body b = [](context& ctx) -> asio::awaitable<output> {
    auto a = co_await ctx.recv<int>("t");
    auto c = co_await ctx.recv<int>("t");
    co_return json({*a, *c});
  };
  CHECK(run(j, "wf", b).outcome.output == "[1,2]");
  CHECK(run(j, "wf", b).outcome.output == "[1,2]");
  const auto& inbox = j.at("wf").inbox;
  CHECK(inbox[0].consumed_seq == 1);
  CHECK(inbox[2].consumed_seq == 3);
  CHECK_FALSE(inbox[1].consumed_seq);
}

TEST_CASE("core: recv journals its deadline and returns nothing once it passed",
          "[core][messages]") {
  memory_journal j;
  j.create("wf", "demo");
  auto r = run(j, "wf", [](context& ctx) -> asio::awaitable<output> {
    auto m = co_await ctx.recv<int>("t", 20ms);
    co_return json(m.has_value());
  });
  CHECK(r.outcome.output == "false");
  const auto& steps = j.at("wf").steps;
  CHECK(steps.at(0).kind == "deadline");
  CHECK(steps.at(1).kind == "recv");
  CHECK(steps.at(1).output == "null");
}

TEST_CASE("core: a message that arrives while recv waits is received", "[core][messages]") {
  memory_journal j;
  j.create("wf", "demo");
  auto r = run(j, "wf", [&j](context& ctx) -> asio::awaitable<output> {
    const auto ex = co_await asio::this_coro::executor;  // no co_await beside temporaries
    asio::co_spawn(ex, deliver_later(j, 15ms, "wf", "t", "9"), asio::detached);
    auto m = co_await ctx.recv<int>("t", 30s);
    co_return json(m.value_or(-1));
  });
  CHECK(r.outcome.output == "9");
}

TEST_CASE("core: an event's latest value is what get_event reads", "[core][events]") {
  memory_journal j;
  j.create("pub", "demo");
  j.create("sub", "demo");
  REQUIRE(run(j, "pub", [](context& ctx) -> asio::awaitable<output> {
            co_await ctx.set_event("k", 1);
            co_await ctx.set_event("k", 2);
            co_return std::nullopt;
          }).outcome.what == verdict::kind::succeeded);
  auto r = run(j, "sub", [](context& ctx) -> asio::awaitable<output> {
    auto v = co_await ctx.get_event<int>("pub", "k", 1s);
    co_return json(v.value_or(-1));
  });
  CHECK(r.outcome.output == "2");
  CHECK(j.at("sub").steps.at(1).output == "[2]");
}

TEST_CASE("core: a child is started once and its result journaled", "[core][children]") {
  memory_journal j;
  j.create("p", "parent");
  int finished = 0;
  const body b = [&j, &finished](context& ctx) -> asio::awaitable<output> {
    child_handle h = co_await ctx.start_child("kid", 7);
    if (!ctx.replaying()) {
      const auto ex = co_await asio::this_coro::executor;  // no co_await beside temporaries
      asio::co_spawn(ex, succeed_later(j, 10ms, h.id(), "49", finished), asio::detached);
    }
    const int v = co_await ctx.child_result<int>(h.id());
    co_return json({h.id(), v});
  };
  auto r = run(j, "p", b);
  CHECK(r.outcome.output == R"(["p/0",49])");
  REQUIRE(j.contains("p/0"));
  CHECK(j.at("p/0").parent == "p");
  CHECK(j.at("p/0").inputs == "[7]");
  CHECK(j.at("p").steps.at(1).kind == "child-result");
  CHECK(run(j, "p", b).outcome.output == r.outcome.output);
  CHECK(finished == 1);
}

TEST_CASE("core: a child that failed fails its parent's step for good", "[core][children]") {
  memory_journal j;
  j.create("p", "parent");
  auto r = run(j, "p", [&j](context& ctx) -> asio::awaitable<output> {
    child_handle h = co_await ctx.start_child("kid");
    j.finish(h.id(), j.at(h.id()).epoch, "failed", {}, R"({"type":"x","message":"it broke"})", {});
    try {
      co_await ctx.child_result<int>(h.id());
    } catch (const step_failed& e) {
      co_return json(std::string(e.what()));
    }
    co_return json("no failure");
  });
  CHECK_THAT(*r.outcome.output, Catch::Contains("it broke"));
  CHECK(j.at("p").steps.at(1).error.has_value());
}

// ---- when the journal fails -----------------------------------------------------------------

TEST_CASE("core: a transient journal failure retries the run and journals nothing", "[core][io]") {
  memory_journal j;
  j.create("wf", "demo");
  int calls = 0;
  const body b = [&calls](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step("pay", [&calls] { return ++calls; });
    co_await ctx.step("ship", [] { return 0; });
    co_return std::nullopt;
  };
  j.fail_next(memory_journal::fault("connection lost", false));
  auto r = run(j, "wf", b);
  CHECK(r.outcome.what == verdict::kind::retry);
  CHECK_THAT(r.outcome.io_error, Catch::Contains("connection lost"));
  CHECK(j.at("wf").steps.empty());
  CHECK(j.at("wf").status == "running");
  // The step ran but its row never committed: it runs again (what idempotency keys are for).
  CHECK(run(j, "wf", b).outcome.what == verdict::kind::succeeded);
  CHECK(calls == 2);
}

TEST_CASE("core: a journal write refused for good parks the workflow", "[core][io]") {
  memory_journal j;
  j.create("wf", "demo");
  j.fail_next(memory_journal::fault("value too large", true));
  auto r = run(j, "wf", [](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step("big", [] { return 1; });
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::parked);
  CHECK(r.outcome.cause == park_cause::journal_refused);
  CHECK(j.at("wf").status == "parked");
  CHECK_THAT(*j.at("wf").reason, Catch::Contains("value too large"));
}

TEST_CASE("core: a read refused for good parks the workflow, a transient one retries it",
          "[core][io]") {
  const bool permanent = GENERATE(true, false);
  memory_journal j;
  j.create("pub", "demo");
  j.create("sub", "demo");
  // The first look for the event fails (the deadline row is written before it).
  j.at("sub").steps.emplace(0, step_row{0, "pub:k", "deadline", "1e12", {}, 1, 0});
  j.fail_next(memory_journal::fault("permission denied for table events", permanent));
  auto r = run(j, "sub", [](context& ctx) -> asio::awaitable<output> {
    auto v = co_await ctx.get_event<int>("pub", "k", 1s);
    co_return json(v.value_or(-1));
  });
  if (permanent) {
    CHECK(r.outcome.what == verdict::kind::parked);
    CHECK(r.outcome.cause == park_cause::journal_refused);
    CHECK_THAT(*j.at("sub").reason, Catch::Contains("permission denied"));
  } else {
    CHECK(r.outcome.what == verdict::kind::retry);
    CHECK(j.at("sub").status == "running");
  }
  CHECK(j.at("sub").steps.size() == 1);  // the value was not journaled
}

TEST_CASE("core: a run released by a shutdown writes nothing more", "[core][io]") {
  memory_journal j;
  j.create("wf", "demo");
  auto r = run(j, "wf", [&j](context& ctx) -> asio::awaitable<output> {
    co_await ctx.step("a", [&j] {
      j.set_standing(run_standing::stopping);
      return 1;
    });
    co_await ctx.step("b", [] { return 2; });
    co_return std::nullopt;
  });
  CHECK(r.outcome.what == verdict::kind::released);
  CHECK(rows(j, "wf") == std::vector<std::pair<int, std::string>>{{0, "a"}});
  CHECK(j.at("wf").status == "running");
}

TEST_CASE("core: a transactional step on the in-memory journal is refused, not pretended",
          "[core][io]") {
  memory_journal j;
  j.create("wf", "demo");
  bool ran = false;
  auto r = run(j, "wf", [&ran](context& ctx) -> asio::awaitable<output> {
    co_await ctx.transaction("debit", [&ran](pg::transaction&) -> asio::awaitable<void> {
      ran = true;
      co_return;
    });
    co_return std::nullopt;
  });
  CHECK_FALSE(ran);
  CHECK(j.at("wf").steps.empty());
  CHECK(r.outcome.what == verdict::kind::parked);  // not the workflow's failure
  CHECK(j.at("wf").status == "parked");
  CHECK_THAT(*j.at("wf").reason, Catch::Contains("'debit'") && Catch::Contains("needs a database"));
}

// What lets a receive skip its look (waiter_registry::quiet_since): a mark of a key taken before
// a look stays quiet only while the listener hears every send and none was for that key.
TEST_CASE("core: a key stays quiet after a mark until it, or every key, is poked",
          "[core][messages]") {
  durable::detail::waiter_registry r;
  const auto unheard = r.mark("w-1");
  CHECK_FALSE(r.quiet_since("w-1", unheard));  // nothing is heard without a listener
  r.set_hears_all(true);
  CHECK_FALSE(r.quiet_since("w-1", unheard));  // a mark from before the listener stays stale
  const auto m1 = r.mark("w-1");
  const auto m2 = r.mark("w-2");
  CHECK(r.quiet_since("w-1", m1));
  CHECK_FALSE(r.quiet_since("w-3", r.mark("w-2")));  // a key never marked is never quiet
  r.poke("w-2");
  CHECK(r.quiet_since("w-1", m1));
  CHECK_FALSE(r.quiet_since("w-2", m2));
  const auto m3 = r.mark("w-2");
  CHECK(r.quiet_since("w-2", m3));  // a mark after the poke: quiet again
  r.poke("w-1");
  CHECK_FALSE(r.quiet_since("w-1", m1));
  const auto m4 = r.mark("w-3");
  r.poke_all("r:");  // a listener's connect or failure, shutdown: any key may have been missed
  CHECK_FALSE(r.quiet_since("w-3", m4));
  const auto m5 = r.mark("w-3");
  for (int i = 0; i < 5000; ++i) (void)r.mark("k-" + std::to_string(i));  // past the keys kept
  CHECK_FALSE(r.quiet_since("w-3", m5));
  const auto m6 = r.mark("k-1");
  CHECK(r.quiet_since("k-1", m6));
  r.set_hears_all(false);
  CHECK_FALSE(r.quiet_since("k-1", m6));
}
