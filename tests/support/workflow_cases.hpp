// The workflows and helpers of the workflow cases (test_workflows.cpp: journaling, round trips,
// group commit, idempotent start, queues; test_workflow_replay.cpp: errors, determinism, codec
// values, transactional steps, fencing).
//
// Note: prvalue class arguments are never passed straight to a coroutine inside co_await.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/experimental/awaitable_operators.hpp>
#include <durable/store.hpp>

#include "support/conninfo.hpp"
#include "support/processes.hpp"
#include "support/workflows.hpp"

namespace workflow_cases {

using namespace durable;
using namespace std::chrono_literals;
using test::probe;

using test::q;  // tests/support/workflows.hpp

// ---- workflows under test -------------------------------------------------------------------

inline asio::awaitable<std::string> shape_wf(context& ctx) {
  std::vector<std::string> names;
  switch (probe.version) {
    case 1:
      names = {"a", "b", "c"};
      break;
    case 2:
      names = {"a", "x", "c"};
      break;  // b renamed
    case 3:
      names = {"a", "new", "b", "c"};
      break;  // a step inserted
    case 4:
      names = {"a", "c"};
      break;  // b removed
    case 5:
      names = {"a"};
      break;  // b and c removed
  }
  std::string out;
  for (const auto& n : names) {
    co_await test::maybe_hang(n);
    out += co_await ctx.step(n, [&n] {
      ++probe.calls[n];
      return n;
    });
  }
  co_return out;
}

inline asio::awaitable<std::string> failing_wf(context& ctx) {
  std::string msg;
  try {
    co_await ctx.step("charge", []() -> int {
      ++probe.calls["charge"];
      throw std::runtime_error("card declined");
    });
  } catch (const step_failed& e) {
    msg = e.what();
    probe.seen.push_back(msg);
    probe.seen.push_back(e.error_type() + "|" + e.error_message() + "|" + std::to_string(e.seq()));
  }
  co_await test::maybe_hang("after");
  co_return co_await ctx.step("after", [&msg] {
    ++probe.calls["after"];
    return msg;
  });
}

inline asio::awaitable<int> propagating_wf(context& ctx) {
  co_return co_await ctx.step("boom", []() -> int { throw std::invalid_argument("bad input 42"); });
}

inline asio::awaitable<void> void_wf(context& ctx, std::string tag) {
  co_await ctx.step("nothing", [] { ++probe.calls["nothing"]; });
  auto t = co_await ctx.step("tag", [&tag] { return tag; });
  probe.seen.push_back(t);
}

struct order {
  std::string id;
  int qty = 0;
  double price = 0;
  NLOHMANN_DEFINE_TYPE_INTRUSIVE(order, id, qty, price)
};
enum class color { red = 1, green = 7 };

inline asio::awaitable<order> codec_wf(context& ctx) {
  using nested_t = std::vector<std::map<std::string, std::optional<int>>>;
  auto nested = co_await ctx.step("nested", [] {
    ++probe.calls["nested"];
    return nested_t{{{"x", 1}, {"y", std::nullopt}}, {}};
  });
  auto tup = co_await ctx.step("tuple", [] {
    ++probe.calls["tuple"];
    return std::tuple<int, double, bool, std::string>{-5, 0.1, true, "\xc3\xbc"};
  });
  auto c = co_await ctx.step("enum", [] { return color::green; });
  auto big = co_await ctx.step("big", [] {
    ++probe.calls["big"];
    std::string s(1 << 20, 'z');
    s[12345] = 'a';
    return s;
  });
  auto o = co_await ctx.step("order", [] { return order{"o-1", 3, 9.99}; });
  probe.seen.push_back(encode(nested).dump() + encode(tup).dump() + encode(c).dump() +
                       std::to_string(big.size()) + big.substr(12340, 10) + encode(o).dump());
  co_await test::maybe_hang("end");
  co_return o;
}

inline asio::awaitable<int> typed_wf(context& ctx) {
  if (probe.version == 1) {
    auto v = co_await ctx.step("val", [] { return std::string("abc"); });
    co_await test::maybe_hang("end");
    co_return int(v.size());
  }
  co_return co_await ctx.step("val", [] { return 5; });
}

inline asio::awaitable<std::string> inputs_wf(context& ctx) {
  auto t = co_await ctx.now();
  auto r = co_await ctx.random();
  auto u = co_await ctx.uuid();
  std::string s = std::to_string(t.time_since_epoch().count()) + "/" + std::to_string(r) + "/" + u;
  probe.seen.push_back(s);
  co_await test::maybe_hang("end");
  co_return s;
}

inline asio::awaitable<std::string> retry_wf(context& ctx) {
  auto v = co_await ctx.step(
      "flaky",
      [&ctx](const step_info& info) {
        probe.seen.push_back(info.idempotency_key + "#" + std::to_string(info.attempt) + "#" +
                             ctx.idempotency_key());
        if (info.attempt < 3) throw std::runtime_error("transient");
        return info.idempotency_key;
      },
      retry{.max_attempts = 3, .initial = 1ms, .factor = 2, .max = 10ms});
  co_await test::maybe_hang("end");
  co_return v;
}

inline asio::awaitable<int> tx_wf(context& ctx, std::string table) {
  int n = co_await ctx.transaction("insert", [&](pg::transaction& tx) -> asio::awaitable<int> {
    ++probe.calls["insert"];
    co_await tx.exec("INSERT INTO " + table + " (v) VALUES ($1)", 1);
    co_return 1;
  });
  try {
    co_await ctx.transaction("doomed", [&](pg::transaction& tx) -> asio::awaitable<void> {
      ++probe.calls["doomed"];
      co_await tx.exec("INSERT INTO " + table + " (v) VALUES ($1)", 2);
      throw std::runtime_error("abort after insert");
    });
  } catch (const step_failed& e) {
    probe.seen.push_back(e.error_message());
  }
  co_await test::maybe_hang("end");
  co_return n;
}

// GCC 12 corrupts a *temporary* closure with owning captures inside co_await (so
// check_step_function rejects `ctx.step("x", [s] {...})` there); a named closure is an lvalue, not
// a temporary, and is accepted. The strings are longer than the small-string buffer, so a bytewise
// copy would share, and free twice, a heap block.
inline asio::awaitable<std::string> named_closure_wf(context& ctx, std::string who) {
  const std::string greeting = "hello " + who + ", from a closure that owns a copy of this string";
  auto greet = [greeting] {
    ++probe.calls["greet"];
    return greeting;
  };
  const std::string said = co_await ctx.step("greet", greet);
  auto echo = [greeting](pg::transaction& tx) -> asio::awaitable<std::string> {
    ++probe.calls["echo"];
    auto r = co_await tx.exec("SELECT $1::text || '!'", greeting);
    co_return r[0].get<std::string>(0);
  };
  const std::string echoed = co_await ctx.transaction("echo", echo);
  co_return said + " / " + echoed;
}

/// The engine parallel_wf runs in, while the I4 case wants "left" to commit after "right".
inline engine* g_parallel_engine = nullptr;

inline asio::awaitable<int> parallel_wf(context& ctx) {
  using namespace asio::experimental::awaitable_operators;
  auto left = ctx.step("left", [&ctx]() -> asio::awaitable<int> {
    ++probe.calls["left"];
    // Finishes (and commits) after "right" has committed: waits for its row, however long the
    // machine takes (a fixed pause lost the race under load).
    for (int i = 0; g_parallel_engine && i < 4000; ++i) {
      auto c = co_await g_parallel_engine->pool().acquire();
      auto r = co_await c->exec("SELECT count(*) FROM " + q(g_parallel_engine->schema_name()) +
                                    ".steps WHERE workflow_id = $1 AND name = 'right'",
                                ctx.workflow_id());
      if (r[0].get<long>(0) > 0) break;
      co_await test::sleep_ms(5);
    }
    co_return 1;
  });
  auto right = ctx.step("right", [] {
    ++probe.calls["right"];
    return 2;
  });
  auto both = std::move(left) && std::move(right);
  auto [x, y] = co_await std::move(both);
  co_await test::maybe_hang("end");
  co_return x * 10 + y;
}

// A pool apart from the engine's: it sees only rows other sessions committed.
inline pg::pool* observer = nullptr;

/// After each step, a second step counts (through `observer`) the journal rows committed so
/// far; returns how many of those counts included every row written before it.
inline asio::awaitable<int> visible_wf(context& ctx, int n) {
  const std::string* id = &ctx.workflow_id();
  const std::string* schema = &probe.seen.front();
  int complete = 0;
  for (int i = 0; i < n; ++i) {
    (void)co_await ctx.step("work", [i] { return i; });
    const long seen = co_await ctx.step("look", [id, schema]() -> asio::awaitable<long> {
      auto c = co_await observer->acquire();
      auto r = co_await c->exec("SELECT count(*) FROM " + *schema + ".steps WHERE workflow_id = $1",
                                *id);
      co_return r[0].get<long>(0);
    });
    if (seen >= 2 * i + 1) ++complete;
  }
  co_return complete;
}

/// Three steps; the middle one ("slow") is the one a test's trigger delays on the server.
inline asio::awaitable<int> slow_middle_wf(context& ctx, int x) {
  int sum = x;
  for (const char* name : {"before", "slow", "after"})
    sum += co_await ctx.step(name, [name] {
      ++probe.calls[name];
      return 1;
    });
  co_return sum;
}

/// Opened by the test: until then a "hold" transaction keeps its connection.
inline bool gate_open = false;

inline asio::awaitable<int> held_wf(context& ctx) {
  co_await test::maybe_hang("hold");
  co_return co_await ctx.transaction("hold", [](pg::transaction& tx) -> asio::awaitable<int> {
    while (!gate_open) co_await test::sleep_ms(5);
    co_await tx.exec("SELECT 1");
    co_return 1;
  });
}

inline void register_all(engine& e) {
  e.register_workflow("held", &held_wf);
  e.register_workflow("visible", &visible_wf);
  e.register_workflow("slow_middle", &slow_middle_wf);
  e.register_workflow("counter", &test::counter_wf);
  e.register_workflow("shape", &shape_wf);
  e.register_workflow("failing", &failing_wf);
  e.register_workflow("propagating", &propagating_wf);
  e.register_workflow("void", &void_wf);
  e.register_workflow("codec", &codec_wf);
  e.register_workflow("typed", &typed_wf);
  e.register_workflow("inputs", &inputs_wf);
  e.register_workflow("retry", &retry_wf);
  e.register_workflow("tx", &tx_wf);
  e.register_workflow("parallel", &parallel_wf);
  e.register_workflow("named_closure", &named_closure_wf);
}

const test::engine_fixture fx{.base = &test::preset::quiet, .add = &register_all};

struct workflow_row {
  std::string status;
  std::optional<std::string> reason, output, error;
  long epoch = 0;
};

inline asio::awaitable<workflow_row> row_of(engine& eng, const std::string& id) {
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec("SELECT status, status_reason, output::text, error::text, epoch FROM " +
                                q(eng.schema_name()) + ".workflows WHERE id = $1",
                            id);
  co_return workflow_row{r[0].get<std::string>(0), r[0].get<std::optional<std::string>>(1),
                         r[0].get<std::optional<std::string>>(2),
                         r[0].get<std::optional<std::string>>(3), r[0].get<long>(4)};
}

}  // namespace workflow_cases
