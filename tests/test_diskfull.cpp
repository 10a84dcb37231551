// The WAL disk fills up in the middle of a run: a PostgreSQL 15 cluster whose pg_wal is a small
// tmpfs, nearly full (scripts/lib.sh, durable_start_diskfull_cluster; scripts/chaos starts it).
// Workflows journal large step outputs until a WAL write fails with ENOSPC, the server PANICs
// and its crash recovery fails for want of space, so it stays down. The test then frees the
// space and starts the server, as an operator would. Checked: every workflow finishes; no step
// whose row the engine had acknowledged runs again (a PANIC loses no committed row); each
// transactional step's effect is in the test's table exactly once; every journal is complete and
// without gaps. The figures (how long the server was down, time to finish after the start,
// re-runs of plain steps) are printed and appended to $DURABLE_CHAOS_REPORT when set.
//
// Skipped (with a warning) unless DURABLE_DISKFULL_URL, DURABLE_DISKFULL_FREE_CMD and
// DURABLE_DISKFULL_START_CMD are set; ctest label `chaos`, which scripts/test leaves out.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "support/chaos.hpp"
#include "support/workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::env_int;
using test::q;
using test::run_command;
using test::seconds_between;

namespace {

using clock_type = std::chrono::steady_clock;

struct diskfull_tally {
  std::map<std::string, int> runs;     // "<workflow>/<step>" -> executions
  std::set<std::string> acknowledged;  // steps that returned to their workflow
  int acknowledged_ran_again = 0;
};
diskfull_tally d;

/// `bytes` letters and digits, different for every seed: little for TOAST to compress.
std::string noise(std::size_t bytes, std::uint64_t seed) {
  static constexpr char alphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::mt19937_64 gen(seed);
  std::string s(bytes, ' ');
  for (auto& c : s) c = alphabet[gen() % (sizeof alphabet - 1)];
  return s;
}

/// `steps` plain steps returning `bytes` of noise each; every tenth step is transactional and
/// inserts (workflow, step) into `table`.
asio::awaitable<long> diskfull_wf(context& ctx, std::string table, int steps, int bytes) {
  const std::string insert = "INSERT INTO " + table + " (workflow_id, step) VALUES ($1, $2)";
  long total = 0;
  for (int i = 0; i < steps; ++i) {
    const std::string name = "s" + std::to_string(i);
    const std::string key = ctx.workflow_id() + "/" + name;
    if (i % 10 == 0) {
      auto effect = [&](pg::transaction& tx) -> asio::awaitable<void> {
        ++d.runs[key];
        if (d.acknowledged.count(key)) ++d.acknowledged_ran_again;
        co_await tx.exec(insert, ctx.workflow_id(), name);
      };
      co_await ctx.transaction(name, effect);
    } else {
      auto big = [&]() -> std::string {
        ++d.runs[key];
        if (d.acknowledged.count(key)) ++d.acknowledged_ran_again;
        return noise(std::size_t(bytes), std::hash<std::string>{}(key));
      };
      total += long((co_await ctx.step(name, big)).size());
    }
    d.acknowledged.insert(key);
  }
  co_return total;
}

/// One number from the database on a connection of its own, or -1 while it is down.
asio::awaitable<long> probe_count(std::string conninfo, std::string sql) {
  try {
    auto c = co_await pg::connection::connect(conninfo);
    auto r = co_await c->exec(sql);
    co_return r[0].get<long>(0);
  } catch (const std::exception&) {
    co_return -1;
  }
}

}  // namespace

TEST_CASE("a WAL disk that fills up loses no acknowledged step", "[diskfull][chaos]") {
  const char* url = std::getenv("DURABLE_DISKFULL_URL");
  const char* free_space = std::getenv("DURABLE_DISKFULL_FREE_CMD");
  const char* start = std::getenv("DURABLE_DISKFULL_START_CMD");
  if (!url || !*url || !free_space || !*free_space || !start || !*start) {
    WARN(
        "DURABLE_DISKFULL_URL, DURABLE_DISKFULL_FREE_CMD and DURABLE_DISKFULL_START_CMD are not "
        "set: skipping the disk-full test (scripts/chaos starts a cluster whose WAL disk fills "
        "up and sets them)");
    return;
  }
  const int workflows = env_int("DURABLE_DISKFULL_WORKFLOWS", 12);
  const int steps = env_int("DURABLE_DISKFULL_STEPS", 150);
  const int bytes = env_int("DURABLE_DISKFULL_BYTES", 32768);
  d = {};
  const auto schema = test::fresh_schema("diskfull");
  const std::string table = q(schema) + ".effects";
  auto o = test::options(schema, "diskfull");
  o.conninfo = url;
  o.min_severity = severity::error;
  o.heartbeat_interval = engine_options{}.heartbeat_interval;

  clock_type::time_point started{}, down{}, freed{}, up{}, all_done{};
  int start_code = -1;
  long effects = -1, distinct_effects = -1, journal_rows = -1, with_holes = -1, succeeded = -1;
  int finished = 0;
  test::run([&]() -> asio::awaitable<void> {
    const auto ex = co_await asio::this_coro::executor;
    engine eng(ex, o);
    eng.register_workflow("diskfull", &diskfull_wf);
    (void)co_await eng.open();
    {
      auto conn = co_await eng.pool().acquire();
      const std::string create =
          "CREATE TABLE " + table + " (workflow_id text NOT NULL, step text NOT NULL)";
      co_await conn->exec(create);
    }
    started = clock_type::now();
    const auto deadline = started + 300s;
    for (int i = 0; i < workflows; ++i) {
      const std::string name = "diskfull";
      const std::string id = "wf-" + std::to_string(i);
      (void)co_await eng.start(name, id, table, steps, bytes);
    }
    const std::string s = q(schema);
    const std::string succeeded_sql =
        "SELECT count(*) FROM " + s + ".workflows WHERE status = 'succeeded'";
    // Until the server is down: three failed probes in a row, 100 ms apart.
    int failures = 0;
    while (clock_type::now() < deadline && failures < 3) {
      const long n = co_await probe_count(url, succeeded_sql);  // named arguments
      failures = n < 0 ? failures + 1 : 0;
      if (n == workflows) break;  // the disk never filled
      co_await test::sleep_ms(100);
    }
    if (failures < 3) co_return;
    down = clock_type::now();
    co_await test::sleep_ms(2000);  // the engine keeps trying meanwhile
    (void)co_await run_command(free_space);
    freed = clock_type::now();
    start_code = co_await run_command(start);
    up = clock_type::now();
    while (clock_type::now() < deadline) {
      succeeded = co_await probe_count(url, succeeded_sql);
      if (succeeded == workflows) break;
      co_await test::sleep_ms(50);
    }
    all_done = clock_type::now();
    // Named, not temporaries: GCC 12 (docs/architecture.md#compiler-notes).
    const std::string effects_sql = "SELECT count(*) FROM " + table;
    const std::string distinct_sql = "SELECT count(DISTINCT (workflow_id, step)) FROM " + table;
    const std::string journal_sql = "SELECT count(*) FROM " + s + ".steps";
    // A journal is a prefix of the program: seq 0 .. n-1 without a gap.
    const std::string holes_sql = "SELECT count(*) FROM (SELECT workflow_id FROM " + s +
                                  ".steps GROUP BY workflow_id HAVING count(*) <> max(seq) + 1) h";
    effects = co_await probe_count(url, effects_sql);
    distinct_effects = co_await probe_count(url, distinct_sql);
    journal_rows = co_await probe_count(url, journal_sql);
    with_holes = co_await probe_count(url, holes_sql);
    for (int i = 0; i < workflows; ++i) {
      try {
        const auto h = eng.handle("wf-" + std::to_string(i));
        const long n = co_await h.result<long>();
        finished += n == long(steps - (steps + 9) / 10) * bytes;
      } catch (const std::exception& e) {
        UNSCOPED_INFO("wf-" << i << ": " << e.what());
      }
    }
  }());

  REQUIRE(down != clock_type::time_point{});  // else the disk never filled: raise the load
  REQUIRE(start_code == 0);
  const long tx_total = long(workflows) * ((steps + 9) / 10);
  int reruns = 0;
  for (const auto& [key, n] : d.runs) reruns += n - 1;
  std::ostringstream report;
  report << "disk full: " << workflows << " workflows x " << steps << " steps of " << bytes
         << " bytes, pg_wal on a tmpfs left nearly full\n"
         << "disk full: the server went down (PANIC, recovery out of space) "
         << seconds_between(started, down) << " s into the run; space freed and the server "
         << "started " << seconds_between(down, up) << " s later (the start took "
         << seconds_between(freed, up) << " s)\n"
         << "disk full: all " << succeeded << "/" << workflows << " finished "
         << seconds_between(up, all_done) << " s after the start; step re-runs " << reruns
         << " (of " << long(workflows) * steps << "); acknowledged steps that ran again "
         << d.acknowledged_ran_again << "; effect rows " << effects << " (distinct "
         << distinct_effects << ", expected " << tx_total << "); journal rows " << journal_rows
         << ", journals with a gap " << with_holes << "\n";
  test::publish_figures(report.str());

  CHECK(succeeded == workflows);
  CHECK(finished == workflows);
  CHECK(d.acknowledged_ran_again == 0);
  CHECK(effects == tx_total);
  CHECK(distinct_effects == tx_total);
  CHECK(journal_rows == long(workflows) * steps);
  CHECK(with_holes == 0);
}
