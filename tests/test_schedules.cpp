// Schedules against a real server (docs/schedules.md): racing executors and SIGKILLed ones fire
// each slot exactly once, catch-up after an outage per policy, pause and resume, bounded and
// idempotent backfill, trigger, and bad definitions refused with nothing written.
#include <libpq-fe.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "durable.hpp"
#include "support/processes.hpp"
#include "support/workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::q;

namespace {

/// The workflow every slot starts: returns the slot it was given (pass_slot).
asio::awaitable<std::string> tick(context& ctx, std::string slot) {
  co_await ctx.step("seen", [&] { return slot; });
  co_return slot;
}

/// One value of a query, read with a blocking libpq connection of the test's own.
std::string sql_value(const std::string& query) {
  PGconn* c = PQconnectdb(test::conninfo().c_str());
  std::string out;
  if (PQstatus(c) == CONNECTION_OK) {
    PGresult* r = PQexec(c, query.c_str());
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
      out = PQgetvalue(r, 0, 0);
    else if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
      out = std::string("ERROR: ") + PQerrorMessage(c);
    PQclear(r);
  }
  PQfinish(c);
  return out;
}
long sql_long(const std::string& query) {
  const std::string v = sql_value(query);
  if (v.starts_with("ERROR")) throw std::runtime_error(v + " in " + query);
  return v.empty() ? 0 : std::stol(v);
}

durable::engine_options firing(const std::string& schema, const std::string& executor) {
  auto o = test::options(schema, executor);
  o.heartbeat_interval = 50ms;  // the tick that fires schedules
  o.lease_timeout = 3s;
  return o;
}

/// Creates the schema and schedule `o` (args: none but the slot), without firing anything.
void create_schedule(const std::string& schema, schedule_options o) {
  auto opts = test::options(schema, "creator");
  opts.fire_schedules = false;
  test::with_open_engine(
      opts, [](engine&) {},
      [&](engine& eng) -> asio::awaitable<void> { co_await eng.schedule(o); });
}

/// The slots (Unix seconds) of the workflows schedule `id` started, from their ids, in order;
/// and whether any slot has two.
std::vector<long> slots_started(const std::string& schema, const std::string& id) {
  PGconn* c = PQconnectdb(test::conninfo().c_str());
  const std::string query =
      "SELECT extract(epoch FROM substr(id, length($1) + 2)::timestamptz)::bigint FROM " +
      q(schema) +
      ".workflows WHERE starts_with(id, $1 || '@') AND id NOT LIKE '%@trigger:%' "
      "ORDER BY 1";
  const char* params[] = {id.c_str()};
  PGresult* r = PQexecParams(c, query.c_str(), 1, nullptr, params, nullptr, nullptr, 0);
  std::vector<long> out;
  if (PQresultStatus(r) == PGRES_TUPLES_OK)
    for (int i = 0; i < PQntuples(r); ++i) out.push_back(std::stol(PQgetvalue(r, i, 0)));
  PQclear(r);
  PQfinish(c);
  return out;
}

/// Every second from the first slot to the last has exactly one workflow.
void check_every_second_once(const std::vector<long>& slots) {
  REQUIRE(slots.size() >= 2);
  // (Two workflows for one slot are impossible by construction: the slot is in the id.)
  CHECK(long(slots.size()) == slots.back() - slots.front() + 1);  // no slot left out
}

/// The message of the exception `a` ends with ("" if none): an awaited call checked outside
/// Catch's macros (GCC 12 and a co_await inside a macro's expression do not mix).
template <class T>
asio::awaitable<std::string> error_of(asio::awaitable<T>& a) {
  try {
    (void)co_await std::move(a);
  } catch (const std::exception& e) {
    co_return e.what();
  }
  co_return std::string();
}

schedule_options every_second(std::string_view id) {
  schedule_options o;
  o.id = id;
  o.cron = "* * * * * *";
  o.workflow = "tick";
  o.pass_slot = true;
  return o;
}

}  // namespace

TEST_CASE("schedules: two and four executors racing fire each slot once", "[schedule][slow]") {
  for (int executors : {2, 4}) {
    const std::string schema = test::fresh_schema("sched_race");
    create_schedule(schema, every_second("race"));
    const auto codes = test::run_together(executors, [&](int i, test::start_gate gate) {
      if (!gate.wait()) return 2;
      test::with_open_engine(
          firing(schema, "racer-" + std::to_string(i)),
          [](engine& e) { e.register_workflow("tick", tick); },
          [](engine&) -> asio::awaitable<void> { co_await test::sleep_ms(3500); });
      return 0;
    });
    for (int code : codes) CHECK(code == 0);
    const auto slots = slots_started(schema, "race");
    INFO(executors << " executors, " << slots.size() << " slots");
    check_every_second_once(slots);
    // The counter is advanced in the statement that starts the workflows: it agrees.
    CHECK(sql_long("SELECT fired FROM " + q(schema) + ".schedules WHERE id = 'race'") ==
          long(slots.size()));
    // The slot reached the workflow as its argument, and the workflows ran.
    CHECK(sql_long("SELECT count(*) FROM " + q(schema) +
                   ".workflows WHERE starts_with(id, 'race@') AND status = 'succeeded' "
                   "AND output #>> '{}' = substr(id, 6)") >= 1);
  }
}

TEST_CASE("schedules: SIGKILL of the firing executor at random points leaves one run per slot",
          "[schedule][slow]") {
  const std::string schema = test::fresh_schema("sched_kill");
  create_schedule(schema, every_second("killed"));
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pause_ms(30, 400);
  const int kills = 32;
  for (int k = 0; k < kills; ++k) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        test::with_open_engine(
            firing(schema, "victim-" + std::to_string(k)),
            [](engine& e) { e.register_workflow("tick", tick); },
            [](engine&) -> asio::awaitable<void> { co_await test::sleep_ms(60000); });
      } catch (...) {
      }
      ::_exit(0);
    }
    REQUIRE(pid > 0);
    ::usleep(useconds_t(pause_ms(rng)) * 1000);
    ::kill(pid, SIGKILL);
    CHECK(test::wait_exit(pid, 30) == 128 + SIGKILL);
  }
  // A last executor fires undisturbed for a while.
  test::with_open_engine(
      firing(schema, "survivor"), [](engine& e) { e.register_workflow("tick", tick); },
      [](engine&) -> asio::awaitable<void> { co_await test::sleep_ms(1500); });
  const auto slots = slots_started(schema, "killed");
  INFO(kills << " kills, " << slots.size() << " slots");
  check_every_second_once(slots);
  CHECK(sql_long("SELECT fired FROM " + q(schema) + ".schedules WHERE id = 'killed'") ==
        long(slots.size()));
}

TEST_CASE("schedules: catch-up after a 3-hour outage follows each policy", "[schedule]") {
  const std::string schema = test::fresh_schema("sched_outage");
  // Not within 2 s of a ten-minute boundary: the newest slot is then surely missed.
  while ((std::chrono::system_clock::now().time_since_epoch() / 1s) % 600 > 597 ||
         (std::chrono::system_clock::now().time_since_epoch() / 1s) % 600 < 2)
    ::usleep(200000);
  for (auto [id, policy] :
       {std::pair{"skip", catch_up::skip}, std::pair{"latest", catch_up::latest},
        std::pair{"all", catch_up::all}}) {
    schedule_options o;
    o.id = id;
    o.cron = "*/10 * * * *";
    o.workflow = "tick";
    o.pass_slot = true;
    o.policy = policy;
    o.catch_up_max = 5;
    o.late_after = 1s;
    create_schedule(schema, o);
  }
  // The outage: nobody fired since the ten-minute slot three hours ago (19 slots came).
  // The newest ten-minute slot, read once (Unix seconds).
  const std::string last_fired =
      "to_timestamp(" +
      std::to_string(sql_long("SELECT (floor(extract(epoch FROM now()) / 600) * 600)::bigint")) +
      ")";
  CHECK(sql_value("UPDATE " + q(schema) + ".schedules SET next_fire_at = " + last_fired +
                  " - interval '3 hours'")
            .empty());
  std::uint64_t missed = 0, late = 0;
  test::with_open_engine(
      firing(schema, "back"), [](engine& e) { e.register_workflow("tick", tick); },
      [&](engine& eng) -> asio::awaitable<void> {
        for (int i = 0; i < 400; ++i) {
          if (sql_long("SELECT count(*) FROM " + q(schema) +
                       ".schedules WHERE next_fire_at > now()") == 3)
            break;
          co_await test::sleep_ms(25);
        }
        // The firing's counters are added once its commit is read back here.
        for (int i = 0; i < 400 && eng.metrics().schedule_slots_missed < 51; ++i)
          co_await test::sleep_ms(5);
        missed = eng.metrics().schedule_slots_missed;
        late = eng.metrics().schedule_slots_late;
      });
  const auto count = [&](const char* id, const char* column) {
    return sql_long("SELECT " + std::string(column) + " FROM " + q(schema) +
                    ".schedules WHERE id = '" + id + "'");
  };
  CHECK(slots_started(schema, "skip").empty());
  CHECK(count("skip", "missed") == 19);
  const auto latest = slots_started(schema, "latest");
  REQUIRE(latest.size() == 1);
  CHECK(latest[0] == sql_long("SELECT extract(epoch FROM " + last_fired + ")::bigint"));
  CHECK(count("latest", "missed") == 18);
  CHECK(count("latest", "late") == 1);
  const auto all = slots_started(schema, "all");
  REQUIRE(all.size() == 5);  // the five most recent
  CHECK(all.back() == latest[0]);
  CHECK(all.back() - all.front() == 4 * 600);
  CHECK(count("all", "missed") == 14);
  CHECK(count("all", "late") == 5);
  CHECK(missed == 19 + 18 + 14);
  CHECK(late == 6);
  // The next slot follows the slots: the first ten-minute slot after now, for each.
  CHECK(sql_long("SELECT count(*) FROM " + q(schema) + ".schedules WHERE next_fire_at = " +
                 last_fired + " + interval '10 minutes'") == 3);
}

TEST_CASE("schedules: spring forward and fall back fire through the executors as documented",
          "[schedule]") {
  // The server-free cron tests (test_cron.cpp) check the slots; this one checks that the firing
  // path starts exactly those runs, with the local time and offset in their ids. Each schedule
  // is made due at a slot before a 2026 transition (as after an outage), with catch_up::all and
  // an end before the next slot that is not listed.
  const std::string schema = test::fresh_schema("sched_dst");
  struct dst_case {
    const char* id;
    const char* cron;
    const char* zone;
    const char* first;  // the slot it is made due at (UTC)
    std::int64_t end;   // end_at (Unix seconds)
    std::vector<std::string> runs;
  };
  const std::vector<dst_case> cases = {
      // 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:00 and 02:30 collapse into 03:00.
      {"berlin-spring",
       "*/30 * * * *",
       "Europe/Berlin",
       "2026-03-29 00:30:00+00",
       1774748700,  // 2026-03-29T01:45:00Z
       {"berlin-spring@2026-03-29T01:30:00+01:00", "berlin-spring@2026-03-29T03:00:00+02:00",
        "berlin-spring@2026-03-29T03:30:00+02:00"}},
      // 2026-10-25: 03:00 CEST becomes 02:00 CET; the repeated hour fires once.
      {"berlin-fall",
       "*/30 * * * *",
       "Europe/Berlin",
       "2026-10-25 00:00:00+00",
       1792894500,  // 2026-10-25T02:15:00Z
       {"berlin-fall@2026-10-25T02:00:00+02:00", "berlin-fall@2026-10-25T02:30:00+02:00",
        "berlin-fall@2026-10-25T03:00:00+01:00"}},
      // 2026-03-08: 02:00 EST becomes 03:00 EDT.
      {"ny-spring",
       "*/30 * * * *",
       "America/New_York",
       "2026-03-08 06:30:00+00",
       1772955900,  // 2026-03-08T07:45:00Z
       {"ny-spring@2026-03-08T01:30:00-05:00", "ny-spring@2026-03-08T03:00:00-04:00",
        "ny-spring@2026-03-08T03:30:00-04:00"}},
      // 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 is lived twice and fires in EDT only.
      {"ny-fall",
       "30 1 * * *",
       "America/New_York",
       "2026-10-31 05:30:00+00",
       1793620800,  // 2026-11-02T12:00:00Z
       {"ny-fall@2026-10-31T01:30:00-04:00", "ny-fall@2026-11-01T01:30:00-04:00",
        "ny-fall@2026-11-02T01:30:00-05:00"}},
  };
  for (const dst_case& c : cases) {
    schedule_options o;
    o.id = c.id;
    o.cron = c.cron;
    o.time_zone = c.zone;
    o.workflow = "tick";
    o.pass_slot = true;
    o.policy = catch_up::all;
    o.catch_up_max = 100;
    o.end_at = std::chrono::sys_seconds(std::chrono::seconds(c.end));
    create_schedule(schema, o);
    CHECK(sql_value("UPDATE " + q(schema) + ".schedules SET next_fire_at = '" + c.first +
                    "' WHERE id = '" + c.id + "'")
              .empty());
  }
  test::with_open_engine(
      firing(schema, "dst"), [](engine& e) { e.register_workflow("tick", tick); },
      [&](engine&) -> asio::awaitable<void> {
        for (int i = 0; i < 400; ++i) {
          if (sql_long("SELECT count(*) FROM " + q(schema) +
                       ".schedules WHERE next_fire_at IS NOT NULL") == 0)
            break;
          co_await test::sleep_ms(25);
        }
      });
  CHECK(sql_long("SELECT count(*) FROM " + q(schema) +
                 ".schedules WHERE next_fire_at IS NOT NULL") == 0);  // each ended at end_at
  for (const dst_case& c : cases) {
    INFO(c.id);
    const std::string ids = sql_value("SELECT string_agg(id, ' ' ORDER BY id) FROM " + q(schema) +
                                      ".workflows WHERE starts_with(id, '" + c.id + "@')");
    std::string expected;
    for (const std::string& r : c.runs) expected += (expected.empty() ? "" : " ") + r;
    CHECK(ids == expected);
    // Each run was given its slot, as written in its id.
    CHECK(sql_long("SELECT count(*) FROM " + q(schema) + ".workflows WHERE starts_with(id, '" +
                   c.id + "@') AND inputs = jsonb_build_array(substr(id, length('" + c.id +
                   "') + 2))") == long(c.runs.size()));
  }
}

TEST_CASE("schedules: a paused schedule fires nothing, and resumes after the pause", "[schedule]") {
  const std::string schema = test::fresh_schema("sched_pause");
  create_schedule(schema, every_second("p"));
  test::with_open_engine(
      firing(schema, "pauser"), [](engine& e) { e.register_workflow("tick", tick); },
      [&](engine& eng) -> asio::awaitable<void> {
        for (int i = 0; i < 500 && slots_started(schema, "p").size() < 2; ++i)
          co_await test::sleep_ms(20);
        REQUIRE(slots_started(schema, "p").size() >= 2);
        const bool paused = co_await eng.pause_schedule("p");
        CHECK(paused);
        const long paused_at = sql_long("SELECT floor(extract(epoch FROM now()))::bigint");
        const auto before = slots_started(schema, "p").size();
        co_await test::sleep_ms(2500);
        CHECK(slots_started(schema, "p").size() == before);
        // Read before the resume: its first slot is the second after the resume's now.
        const long resumed_at = sql_long("SELECT floor(extract(epoch FROM now()))::bigint");
        const bool resumed = co_await eng.resume_schedule("p");
        CHECK(resumed);
        // After the resume's now (not the check's: on a loaded machine the next slot may be due,
        // or fired, by the time this runs; firing only moves next_fire_at later).
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) +
                       ".schedules WHERE id = 'p' AND NOT paused AND next_fire_at > "
                       "to_timestamp(" +
                       std::to_string(resumed_at) + ")") == 1);
        for (int i = 0; i < 500 && slots_started(schema, "p").size() < before + 2; ++i)
          co_await test::sleep_ms(20);
        CHECK(slots_started(schema, "p").size() >= before + 2);
        // No slot of the pause ran.
        for (long s : slots_started(schema, "p")) CHECK((s <= paused_at || s > resumed_at));
        const bool unknown = co_await eng.pause_schedule("nope");
        CHECK_FALSE(unknown);
      });
}

TEST_CASE("schedules: backfill is bounded and idempotent, trigger runs one now", "[schedule]") {
  const std::string schema = test::fresh_schema("sched_backfill");
  schedule_options o;
  o.id = "nightly";
  o.cron = "* * * * *";  // every minute: 1 000 slots in 1 000 minutes
  o.time_zone = "Europe/Berlin";
  o.workflow = "tick";
  o.pass_slot = true;
  o.paused = true;
  create_schedule(schema, o);
  auto opts = test::options(schema, "operator");
  opts.fire_schedules = false;
  test::with_open_engine(
      opts, [](engine&) {},
      [&](engine& eng) -> asio::awaitable<void> {
        const auto from = std::chrono::sys_seconds(std::chrono::seconds(1796083200));  // 2026-12-01
        const auto to = from + std::chrono::minutes(999);
        const std::size_t started = co_await eng.backfill_schedule("nightly", from, to);
        CHECK(started == 1000);
        const std::size_t again = co_await eng.backfill_schedule("nightly", from, to);
        CHECK(again == 0);  // nothing twice
        {
          auto op_e1 = eng.backfill_schedule("nightly", from, to + 1min);  // named: GCC 12
          const std::string e1 = co_await error_of(op_e1);
          CHECK_THAT(e1, Catch::Contains("more than 1000 slots") && Catch::Contains("nothing"));
        }
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) + ".workflows") == 1000);
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) +
                       ".workflows WHERE id = 'nightly@2026-12-01T01:00:00+01:00' AND "
                       "inputs = '[\"2026-12-01T01:00:00+01:00\"]' AND status = 'pending'") == 1);
        // A trigger runs one now, paused or not.
        const std::string wid = co_await eng.trigger_schedule("nightly");
        CHECK(wid.starts_with("nightly@trigger:"));
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) + ".workflows WHERE id = '" + wid +
                       "'") == 1);
        {
          auto op_e2 = eng.trigger_schedule("nope");  // named: GCC 12
          const std::string e2 = co_await error_of(op_e2);
          CHECK_THAT(e2, Catch::Contains("no schedule 'nope'"));
        }
        const bool deleted = co_await eng.delete_schedule("nightly");
        CHECK(deleted);
        const bool deleted_again = co_await eng.delete_schedule("nightly");
        CHECK_FALSE(deleted_again);
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) + ".workflows") == 1001);  // they stay
      });
}

TEST_CASE("schedules: bad expressions, zones and options are refused and nothing is written",
          "[schedule]") {
  const std::string schema = test::fresh_schema("sched_bad");
  auto opts = test::options(schema, "operator");
  opts.fire_schedules = false;
  test::with_open_engine(
      opts, [](engine&) {},
      [&](engine& eng) -> asio::awaitable<void> {
        schedule_options o;
        o.id = "bad";
        o.workflow = "tick";
        o.cron = "0 25 * * *";
        {
          auto op_e3 = eng.schedule(o);  // named: GCC 12
          const std::string e3 = co_await error_of(op_e3);
          CHECK_THAT(e3, Catch::Contains("hour") && Catch::Contains("25"));
        }
        o.cron = "0 3 * * *";
        o.time_zone = "Mars/Olympus_Mons";
        {
          auto op_e4 = eng.schedule(o);  // named: GCC 12
          const std::string e4 = co_await error_of(op_e4);
          CHECK_THAT(e4, Catch::Contains("Mars/Olympus_Mons"));
        }
        o.time_zone = "UTC";
        o.id = "a@b";
        {
          auto op_e5 = eng.schedule(o);  // named: GCC 12
          const std::string e5 = co_await error_of(op_e5);
          CHECK_THAT(e5, Catch::Contains("must not contain '@'"));
        }
        o.id = "bad";
        o.workflow = "";
        auto op_empty_name = eng.schedule(o);  // named: GCC 12
        const std::string empty_name = co_await error_of(op_empty_name);
        CHECK_THAT(empty_name, Catch::Contains("workflow name must not be empty"));
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) + ".schedules") == 0);
        // A good one, listed with its next slot; an update keeps it one row.
        o.workflow = "tick";
        const std::string first = "argument", second = "argument 2";  // named: GCC 12
        co_await eng.schedule(o, first);
        co_await eng.schedule(o, second);
        const auto list = co_await eng.list_schedules();
        REQUIRE(list.size() == 1);
        CHECK(list[0].id == "bad");
        CHECK(list[0].inputs == "[\"argument 2\"]");
        REQUIRE(list[0].next_fire_at);
        CHECK(list[0].next_fire_at->time_since_epoch().count() % 86400 == 3 * 3600);
        CHECK_FALSE(list[0].paused);
      });
}

namespace {

asio::awaitable<int> slow(context& ctx, int n) {
  co_await ctx.step("work", [&]() -> asio::awaitable<int> {
    co_await test::sleep_ms(150);
    co_return n;
  });
  co_return n;
}

asio::awaitable<int> echo(context& ctx, int n) {
  co_await ctx.step("echo", [&] { return n; });
  co_return n;
}

}  // namespace

TEST_CASE("queues: a paused queue dispatches nothing, lets what runs finish, and resumes",
          "[queue]") {
  const std::string schema = test::fresh_schema("queue_pause");
  auto o = test::options(schema, "worker");
  o.queues = {"work"};
  o.poll_interval = 50ms;
  o.heartbeat_interval = 200ms;
  test::with_open_engine(
      o, [](engine& e) { e.register_workflow("slow", slow); },
      [&](engine& eng) -> asio::awaitable<void> {
        co_await eng.configure_queue({.name = "work", .concurrency = 4});
        for (int i = 0; i < 6; ++i) {
          const std::string wid = "a-" + std::to_string(i);
          (void)co_await eng.enqueue({.queue = "work"}, "slow", wid, i);
        }
        for (int i = 0; i < 2000 && sql_long("SELECT count(*) FROM " + q(schema) +
                                             ".workflows WHERE status = 'running'") == 0;
             ++i)
          co_await test::sleep_ms(5);
        co_await eng.pause_queue("work");
        const std::string paused_at = sql_value("SELECT now()");
        for (int i = 0; i < 10; ++i) {
          const std::string wid = "b-" + std::to_string(i);
          (void)co_await eng.enqueue({.queue = "work"}, "slow", wid, i);
        }
        co_await test::sleep_ms(1200);
        // What ran finished; nothing was dispatched after the pause.
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) +
                       ".workflows WHERE status = 'running'") == 0);
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) + ".workflows WHERE started_at > '" +
                       paused_at + "'") == 0);
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) +
                       ".workflows WHERE starts_with(id, 'b-') AND status = 'pending'") == 10);
        CHECK(sql_value("SELECT reason FROM " + q(schema) + ".queued WHERE id = 'b-0'") ==
              "pending: queue 'work' is paused (durable queue resume work)");
        // Its limits change while it runs, without a restart: one at a time from now on.
        co_await eng.configure_queue({.name = "work", .concurrency = 1});
        co_await eng.resume_queue("work");
        long most = 0;
        for (int i = 0; i < 3000 && sql_long("SELECT count(*) FROM " + q(schema) +
                                             ".workflows WHERE status <> 'succeeded'") > 0;
             ++i) {
          most = std::max(most, sql_long("SELECT count(*) FROM " + q(schema) +
                                         ".workflows WHERE status = 'running'"));
          co_await test::sleep_ms(10);
        }
        CHECK(most == 1);
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) +
                       ".workflows WHERE status = 'succeeded'") == 16);
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) + ".workflows") == 16);
      });
}

TEST_CASE("queues: a burst of 1 000 debounced enqueues starts one workflow with the last arguments",
          "[queue]") {
  const std::string schema = test::fresh_schema("debounce");
  auto o = test::options(schema, "worker");
  o.poll_interval = 50ms;
  test::with_open_engine(
      o, [](engine& e) { e.register_workflow("echo", echo); },
      [&](engine& eng) -> asio::awaitable<void> {
        enqueue_options e;
        e.debounce = debounce_options{.key = "reindex:doc-7", .window = 60s};
        std::set<std::string> ids;
        for (int i = 0; i < 1000; ++i) {
          const std::string wid = "reindex-" + std::to_string(i);
          auto h = co_await eng.enqueue(e, "echo", wid, i);
          ids.insert(h.id());
        }
        CHECK(ids == std::set<std::string>{"reindex-0"});
        // Due when the window from the first enqueue ends; the test closes it now.
        CHECK(sql_long("SELECT round(extract(epoch FROM wake_at - created_at)) FROM " + q(schema) +
                       ".workflows WHERE id = 'reindex-0'") == 60);
        CHECK(sql_value("UPDATE " + q(schema) + ".workflows SET wake_at = now()").empty());
        const auto first = eng.handle("reindex-0");
        const int result = co_await first.result<int>();
        CHECK(result == 999);
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) + ".workflows") == 1);
        // After it ran, the key starts a new burst.
        auto again = co_await eng.enqueue(e, "echo", "reindex-1000", 1000);
        CHECK(again.id() == "reindex-1000");
        // Racing first enqueues of a new key: one creates the workflow, the others update it.
        enqueue_options racing;
        racing.debounce = debounce_options{.key = "race", .window = 60s};
        std::set<std::string> raced;
        auto state = test::spawn_all(co_await asio::this_coro::executor, 20,
                                     [&](int i) -> asio::awaitable<void> {
                                       const std::string wid = "race-" + std::to_string(i);
                                       auto h = co_await eng.enqueue(racing, "echo", wid, i);
                                       raced.insert(h.id());
                                     });
        co_await test::wait_all(state);
        CHECK(raced.size() == 1);
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) +
                       ".workflows WHERE debounce_key = 'race'") == 1);
        // Bad debounce options are refused before anything is written.
        e.debounce = debounce_options{.key = "", .window = 1s};
        {
          std::string e6;  // enqueue() may throw before it returns its operation
          try {
            auto op = eng.enqueue(e, "echo", "x", 1);
            (void)co_await std::move(op);
          } catch (const std::exception& x) {
            e6 = x.what();
          }
          CHECK_THAT(e6, Catch::Contains("key must not be empty"));
        }
        e.debounce = debounce_options{.key = "k", .window = 0ms};
        {
          std::string e7;  // enqueue() may throw before it returns its operation
          try {
            auto op = eng.enqueue(e, "echo", "x", 1);
            (void)co_await std::move(op);
          } catch (const std::exception& x) {
            e7 = x.what();
          }
          CHECK_THAT(e7, Catch::Contains("window must be positive"));
        }
        CHECK(sql_long("SELECT count(*) FROM " + q(schema) + ".workflows") == 3);
      });
}
