// Trace context (issue 40, first slice): W3C traceparent and tracestate checked where they enter,
// stored with the workflow by start() and enqueue() (given in their options, or by
// engine_options::current_trace), inherited by children with the parent's step as parent span,
// kept by a fork, shown by status(); a context that is not valid is refused before anything is
// written, or (the hook's) dropped with a warning.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include "durable/trace.hpp"
#include "support/workflows.hpp"

// In a namespace of its own: the files of one executable compile as one translation unit in
// scripts/test (docs/development.md, "Unity builds").
namespace trace_cases {

using namespace durable;
using test::q;

namespace {

constexpr const char* given_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr const char* hooks_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

asio::awaitable<int> leaf_wf(context& ctx, int n) {
  co_return co_await ctx.step("double", [n]() -> asio::awaitable<int> { co_return 2 * n; });
}

/// One step, then a child (step 1 starts it, step 2 awaits it).
asio::awaitable<int> parent_wf(context& ctx, int n) {
  const int m = co_await ctx.step("add", [n]() -> asio::awaitable<int> { co_return n + 1; });
  auto child = co_await ctx.start_child("leaf", m);
  co_return co_await child.result<int>();
}

void add_workflows(engine& eng) {
  eng.register_workflow("leaf", &leaf_wf);
  eng.register_workflow("parent", &parent_wf);
}

/// The stored trace context of workflow `id`: "traceparent|tracestate" ("" for NULL).
asio::awaitable<std::string> stored(engine& eng, std::string id) {
  co_return co_await test::scalar(eng,
                                  "SELECT coalesce(traceparent, '') || '|' || "
                                  "coalesce(tracestate, '') FROM " +
                                      q(eng.schema_name()) + ".workflows WHERE id = $1",
                                  id);
}

/// What a call threw: its message, or "" when it did not throw invalid_text.
template <class Call>
asio::awaitable<std::string> refused(Call call) {
  try {
    co_await call();
  } catch (const invalid_text& e) {
    co_return std::string(e.field()) + ": " + e.what();
  }
  co_return "";
}

}  // namespace

TEST_CASE("trace context: traceparent and tracestate are checked as W3C trace context", "[trace]") {
  const auto ok = trace_context::parse(given_parent, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  REQUIRE(ok);
  CHECK(ok->trace_id() == "4bf92f3577b34da6a3ce929d0e0e4736");
  CHECK(ok->parent_id() == "00f067aa0ba902b7");
  CHECK(ok->sampled());
  CHECK_FALSE(trace_context::parse(hooks_parent)->sampled());
  CHECK(trace_context::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0b")->sampled());
  // A later version keeps its first four fields, stored as version 00 (how it propagates).
  const auto later =
      trace_context::parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-next");
  REQUIRE(later);
  CHECK(later->traceparent == given_parent);
  CHECK(trace_context::parse(given_parent, " a=1 ,, b@c=x y ,"));  // blanks and empty entries

  const auto why = [](std::string_view tp, std::string_view ts = {}) {
    std::string w;
    CHECK_FALSE(trace_context::parse(tp, ts, &w));
    return w;
  };
  const std::string valid = given_parent;
  CHECK(why("00-4bf9").find("shorter than 55") != std::string::npos);
  CHECK(why("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").find("lowercase") !=
        std::string::npos);
  CHECK(why("ff" + valid.substr(2)).find("version ff") != std::string::npos);
  CHECK(why(valid + "-x").find("exactly 55") != std::string::npos);
  CHECK(why("cc" + valid.substr(2) + "x").find("followed by '-'") != std::string::npos);
  CHECK(why("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").find("separated") !=
        std::string::npos);
  CHECK(why("00-00000000000000000000000000000000-00f067aa0ba902b7-01").find("trace id is all") !=
        std::string::npos);
  CHECK(why("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01").find("parent id is all") !=
        std::string::npos);
  CHECK(why("cc" + valid.substr(2) + std::string("-\0x", 3)).find("not printable") !=
        std::string::npos);
  CHECK(why(valid, "Congo=1").find("does not start with a-z") != std::string::npos);
  CHECK(why(valid, "con go=1").find("a-z, 0-9") != std::string::npos);
  CHECK(why(valid, "congo").find("not key=value") != std::string::npos);
  CHECK(why(valid, "congo=a,b").find("not key=value") != std::string::npos);
  CHECK(why(valid, std::string("congo=a\0b", 9)).find("not printable ASCII") != std::string::npos);
  CHECK(why(valid, "congo=caf\xc3\xa9").find("not printable ASCII") != std::string::npos);
  std::string many;
  for (int i = 0; i < 33; ++i) many += "k" + std::to_string(i) + "=v,";
  CHECK(why(valid, many).find("more than 32 entries") != std::string::npos);
  CHECK(why(valid, "k=" + std::string(600, 'v')).find("more than 512") != std::string::npos);
  // What is shown of a bad traceparent is printable and bounded.
  const std::string shown = why(std::string(200, '\x01'));
  CHECK(shown.find('\x01') == std::string::npos);
  CHECK(shown.size() < 200);

  // A step's span id depends on the workflow, the generation and the step alone.
  const std::string a = detail::step_span_id("w-1", 0, 3);
  CHECK(a.size() == 16);
  CHECK(detail::lower_hex(a));
  CHECK(a == detail::step_span_id("w-1", 0, 3));
  CHECK(a != detail::step_span_id("w-1", 0, 4));
  CHECK(a != detail::step_span_id("w-1", 1, 3));
  CHECK(a != detail::step_span_id("w-2", 0, 3));
}

TEST_CASE("a workflow keeps its start's trace context, and its children inherit the trace",
          "[trace]") {
  const auto schema = test::fresh_schema("trace");
  std::vector<std::string> warnings;
  int hook_calls = 0;
  std::optional<trace_context> from_hook;  // what current_trace returns now
  bool hook_throws = false;
  auto o = test::options(schema);
  o.current_trace = [&]() -> std::optional<trace_context> {
    ++hook_calls;
    if (hook_throws) throw std::runtime_error("no span here");
    return from_hook;
  };
  o.on_event = [&](const event& e) {
    if (e.message.find("current_trace") != std::string_view::npos) warnings.emplace_back(e.message);
  };
  test::with_open_engine(o, add_workflows, [&](engine& eng) -> asio::awaitable<void> {
    // Given in the options: stored as given (a later version as version 00), and status() says it.
    start_options so{.timeout = {}, .traceparent = given_parent, .tracestate = "rojo=1"};
    auto h = co_await eng.start(so, "parent", "w-given", 20);
    const int out = co_await h.result<int>();
    CHECK(out == 42);
    const workflow_status st = co_await h.status();
    CHECK(st.traceparent == std::optional<std::string>(given_parent));
    {
      const std::string got = co_await stored(eng, "w-given");
      CHECK(got == std::string(given_parent) + "|rojo=1");
    }
    CHECK(hook_calls == 0);  // options that carry one never ask the hook
    // The child: the parent's trace id and flags, and as parent span the span id of the
    // parent's step 1, which started it; the parent's tracestate.
    const std::string child_id = "w-given/1";
    const std::string child = co_await stored(eng, child_id);
    CHECK(child == "00-4bf92f3577b34da6a3ce929d0e0e4736-" + detail::step_span_id("w-given", 0, 1) +
                       "-01|rojo=1");
    // A fork of it stays in its trace.
    auto forked = co_await eng.fork("w-given", 1, "w-forked");
    (void)co_await forked.result<int>();
    {
      const std::string got = co_await stored(eng, "w-forked");
      CHECK(got == std::string(given_parent) + "|rojo=1");
    }

    // None given, none from the hook: none stored, and the child has none either.
    auto plain = co_await eng.start("parent", "w-plain", 1);
    (void)co_await plain.result<int>();
    {
      const std::string got = co_await stored(eng, "w-plain");
      CHECK(got == "|");
    }
    {
      const std::string got = co_await stored(eng, "w-plain/1");
      CHECK(got == "|");
    }
    const workflow_status plain_status = co_await plain.status();
    CHECK(plain_status.traceparent == std::nullopt);
    CHECK(hook_calls == 1);

    // From the hook, when the options carry none: start and enqueue alike.
    from_hook = trace_context{hooks_parent, ""};
    auto hooked = co_await eng.start("leaf", "w-hooked", 1);
    (void)co_await hooked.result<int>();
    {
      const std::string got = co_await stored(eng, "w-hooked");
      CHECK(got == std::string(hooks_parent) + "|");
    }
    enqueue_options eo{.queue = "default"};
    auto queued = co_await eng.enqueue(eo, "leaf", "w-queued", 2);
    (void)co_await queued.result<int>();
    {
      const std::string got = co_await stored(eng, "w-queued");
      CHECK(got == std::string(hooks_parent) + "|");
    }
    eo.traceparent = given_parent;  // the options' wins
    auto queued2 = co_await eng.enqueue(eo, "leaf", "w-queued-2", 2);
    (void)co_await queued2.result<int>();
    {
      const std::string got = co_await stored(eng, "w-queued-2");
      CHECK(got == std::string(given_parent) + "|");
    }
    // The statement for the application's own transaction carries it too.
    {
      auto stmt = eng.enqueue_statement(eo, "leaf", "w-statement", 3);
      auto c = co_await eng.pool().acquire();
      (void)co_await c->run(std::move(stmt));
    }
    {
      const std::string got = co_await stored(eng, "w-statement");
      CHECK(got == std::string(given_parent) + "|");
    }
    CHECK(warnings.empty());

    // A hook's context that is not valid, or a hook that throws, costs the trace, not the start.
    from_hook = trace_context{"00-nonsense", ""};
    auto bad = co_await eng.start("leaf", "w-bad-hook", 1);
    (void)co_await bad.result<int>();
    {
      const std::string got = co_await stored(eng, "w-bad-hook");
      CHECK(got == "|");
    }
    hook_throws = true;
    auto threw = co_await eng.start("leaf", "w-hook-threw", 1);
    (void)co_await threw.result<int>();
    {
      const std::string got = co_await stored(eng, "w-hook-threw");
      CHECK(got == "|");
    }
    co_await test::sleep_ms(1);  // the warnings are posted to the engine's executor
  });
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[0].find("start('leaf', 'w-bad-hook'): engine_options::current_trace gave a "
                         "context that is not valid (traceparent '00-nonsense' is not W3C trace "
                         "context: it is shorter than 55 characters); started without one") == 0);
  CHECK(warnings[1].find("current_trace threw (no span here)") != std::string::npos);
}

TEST_CASE("a traceparent or tracestate that is not valid is refused before anything is written",
          "[trace]") {
  const auto schema = test::fresh_schema("trace_bad");
  test::with_open_engine(
      test::options(schema), add_workflows, [&](engine& eng) -> asio::awaitable<void> {
        const std::string upper = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
        const std::string start_err = co_await refused([&]() -> asio::awaitable<void> {
          start_options so{.timeout = {}, .traceparent = upper, .tracestate = {}};
          (void)co_await eng.start(so, "leaf", "w-refused", 1);
        });
        CHECK(start_err.find("traceparent: start('leaf', 'w-refused'): traceparent '" + upper +
                             "' is not W3C trace context: its fields must be lowercase "
                             "hexadecimal; nothing was done") == 0);
        const std::string enqueue_err = co_await refused([&]() -> asio::awaitable<void> {
          enqueue_options eo{.queue = "default"};
          eo.traceparent = given_parent;
          eo.tracestate = "a=1,Bad=2";
          (void)co_await eng.enqueue(eo, "leaf", "w-refused-2", 1);
        });
        CHECK(enqueue_err.find(
                  "traceparent: enqueue('leaf', 'w-refused-2'): tracestate key 'Bad'") == 0);
        const std::string state_alone = co_await refused([&]() -> asio::awaitable<void> {
          start_options so{.timeout = {}, .traceparent = {}, .tracestate = "a=1"};
          (void)co_await eng.start(so, "leaf", "w-refused-3", 1);
        });
        CHECK(state_alone.find("tracestate: start('leaf', 'w-refused-3'): a tracestate without a "
                               "traceparent") == 0);
        enqueue_options eo{.queue = "default"};
        eo.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7";
        CHECK_THROWS_AS(eng.enqueue_statement(eo, "leaf", "w-refused-4", 1), invalid_text);
        const long rows =
            co_await test::scalar<long>(eng, "SELECT count(*) FROM " + q(schema) + ".workflows");
        CHECK(rows == 0);
        // The table refuses what the engine would not write (a hand-written INSERT, an import).
        std::string refused_insert;
        try {
          (void)co_await test::scalar(
              eng,
              "INSERT INTO " + q(schema) +
                  ".workflows (id, name, status, inputs, traceparent) VALUES "
                  "('w-sql', 'leaf', 'pending', '[1]', $1) RETURNING id",
              upper);
        } catch (const pg::error& e) {
          refused_insert = e.what();
        }
        CHECK(refused_insert.find("workflows_traceparent_check") != std::string::npos);
      });
}

}  // namespace trace_cases
