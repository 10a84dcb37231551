// The code of docs/testing.md, as a reader copies it: the guide's first test and its
// crash-at-every-step test, so that the guide cannot drift from the kit. No database.
#include <catch2/catch.hpp>
#include <durable/testing.hpp>

#include <string>

namespace guide {

namespace dt = durable::testing;
using namespace std::chrono_literals;

// The service the workflow calls, behind an interface: a real client in the program, a fake
// that counts calls in a test.
struct labeller {
  virtual ~labeller() = default;
  virtual asio::awaitable<std::string> label(std::string key, std::string text) = 0;
};
inline labeller* service = nullptr;

asio::awaitable<std::string> classify(durable::context& ctx, std::string doc) {
  const std::string text = co_await ctx.step("read", [&] { return "Invoice " + doc; });
  durable::retry policy{.max_attempts = 5, .initial = 200ms};
  const std::string label = co_await ctx.step(
      "label",
      [&](const durable::step_info& i) -> asio::awaitable<std::string> {
        co_return co_await service->label(i.idempotency_key, text);
      },
      policy);
  co_await ctx.sleep_for(24h);  // virtual: passes at once in the harness
  co_return label;
}

// The fake: a testing::service records every call (its idempotency key, the step it ran in,
// the process) for the kit to check, and answers a key it saw before from its first reply, as
// a real idempotent API does.
struct fake_labeller final : labeller {
  dt::service<std::string, std::string> calls;
  explicit fake_labeller(dt::harness& h)
      : calls(h, "labeller", [](const std::string& text) {
          return std::string(text.starts_with("Invoice") ? "invoice" : "other");
        }) {}
  asio::awaitable<std::string> label(std::string key, std::string text) override {
    co_return calls(text, key);
  }
};

TEST_CASE("guide: classify labels an invoice", "[testing][guide]") {
  dt::harness h;
  fake_labeller fake(h);
  service = &fake;
  h.register_workflow("classify", classify);
  h.start("classify", "doc-42", std::string("42"));
  h.run();
  CHECK(h.result<std::string>("doc-42") == "invoice");
  CHECK(h.journal("doc-42").size() == 3);  // read, label, sleep
  CHECK(fake.calls.calls_with_key("doc-42:1") == 1);
  service = nullptr;
}

TEST_CASE("guide: classify survives a crash at every step", "[testing][guide]") {
  dt::harness h;
  fake_labeller fake(h);
  service = &fake;
  h.register_workflow("classify", classify);
  dt::crash_options o;
  o.id = "doc-42";
  const dt::crash_report r = dt::check_crashes(h, o, "classify", std::string("42"));
  INFO(r.summary());
  CHECK(r.ok());  // check_crashes has thrown dt::check_failed already if a case failed
  // (Not in the guide: its report reads as the guide shows it under "Reading the report".)
  const std::string shown = r.summary();
  CHECK_THAT(shown,
             Catch::Contains("check_crashes('classify' as 'doc-42'): 8 cases, 8 passed, 0 failed\n"
                             "uninterrupted run: succeeded \"invoice\"\n"));
  CHECK_THAT(shown, Catch::Contains("  doc-42:1                          'label'                 "
                                    "2  (lost reply at step 1 'label' (step) of 'doc-42')\n"));
  CHECK_THAT(shown, Catch::Contains("external calls (services 'labeller'):\n  service 'labeller' "
                                    "was called 2 times with key 'doc-42:1' (lost reply at step 1 "
                                    "'label' (step) of 'doc-42'): the repeats got the first "
                                    "reply; the real service must deduplicate on that key as the "
                                    "fake does\n"));
  CHECK_THAT(shown, !Catch::Contains("failed cases"));
  service = nullptr;
}

}  // namespace guide
