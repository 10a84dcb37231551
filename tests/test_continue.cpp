// The journal limit (warned, parked before the step beyond it, resumed when raised) and
// continue_as_new (a bounded journal across generations, messages and children per generation,
// misuse, forks, SIGKILLs around the continue) against the real server. Workflows and helpers:
// support/primitives.hpp.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include "support/primitives.hpp"

// In the namespace of the shared cases (not a using-directive at file scope): the files of one
// executable compile as one translation unit in scripts/test (docs/development.md, "Unity builds").
namespace primitive_cases {

// ---- journal limit, continue as new

TEST_CASE("journal limit: warned once, parked before the step beyond it, resumed when raised",
          "[journal-limit]") {
  probe.reset();
  k = {};
  const auto schema = test::fresh_schema("jlimit");
  std::vector<std::string> warnings;
  fx.with_engine(
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
  fx.with_engine(
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(
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
  fx.with_engine(
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
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
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
  fx.with_engine(
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
  fx.with_engine(
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

}  // namespace primitive_cases
