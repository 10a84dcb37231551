// Clock skew: an executor whose wall clock is an hour wrong (libfaketime, Debian's package; the
// monotonic clock left alone, as on a host whose time is not synchronized) takes over workflows
// that wait in their run (a sleep, a recv with a timeout) after their executor was killed with
// SIGKILL. Each wait must end no earlier than its journaled wake-up time and not much later,
// both read on the database server's clock.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "support/processes.hpp"
#include "support/workflows.hpp"

using namespace durable;

namespace {

/// libfaketime (Debian's package faketime), or empty when it is not installed. It is preloaded
/// directly rather than through the `faketime` program, which runs the command as a child of its
/// own: killing it would leave the executor running.
std::string libfaketime() {
  for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                          "/usr/lib/i386-linux-gnu", "/usr/lib64", "/usr/lib"}) {
    const std::string file = std::string(dir) + "/faketime/libfaketime.so.1";
    if (::access(file.c_str(), R_OK) == 0) return file;
  }
  return {};
}

/// Starts tests/support/skew_executor as a process; with `offset` (libfaketime's "+1h", "-1h")
/// its wall clock is moved by `skew_s` seconds and its monotonic clock left alone.
pid_t spawn_skew_executor(const std::string& schema, const std::string& executor,
                          const std::string& mode, const char* offset, int skew_s) {
  const std::string lib = libfaketime();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const std::string skew = std::to_string(skew_s);
  if (offset) {
    // A sanitized executor refuses to start when another library is preloaded before ASan's
    // runtime; the order does not matter for a clock library, so the check is switched off
    // (and leak checks, which libfaketime's own allocations would trip, in this helper only).
    const char* asan = std::getenv("ASAN_OPTIONS");
    const std::string options = std::string(asan ? asan : "") + (asan && *asan ? ":" : "") +
                                "verify_asan_link_order=0:detect_leaks=0";
    ::setenv("ASAN_OPTIONS", options.c_str(), 1);
    ::setenv("LD_PRELOAD", lib.c_str(), 1);
    ::setenv("FAKETIME", offset, 1);
    ::setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
  }
  ::execl(DURABLE_SKEW_EXECUTOR, DURABLE_SKEW_EXECUTOR, schema.c_str(), executor.c_str(),
          mode.c_str(), skew.c_str(), static_cast<char*>(nullptr));
  ::_exit(127);
}

/// When a wait was due and when it ended, both in Unix seconds on the server's clock: the
/// journaled wake-up time (a sleep's output, in microseconds) or deadline (seconds), and the
/// completed_at (the server's now()) of the row journaled once the wait was over.
struct wait_times {
  double due = 0, ended = 0;
};

wait_times times_of(const std::string& schema, const std::string& id, const std::string& due_sql,
                    const std::string& end_where) {
  return test::run([&]() -> asio::awaitable<wait_times> {
    auto c = co_await pg::connection::connect(test::conninfo());
    const std::string steps = test::q(schema) + ".steps";
    auto r = co_await c->exec("SELECT (SELECT " + due_sql + " FROM " + steps +
                                  " WHERE workflow_id = $1 AND seq = 1), "
                                  "(SELECT extract(epoch FROM completed_at)::double precision "
                                  "FROM " +
                                  steps + " WHERE workflow_id = $1 AND " + end_where + ")",
                              id);
    co_return wait_times{r[0].get<double>(0), r[0].get<double>(1)};
  }());
}

/// Until both workflows have journaled the start of their wait (the sleep's wake-up time, the
/// recv's deadline): three rows between them.
void wait_for_waits(const std::string& schema) {
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo());
    for (int i = 0; i < 3000; ++i) {
      auto r = co_await c->exec("SELECT count(*) FROM " + test::q(schema) +
                                ".steps WHERE kind IN ('sleep', 'deadline')");
      if (r[0].get<long>(0) >= 2) co_return;
      co_await test::sleep_ms(10);
    }
    throw std::runtime_error("the workflows never began to wait");
  }());
}

void takeover_with_skew(const char* offset, int skew_s) {
  if (libfaketime().empty()) {
    WARN(
        "libfaketime is not installed (Debian package faketime): the clock-skew test is "
        "skipped");
    return;
  }
  const std::string schema = test::fresh_schema("skew");
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema, "setup"));
    co_await eng.migrate();
  }());
  const pid_t a = spawn_skew_executor(schema, "exec-a", "start", nullptr, 0);
  wait_for_waits(schema);
  ::kill(a, SIGKILL);
  REQUIRE(test::wait_exit(a, 10) == 128 + SIGKILL);
  const pid_t b = spawn_skew_executor(schema, "exec-b", "resume", offset, skew_s);
  const int code = test::wait_exit(b, 60);
  INFO("the executor with its clock at " << offset << " exited with " << code
                                         << " (7: faketime did not skew its clock; -1: its waits "
                                            "did not end within a minute)");
  REQUIRE(code == 0);
  const wait_times sleep = times_of(schema, "w-sleep", "(output::text)::double precision / 1e6",
                                    "kind = 'step' AND name = 'after'");
  const wait_times recv =
      times_of(schema, "w-recv", "(output::text)::double precision", "kind = 'recv'");
  INFO("sleep: due " << std::fixed << sleep.due << ", ended " << sleep.ended);
  INFO("recv: due " << std::fixed << recv.due << ", ended " << recv.ended);
  // Not a timing benchmark: a wait may end late by a takeover's delay, never early.
  CHECK(sleep.ended >= sleep.due);
  CHECK(sleep.ended <= sleep.due + 20);
  CHECK(recv.ended >= recv.due);
  CHECK(recv.ended <= recv.due + 20);
}

}  // namespace

TEST_CASE("waits taken over by an executor whose clock is an hour ahead end on the server's time",
          "[skew][process][slow]") {
  takeover_with_skew("+1h", 3600);
}

TEST_CASE("waits taken over by an executor whose clock is an hour behind end on the server's time",
          "[skew][process][slow]") {
  takeover_with_skew("-1h", -3600);
}
