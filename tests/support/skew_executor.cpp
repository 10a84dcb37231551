// An executor process for the clock-skew tests (tests/test_skew.cpp), which run it under
// faketime so that its wall clock is wrong while its monotonic clock is right, as on a host
// whose time is not synchronized.
//
//   skew_executor <schema> <executor id> start          starts the two workflows, then idles
//                                                       (the test kills it mid-wait)
//   skew_executor <schema> <executor id> resume <skew>  takes them over once the first
//                                                       executor's lease ran out and waits for
//                                                       both; <skew> is the wall-clock offset
//                                                       (s) faketime was asked for
//
// Exit codes: 0 both workflows ended as expected, 3 a wrong result, 4 a workflow failed, 5 not
// finished in time, 7 this process's clock is not skewed as asked (faketime did not work).
#include <cmath>
#include <cstdio>
#include <string>

#include "support/workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

// How long each wait lasts: long enough that the second executor takes it over (after the
// first one's lease of 1 s ran out) well before it is due, so that a wait ending at once on a
// clock an hour ahead would show; no longer, since the cases wait for it twice.
constexpr auto wait_length = 4s;

/// Sleeps in its run (unload_after is an hour here), between two steps.
asio::awaitable<int> skew_sleep(context& ctx) {
  (void)co_await ctx.step("before", [] { return 1; });
  co_await ctx.sleep_for(wait_length);
  co_return co_await ctx.step("after", [] { return 2; });
}

/// Waits in its run for a message that never comes, up to its timeout.
asio::awaitable<int> skew_recv(context& ctx) {
  (void)co_await ctx.step("before", [] { return 1; });
  const std::optional<int> m = co_await ctx.recv<int>("never", wait_length);
  co_return m ? 3 : 2;
}

/// How far this process's wall clock is ahead of the server's (seconds).
asio::awaitable<double> skew_of(engine& eng) {
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec("SELECT extract(epoch FROM clock_timestamp())::double precision");
  const double server = r[0].get<double>(0);
  const double local =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  co_return local - server;
}

asio::awaitable<int> await_result(engine& eng, std::string id) {
  for (int i = 0; i < 6000; ++i) {  // taken over only once the first executor's lease ran out
    try {
      const int v = co_await eng.handle(id).result<int>();
      co_return v == 2 ? 0 : 3;
    } catch (const workflow_failed&) {
      co_return 4;
    } catch (const durable::error&) {
    } catch (const pg::error&) {
    }
    co_await test::sleep_ms(10);
  }
  co_return 5;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: skew_executor <schema> <executor id> start|resume [skew s]\n");
    return 2;
  }
  const std::string schema = argv[1], executor = argv[2], mode = argv[3];
  const double skew = argc > 4 ? std::stod(argv[4]) : 0.0;
  int code = 1;
  try {
    test::run([&]() -> asio::awaitable<void> {
      auto o = test::options(schema, executor);
      o.lease_timeout = 1000ms;
      o.heartbeat_interval = 100ms;
      o.poll_interval = 50ms;
      o.unload_after = 1h;  // the waits stay in their run, as in the reported case
      engine eng(co_await asio::this_coro::executor, o);
      eng.register_workflow("skew-sleep", &skew_sleep);
      eng.register_workflow("skew-recv", &skew_recv);
      (void)co_await eng.open();
      if (std::fabs(co_await skew_of(eng) - skew) > 60) {
        code = 7;
        co_return;
      }
      if (mode == "start") {
        (void)co_await eng.start("skew-sleep", "w-sleep");
        (void)co_await eng.start("skew-recv", "w-recv");
        co_await test::sleep_ms(600000);
        co_return;
      }
      const int a = co_await await_result(eng, "w-sleep");
      const int b = co_await await_result(eng, "w-recv");
      code = a != 0 ? a : b;
    }());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "skew_executor %s: %s\n", executor.c_str(), e.what());
  }
  return code;
}
