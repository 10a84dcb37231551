// One INSERT-and-commit round trip through durable::pg::connection beside the same statement
// through plain blocking libpq, in the same executable and the same (interleaved) run.
//
//   BM_raw_libpq_insert          PQexecParams("INSERT INTO bench_pg(payload) VALUES ($1)"),
//   autocommit BM_durable_insert            the same statement through co_await conn->exec(...):
//   the same
//                                protocol messages (Parse/Bind/Describe/Execute/Sync, unnamed)
//   BM_raw_libpq_insert_prepared PQexecPrepared of the statement prepared once
//   BM_durable_insert_prepared   co_await conn->run(pg::prepared(...)), prepared once via a catalog
//   BM_raw_libpq_select1,        "SELECT 1" both ways: a round trip without a commit, so the
//   BM_durable_select1           library's own overhead is not diluted by the fsync of a commit
//   BM_durable_pool1_insert      the prepared INSERT through pg::pool::acquire() of a pool of 1,
//   BM_durable_pool4_insert      and of a pool of 4 (the engine's path for every journal write)
//   BM_paired                    the raw and durable variants on single connections (not the
//                                pools) once each per iteration, in rotating order, each timed
//                                on its own: medians of variants measured side by side, which a
//                                shared, drifting machine disturbs much less than separate
//                                benchmarks a fraction of a second apart. The raw connection and
//                                the library's connection each serve half of the statements,
//                                so neither backend sits idle longer than the other.
//
// The library benchmarks use one io_context and one connection for all their iterations: the
// benchmark loop runs inside one coroutine. main() prints durable/raw ratios of the medians.
//
// Database: $DURABLE_DATABASE_URL, else libpq's PG* variables. Drops and recreates the table
// bench_pg in the connection's default schema.

#include <benchmark/benchmark.h>
#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <durable.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace {

const char* const insert_sql = "INSERT INTO bench_pg(payload) VALUES ($1)";
const char* const select_sql = "SELECT 1";
const char* const insert_name = "bench_pg_insert";
const std::string payload = "a durable benchmark payload";

asio::io_context* g_io = nullptr;
durable::pg::connection* g_conn = nullptr;
durable::pg::pool* g_pool1 = nullptr;
durable::pg::pool* g_pool4 = nullptr;
bench::raw_connection* g_raw = nullptr;

// ---- raw libpq ------------------------------------------------------------------------------

void raw_loop(benchmark::State& state, const char* sql, int nparams, bool prepared,
              ExecStatusType want) {
  const char* values[1] = {payload.c_str()};
  PGconn* c = g_raw->get();
  for (auto _ : state) {
    PGresult* r = prepared ? PQexecPrepared(c, sql, nparams, values, nullptr, nullptr, 0)
                           : PQexecParams(c, sql, nparams, nullptr, values, nullptr, nullptr, 0);
    const bool ok = PQresultStatus(r) == want;
    PQclear(r);
    if (!ok) {
      state.SkipWithError(PQerrorMessage(c));
      break;
    }
  }
}

void BM_raw_libpq_insert(benchmark::State& state) {
  raw_loop(state, insert_sql, 1, false, PGRES_COMMAND_OK);
}
void BM_raw_libpq_insert_prepared(benchmark::State& state) {
  raw_loop(state, insert_name, 1, true, PGRES_COMMAND_OK);
}
void BM_raw_libpq_select1(benchmark::State& state) {
  raw_loop(state, select_sql, 0, false, PGRES_TUPLES_OK);
}

// ---- durable::pg ----------------------------------------------------------------------------

enum class mode { params, prepared, select1 };

asio::awaitable<void> durable_loop(benchmark::State& state, durable::pg::connection& c, mode m) {
  for (auto _ : state) {
    if (m == mode::params) {
      (void)co_await c.exec(insert_sql, payload);
    } else if (m == mode::prepared) {
      durable::pg::statement st = durable::pg::prepared(insert_name, payload);
      (void)co_await c.run(std::move(st));
    } else {
      (void)co_await c.exec(select_sql);
    }
  }
}

asio::awaitable<void> pool_loop(benchmark::State& state, durable::pg::pool& p) {
  for (auto _ : state) {
    durable::pg::statement st = durable::pg::prepared(insert_name, payload);
    auto c = co_await p.acquire();
    (void)co_await c->run(std::move(st));
  }
}

/// Connects every connection of `p` (acquire hands them out in turn) and prepares the INSERT.
asio::awaitable<void> warm_up(durable::pg::pool& p) {
  for (std::size_t i = 0; i < 2 * p.size(); ++i) {
    durable::pg::statement st = durable::pg::prepared(insert_name, payload);
    auto c = co_await p.acquire();
    (void)co_await c->run(std::move(st));
  }
}

void BM_durable_pool1_insert(benchmark::State& state) {
  bench::run_loop(state, *g_io, pool_loop(state, *g_pool1));
}
void BM_durable_pool4_insert(benchmark::State& state) {
  bench::run_loop(state, *g_io, pool_loop(state, *g_pool4));
}

// ---- paired: all variants side by side ------------------------------------------------------

enum variant : int {
  v_raw_insert,
  v_durable_insert,
  v_raw_prepared,
  v_durable_prepared,
  v_raw_select1,
  v_durable_select1,
  v_count
};
const char* const variant_names[v_count] = {
    "raw PQexecParams INSERT", "durable exec INSERT", "raw PQexecPrepared INSERT",
    "durable prepared INSERT", "raw SELECT 1",        "durable SELECT 1"};
std::vector<double> g_paired[v_count];  // seconds, one sample per variant and iteration

void raw_once(const char* sql, int nparams, bool prepared) {
  const char* values[1] = {payload.c_str()};
  PGresult* r =
      prepared ? PQexecPrepared(g_raw->get(), sql, nparams, values, nullptr, nullptr, 0)
               : PQexecParams(g_raw->get(), sql, nparams, nullptr, values, nullptr, nullptr, 0);
  const ExecStatusType st = PQresultStatus(r);
  PQclear(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
    throw std::runtime_error(PQerrorMessage(g_raw->get()));
}

asio::awaitable<void> run_variant(int v) {
  switch (v) {
    case v_raw_insert:
      raw_once(insert_sql, 1, false);
      break;
    case v_durable_insert:
      (void)co_await g_conn->exec(insert_sql, payload);
      break;
    case v_raw_prepared:
      raw_once(insert_name, 1, true);
      break;
    case v_durable_prepared: {
      durable::pg::statement st = durable::pg::prepared(insert_name, payload);
      (void)co_await g_conn->run(std::move(st));
      break;
    }
    case v_raw_select1:
      raw_once(select_sql, 0, false);
      break;
    default:
      (void)co_await g_conn->exec(select_sql);
      break;
  }
}

asio::awaitable<void> paired_loop(benchmark::State& state) {
  int rotation = 0;
  for (auto _ : state) {
    for (int k = 0; k < v_count; ++k) {
      const int v = (k + rotation) % v_count;
      const auto t0 = std::chrono::steady_clock::now();
      co_await run_variant(v);
      g_paired[v].push_back(bench::seconds_since(t0));
    }
    rotation = (rotation + 1) % v_count;
  }
}

void BM_paired(benchmark::State& state) { bench::run_loop(state, *g_io, paired_loop(state)); }

void BM_durable_insert(benchmark::State& state) {
  bench::run_loop(state, *g_io, durable_loop(state, *g_conn, mode::params));
}
void BM_durable_insert_prepared(benchmark::State& state) {
  bench::run_loop(state, *g_io, durable_loop(state, *g_conn, mode::prepared));
}
void BM_durable_select1(benchmark::State& state) {
  bench::run_loop(state, *g_io, durable_loop(state, *g_conn, mode::select1));
}

// Interleaved repetitions (see bench::with_interleaving); the summary uses their medians.
constexpr int repetitions = 10;
#define DURABLE_BENCH(fn)        \
  BENCHMARK(fn)                  \
      ->Repetitions(repetitions) \
      ->MinTime(0.3)             \
      ->UseRealTime()            \
      ->Unit(benchmark::kMicrosecond)

DURABLE_BENCH(BM_raw_libpq_insert);
DURABLE_BENCH(BM_durable_insert);
DURABLE_BENCH(BM_raw_libpq_insert_prepared);
DURABLE_BENCH(BM_durable_insert_prepared);
DURABLE_BENCH(BM_raw_libpq_select1);
DURABLE_BENCH(BM_durable_select1);
DURABLE_BENCH(BM_durable_pool1_insert);
DURABLE_BENCH(BM_durable_pool4_insert);
BENCHMARK(BM_paired)->MinTime(4)->UseRealTime()->Unit(benchmark::kMillisecond);

asio::awaitable<std::unique_ptr<durable::pg::connection>> connect_library(std::string conninfo) {
  auto catalog = std::make_shared<durable::pg::statement_catalog>();
  (*catalog)[insert_name] = insert_sql;
  auto c = co_await durable::pg::connection::connect(std::move(conninfo), std::move(catalog));
  co_await c->prepare(insert_name, insert_sql);
  co_return c;
}

void print_ratio(const bench::collecting_reporter& rep, const char* label,
                 const std::string& raw_name, const std::string& lib_name, bool headline) {
  const auto raw = rep.median(raw_name);
  const auto lib = rep.median(lib_name);
  if (!raw || !lib) {
    std::printf("%-34s not measured (filtered out or failed)\n", label);
    return;
  }
  const double ratio = *lib / *raw;
  std::printf("%-34s raw %8.1f us   durable %8.1f us   difference %+7.1f us\n", label, *raw * 1e6,
              *lib * 1e6, (*lib - *raw) * 1e6);
  if (headline)
    std::printf("durable/raw ratio: %.2f (target <= 1.10: %s)\n", ratio,
                bench::verdict(ratio, 1.10));
  else
    std::printf("  ratio %.2f\n", ratio);
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::initialize(argc, argv)) return 1;

  const std::string conninfo = bench::conninfo();
  asio::io_context io;
  std::unique_ptr<bench::raw_connection> raw;
  std::unique_ptr<durable::pg::connection> conn;
  auto catalog = std::make_shared<durable::pg::statement_catalog>();
  (*catalog)[insert_name] = insert_sql;
  durable::pg::pool pool1(io.get_executor(), conninfo, 1, catalog);
  durable::pg::pool pool4(io.get_executor(), conninfo, 4, catalog);
  try {
    raw = std::make_unique<bench::raw_connection>(conninfo);
    raw->exec(
        "DROP TABLE IF EXISTS bench_pg; CREATE TABLE bench_pg(id bigserial PRIMARY KEY, payload "
        "text)");
    raw->prepare(insert_name, insert_sql);
    conn = bench::run_on(io, connect_library(conninfo));
    bench::run_on(io, warm_up(pool1));
    bench::run_on(io, warm_up(pool4));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pg: setup failed: %s\n", e.what());
    return 1;
  }
  g_io = &io;
  g_conn = conn.get();
  g_raw = raw.get();
  g_pool1 = &pool1;
  g_pool4 = &pool4;

  bench::collecting_reporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::Shutdown();

  std::printf("\n==== bench_pg summary: medians of %d interleaved repetitions, same run ====\n",
              repetitions);
  print_ratio(rep, "INSERT + commit (unnamed, params)", "BM_raw_libpq_insert", "BM_durable_insert",
              true);
  print_ratio(rep, "INSERT + commit (prepared)", "BM_raw_libpq_insert_prepared",
              "BM_durable_insert_prepared", false);
  print_ratio(rep, "SELECT 1 (no commit)", "BM_raw_libpq_select1", "BM_durable_select1", false);
  print_ratio(rep, "prepared INSERT, pool of 1", "BM_raw_libpq_insert_prepared",
              "BM_durable_pool1_insert", false);
  print_ratio(rep, "prepared INSERT, pool of 4", "BM_raw_libpq_insert_prepared",
              "BM_durable_pool4_insert", false);
  std::optional<double> med[v_count];
  for (int v = 0; v < v_count; ++v) med[v] = bench::median_of(g_paired[v]);
  if (med[v_raw_insert]) {
    std::printf(
        "\npaired (every variant once per iteration, rotating order; %zu samples each), medians:\n",
        g_paired[0].size());
    for (int v = 0; v < v_count; ++v)
      std::printf("  %-28s %8.1f us\n", variant_names[v], *med[v] * 1e6);
    auto pr = [&](const char* label, int lib, int raw) {
      std::printf("  %-44s %.2f (%+.1f us)\n", label, *med[lib] / *med[raw],
                  (*med[lib] - *med[raw]) * 1e6);
    };
    pr("paired durable/raw ratio (unnamed, params):", v_durable_insert, v_raw_insert);
    pr("paired durable/raw ratio (prepared):", v_durable_prepared, v_raw_prepared);
    pr("paired durable/raw ratio (SELECT 1):", v_durable_select1, v_raw_select1);
  }
  std::printf("library round trips: %llu, statements: %llu\n",
              static_cast<unsigned long long>(conn->stats().round_trips),
              static_cast<unsigned long long>(conn->stats().statements));
  return 0;
}
