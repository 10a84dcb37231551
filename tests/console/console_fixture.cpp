// The browser tests' application (tests/console/test_browser.py): it fills a schema with
// workflows in every state a page shows — succeeded ones with steps, a dead letter, a failed
// one, a parent with children, a sleeping one with an unconsumed message and an event, queued
// work in a paused queue, a schedule, and ids, names and outputs that hold HTML and
// javascript: URLs, and workflows queued in a paused queue 'bulk' for the bulk actions — then
// serves the console from its own process (durable::console, as an application mounts it) with
// its engine open, so the executors page has a live executor and actions run here.
//
//   console_fixture SCHEMA [--token-file PATH] [--read-only] [--no-seed]
//     prints "console: URL" once the data is in place and serves until its standard input
//     closes or SIGTERM. --token-file: the console's token (the file's content, surrounding
//     whitespace trimmed), which turns its actions on; --read-only: none even so; --no-seed:
//     serve SCHEMA as it is (filled by another fixture) with an engine that is never opened,
//     as `durable ui` does. The console's query_timeout is 2 s.
#include <fmt/core.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/read.hpp>
#include <asio/signal_set.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <durable.hpp>
#include <durable/console.hpp>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

asio::awaitable<int> invoice(durable::context& ctx, int n) {
  const int amount = co_await ctx.step("fetch order", [&] { return n * 100; });
  const std::string pdf =
      co_await ctx.step("render pdf", [&] { return fmt::format("invoice {}.pdf", amount); });
  (void)co_await ctx.step("store", [&] { return pdf.size(); });
  co_return amount;
}

// The card is declined the first time only: the dead letter charge-7 succeeds when retried
// (the browser test retries it from its page).
std::atomic<int> charge_attempts{0};

asio::awaitable<int> charge(durable::context& ctx, int cents) {
  co_return co_await ctx.step("charge card", [&]() -> int {
    if (charge_attempts.fetch_add(1) == 0)
      throw durable::permanent_error(fmt::format("card declined: {} cents over the limit", cents));
    return cents;
  });
}

// The gateway answers 503 twice, then the capture goes through: three attempts of one step,
// the workflow page's attempt history.
std::atomic<int> capture_attempts{0};

asio::awaitable<int> capture(durable::context& ctx, int cents) {
  const durable::retry quick{.max_attempts = 5, .initial = 20ms, .factor = 2.0, .jitter = 0};
  co_return co_await ctx.step(
      "capture payment",
      [&]() -> int {
        if (capture_attempts.fetch_add(1) < 2)
          throw std::runtime_error(fmt::format("gateway answered 503 for {} cents", cents));
        return cents;
      },
      quick);
}

// Waits for an approval; the fixture sends it under a mistyped topic ('aproval'), so the workflow
// page says what it waits for and what came instead.
asio::awaitable<std::string> approval(durable::context& ctx) {
  auto v = co_await ctx.recv<std::string>("approval");
  co_return v ? *v : std::string();
}

// Waits for its child, which waits for an approval nobody sends.
asio::awaitable<std::string> supervisor(durable::context& ctx) {
  auto child = co_await ctx.start_child("approval");
  co_return co_await child.result<std::string>();
}

// The bank's API is down: the next attempt is an hour away (the workflow is unloaded until
// then), the second of four.
asio::awaitable<int> settle(durable::context& ctx) {
  const durable::retry hourly{
      .max_attempts = 4, .initial = 1h, .factor = 1.0, .max = 1h, .jitter = 0};
  co_return co_await ctx.step(
      "settle batch", []() -> int { throw std::runtime_error("the bank's API answered 503"); },
      hourly);
}

// Queued in the paused queue 'bulk', which no executor serves: they stay pending for the bulk
// actions of the browser test.
asio::awaitable<int> bulk_sync(durable::context& ctx, int n) {
  co_return co_await ctx.step("sync", [&] { return n; });
}

asio::awaitable<int> broken(durable::context& ctx) {
  (void)co_await ctx.step("load", [] { return 1; });
  throw std::runtime_error("the report template is missing");
}

// Hostile values: a name with markup, an output with markup and a javascript: URL.
asio::awaitable<std::map<std::string, std::string>> hostile(durable::context& ctx) {
  (void)co_await ctx.step("<b>bold step</b>", [] { return std::string("<i>x</i>"); });
  co_return std::map<std::string, std::string>{{"html", "<b>x</b><script>alert(3)</script>"},
                                               {"url", "javascript:alert(4)"}};
}

asio::awaitable<int> child_task(durable::context& ctx, int n) {
  co_return co_await ctx.step("work", [&] { return n * 2; });
}

asio::awaitable<int> parent(durable::context& ctx) {
  auto a = co_await ctx.start_child("child_task", 1);
  auto b = co_await ctx.start_child("child_task", 2);
  auto ra = a.result<int>();
  auto rb = b.result<int>();
  auto [x, y] = co_await ctx.all(std::move(ra), std::move(rb));
  co_return x + y;
}

asio::awaitable<std::string> waiter(durable::context& ctx) {
  const std::string stage = "waiting for the warehouse";  // named: GCC 12
  co_await ctx.set_event("stage", stage);
  co_await ctx.sleep_for(24h);
  co_return "done";
}

/// A stream the browser test follows live: a value and a hostile one, then one more for each
/// "more" message, closed by the message "done".
asio::awaitable<int> narrator(durable::context& ctx) {
  const std::string first = "once upon a time", hostile = "<img src=x onerror=alert(3)>";
  co_await ctx.write_stream("story", first);
  co_await ctx.write_stream("story", hostile);
  for (;;) {
    const auto more = co_await ctx.recv<std::string>("more");
    if (!more || *more == "done") break;
    co_await ctx.write_stream("story", *more);
  }
  co_return static_cast<int>(co_await ctx.close_stream("story"));
}

asio::awaitable<std::string> report(durable::context& ctx, std::string slot) {
  co_return co_await ctx.step("build report", [&] { return "report for " + slot; });
}

template <class T>
asio::awaitable<void> expect_failure(durable::workflow_handle h) {
  try {
    (void)co_await h.result<T>();
  } catch (const std::exception&) {
    co_return;
  }
  throw std::runtime_error("workflow " + h.id() + " was expected to fail and succeeded");
}

asio::awaitable<void> fill(durable::engine& eng) {
  for (int i = 1; i <= 12; ++i) {
    const std::string id = fmt::format("invoice-{}", i);  // named: GCC 12
    auto h = co_await eng.start("invoice", id, i);
    (void)co_await h.result<int>();
  }
  auto dead = co_await eng.start("charge", "charge-7", 4200);
  co_await expect_failure<int>(dead);
  auto failed = co_await eng.start("broken", "report-broken");
  co_await expect_failure<int>(failed);
  auto bad = co_await eng.start("<img src=x onerror=alert(2)>", "<script>alert(1)</script>");
  (void)co_await bad.result<std::map<std::string, std::string>>();
  auto bad_url = co_await eng.start("<img src=x onerror=alert(2)>", "javascript:alert(5)");
  (void)co_await bad_url.result<std::map<std::string, std::string>>();
  // An id with a right-to-left override and its end (U+202E, U+202C): shown raw, it reads as
  // another id.
  auto bidi = co_await eng.start("<img src=x onerror=alert(2)>",
                                 "mark-\xe2\x80\xae"
                                 "evil\xe2\x80\xac");
  (void)co_await bidi.result<std::map<std::string, std::string>>();
  auto flaky = co_await eng.start("capture", "capture-3", 990);
  (void)co_await flaky.result<int>();
  (void)co_await eng.start("approval", "approval-5");
  const std::string typo = "yes";
  (void)co_await eng.send("approval-5", "aproval", typo);
  (void)co_await eng.start("supervisor", "supervisor-2");
  (void)co_await eng.start("settle", "settle-1");
  // In a trace (the browser test reads its id on the parent's page and a child's).
  const durable::start_options traced{
      .timeout = {},
      .traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      .tracestate = {}};
  auto tree = co_await eng.start(traced, "parent", "order-tree");
  (void)co_await tree.result<int>();
  (void)co_await eng.start("narrator", "story-1");
  auto w = co_await eng.start("waiter", "shipment-9");
  const auto stage = co_await eng.get_event<std::string>("shipment-9", "stage", 20s);
  if (!stage) throw std::runtime_error("shipment-9 did not publish its stage");
  const std::string approval = "<u>alice</u>";
  const bool sent = co_await eng.send("shipment-9", "approval", approval);
  if (!sent) throw std::runtime_error("the message to shipment-9 was not sent");
  (void)w;
  co_await eng.pause_queue("emails");
  for (int i = 1; i <= 3; ++i) {
    durable::enqueue_options e;
    e.queue = "emails";
    const std::string id = fmt::format("email-{}", i);
    (void)co_await eng.enqueue(e, "invoice", id, i);
  }
  co_await eng.pause_queue("bulk");
  for (int i = 1; i <= 4; ++i) {
    durable::enqueue_options e;
    e.queue = "bulk";
    const std::string id = fmt::format("bulk-{}", i);
    (void)co_await eng.enqueue(e, "sync", id, i);
  }
  durable::schedule_options s;
  s.id = "nightly-report";
  s.cron = "0 3 * * *";
  s.time_zone = "Europe/Berlin";
  s.workflow = "report";
  s.pass_slot = true;
  co_await eng.schedule(s);
  const std::string schedule_id = "nightly-report";  // named: GCC 12
  (void)co_await eng.trigger_schedule(schedule_id);  // one run now: the schedule's page lists it
}

std::string trimmed(std::string s) {
  const auto* ws = " \t\r\n\f\v";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::ostringstream out;
  out << f.rdbuf();
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string schema;
  std::string token_file;
  bool read_only = false;
  bool seed = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--token-file" && i + 1 < argc) {
      token_file = argv[++i];
    } else if (a == "--read-only") {
      read_only = true;
    } else if (a == "--no-seed") {
      seed = false;
    } else if (schema.empty() && !a.starts_with("--")) {
      schema = a;
    } else {
      schema.clear();
      break;
    }
  }
  if (schema.empty()) {
    fmt::print(stderr,
               "usage: console_fixture SCHEMA [--token-file PATH] [--read-only] [--no-seed]\n");
    return 2;
  }
  try {
    asio::io_context io;
    durable::engine_options o;
    if (const char* url = std::getenv("DURABLE_DATABASE_URL")) o.conninfo = url;
    o.schema = schema;
    o.executor_id = "console-fixture";
    o.poll_interval = 50ms;
    o.queues = {"default", "emails"};
    durable::engine eng(io.get_executor(), o);
    eng.register_workflow("invoice", &invoice);
    eng.register_workflow("charge", &charge);
    eng.register_workflow("capture", &capture);
    eng.register_workflow("approval", &approval);
    eng.register_workflow("supervisor", &supervisor);
    eng.register_workflow("settle", &settle);
    eng.register_workflow("broken", &broken);
    eng.register_workflow("<img src=x onerror=alert(2)>", &hostile);
    eng.register_workflow("child_task", &child_task);
    eng.register_workflow("parent", &parent);
    eng.register_workflow("waiter", &waiter);
    eng.register_workflow("narrator", &narrator);
    eng.register_workflow("report", &report);
    eng.register_workflow("sync", &bulk_sync);
    durable::console_options co;
    co.port = 0;
    if (!token_file.empty()) co.token = trimmed(read_file(token_file));
    co.read_only = read_only;
    co.query_timeout = 2s;  // a test of a database that does not answer waits less
    durable::console console(io, eng, co);

    std::exception_ptr failed;
    asio::signal_set signals(io, SIGTERM, SIGINT);
    asio::posix::stream_descriptor in(io, ::dup(0));
    char byte = 0;
    auto stop = [&] {
      signals.cancel();
      in.close();
      console.stop();
      if (!seed) return;  // the engine was never opened
      asio::co_spawn(
          io, [&]() -> asio::awaitable<void> { co_await eng.shutdown(); },
          [](std::exception_ptr) {});
    };
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          if (seed) {
            (void)co_await eng.open();
            co_await fill(eng);
          }
          console.start();
          fmt::print("console: {}\n", console.url());
          std::fflush(stdout);
        },
        [&](std::exception_ptr e) {
          if (!e) return;
          failed = e;
          stop();
        });
    signals.async_wait([&](const asio::error_code& ec, int) {
      if (!ec) stop();
    });
    asio::async_read(in, asio::buffer(&byte, 1), [&](const asio::error_code& ec, std::size_t) {
      if (ec != asio::error::operation_aborted) stop();
    });
    io.run();
    if (failed) std::rethrow_exception(failed);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "console_fixture: {}\n", e.what());
    return 1;
  }
}
