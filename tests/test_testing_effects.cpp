// The test kit's external effects (durable/testing/service.hpp), tried as issue 38 tried the kit:
// a 4-step order workflow (reserve, charge through a payment API that takes an idempotency key,
// a day's sleep, a receipt by email) and variants with the bugs every adopter of durable
// execution is told to test for. Each planted bug must be reported, with its sentence, on every
// run; the correct workflow must pass without noise. No database.
#include <algorithm>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "durable.hpp"
#include "durable/testing.hpp"

// The cases' own namespace: the files of one executable compile as one translation unit in
// scripts/test (docs/development.md, "Unity builds").
namespace kit_effects {

using namespace durable;
using namespace std::chrono_literals;
namespace dt = durable::testing;

struct charge_request {
  std::string order;
  int cents = 0;
  bool operator==(const charge_request&) const = default;  // lets the fake compare requests
};

// The fakes the workflows call, set by each test case (a real program passes clients).
dt::service<charge_request, std::string>* g_charge = nullptr;
dt::service<std::string>* g_email = nullptr;

/// The correct order: every external call in a step, the charge with the step's key.
asio::awaitable<std::string> order_ok(context& ctx, std::string order, int cents) {
  const std::string reservation = co_await ctx.step("reserve", [&] { return "r-" + order; });
  const std::string charge_id = co_await ctx.step("charge-card", [&] {
    return (*g_charge)(charge_request{order, cents}, ctx.idempotency_key());
  });
  co_await ctx.sleep_for(24h);
  co_await ctx.step("email", [&](const step_info& i) {
    (*g_email)("receipt for " + order + ": " + charge_id, i.idempotency_key);
  });
  co_return reservation + "/" + charge_id;
}

/// Planted bug 1: the receipt is sent outside any step.
asio::awaitable<std::string> order_email_outside(context& ctx, std::string order, int cents) {
  const std::string reservation = co_await ctx.step("reserve", [&] { return "r-" + order; });
  const std::string charge_id = co_await ctx.step("charge-card", [&] {
    return (*g_charge)(charge_request{order, cents}, ctx.idempotency_key());
  });
  co_await ctx.sleep_for(24h);
  (*g_email)("receipt for " + order + ": " + charge_id);  // the bug
  co_return reservation + "/" + charge_id;
}

/// Planted bug 2: the charge is made without the idempotency key.
asio::awaitable<std::string> order_no_key(context& ctx, std::string order, int cents) {
  const std::string reservation = co_await ctx.step("reserve", [&] { return "r-" + order; });
  const std::string charge_id = co_await ctx.step("charge-card", [&] {
    return (*g_charge)(charge_request{order, cents});  // the bug
  });
  co_await ctx.sleep_for(24h);
  co_await ctx.step("email", [&](const step_info& i) {
    (*g_email)("receipt for " + order + ": " + charge_id, i.idempotency_key);
  });
  co_return reservation + "/" + charge_id;
}

/// A key of its own per attempt (a fresh UUID in the request, say): as bad as none.
asio::awaitable<std::string> order_key_per_attempt(context& ctx, std::string order, int cents) {
  const std::string charge_id = co_await ctx.step(
      "charge-card",
      [&](const step_info& i) {
        return (*g_charge)(charge_request{order, cents}, order + "#" + std::to_string(i.attempt));
      },
      retry{.max_attempts = 3, .initial = 1s});
  co_return charge_id;
}

/// Planted bug 2 in a step that awaits (an asynchronous client): the same bug.
asio::awaitable<std::string> order_no_key_async(context& ctx, std::string order, int cents) {
  const std::string charge_id =
      co_await ctx.step("charge-card", [&]() -> asio::awaitable<std::string> {
        co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);  // yields
        co_return (*g_charge)(charge_request{order, cents});                           // the bug
      });
  co_return charge_id;
}

/// Two charges in one step under the step's one key: the second never happens.
asio::awaitable<std::string> order_key_reused(context& ctx, std::string order, int cents) {
  const std::string ids = co_await ctx.step("charge-cards", [&] {
    const std::string key = ctx.idempotency_key();
    return (*g_charge)(charge_request{order, cents}, key) + "+" +
           (*g_charge)(charge_request{order + "-gift", 500}, key);
  });
  co_return ids;
}

/// Two steps that await, side by side, each calling without a key once both are under way.
asio::awaitable<std::string> order_two_at_once(context& ctx, std::string order, int cents) {
  auto one = ctx.step("card", [&]() -> asio::awaitable<std::string> {
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    co_return (*g_charge)(charge_request{order, cents});
  });
  auto two = ctx.step("gift", [&]() -> asio::awaitable<std::string> {
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    co_return (*g_charge)(charge_request{order + "-gift", 500});
  });
  auto [a, b] = co_await ctx.all(std::move(one), std::move(two));
  co_return a + "+" + b;
}

/// The payment API's fake: a new charge id per call that acts, as a real API makes one.
std::string new_charge_id(const charge_request&, const dt::service_call& c) {
  return "ch_" + std::to_string(c.number);
}

/// Sets the globals for one test case.
struct fakes {
  dt::service<charge_request, std::string> charge;
  dt::service<std::string> email;
  explicit fakes(dt::harness& h) : charge(h, "charge", &new_charge_id), email(h, "email") {
    g_charge = &charge;
    g_email = &email;
  }
  fakes(const fakes&) = delete;
  fakes& operator=(const fakes&) = delete;
  ~fakes() {
    g_charge = nullptr;
    g_email = nullptr;
  }
};

/// The options of a check whose report the test reads (it does not throw); with
/// `compare_output` false only the statuses are compared (the fakes make new ids per call).
dt::crash_options reporting(std::string id, bool compare_output = true) {
  dt::crash_options o;
  o.id = std::move(id);
  o.throw_on_failure = false;
  o.compare_output = compare_output;
  return o;
}

std::string failed_cases(const dt::crash_report& r) {
  std::string out;
  for (const auto& c : r.cases)
    if (!c.problem.empty()) out += c.problem + "\n";
  return out;
}

TEST_CASE("kit effects: the correct order passes, charged and mailed once per case",
          "[testing][effects]") {
  dt::harness h;
  h.register_workflow("order", order_ok);
  fakes f(h);
  dt::crash_options o;
  o.id = "order-1";
  int cases = 0;
  o.after_case = [&](const dt::harness& x, const dt::crash_case& c) {
    // Fresh fakes per case: whatever the crash, one charge and one receipt acted.
    if (f.charge.effects() != 1 || f.email.effects() != 1)
      throw std::runtime_error("charged " + std::to_string(f.charge.effects()) + " times, " +
                               std::to_string(f.email.effects()) + " receipts");
    if (c.seq >= 0) ++cases;
    if (x.status("order-1") != "succeeded") throw std::runtime_error("not succeeded");
  };
  const dt::crash_report r = dt::check_crashes(h, o, "order", std::string("o-1"), 1250);
  const std::string s = r.summary();
  INFO(s);
  CHECK(r.ok());
  CHECK(cases == int(r.cases.size()));
  // The uninterrupted run's charge id: the fake's first call, in every case.
  CHECK(r.outcome == "\"r-o-1/ch_1\"");
  CHECK(r.services == std::vector<std::string>{"charge", "email"});
  CHECK_THAT(s, Catch::Contains("0 failed"));
  CHECK_THAT(s, Catch::Contains("service 'charge' was called 2 times with key 'order-1:1' (lost "
                                "reply at step 1 'charge-card' (step) of 'order-1'): the repeats "
                                "got the first reply"));
  CHECK_THAT(s, !Catch::Contains("outside any step"));
  CHECK(r.notes.empty());
  // No step retries: no backoff case.
  CHECK(std::none_of(r.cases.begin(), r.cases.end(), [](const dt::crash_case& c) {
    return c.how == dt::interruption::in_backoff;
  }));
  // The last case's calls stay for the test to read, with their step and process.
  REQUIRE_FALSE(f.charge.calls().empty());
  for (const dt::service_call& c : f.charge.calls()) {
    CHECK(c.seq == 1);
    CHECK(c.step == "charge-card");
    CHECK(c.workflow_id == "order-1");
    CHECK(c.key == std::optional<std::string>("order-1:1"));
  }
  CHECK(f.charge.requests().front().cents == 1250);
}

TEST_CASE("kit effects: a receipt sent outside any step is reported in every run",
          "[testing][effects]") {
  dt::harness h;
  h.register_workflow("order", order_email_outside);
  fakes f(h);
  dt::crash_options o = reporting("order-2");
  const dt::crash_report r = dt::check_crashes(h, o, "order", std::string("o-2"), 990);
  INFO(r.summary());
  CHECK_FALSE(r.ok());
  // A process that dies after the receipt went out, before the workflow's end is recorded:
  // the replay sends it again.
  const auto end = std::find_if(r.cases.begin(), r.cases.end(), [](const dt::crash_case& c) {
    return c.how == dt::interruption::before_end;
  });
  REQUIRE(end != r.cases.end());
  CHECK_FALSE(end->problem.empty());
  const std::string problems = failed_cases(r);
  CHECK_THAT(problems, Catch::Contains("service 'email' was called outside any step (twice here, "
                                       "once in the uninterrupted run): it runs again on every "
                                       "replay; move it into a step"));
  // The call is recorded as outside any step.
  bool outside = false;
  for (const dt::service_call& c : f.email.calls()) outside = outside || c.outside_step();
  CHECK(outside);
  o.throw_on_failure = true;
  CHECK_THROWS_WITH(dt::check_crashes(h, o, "order", std::string("o-2"), 990),
                    Catch::Contains("outside any step"));
}

TEST_CASE("kit effects: a charge without the idempotency key is reported, output compared or not",
          "[testing][effects]") {
  for (const bool compare : {false, true}) {
    dt::harness h;
    h.register_workflow("order", order_no_key);
    fakes f(h);
    const dt::crash_options o = reporting("order-3", compare);
    const dt::crash_report r = dt::check_crashes(h, o, "order", std::string("o-3"), 4200);
    INFO("compare_output " << compare << "\n" << r.summary());
    CHECK_FALSE(r.ok());
    const auto lost = std::find_if(r.cases.begin(), r.cases.end(), [](const dt::crash_case& c) {
      return c.how == dt::interruption::lost_reply && c.step == "charge-card";
    });
    REQUIRE(lost != r.cases.end());
    // The cause comes first, in words; a differing result (when compared) after it.
    CHECK_THAT(lost->problem,
               Catch::StartsWith("service 'charge' was called twice for step 1 'charge-card' "
                                 "with no idempotency key: a lost reply bills twice; pass "
                                 "ctx.idempotency_key()"));
    if (compare) CHECK_THAT(lost->problem, Catch::Contains("where the uninterrupted run ended"));
    // Only the lost reply of the charge repeats it: the other cases pass.
    for (const auto& c : r.cases)
      if (!(c.how == dt::interruption::lost_reply && c.step == "charge-card"))
        CHECK(c.problem.empty());
  }
}

TEST_CASE("kit effects: a charge without its key in a step that awaits is reported too",
          "[testing][effects]") {
  dt::harness h;
  h.register_workflow("order", order_no_key_async);
  fakes f(h);
  dt::crash_options o = reporting("order-6", false);
  const dt::crash_report r = dt::check_crashes(h, o, "order", std::string("o-6"), 300);
  INFO(r.summary());
  CHECK_THAT(failed_cases(r), Catch::Contains("service 'charge' was called twice for step 0 "
                                              "'charge-card' with no idempotency key"));
  CHECK(r.notes.empty());
}

TEST_CASE("kit effects: one key for two different requests is reported in the first run",
          "[testing][effects]") {
  dt::harness h;
  h.register_workflow("order", order_key_reused);
  fakes f(h);
  CHECK_THROWS_WITH(dt::check_crashes(h, "order", std::string("o-7"), 800),
                    Catch::Contains("the uninterrupted run: service 'charge' was called with key "
                                    "'order-under-test:0' for step 0 'charge-cards' with another "
                                    "request than the first call with that key"));
}

TEST_CASE("kit effects: calls the kit cannot place are left out and said so, not blamed",
          "[testing][effects]") {
  dt::harness h;
  h.register_workflow("order", order_two_at_once);
  fakes f(h);
  dt::crash_options o = reporting("order-8", false);
  const dt::crash_report r = dt::check_crashes(h, o, "order", std::string("o-8"), 300);
  INFO(r.summary());
  // Both calls were made while both steps were under way: neither is called outside a step or
  // a repeat of the other, and the report says what it could not check.
  CHECK_THAT(failed_cases(r), !Catch::Contains("outside any step"));
  REQUIRE(r.notes.size() == 1);
  CHECK_THAT(r.notes[0], Catch::Contains("service 'charge': up to 2 calls in one case carried "
                                         "no key while several steps that await were under way"));
  CHECK_THAT(r.summary(), Catch::Contains(r.notes[0]));
}

TEST_CASE("kit effects: a service idempotent by nature may be called again without a key",
          "[testing][effects]") {
  dt::harness h;
  h.register_workflow("order", order_no_key);
  // A PUT of the whole order: the same answer however often it is made.
  dt::service<charge_request, std::string> put(
      h, "charge", [](const charge_request& r) { return "put-" + r.order; });
  dt::service<std::string> email(h, "email");
  g_charge = &put;
  g_email = &email;
  put.idempotent(true);
  dt::crash_options o;
  o.id = "order-9";
  const dt::crash_report r = dt::check_crashes(h, o, "order", std::string("o-9"), 1);
  INFO(r.summary());
  CHECK(r.ok());
  put.idempotent(false);  // the same workflow, the service no longer declared idempotent
  o.throw_on_failure = false;
  const dt::crash_report again = dt::check_crashes(h, o, "order", std::string("o-9"), 1);
  CHECK_FALSE(again.ok());
  g_charge = nullptr;
  g_email = nullptr;
}

// A workflow that picks its step from state its own end changes (a cache filled on first use):
// every run and its replay within a case agree; a second replay after the end does not.
bool g_warm = false;
asio::awaitable<int> warms_up(context& ctx) {
  const std::string name = g_warm ? "from-cache" : "fill-cache";
  const int v = co_await ctx.step(name, [] { return 1; });
  g_warm = true;
  co_return v;
}

TEST_CASE("kit effects: a second replay of each journal, on a moved clock, takes the same path",
          "[testing][effects]") {
  dt::harness h;
  h.register_workflow("warm", warms_up);
  dt::crash_options o;
  o.setup = [](dt::harness&) { g_warm = false; };
  o.throw_on_failure = false;
  const dt::crash_report r = dt::check_crashes(h, o, "warm");
  INFO(r.summary());
  REQUIRE_FALSE(r.cases.empty());
  for (const auto& c : r.cases) {
    // The end lost: the crash's own replay runs after the cache was filled. Else the run and
    // its replay agree, and only the second replay tells.
    if (c.how != dt::interruption::before_end)
      CHECK_THAT(c.problem,
                 Catch::StartsWith("a second replay of the journal this case wrote, on a clock "
                                   "moved by a day and an hour, took another path"));
    CHECK_THAT(c.problem, Catch::Contains("step 0 is journaled as 'fill-cache' but its replay "
                                          "asks for 'from-cache'"));
  }
  // The same workflow without the state: it passes, second replays included.
  h.register_workflow("steady", [](context& ctx) -> asio::awaitable<int> {
    co_return co_await ctx.step("fill-cache", [] { return 1; });
  });
  CHECK(dt::check_crashes(h, "steady").ok());
}

TEST_CASE("kit effects: a key made anew for each attempt is reported as different keys",
          "[testing][effects]") {
  dt::harness h;
  h.register_workflow("pay", order_key_per_attempt);
  fakes f(h);
  dt::crash_options o = reporting("pay-1", false);
  const dt::crash_report r = dt::check_crashes(h, o, "pay", std::string("o-4"), 100);
  INFO(r.summary());
  const auto backoff = std::find_if(r.cases.begin(), r.cases.end(), [](const dt::crash_case& c) {
    return c.how == dt::interruption::in_backoff;
  });
  REQUIRE(backoff != r.cases.end());
  CHECK_THAT(backoff->problem,
             Catch::Contains("service 'charge' was called twice for step 0 'charge-card' with "
                             "different idempotency keys ('o-4#1', 'o-4#2'): a lost reply bills "
                             "twice"));
}

TEST_CASE("kit effects: fakes are fresh per case unless kept, and after_case can fail a case",
          "[testing][effects]") {
  dt::harness h;
  h.register_workflow("order", order_ok);
  fakes f(h);
  dt::crash_options o = reporting("order-5");
  // Kept across cases, the fake answers every case's charge from the first one's reply, and
  // counts every call since.
  f.charge.keep_across_cases(true);
  std::vector<std::size_t> seen;
  o.after_case = [&](const dt::harness&, const dt::crash_case& c) {
    seen.push_back(f.charge.calls().size());
    if (c.how == dt::interruption::after_row && c.step == "email")
      throw std::runtime_error("the test's own rule: no receipt after " + c.step);
  };
  const dt::crash_report r = dt::check_crashes(h, o, "order", std::string("o-5"), 7);
  INFO(r.summary());
  REQUIRE(seen.size() == r.cases.size() + 1);
  for (std::size_t i = 1; i < seen.size(); ++i) CHECK(seen[i] > seen[i - 1]);
  CHECK(f.charge.effects() == 1);  // one charge acted over all the cases
  int failed = 0;
  for (const auto& c : r.cases)
    if (!c.problem.empty()) {
      ++failed;
      CHECK(c.problem == "after_case: the test's own rule: no receipt after email");
    }
  CHECK(failed == 1);
}

TEST_CASE("kit effects: a service's bad names are refused", "[testing][effects]") {
  dt::harness h;
  dt::service<std::string> mail(h, "mail");
  CHECK_THROWS_WITH(dt::service<std::string>(h, "mail"), Catch::Contains("exists already"));
  CHECK_THROWS_WITH(dt::service<std::string>(h, ""), Catch::Contains("must not be empty"));
  // Outside of any run, a call is recorded as outside any step; a repeated key acts once.
  mail("a", "k");
  mail("b", "k");
  REQUIRE(mail.calls().size() == 2);
  CHECK(mail.calls()[1].repeated);
  CHECK(mail.effects() == 1);
  CHECK(mail.calls_with_key("k") == 2);
}

}  // namespace kit_effects
