// Shared helpers of the benchmark executables: the database to use, a blocking libpq
// connection for the raw baselines and for setup, running a coroutine on an io_context, and a
// reporter that shows Google Benchmark's usual console output while keeping every repetition's
// time, so that main() can print medians and ratios from the same run.
#pragma once

#include <libpq-fe.h>
#include <sys/select.h>
#include <unistd.h>

#include <benchmark/benchmark.h>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace bench {

/// The server to measure: $DURABLE_DATABASE_URL (scripts/bench sets it), else libpq's PG*
/// environment variables.
inline std::string conninfo() {
  const char* url = std::getenv("DURABLE_DATABASE_URL");
  return url ? url : "";
}

/// engine_options::group_commit_send_alone for the engines of a benchmark:
/// DURABLE_BENCH_SEND_ALONE=1 turns it on (off by default, as in the library).
inline bool send_alone() {
  const char* v = std::getenv("DURABLE_BENCH_SEND_ALONE");
  return v && std::string_view(v) == "1";
}

/// A plain blocking libpq connection (autocommit), for the raw baselines and for setup.
class raw_connection {
public:
  explicit raw_connection(const std::string& conninfo) : conn_(PQconnectdb(conninfo.c_str())) {
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK)
      throw std::runtime_error("could not connect to PostgreSQL: " + message());
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
  }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;
  ~raw_connection() { PQfinish(conn_); }

  [[nodiscard]] PGconn* get() const noexcept { return conn_; }

  /// Runs one or more parameterless statements (simple query protocol); throws on error.
  void exec(const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    check(r, sql);
  }

  /// Runs one statement with text parameters (extended protocol); throws on error.
  void exec_params(const char* sql, const std::vector<const char*>& values) {
    PGresult* r =
        PQexecParams(conn_, sql, int(values.size()), nullptr, values.data(), nullptr, nullptr, 0);
    check(r, sql);
  }

  void prepare(const char* name, const char* sql) {
    PGresult* r = PQprepare(conn_, name, sql, 0, nullptr);
    check(r, sql);
  }

private:
  void check(PGresult* r, std::string_view what) {
    const ExecStatusType st = PQresultStatus(r);
    const bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    std::string err = ok ? std::string() : message();
    PQclear(r);
    if (!ok) throw std::runtime_error("'" + std::string(what.substr(0, 80)) + "' failed: " + err);
  }
  std::string message() const {
    std::string m = conn_ ? PQerrorMessage(conn_) : "out of memory";
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    return m;
  }
  PGconn* conn_;
};

/// The first column of the first row of `sql` as text; "" when it fails, has no row or is NULL.
inline std::string value(raw_connection& c, const std::string& sql) {
  PGresult* r = PQexec(c.get(), sql.c_str());
  std::string out =
      PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0)
          ? PQgetvalue(r, 0, 0)
          : "";
  PQclear(r);
  return out;
}

/// Runs `a` on `io` until it completes; rethrows its exception. Other work on `io` (an
/// engine's background loops, the tail of a finished run) goes on while it runs and stays
/// queued afterwards, so one io_context and its connections serve the whole executable.
template <class T>
T run_on(asio::io_context& io, asio::awaitable<T> a) {
  std::exception_ptr error;
  std::optional<std::conditional_t<std::is_void_v<T>, int, T>> value;
  bool done = false;
  if constexpr (std::is_void_v<T>) {
    asio::co_spawn(io, std::move(a), [&](std::exception_ptr e) {
      error = e;
      if (!e) value.emplace(0);
      done = true;
    });
  } else {
    asio::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
      error = e;
      if (!e) value.emplace(std::move(v));
      done = true;
    });
  }
  // A previous call may have left `io` stopped (out of work); run_one() would then return
  // at once.
  io.restart();
  while (!done)
    if (io.run_one() == 0 && !done)
      throw std::runtime_error("the io_context ran out of work before the coroutine completed");
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<T>) return std::move(*value);
}

/// Runs a benchmark loop written as a coroutine (`for (auto _ : state)` inside it) on `io`;
/// an exception ends the benchmark with its message as the error.
inline void run_loop(benchmark::State& state, asio::io_context& io, asio::awaitable<void> loop) {
  try {
    run_on(io, std::move(loop));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

/// The median of `v` (which it sorts), or nullopt when empty.
/// Blocks until a notification arrives on `c` (a connection that LISTENs) and returns true, or
/// until `stop_fd` (when given) is readable and returns false. Throws if the connection fails.
inline bool next_notification(PGconn* c, int stop_fd = -1) {
  for (;;) {
    if (PGnotify* n = PQnotifies(c)) {
      PQfreemem(n);
      return true;
    }
    const int sock = PQsocket(c);
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(sock, &fds);
    if (stop_fd >= 0) FD_SET(stop_fd, &fds);
    if (select(std::max(sock, stop_fd) + 1, &fds, nullptr, nullptr, nullptr) < 0) continue;
    if (stop_fd >= 0 && FD_ISSET(stop_fd, &fds)) return false;
    if (!PQconsumeInput(c)) throw std::runtime_error("the listening connection failed");
  }
}

/// A prepared statement run by blocking libpq; throws unless the result has status `want`.
inline void exec_prepared(PGconn* c, const char* name, int n, const char* const* values,
                          ExecStatusType want) {
  PGresult* r = PQexecPrepared(c, name, n, values, nullptr, nullptr, 0);
  const bool ok = PQresultStatus(r) == want;
  PQclear(r);
  if (!ok) throw std::runtime_error(PQerrorMessage(c));
}

/// Runs `once()` per iteration; an error ends the benchmark with its message.
template <class F>
void blocking_loop(benchmark::State& state, F once) {
  try {
    for (auto _ : state) once();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

/// The `p` quantile of `v` (the sample nearest it), or 0 when empty.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, std::size_t(p * double(v.size() - 1) + 0.5));
  return v[i];
}

/// The floor of a benchmark: a prepared INSERT into `table` (id bigint, name text, output
/// jsonb) and its commit, one round trip per iteration on a connection of its own; the table
/// is emptied afterwards through `db`.
inline void raw_commit_latency(benchmark::State& state, raw_connection& db,
                               const std::string& table) {
  raw_connection c(conninfo());
  const std::string insert = "INSERT INTO " + table + " VALUES ($1, $2, $3)";
  c.prepare("floor", insert.c_str());
  std::int64_t next = 0;
  blocking_loop(state, [&] {
    const std::string id = std::to_string(next++);
    const char* v[] = {id.c_str(), "a", "1"};
    exec_prepared(c.get(), "floor", 3, v, PGRES_COMMAND_OK);
  });
  db.exec("TRUNCATE " + table);
}

inline std::optional<double> median_of(std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Seconds elapsed since `t0` on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Forwards to the console reporter (repetitions are shown as their aggregates only) and
/// keeps the time per iteration of every repetition, by benchmark name ("BM_x/arg").
class collecting_reporter : public benchmark::BenchmarkReporter {
public:
  collecting_reporter()
      : console_(::isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                                         : benchmark::ConsoleReporter::OO_Tabular) {}

  bool ReportContext(const Context& context) override { return console_.ReportContext(context); }

  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> shown;
    for (const Run& r : runs) {
      const bool single = r.run_type == Run::RT_Iteration;
      if (single && !r.error_occurred && r.iterations > 0)
        samples_[key(r)].push_back(r.real_accumulated_time / double(r.iterations));
      if (single && !r.error_occurred && r.repetitions > 1) continue;  // shown as aggregates
      shown.push_back(r);
    }
    if (!shown.empty()) console_.ReportRuns(shown);
  }

  void Finalize() override { console_.Finalize(); }

  /// Median seconds per iteration of the repetitions of `name`, if it ran without error.
  [[nodiscard]] std::optional<double> median(const std::string& name) const {
    auto it = samples_.find(name);
    if (it == samples_.end() || it->second.empty()) return std::nullopt;
    std::vector<double> v = it->second;
    return median_of(v);
  }

  [[nodiscard]] std::size_t repetitions(const std::string& name) const {
    auto it = samples_.find(name);
    return it == samples_.end() ? 0 : it->second.size();
  }

private:
  static std::string key(const Run& r) {
    return r.run_name.function_name + (r.run_name.args.empty() ? "" : "/" + r.run_name.args);
  }
  benchmark::ConsoleReporter console_;
  std::map<std::string, std::vector<double>> samples_;
};

/// argv plus --benchmark_enable_random_interleaving=true unless the caller chose: the
/// repetitions of all benchmarks run shuffled, so slow drift of a shared machine spreads over
/// every benchmark instead of biasing the one that happened to run during it.
inline std::vector<char*> with_interleaving(int argc, char** argv) {
  static char flag[] = "--benchmark_enable_random_interleaving=true";
  std::vector<char*> args(argv, argv + argc);
  bool given = false;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--benchmark_enable_random_interleaving", 38) == 0) given = true;
  if (!given) args.push_back(flag);
  args.push_back(nullptr);
  return args;
}

/// benchmark::Initialize with interleaved repetitions (see with_interleaving); false after
/// reporting an argument Google Benchmark does not know.
inline bool initialize(int argc, char** argv) {
  static std::vector<char*> args;
  args = with_interleaving(argc, argv);
  int n = int(args.size()) - 1;
  benchmark::Initialize(&n, args.data());
  return !benchmark::ReportUnrecognizedArguments(n, args.data());
}

/// "met" or "MISSED" for a measured value against an upper bound.
inline const char* verdict(double value, double bound) { return value <= bound ? "met" : "MISSED"; }

/// The floor for concurrent commits: one blocking connection per client, each with "floor"
/// prepared as an INSERT of (id, 'a', 1) into `table`.
inline std::vector<std::unique_ptr<raw_connection>> floor_clients(const std::string& table,
                                                                  int clients) {
  const std::string insert = "INSERT INTO " + table + " VALUES ($1, $2, $3)";
  std::vector<std::unique_ptr<raw_connection>> conns;
  for (int i = 0; i < clients; ++i) {
    conns.push_back(std::make_unique<raw_connection>(conninfo()));
    conns.back()->prepare("floor", insert.c_str());
  }
  return conns;
}

/// One round of that floor: every client, on a thread of its own, commits `per_client` rows
/// (ids from `next` on, which moves past them). Throws the first client's error.
inline void floor_round(std::vector<std::unique_ptr<raw_connection>>& conns, int per_client,
                        std::int64_t& next) {
  const std::size_t clients = conns.size();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(clients);
  for (std::size_t c = 0; c < clients; ++c) {
    const std::int64_t first = next + std::int64_t(c) * per_client;
    threads.emplace_back([&, c, first] {
      try {
        for (int i = 0; i < per_client; ++i) {
          const std::string id = std::to_string(first + i);
          const char* v[] = {id.c_str(), "a", "1"};
          exec_prepared(conns[c]->get(), "floor", 3, v, PGRES_COMMAND_OK);
        }
      } catch (const std::exception& e) {
        errors[c] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  next += std::int64_t(clients) * per_client;
  for (const auto& e : errors)
    if (!e.empty()) throw std::runtime_error(e);
}

}  // namespace bench
