// Trace context (issue 40, first slice): W3C traceparent and tracestate checked where they enter,
// stored with the workflow by start() and enqueue() (given in their options, or by
// engine_options::current_trace), inherited by children with the parent's step as parent span,
// kept by a fork, shown by status(); a context that is not valid is refused before anything is
// written, or (the hook's) dropped with a warning.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "durable/trace.hpp"
#include "support/processes.hpp"
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

int charge_calls = 0;

/// A step that fails once, a child, a message: the span tree's workflow.
asio::awaitable<int> tree_wf(context& ctx, int n) {
  const retry twice{.max_attempts = 2, .initial = std::chrono::milliseconds(5)};
  const int charged = co_await ctx.step(
      "charge",
      [n]() -> int {
        if (++charge_calls == 1) throw std::runtime_error("card declined");
        return n;
      },
      twice);
  auto child = co_await ctx.start_child("leaf", charged);
  const int doubled = co_await child.result<int>();
  const auto go = co_await ctx.recv<int>("go");
  co_return doubled + go.value_or(0);
}

/// What a span said, copied (the hook's views live only during its call).
struct seen_span {
  span_kind kind;
  bool ended;
  std::string trace, id, parent, workflow, name, step_kind, error;
  int step, attempt;
  std::int64_t epoch;
  bool failed, sampled;
};

seen_span copy_of(const span& sp) {
  return {sp.kind,
          sp.ended,
          std::string(sp.trace_id),
          std::string(sp.span_id),
          std::string(sp.parent_id),
          std::string(sp.workflow_id),
          std::string(sp.name),
          std::string(sp.step_kind),
          std::string(sp.error),
          sp.step,
          sp.attempt,
          sp.epoch,
          sp.failed,
          sp.sampled};
}

/// A step, a wait for a message (the run stays loaded: unload_after is long), another step.
asio::awaitable<int> kill_wf(context& ctx, int n) {
  const int a = co_await ctx.step("before", [n] { return n + 1; });
  const auto go = co_await ctx.recv<int>("go");
  co_return co_await ctx.step("after", [a, go] { return a + go.value_or(0); });
}

/// An executor in a process of its own that writes every span it is told to `path`, a line
/// each ("kind ended trace id parent workflow name step_kind epoch failed"), flushed at once.
/// The first one starts w-kill and then waits; the second sends it "go" and waits for its
/// result (exit 0).
pid_t spawn_traced(const std::string& schema, const std::string& executor, const std::string& path,
                   bool first) {
  return test::spawn_process("executor " + executor, [&] {
    int code = 1;
    std::FILE* out = std::fopen(path.c_str(), "w");
    if (!out) throw std::runtime_error("cannot write " + path);
    test::run([&]() -> asio::awaitable<void> {
      auto o = test::options(schema, executor);
      o.lease_timeout = std::chrono::milliseconds(1000);
      o.heartbeat_interval = std::chrono::milliseconds(100);
      o.poll_interval = std::chrono::milliseconds(50);
      o.unload_after = std::chrono::hours(1);
      o.on_span = [out](const span& sp) {
        std::fprintf(out, "%s %d %.*s %.*s %.*s %.*s %.*s %.*s %lld %d\n",
                     std::string(to_string(sp.kind)).c_str(), sp.ended ? 1 : 0,
                     int(sp.trace_id.size()), sp.trace_id.data(), int(sp.span_id.size()),
                     sp.span_id.data(), sp.parent_id.empty() ? 1 : int(sp.parent_id.size()),
                     sp.parent_id.empty() ? "-" : sp.parent_id.data(), int(sp.workflow_id.size()),
                     sp.workflow_id.data(), int(sp.name.size()), sp.name.data(),
                     sp.step_kind.empty() ? 1 : int(sp.step_kind.size()),
                     sp.step_kind.empty() ? "-" : sp.step_kind.data(),
                     static_cast<long long>(sp.epoch), sp.failed ? 1 : 0);
        std::fflush(out);
      };
      engine eng(co_await asio::this_coro::executor, o);
      eng.register_workflow("kill", &kill_wf);
      (void)co_await eng.open();
      if (first) {
        const start_options so{.timeout = {}, .traceparent = given_parent, .tracestate = {}};
        (void)co_await eng.start(so, "kill", "w-kill", 1);
        co_await test::sleep_ms(600000);
      } else {
        (void)co_await eng.send("w-kill", "go", 40);
        const workflow_handle handle = eng.handle("w-kill");
        const int out_value = co_await handle.result<int>();
        co_await test::wait_idle(eng);  // its run has ended, and so has the run's span
        code = out_value == 42 ? 0 : 2;
      }
    }());
    return code;
  });
}

/// The spans a process wrote (spawn_traced), as fields.
struct span_line {
  std::string kind;
  int ended = 0;
  std::string trace, id, parent, workflow, name, step_kind;
  long long epoch = 0;
  int failed = 0;
};

std::vector<span_line> read_spans(const std::string& path) {
  std::vector<span_line> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    std::istringstream f(text);
    span_line l;
    f >> l.kind >> l.ended >> l.trace >> l.id >> l.parent >> l.workflow >> l.name >> l.step_kind >>
        l.epoch >> l.failed;
    lines.push_back(l);
  }
  return lines;
}

/// Every other kind of span, over two generations and an unload: a short sleep, an event, a send
/// to itself and its receipt, a get_event, a transaction; generation 0 continues as new,
/// generation 1 sleeps long enough to be unloaded and is finished by a later run.
asio::awaitable<int> tour_wf(context& ctx, int round) {
  co_await ctx.sleep_for(std::chrono::milliseconds(5));
  co_await ctx.set_event("stage", round);
  const std::string self = ctx.workflow_id();
  co_await ctx.send(self, "self", round + 10);
  const auto got = co_await ctx.recv<int>("self", std::chrono::seconds(30));
  const auto stage = co_await ctx.get_event<int>(self, "stage", std::chrono::seconds(30));
  co_await ctx.transaction("tx", [](pg::transaction&) -> asio::awaitable<void> { co_return; });
  if (round == 0) co_return co_await ctx.continue_as_new<int>(1);
  co_await ctx.sleep_for(std::chrono::milliseconds(1200));  // unloaded: unload_after is 1 s
  co_return got.value_or(0) + stage.value_or(0);
}

void add_workflows(engine& eng) {
  eng.register_workflow("tour", &tour_wf);
  eng.register_workflow("tree", &tree_wf);
  eng.register_workflow("leaf", &leaf_wf);
  eng.register_workflow("parent", &parent_wf);
}

/// The stored trace context of workflow `id`: "traceparent|tracestate" ("" for NULL). A plain
/// function: its arguments are bound before the coroutine starts (GCC 12).
asio::awaitable<std::string> stored(engine& eng, const std::string& id) {
  return test::scalar(eng,
                      "SELECT coalesce(traceparent, '') || '|' || coalesce(tracestate, '') FROM " +
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
  // ... with only the flags version 00 knows (sampled, random).
  const auto flags =
      trace_context::parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff");
  REQUIRE(flags);
  CHECK(flags->traceparent == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03");
  // A request's headers: a bad tracestate is dropped, a bad traceparent drops all.
  const auto headers = trace_context::from_headers(given_parent, "Bad=1");
  REQUIRE(headers);
  CHECK(headers->traceparent == given_parent);
  CHECK(headers->tracestate.empty());
  CHECK_FALSE(trace_context::from_headers("00-nonsense", "a=1"));
  CHECK(trace_context{"short", ""}.trace_id().empty());            // no throw on a bad one
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
  const std::string a = detail::step_span_id("w-1", 0, 3, 1);
  CHECK(a.size() == 16);
  CHECK(detail::lower_hex(a));
  CHECK(a == detail::step_span_id("w-1", 0, 3, 1));
  CHECK(a != detail::step_span_id("w-1", 0, 4, 1));
  CHECK(a != detail::step_span_id("w-1", 1, 3, 1));
  CHECK(a != detail::step_span_id("w-1", 0, 3, 2));
  CHECK(a != detail::step_span_id("w-2", 0, 3, 1));
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
    if (e.message.find("current_trace") != std::string_view::npos)
      warnings.push_back(std::string(e.workflow_id) + ": " + std::string(e.message));
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
    CHECK(child == "00-4bf92f3577b34da6a3ce929d0e0e4736-" +
                       detail::step_span_id("w-given", 0, 1, 1) + "-01|rojo=1");
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
    // A tracestate of the hook's that is not valid is dropped; its traceparent is kept.
    hook_throws = false;
    from_hook = trace_context{hooks_parent, "Bad=1"};
    auto kept = co_await eng.start("leaf", "w-hook-state", 1);
    (void)co_await kept.result<int>();
    {
      const std::string got = co_await stored(eng, "w-hook-state");
      CHECK(got == std::string(hooks_parent) + "|");
    }
    // Blanks around entries are allowed and tidied away (the table's check takes no tab).
    start_options tabs{.timeout = {}, .traceparent = given_parent, .tracestate = " a=1 ,\tb=2\t,,"};
    auto tidy = co_await eng.start(tabs, "leaf", "w-tabs", 1);
    (void)co_await tidy.result<int>();
    {
      const std::string got = co_await stored(eng, "w-tabs");
      CHECK(got == std::string(given_parent) + "|a=1,b=2");
    }
  });
  // Each was posted to the engine's executor before its start's insert, so it is told by now.
  REQUIRE(warnings.size() == 3);
  CHECK(warnings[0] ==
        "w-bad-hook: start('leaf', 'w-bad-hook'): engine_options::current_trace "
        "gave a context that is not valid (traceparent '00-nonsense' is not W3C "
        "trace context: it is shorter than 55 characters); the workflow has no "
        "trace context");
  CHECK(warnings[1] ==
        "w-hook-threw: start('leaf', 'w-hook-threw'): engine_options::"
        "current_trace threw (no span here); the workflow has no trace context");
  CHECK(warnings[2] ==
        "w-hook-state: start('leaf', 'w-hook-state'): engine_options::"
        "current_trace gave a tracestate that is not valid (tracestate key "
        "'Bad' does not start with a-z or 0-9); the workflow keeps the "
        "traceparent without it");
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
                  "tracestate: enqueue('leaf', 'w-refused-2'): tracestate key 'Bad'") == 0);
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
        std::string state_without_parent;
        try {
          (void)co_await test::scalar(
              eng, "INSERT INTO " + q(schema) +
                       ".workflows (id, name, status, inputs, tracestate) VALUES "
                       "('w-sql', 'leaf', 'pending', '[1]', 'a=1') RETURNING id");
        } catch (const pg::error& e) {
          state_without_parent = e.what();
        }
        CHECK(state_without_parent.find("workflows_tracestate_check") != std::string::npos);
      });
}

TEST_CASE("spans: a run, its steps, attempts, child and waits form one tree in the caller's trace",
          "[trace][spans]") {
  const auto schema = test::fresh_schema("spans");
  charge_calls = 0;
  std::vector<seen_span> spans;
  auto o = test::options(schema);
  o.on_span = [&spans](const span& sp) { spans.push_back(copy_of(sp)); };
  test::with_open_engine(o, add_workflows, [&](engine& eng) -> asio::awaitable<void> {
    const start_options so{.timeout = {}, .traceparent = given_parent, .tracestate = {}};
    auto h = co_await eng.start(so, "tree", "w-tree", 20);
    (void)co_await eng.send("w-tree", "go", 1);
    const int out = co_await h.result<int>();
    CHECK(out == 41);
    co_await test::wait_idle(eng);  // the runs have ended, and so have their spans
  });
  // Every span started once and ended once.
  std::map<std::string, int> starts, ends;
  for (const auto& sp : spans) ++(sp.ended ? ends : starts)[sp.id];
  CHECK(starts == ends);
  for (const auto& [id, n] : ends) CHECK(n == 1);
  const auto ended = [&spans](const std::string& workflow, span_kind kind,
                              const std::string& step_kind) {
    std::vector<const seen_span*> found;
    for (const auto& sp : spans)
      if (sp.ended && sp.workflow == workflow && sp.kind == kind && sp.step_kind == step_kind)
        found.push_back(&sp);
    return found;
  };
  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  for (const auto& sp : spans) {
    CHECK(sp.trace == trace);
    CHECK(sp.sampled);                                            // the caller's flags are 01
    CHECK(sp.error.find("did not finish") == std::string::npos);  // none was left unfinished
  }

  // The run: under the caller's span.
  const auto runs = ended("w-tree", span_kind::run, "");
  REQUIRE(runs.size() == 1);
  const seen_span& run = *runs[0];
  CHECK(run.parent == "00f067aa0ba902b7");
  CHECK(run.name == "tree");
  CHECK(run.epoch == 1);
  CHECK_FALSE(run.failed);
  // The step that failed once: two attempts under it, the first failed with its error.
  const auto steps = ended("w-tree", span_kind::step, "step");
  REQUIRE(steps.size() == 1);
  const seen_span& charge = *steps[0];
  CHECK(charge.name == "charge");
  CHECK(charge.parent == run.id);
  CHECK_FALSE(charge.failed);
  auto attempts = ended("w-tree", span_kind::attempt, "step");
  REQUIRE(attempts.size() == 2);
  std::sort(attempts.begin(), attempts.end(),
            [](const seen_span* a, const seen_span* b) { return a->attempt < b->attempt; });
  CHECK(attempts[0]->attempt == 1);
  CHECK(attempts[0]->failed);
  CHECK(attempts[0]->error == "card declined");
  CHECK(attempts[1]->attempt == 2);
  CHECK_FALSE(attempts[1]->failed);
  for (const auto* a : attempts) CHECK(a->parent == charge.id);
  // The child's start is a step of the run; the child's run hangs under it, its step under that.
  const auto starts_child = ended("w-tree", span_kind::step, "child");
  REQUIRE(starts_child.size() == 1);
  const seen_span& start = *starts_child[0];
  CHECK(start.parent == run.id);
  CHECK(start.id == detail::step_span_id("w-tree", 0, start.step, 1));
  const auto child_runs = ended("w-tree/1", span_kind::run, "");
  REQUIRE(child_runs.size() == 1);
  CHECK(child_runs[0]->parent == start.id);
  const auto child_steps = ended("w-tree/1", span_kind::step, "step");
  REQUIRE(child_steps.size() == 1);
  CHECK(child_steps[0]->name == "double");
  CHECK(child_steps[0]->parent == child_runs[0]->id);
  // The waits: for the child's result, and for the message.
  const auto for_child = ended("w-tree", span_kind::wait, "child-result");
  REQUIRE(for_child.size() == 1);
  CHECK(for_child[0]->name == "w-tree/1");
  CHECK(for_child[0]->parent == run.id);
  const auto for_message = ended("w-tree", span_kind::wait, "recv");
  REQUIRE(for_message.size() == 1);
  CHECK(for_message[0]->name == "go");
  CHECK(for_message[0]->parent == run.id);
  // Nothing else, and every parent is a span of the tree but the caller's.
  CHECK(ends.size() == 10);  // 2 runs, 3 steps, 2 attempts, child's 1 attempt, 2 waits
  for (const auto& sp : spans)
    if (sp.parent != run.parent) CHECK(ends.count(sp.parent) == 1);
}

TEST_CASE("spans: after a SIGKILL, the run that takes over continues the trace, replays unseen",
          "[trace][spans][process]") {
  const auto schema = test::fresh_schema("spans_kill");
  const std::string a_path = "/tmp/" + schema + "-a.spans", b_path = "/tmp/" + schema + "-b.spans";
  const pid_t a = spawn_traced(schema, "exec-a", a_path, true);
  // Killed once its run waits for the message: the wait's span has started.
  bool waiting = false;
  for (int i = 0; i < 6000 && !waiting; ++i) {
    for (const auto& l : read_spans(a_path))
      if (l.kind == "wait" && l.step_kind == "recv" && l.ended == 0) waiting = true;
    if (!waiting) ::usleep(10000);
  }
  REQUIRE(waiting);
  ::kill(a, SIGKILL);
  CHECK(test::wait_exit(a, 10) == 128 + SIGKILL);
  const pid_t b = spawn_traced(schema, "exec-b", b_path, false);
  REQUIRE(test::wait_exit(b, 60) == 0);

  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  const auto before = read_spans(a_path), after = read_spans(b_path);
  const auto find = [](const std::vector<span_line>& in, const std::string& kind,
                       const std::string& name, int ended) -> const span_line* {
    for (const auto& l : in)
      if (l.workflow == "w-kill" && l.kind == kind && l.name == name && l.ended == ended) return &l;
    return nullptr;
  };
  // The killed process: its run and its wait started and never ended; the first step ended.
  const span_line* a_run = find(before, "run", "kill", 0);
  REQUIRE(a_run);
  CHECK(a_run->epoch == 1);
  CHECK_FALSE(find(before, "run", "kill", 1));
  const span_line* a_step = find(before, "step", "before", 1);
  REQUIRE(a_step);
  CHECK(a_step->parent == a_run->id);
  // The taker: a new run in the same trace, under the same caller's span.
  const span_line* b_run = find(after, "run", "kill", 1);
  REQUIRE(b_run);
  CHECK(b_run->trace == trace);
  CHECK(b_run->parent == "00f067aa0ba902b7");
  CHECK(b_run->epoch > a_run->epoch);
  CHECK(b_run->id != a_run->id);
  CHECK(b_run->failed == 0);
  // The replayed step is not a span again; the wait and the step after it are, under the run.
  CHECK_FALSE(find(after, "step", "before", 0));
  CHECK_FALSE(find(after, "step", "before", 1));
  const span_line* b_wait = find(after, "wait", "go", 1);
  REQUIRE(b_wait);
  CHECK(b_wait->parent == b_run->id);
  const span_line* b_step = find(after, "step", "after", 1);
  REQUIRE(b_step);
  CHECK(b_step->parent == b_run->id);
  for (const auto& l : after) CHECK(l.trace == trace);
  for (const auto& l : before) CHECK(l.trace == trace);
  std::remove(a_path.c_str());
  std::remove(b_path.c_str());
}

TEST_CASE("spans: sleeps, events, sends, transactions, a dispatch, a continue and an unload",
          "[trace][spans]") {
  const auto schema = test::fresh_schema("spans_tour");
  std::vector<seen_span> spans;
  auto o = test::options(schema);
  o.unload_after = std::chrono::milliseconds(1000);
  o.on_span = [&spans](const span& sp) { spans.push_back(copy_of(sp)); };
  test::with_open_engine(o, add_workflows, [&](engine& eng) -> asio::awaitable<void> {
    enqueue_options eo{.queue = "default"};  // claimed by the queue's dispatch
    eo.traceparent = given_parent;
    auto h = co_await eng.enqueue(eo, "tour", "w-tour", 0);
    const int out = co_await h.result<int>();
    CHECK(out == 12);
    co_await test::wait_idle(eng);
  });
  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  std::map<std::string, int> starts, ends;
  for (const auto& sp : spans) {
    ++(sp.ended ? ends : starts)[sp.id];
    CHECK(sp.trace == trace);
    CHECK(sp.error.find("did not finish") == std::string::npos);
  }
  CHECK(starts == ends);
  std::vector<const seen_span*> runs;
  for (const auto& sp : spans)
    if (sp.ended && sp.kind == span_kind::run) runs.push_back(&sp);
  std::sort(runs.begin(), runs.end(),
            [](const seen_span* a, const seen_span* b) { return a->epoch < b->epoch; });
  // Generation 0 continued as new; generation 1 was unloaded (released, not a failure), then
  // finished by a later run: three runs, each under the caller's span.
  REQUIRE(runs.size() == 3);
  CHECK(runs[0]->error == "continued as new");
  CHECK(runs[1]->error.find("released: ") == 0);
  CHECK(runs[2]->error.empty());
  for (const auto* r : runs) {
    CHECK(r->parent == "00f067aa0ba902b7");
    CHECK_FALSE(r->failed);
  }
  // In each of the first two runs, a span of each kind of work, under the run, none failed. (The
  // short sleep's wait is not among them: its 5 ms may have passed once its wake-up time is
  // journaled, and then there is nothing to wait for.)
  const std::set<std::pair<span_kind, std::string>> expected = {{span_kind::step, "event"},
                                                                {span_kind::step, "send"},
                                                                {span_kind::wait, "recv"},
                                                                {span_kind::wait, "get_event"},
                                                                {span_kind::step, "transaction"}};
  for (int r = 0; r < 2; ++r) {
    std::set<std::pair<span_kind, std::string>> made;
    for (const auto& sp : spans)
      if (sp.ended && sp.parent == runs[size_t(r)]->id) {
        made.emplace(sp.kind, sp.step_kind);
        CHECK_FALSE(sp.failed);
      }
    for (const auto& e : expected) {
      INFO("run " << r << ": " << to_string(e.first) << " " << e.second);
      CHECK(made.count(e) == 1);
    }
  }
  // The long sleep ended with its run's release: not failed, and it says why.
  const seen_span* long_sleep = nullptr;
  for (const auto& sp : spans)
    if (sp.ended && sp.kind == span_kind::wait && sp.step_kind == "sleep" &&
        sp.parent == runs[1]->id && !sp.error.empty())
      long_sleep = &sp;
  REQUIRE(long_sleep);
  CHECK_FALSE(long_sleep->failed);
  // The run that finished it replayed the rest: no step of it is a span again.
  for (const auto& sp : spans)
    if (sp.parent == runs[2]->id) CHECK(sp.kind == span_kind::wait);
}

}  // namespace trace_cases
