// Metrics (issue 11): the engine's counters and histograms, the hook, the Prometheus text writer
// and the HTTP endpoint, scraped over TCP and checked with Prometheus's own `promtool check
// metrics` (Debian package `prometheus`).
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio/connect.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <durable/metrics_server.hpp>
#include <fstream>
#include <map>
#include <string>

#include "support/prometheus.hpp"
#include "support/workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::check_with_promtool;
using test::http_exchange;
using test::parse_reply;
using test::probe;
using test::promtool_check;
using test::sample;

namespace {

// ---- workflows ---------------------------------------------------------------------------------

asio::awaitable<int> dead_wf(context& ctx) {
  co_return co_await ctx.step(
      "charge", []() -> int { throw permanent_error("HTTP 400: the card is invalid"); });
}

asio::awaitable<int> park_wf(context& ctx) {
  const int v = co_await ctx.step("look", [] { return 1; });
  if (v == 1) throw workflow_parked(ctx.workflow_id(), "needs a person");
  co_return v;
}

void register_all(engine& eng) {
  eng.register_workflow("counter", &test::counter_wf);
  eng.register_workflow("dead", &dead_wf);
  eng.register_workflow("park", &park_wf);
}

std::uint64_t count_of(const labelled_counts& c, std::string_view label) {
  for (const auto& [value, n] : c)
    if (value == label) return n;
  return 0;
}

// What a hook saw: per metric name (and label value, if any) the number of observations and the
// sum of their values.
struct seen_metrics {
  std::map<std::string, std::uint64_t> calls;
  std::map<std::string, double> sums;
  void add(const metric_observation& o) {
    std::string key(o.name);
    for (const auto& l : o.labels)
      key += "{" + std::string(l.name) + "=" + std::string(l.value) + "}";
    ++calls[key];
    sums[key] += o.value;
  }
};

}  // namespace

TEST_CASE("the Prometheus writer escapes labels and help, formats numbers, and promtool accepts it",
          "[metrics]") {
  prometheus_writer w;
  const std::string odd_queue = std::string("we\"ird\\queue\nwith \xff\xfe bytes");
  const std::string odd_workflow = "wf \xc3\xa9t\xc3\xa9 \"quoted\" back\\slash";
  w.gauge("myapp_queue_depth", "Depth of a queue.\nSecond line with a \\ backslash.", 3,
          {{"queue", odd_queue}});
  w.gauge("myapp_queue_depth", "ignored: same family", 4, {{"queue", "plain"}});
  w.counter("myapp_workflows_total", "Workflows.", 12345678901.0, {{"workflow", odd_workflow}});
  w.gauge("myapp_ratio", "A fraction.", 0.1);
  w.gauge("myapp_inf", "Infinite.", std::numeric_limits<double>::infinity());
  histogram_snapshot h;
  h.upper_bounds = {0.001, 0.5, 10};
  h.cumulative = {1, 3, 3, 4};
  h.sum = 12.75;
  h.count = 4;
  w.histogram("myapp_latency_seconds", "Latency.", h, {{"queue", odd_queue}});
  const std::string text = w.take();
  CHECK_THAT(text, Catch::Contains("myapp_queue_depth{queue=\"we\\\"ird\\\\queue\\nwith "
                                   "\xef\xbf\xbd\xef\xbf\xbd bytes\"} 3\n"));
  CHECK_THAT(
      text,
      Catch::Contains(
          "# HELP myapp_queue_depth Depth of a queue.\\nSecond line with a \\\\ backslash.\n"));
  CHECK_THAT(text, Catch::Contains("# TYPE myapp_queue_depth gauge\nmyapp_queue_depth{"));
  CHECK_THAT(text, Catch::Contains("myapp_queue_depth{queue=\"plain\"} 4\n"));
  CHECK_THAT(text, Catch::Contains("myapp_workflows_total{workflow=\"wf \xc3\xa9t\xc3\xa9 "
                                   "\\\"quoted\\\" back\\\\slash\"} 12345678901\n"));
  CHECK_THAT(text, Catch::Contains("myapp_ratio 0.1\n"));
  CHECK_THAT(text, Catch::Contains("myapp_inf +Inf\n"));
  CHECK_THAT(text, Catch::Contains("myapp_latency_seconds_bucket{queue=\"we\\\"ird"));
  CHECK_THAT(text, Catch::Contains("\",le=\"0.001\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("\",le=\"10\"} 3\n"));
  CHECK_THAT(text, Catch::Contains("\",le=\"+Inf\"} 4\n"));
  CHECK_THAT(text, Catch::Contains("myapp_latency_seconds_count{queue="));
  CHECK(text.find("# HELP myapp_queue_depth") == text.rfind("# HELP myapp_queue_depth"));
  check_with_promtool(text);

  // Programming errors are refused.
  prometheus_writer bad;
  CHECK_THROWS_AS(bad.gauge("0starts_with_digit", "x", 1), std::invalid_argument);
  CHECK_THROWS_AS(bad.gauge("ok", "x", 1, {{"bad-label", "v"}}), std::invalid_argument);
  CHECK_THROWS_AS(bad.gauge("ok2", "x", 1, {{"__reserved", "v"}}), std::invalid_argument);
  CHECK_THROWS_AS(bad.histogram("h", "x", h, {{"le", "1"}}), std::invalid_argument);
  bad.gauge("first", "x", 1);
  bad.gauge("second", "x", 1);
  CHECK_THROWS_AS(bad.gauge("first", "x", 2), std::invalid_argument);     // not contiguous
  CHECK_THROWS_AS(bad.counter("second", "x", 2), std::invalid_argument);  // another type
}

TEST_CASE("steps, replays, recoveries, parks and dead letters are counted and served",
          "[metrics]") {
  probe.reset();
  const auto schema = test::fresh_schema("metrics");
  // A first process runs w-rec to its third step and dies there.
  probe.hang_before = "s2";
  test::with_open_engine(test::options(schema), &register_all,
                         [&](engine& eng) -> asio::awaitable<void> {
                           (void)co_await eng.start("counter", "w-rec", 3);
                           co_await test::wait_rows(eng, "w-rec", 2);
                         });
  probe.hang_before.clear();

  // The restarted process (same executor id) resumes it: two steps replayed, one executed.
  seen_metrics seen;
  auto o = test::options(schema);
  o.on_metric = [&](const metric_observation& ob) { seen.add(ob); };
  const std::string odd_queue = "odd \"queue\" \\ with\nnewline";
  o.queues = {"default", odd_queue};
  std::string text;
  test::with_open_engine(o, &register_all, [&](engine& eng) -> asio::awaitable<void> {
    const int rec = co_await eng.handle("w-rec").result<int>();
    CHECK(rec == 3);
    auto ok = co_await eng.start("counter", "w-ok", 3);
    const int v = co_await ok.result<int>();
    CHECK(v == 3);
    auto m = eng.metrics();
    CHECK(m.workflows_recovered == 1);
    CHECK(m.steps_replayed == 2);
    CHECK(m.steps_executed == 4);
    // Every executed step is one journal row through the group committer.
    CHECK(m.journal_write_seconds.count == 4);
    CHECK(m.journal_write_seconds.cumulative.back() == 4);
    CHECK(m.journal_write_seconds.sum > 0);
    CHECK(m.group_commit_batch_size.count >= 1);
    CHECK(m.group_commit_seconds.count == m.group_commit_batch_size.count);
    CHECK(count_of(m.workflows_started, "start") == 1);
    CHECK(count_of(m.workflows_finished, "succeeded") == 2);
    CHECK(m.workflows_taken_over == 0);

    // A dead letter and a park.
    auto dead = co_await eng.start("dead", "w-dead");
    auto dead_err = co_await test::error_of<workflow_dead_letter>(dead.result<int>());
    CHECK(dead_err);
    auto parked = co_await eng.start("park", "w-park");
    auto park_err = co_await test::error_of<workflow_parked>(parked.result<int>());
    CHECK(park_err);
    co_await test::wait_idle(eng);
    m = eng.metrics();
    CHECK(m.workflows_dead_lettered == 1);
    CHECK(count_of(m.workflows_parked, "requested") == 1);
    CHECK(count_of(m.workflows_finished, "failed") == 0);

    // Waiting work in the queues this engine serves, one of them oddly named.
    enqueue_options later;
    later.delay = 1h;
    (void)co_await eng.enqueue(later, "counter", "w-q1", 1);
    later.queue = odd_queue;
    (void)co_await eng.enqueue(later, "counter", "w-q2", 1);
    (void)co_await eng.enqueue(later, "counter", "w-q3", 1);
    const auto depths = co_await eng.queue_depths();
    REQUIRE(depths.size() == 2);
    CHECK(depths[0].queue == "default");
    CHECK(depths[0].queued == 1);
    CHECK(depths[1].queue == odd_queue);
    CHECK(depths[1].queued == 2);

    // The endpoint, scraped over TCP.
    unsigned short port = 0;
    metrics_server_options so;
    so.on_listening = [&](const asio::ip::tcp::endpoint& ep) { port = ep.port(); };
    asio::cancellation_signal stop;
    bool served = false;
    std::exception_ptr serve_error;
    asio::co_spawn(co_await asio::this_coro::executor,
                   serve_metrics(eng, {asio::ip::make_address("127.0.0.1"), 0}, so),
                   asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr e) {
                     served = true;
                     serve_error = e;
                   }));
    while (port == 0) co_await test::sleep_ms(1);
    const std::string get = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    const auto raw = co_await http_exchange(port, get);
    const auto reply = parse_reply(raw);
    CHECK(reply.status_line == "HTTP/1.1 200 OK");
    CHECK(reply.content_type == "text/plain; version=0.0.4; charset=utf-8");
    text = reply.body;
    // A second scrape works as well (one request per connection).
    const auto again = parse_reply(co_await http_exchange(port, get));
    CHECK(again.status_line == "HTTP/1.1 200 OK");
    m = eng.metrics();
    CHECK(sample(text, "durable_steps_executed_total") == double(m.steps_executed));
    CHECK(sample(text, "durable_steps_replayed_total") == 2.0);
    CHECK(sample(text, "durable_workflows_recovered_total") == 1.0);
    CHECK(sample(text, "durable_workflows_dead_lettered_total") == 1.0);
    CHECK(sample(text, "durable_workflows_parked_total{reason=\"requested\"}") == 1.0);
    CHECK(sample(text, "durable_workflows_finished_total{status=\"succeeded\"}") == 2.0);
    CHECK(sample(text, "durable_journal_write_seconds_count") ==
          double(m.journal_write_seconds.count));
    CHECK(sample(text, "durable_journal_write_seconds_bucket{le=\"+Inf\"}") ==
          double(m.journal_write_seconds.count));
    CHECK(sample(text, "durable_queue_depth{queue=\"default\"}") == 1.0);
    CHECK(sample(text, "durable_queue_depth{queue=\"odd \\\"queue\\\" \\\\ with\\nnewline\"}") ==
          2.0);
    CHECK(sample(text, "durable_queue_depth_ok") == 1.0);
    CHECK(sample(text, "durable_executor_info{executor=\"exec-a\",version=\"\"}") == 1.0);
    CHECK(sample(text, "durable_workflows_running") == 0.0);
    CHECK(sample(text, "durable_lease_expired") == 0.0);

    // The hook saw every observation the counters made.
    CHECK(seen.calls["durable_steps_executed_total"] == m.steps_executed);
    CHECK(seen.calls["durable_steps_replayed_total"] == m.steps_replayed);
    CHECK(seen.calls["durable_workflows_recovered_total"] == 1);
    CHECK(seen.calls["durable_workflows_dead_lettered_total"] == 1);
    CHECK(seen.calls["durable_workflows_parked_total{reason=requested}"] == 1);
    CHECK(seen.calls["durable_workflows_started_total{via=start}"] == 3 + 0);
    CHECK(seen.calls["durable_journal_write_seconds"] == m.journal_write_seconds.count);
    CHECK(seen.sums["durable_journal_write_seconds"] == Approx(m.journal_write_seconds.sum));
    CHECK(seen.calls["durable_group_commit_batch_size"] == m.group_commit_batch_size.count);

    // Cancelling the server's coroutine stops it.
    stop.emit(asio::cancellation_type::terminal);
    for (int i = 0; i < 2000 && !served; ++i) co_await test::sleep_ms(1);
    CHECK(served);
    CHECK_FALSE(serve_error);
  });
  check_with_promtool(text);
}

TEST_CASE("a takeover is counted", "[metrics]") {
  probe.reset();
  const auto schema = test::fresh_schema("metrics_takeover");
  probe.hang_before = "s1";
  test::with_open_engine(test::options(schema, "exec-dies"), &register_all,
                         [&](engine& eng) -> asio::awaitable<void> {
                           (void)co_await eng.start("counter", "w-taken", 2);
                           co_await test::wait_rows(eng, "w-taken", 1);
                         });
  probe.hang_before.clear();
  auto o = test::options(schema, "exec-taker");
  o.heartbeat_interval = 50ms;  // the maintenance tick that takes it over
  test::with_open_engine(o, &register_all, [&](engine& eng) -> asio::awaitable<void> {
    co_await test::lapse_lease(eng, "exec-dies");
    const int v = co_await eng.handle("w-taken").result<int>();
    CHECK(v == 1);
    const auto m = eng.metrics();
    CHECK(m.workflows_taken_over == 1);
    CHECK(m.workflows_recovered == 0);
    CHECK(m.steps_replayed == 1);
    CHECK(m.steps_executed == 1);
    const std::string text = co_await prometheus_text(eng);
    CHECK(sample(text, "durable_workflows_taken_over_total") == 1.0);
    co_await eng.shutdown();
  });
}

TEST_CASE("a park at the journal limit is counted with reason journal_limit", "[metrics]") {
  probe.reset();
  const auto schema = test::fresh_schema("metrics_jlimit");
  auto o = test::options(schema);
  o.journal_limit = 2;
  test::with_open_engine(o, &register_all, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("counter", "w-big", 3);
    auto parked = co_await test::error_of<workflow_parked>(h.result<int>());
    CHECK(parked);
    co_await test::wait_idle(eng);
    const auto m = eng.metrics();
    CHECK(count_of(m.workflows_parked, "journal_limit") == 1);
    CHECK(count_of(m.workflows_parked, "other") == 0);
    const std::string text = co_await prometheus_text(eng);
    CHECK(sample(text, "durable_workflows_parked_total{reason=\"journal_limit\"}") == 1.0);
  });
}

TEST_CASE("an orphan that its claim parks is not counted as recovered", "[metrics]") {
  probe.reset();
  const auto schema = test::fresh_schema("metrics_orphan");
  auto o = test::options(schema, "exec-o");
  o.heartbeat_interval = 50ms;
  test::with_open_engine(o, &register_all, [&](engine& eng) -> asio::awaitable<void> {
    // Ours, running nowhere (its process died), and claimed too often without progress: the
    // maintenance tick finds it, and its claim parks it instead of starting it (I9).
    auto c = co_await eng.pool().acquire();
    const std::string sql = "INSERT INTO " + test::q(schema) +
                            ".workflows (id, name, status, inputs, executor_id, stalled_claims) "
                            "VALUES ($1, 'counter', 'running', '[1]', 'exec-o', 100)";
    const std::string id = "w-orphan";
    (void)co_await c->exec(sql, id);
    const auto row = co_await test::wait_status(eng, id, "parked");
    CHECK(row.status == "parked");
    co_await test::sleep_ms(100);
    const auto m = eng.metrics();
    CHECK(count_of(m.workflows_parked, "no_progress") == 1);
    CHECK(m.workflows_recovered == 0);
  });
}

TEST_CASE("the metrics endpoint survives bad requests (404, 405, 400) and stops at shutdown",
          "[metrics]") {
  const auto schema = test::fresh_schema("metrics_http");
  std::vector<std::string> events;
  auto o = test::options(schema);
  o.on_event = [&](const event& e) {
    events.push_back(std::string(e.component) + ": " + std::string(e.message));
  };
  test::with_open_engine(o, &register_all, [&](engine& eng) -> asio::awaitable<void> {
    unsigned short port = 0;
    metrics_server_options so;
    so.on_listening = [&](const asio::ip::tcp::endpoint& ep) { port = ep.port(); };
    so.timeout = 300ms;
    bool served = false;
    std::exception_ptr serve_error;
    asio::co_spawn(co_await asio::this_coro::executor,
                   serve_metrics(eng, {asio::ip::make_address("127.0.0.1"), 0}, so),
                   [&](std::exception_ptr e) {
                     served = true;
                     serve_error = e;
                   });
    while (port == 0) co_await test::sleep_ms(1);

    // A second server on the same port cannot bind: it throws at once.
    const asio::ip::tcp::endpoint taken(asio::ip::make_address("127.0.0.1"), port);
    auto bind_err = co_await test::error_of(serve_metrics(eng, taken));
    CHECK(bind_err);

    const std::string other = "GET /other HTTP/1.1\r\n\r\n";
    const auto r404 = parse_reply(co_await http_exchange(port, other));
    CHECK(r404.status_line == "HTTP/1.1 404 Not Found");
    const std::string post = "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    const auto r405 = parse_reply(co_await http_exchange(port, post));
    CHECK(r405.status_line == "HTTP/1.1 405 Method Not Allowed");
    const std::string garbage = "\x01\x02 garbage\xff\r\n\r\n";
    const auto r400 = parse_reply(co_await http_exchange(port, garbage));
    CHECK(r400.status_line == "HTTP/1.1 400 Bad Request");
    const std::string no_version = "GET /metrics\r\n\r\n";
    const auto r400b = parse_reply(co_await http_exchange(port, no_version));
    CHECK(r400b.status_line == "HTTP/1.1 400 Bad Request");
    const std::string huge = "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(20000, 'x');
    const auto r431 = parse_reply(co_await http_exchange(port, huge));
    CHECK(r431.status_line == "HTTP/1.1 431 Request Header Fields Too Large");
    // A client that connects and says nothing, and one that stops halfway, are dropped.
    {
      asio::ip::tcp::socket idle(co_await asio::this_coro::executor);
      co_await idle.async_connect(taken, asio::use_awaitable);
      const std::string half = "GET ";
      const auto cut = co_await http_exchange(port, half);  // closed after the server's timeout
      CHECK(cut.empty());
    }
    const std::string head = "HEAD /metrics?x=1 HTTP/1.0\r\n\r\n";
    const auto head_reply = parse_reply(co_await http_exchange(port, head));
    CHECK(head_reply.status_line == "HTTP/1.1 200 OK");
    CHECK(head_reply.body.empty());
    // After all that, it still serves.
    const std::string get = "GET /metrics HTTP/1.1\r\n\r\n";
    const auto ok = parse_reply(co_await http_exchange(port, get));
    CHECK(ok.status_line == "HTTP/1.1 200 OK");
    CHECK_THAT(ok.body, Catch::Contains("# TYPE durable_journal_write_seconds histogram"));
    CHECK(served == false);

    // Shutdown stops it.
    co_await eng.shutdown();
    for (int i = 0; i < 2000 && !served; ++i) co_await test::sleep_ms(1);
    CHECK(served);
    CHECK_FALSE(serve_error);
  });
}

TEST_CASE("idle and slow-loris clients do not starve the metrics endpoint, too big is refused",
          "[metrics]") {
  const auto schema = test::fresh_schema("metrics_hostile");
  std::vector<std::string> events;
  auto o = test::options(schema);
  o.on_event = [&](const event& e) {
    events.push_back(std::string(e.component) + ": " + std::string(e.message));
  };
  test::with_open_engine(o, &register_all, [&](engine& eng) -> asio::awaitable<void> {
    unsigned short port = 0;
    metrics_server_options so;
    so.on_listening = [&](const asio::ip::tcp::endpoint& ep) { port = ep.port(); };
    so.max_connections = 16;
    so.timeout = 3s;
    bool served = false;
    asio::co_spawn(co_await asio::this_coro::executor,
                   serve_metrics(eng, {asio::ip::make_address("127.0.0.1"), 0}, so),
                   [&](std::exception_ptr) { served = true; });
    while (port == 0) co_await test::sleep_ms(1);
    const std::string get = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    int answered = 0;
    std::string last;
    auto scrape = [&]() -> asio::awaitable<void> {
      const auto r = parse_reply(co_await http_exchange(port, get));
      if (r.status_line == "HTTP/1.1 200 OK") ++answered;
      last = r.body;
    };

    // As many idle connections as the server holds, and four slow lorises: every scrape answers.
    test::hostile_clients hostile(co_await asio::this_coro::executor, port);
    co_await hostile.idle(16);
    hostile.slow(4);
    co_await test::sleep_ms(100);
    for (int i = 0; i < 6; ++i) co_await scrape();
    CHECK(answered == 6);
    // And four times as many.
    co_await hostile.idle(64);
    for (int i = 0; i < 6; ++i) co_await scrape();
    CHECK(answered == 12);
    // Bounded: the oldest clients that had not sent a whole request were closed for newer ones.
    const auto open_now = sample(last, "durable_metrics_server_connections");
    REQUIRE(open_now);
    CHECK(*open_now >= 1);
    CHECK(*open_now <= 16);
    // (Timed out instead, on a machine slow enough to take the timeout for all that.)
    const double evicted =
        sample(last, "durable_metrics_server_refused_total{reason=\"evicted\"}").value_or(0) +
        sample(last, "durable_metrics_server_refused_total{reason=\"timeout\"}").value_or(0);
    CHECK(evicted >= 64 - 16);
    CHECK(sample(last, "durable_metrics_server_refused_total{reason=\"rejected\"}") == 0.0);
    check_with_promtool(last);
    // Reported through the event hook (one report a minute at most).
    const auto reported = std::count_if(events.begin(), events.end(), [](const std::string& e) {
      return e.starts_with("metrics: the metrics endpoint at 127.0.0.1:") &&
             e.find("closed before their request was whole") != std::string::npos;
    });
    CHECK(reported >= 1);
    CHECK(count_of(eng.metrics().background_failures, "metrics") >= 1);
    hostile.close();
    for (int i = 0; i < 500 && hostile.slow_running() > 0; ++i) co_await test::sleep_ms(10);

    // A slow loris that keeps going is closed once its head is not whole within the timeout.
    test::hostile_clients slow(co_await asio::this_coro::executor, port);
    slow.slow(2);
    for (int i = 0; i < 3000 && slow.slow_running() > 0; ++i) co_await test::sleep_ms(10);
    CHECK(slow.slow_cut() == 2);
    co_await scrape();
    CHECK(answered == 13);
    CHECK(sample(last, "durable_metrics_server_refused_total{reason=\"timeout\"}").value_or(0) >=
          2);

    // Too big: a head over the limit (431), a body (413), however it is announced.
    const std::string huge = "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(64 * 1024, 'x');
    const auto r431 = parse_reply(co_await http_exchange(port, huge));
    CHECK(r431.status_line == "HTTP/1.1 431 Request Header Fields Too Large");
    const std::string body = "GET /metrics HTTP/1.1\r\nContent-Length: 100000000000\r\n\r\n";
    const auto r413 = parse_reply(co_await http_exchange(port, body));
    CHECK(r413.status_line == "HTTP/1.1 413 Content Too Large");
    const std::string chunked = "GET /metrics HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
    const auto r413b = parse_reply(co_await http_exchange(port, chunked));
    CHECK(r413b.status_line == "HTTP/1.1 413 Content Too Large");
    const std::string bad_length = "GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n";
    const auto r400 = parse_reply(co_await http_exchange(port, bad_length));
    CHECK(r400.status_line == "HTTP/1.1 400 Bad Request");
    const std::string empty_body = "GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    const auto r200 = parse_reply(co_await http_exchange(port, empty_body));
    CHECK(r200.status_line == "HTTP/1.1 200 OK");
    co_await scrape();
    CHECK(answered == 14);
    CHECK(sample(last, "durable_metrics_server_refused_total{reason=\"too_large\"}") == 3.0);
    CHECK(sample(last, "durable_metrics_server_refused_total{reason=\"malformed\"}") == 1.0);
    CHECK(served == false);

    co_await eng.shutdown();
    for (int i = 0; i < 2000 && !served; ++i) co_await test::sleep_ms(1);
    CHECK(served);
  });
}

TEST_CASE("until_shutdown ends at shutdown or when cancelled, a reported failure counts",
          "[metrics]") {
  const auto schema = test::fresh_schema("metrics_public");
  std::vector<std::string> events;
  auto o = test::options(schema);
  o.on_event = [&](const event& e) {
    events.push_back(std::string(e.component) + ": " + std::string(e.message));
  };
  test::with_open_engine(o, &register_all, [&](engine& eng) -> asio::awaitable<void> {
    // Cancelled by its caller: it completes without an error, and the engine goes on.
    asio::cancellation_signal stop;
    bool cancelled = false;
    std::exception_ptr cancel_error;
    eng.until_shutdown(asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr e) {
      cancelled = true;
      cancel_error = e;
    }));
    bool at_shutdown = false;
    std::exception_ptr shutdown_error;
    eng.until_shutdown([&](std::exception_ptr e) {
      at_shutdown = true;
      shutdown_error = e;
    });
    co_await test::sleep_ms(10);
    CHECK_FALSE(cancelled);
    stop.emit(asio::cancellation_type::terminal);
    for (int i = 0; i < 2000 && !cancelled; ++i) co_await test::sleep_ms(1);
    CHECK(cancelled);
    CHECK_FALSE(cancel_error);
    CHECK_FALSE(eng.shutting_down());
    CHECK_FALSE(at_shutdown);

    // A failure of a part beside the engine: an event, and a count under its component (one
    // the metrics do not list counts as "other").
    eng.report_background_failure("metrics", "scrape failed in a test");
    eng.report_background_failure("my_loop", "my loop failed in a test");
    std::map<std::string, std::uint64_t> failures;
    for (const auto& [component, n] : eng.metrics().background_failures)
      failures[std::string(component)] = n;
    CHECK(failures["metrics"] == 1);
    CHECK(failures["other"] == 1);
    CHECK(std::find(events.begin(), events.end(), "metrics: scrape failed in a test") !=
          events.end());
    CHECK(std::find(events.begin(), events.end(), "my_loop: my loop failed in a test") !=
          events.end());

    // Shutdown completes the one still waiting.
    co_await eng.shutdown();
    CHECK(eng.shutting_down());
    for (int i = 0; i < 2000 && !at_shutdown; ++i) co_await test::sleep_ms(1);
    CHECK(at_shutdown);
    CHECK_FALSE(shutdown_error);
  });
}
