// Running the `durable` program in the CLI's cases (test_cli.cpp, test_cli_text.cpp): a real
// process against the real server, its output and exit status, and the workflows it steers.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <durable/store.hpp>
#include <fstream>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/prometheus.hpp"
#include "support/workflows.hpp"

namespace cli_cases {

using namespace durable;
using namespace std::chrono_literals;
using test::wait_status;
using json = nlohmann::json;

struct cli_result {
  int status = -1;
  std::string out, err;
  [[nodiscard]] json parsed() const {
    try {
      return json::parse(out);
    } catch (const std::exception& e) {
      FAIL("stdout is not JSON (" << e.what() << "):\n" << out << "\nstderr:\n" << err);
      return {};
    }
  }
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// A run of a program: its pid and the files its stdout and stderr go to.
struct started_program {
  pid_t pid = -1;
  std::vector<std::string> argv;
  std::string out_path, err_path;
};

/// Starts the program `argv_in[0]` with `argv_in` (and DURABLE_DATABASE_URL from this process),
/// `input` (when given) written to its standard input through a pipe.
inline started_program start_program(const std::vector<std::string>& argv_in,
                                     const std::string* input) {
  char out_path[] = "/tmp/durable-cli-out-XXXXXX";
  char err_path[] = "/tmp/durable-cli-err-XXXXXX";
  const int out_fd = ::mkstemp(out_path);
  const int err_fd = ::mkstemp(err_path);
  REQUIRE(out_fd >= 0);
  REQUIRE(err_fd >= 0);
  std::vector<std::string> argv_s = argv_in;
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  int in_pipe[2] = {-1, -1};
  if (input) REQUIRE(::pipe(in_pipe) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (input) {
      ::dup2(in_pipe[0], 0);
      ::close(in_pipe[0]);
      ::close(in_pipe[1]);
    }
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  ::close(out_fd);
  ::close(err_fd);
  if (input) {
    // The program may refuse before it reads everything: no SIGPIPE for this process then.
    const auto previous = ::signal(SIGPIPE, SIG_IGN);
    ::close(in_pipe[0]);
    for (std::size_t at = 0; at < input->size();) {
      const ssize_t n = ::write(in_pipe[1], input->data() + at, input->size() - at);
      if (n <= 0) break;
      at += std::size_t(n);
    }
    ::close(in_pipe[1]);
    ::signal(SIGPIPE, previous);
  }
  return {pid, argv_in, out_path, err_path};
}

/// What a started program did, once it has exited with `status` (from waitpid).
inline cli_result result_of(const started_program& p, int status) {
  cli_result r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(p.out_path);
  r.err = slurp(p.err_path);
  ::unlink(p.out_path.c_str());
  ::unlink(p.err_path.c_str());
  INFO("durable " <<
       [&] {
         std::string all;
         for (const auto& a : p.argv) all += a + " ";
         return all;
       }() << "\nstdout:\n"
                  << r.out.substr(0, 4000) << "\nstderr:\n"
                  << r.err);
  // Never a crash, a stack trace or an uncaught exception, whatever the outcome.
  CHECK(r.status < 128);
  CHECK(r.err.find("terminate called") == std::string::npos);
  CHECK(r.err.find("what()") == std::string::npos);
  return r;
}

/// Runs the program `argv_in[0]` with `argv_in`, waits for it, and returns its exit status,
/// stdout and stderr.
inline cli_result run_program(const std::vector<std::string>& argv_in, const std::string* input) {
  const started_program p = start_program(argv_in, input);
  int status = 0;
  ::waitpid(p.pid, &status, 0);
  return result_of(p, status);
}

/// Waits, without blocking the event loop (10 ms polls, at most `limit`), for a program started
/// with start_program; the engine of the test runs meanwhile.
inline asio::awaitable<cli_result> finished(
    const started_program& p, std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(p.pid, &status, WNOHANG);
    if (done == p.pid) break;
    if (std::chrono::steady_clock::now() > until) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, &status, 0);
      break;
    }
    co_await test::sleep_ms(10);
  }
  co_return result_of(p, status);
}

/// Starts build/bin/durable with --schema `schema` and `args` (finished() waits for it).
inline started_program start_cli_in(const std::string& schema,
                                    std::initializer_list<std::string> args) {
  std::vector<std::string> all{DURABLE_CLI_PATH, "--schema", schema};
  all.insert(all.end(), args.begin(), args.end());
  return start_program(all, nullptr);
}

/// Runs build/bin/durable with `args`; `input` (when given) is its standard input.
inline cli_result cli(const std::vector<std::string>& args, const std::string* input = nullptr) {
  std::vector<std::string> argv_s{DURABLE_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  return run_program(argv_s, input);
}

/// cli() with --schema first.
inline cli_result cli_in(const std::string& schema, std::initializer_list<std::string> args) {
  std::vector<std::string> all{"--schema", schema};
  all.insert(all.end(), args.begin(), args.end());
  return cli(all);
}

/// cli_in() with `input` as the program's standard input.
inline cli_result cli_in_with(const std::string& schema, std::initializer_list<std::string> args,
                              const std::string& input) {
  std::vector<std::string> all{"--schema", schema};
  all.insert(all.end(), args.begin(), args.end());
  return cli(all, &input);
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- workflows under test

struct cli_knobs {
  bool charge_fixed = false;  // the "charge" step fails for good until an operator fixes it
};
inline cli_knobs ck;

inline asio::awaitable<std::string> order_wf(context& ctx, std::string order) {
  co_await ctx.step("reserve", [] { return 1; });
  const retry twice{.max_attempts = 2, .initial = 10ms};
  const std::string paid = co_await ctx.step(
      "charge",
      [] {
        if (!ck.charge_fixed) throw std::runtime_error("card declined: gateway said \"no\"");
        return std::string("paid");
      },
      twice);
  co_return order + ":" + paid;
}

inline asio::awaitable<std::string> inbox_wf(context& ctx) {
  co_await ctx.step("first", [] { return 1; });
  const auto m = co_await ctx.recv<json>("go", 60s);
  co_await ctx.step("last", [] { return 2; });
  co_return m ? m->dump() : std::string("timeout");
}

/// Writes "a" to stream "out", waits for "go", writes a line with a newline in it and an
/// object, and closes the stream.
inline asio::awaitable<int> streamer_wf(context& ctx) {
  const std::string first = "a", second = "line\n2";
  const json third{{"n", 3}};
  co_await ctx.write_stream("out", first);
  (void)co_await ctx.recv<int>("go");
  co_await ctx.write_stream("out", second);
  co_await ctx.write_stream("out", third);
  co_return static_cast<int>(co_await ctx.close_stream("out"));
}

inline void register_cli(engine& eng) {
  eng.register_workflow("order", &order_wf);
  eng.register_workflow("inbox", &inbox_wf);
  eng.register_workflow("streamer", &streamer_wf);
}

const test::engine_fixture fx{
    .base = &test::preset::live, .add = &register_cli, .executor = "exec-cli"};

inline asio::awaitable<void> migrated(std::string_view schema_view) {
  const std::string schema(schema_view);
  auto o = test::options(schema);
  engine eng(co_await asio::this_coro::executor, o);
  (void)co_await eng.migrate();
}

}  // namespace cli_cases
