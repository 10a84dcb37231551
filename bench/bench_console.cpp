// The web console's pages over a large table (docs/console.md, issue 21): each API request the
// pages make, timed over HTTP against a console served in this process, with 1 000 000
// workflows in the schema (bench_console; seeded once and kept, since seeding takes a minute).
//
//   floor     GET /api/session: the same HTTP round trip, no database
//   pages     the overview, the workflow list (first page, a deep cursor, each filter), a
//             workflow, queues, executors, schedules, the audit, a bulk dry run
//
// Each request runs `repeats` times (20); the table shows the median and the p99 in ms, the
// median's ratio to the floor's, and whether the p99 is under the target of 200 ms.
// Plain output; exits 1 when a page misses the target. Database: $DURABLE_DATABASE_URL, else
// libpq's PG* variables. Arguments: [workflows] (default 1000000).
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <durable.hpp>
#include <durable/console.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

namespace {

const std::string schema = "bench_console";
constexpr int repeats = 20;
constexpr double target_ms = 200;

using bench::value;

// Workflows as an application's table looks after months: mostly succeeded, some failed,
// pending, sleeping, a few dead letters and parked ones, four names, three queues, created one
// per 3 s (a month for 1 000 000), each with two journal rows for the first 1 000.
void seed(bench::raw_connection& c, long n) {
  const long have = std::stol(value(c, "SELECT count(*) FROM " + schema + ".workflows"));
  c.exec("INSERT INTO " + schema +
         ".steps (workflow_id, seq, name, kind, status, output, epoch) "
         "SELECT 'order-' || lpad(g::text, 8, '0'), s, 'step-' || s, 'step', 'succeeded', "
         "to_jsonb(s), 1 FROM generate_series(0, 999) g, generate_series(0, 1) s "
         "ON CONFLICT DO NOTHING");
  if (have >= n) return;
  std::printf("seeding %ld workflows (once; the schema is kept)...\n", n - have);
  std::fflush(stdout);
  for (long from = have; from < n; from += 100000) {
    const long to = std::min(n, from + 100000) - 1;
    c.exec("INSERT INTO " + schema +
           ".workflows (id, name, status, inputs, output, queue, created_at, updated_at, "
           "completed_at, error) "
           "SELECT 'order-' || lpad(g::text, 8, '0'), "
           "(ARRAY['invoice','charge','report','ship'])[1 + g % 4], "
           "CASE WHEN g % 5000 = 7 THEN 'dead_letter' WHEN g % 5000 = 11 THEN 'parked' "
           "WHEN g % 500 = 3 THEN 'failed' WHEN g % 1000 = 5 THEN 'sleeping' "
           "WHEN g % 1000 = 9 THEN 'pending' ELSE 'succeeded' END, "
           "jsonb_build_array(g, 'customer-' || (g % 977)), jsonb_build_object('total', g % 1000), "
           "(ARRAY['default','emails','billing'])[1 + g % 3], "
           "now() - make_interval(secs => (" +
           std::to_string(n) + " - g) * 3), now() - make_interval(secs => (" + std::to_string(n) +
           " - g) * 3 - 2), now() - make_interval(secs => (" + std::to_string(n) +
           " - g) * 3 - 2), "
           "CASE WHEN g % 500 = 3 THEN jsonb_build_object('message', 'card declined') END "
           "FROM generate_series(" +
           std::to_string(from) + ", " + std::to_string(to) + ") g");
  }
  c.exec("ANALYZE " + schema + ".workflows");
  c.exec("ANALYZE " + schema + ".steps");
}

// One HTTP/1.1 request on a new connection; the body. Throws unless the status is 200.
std::string http(const std::string& port, const std::string& method, const std::string& target,
                 const std::string& body = {}, const std::string& token = {}) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  asio::ip::tcp::resolver r(io);
  asio::connect(s, r.resolve("127.0.0.1", port));
  std::string req =
      method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1:" + port + "\r\nConnection: close\r\n";
  if (!token.empty()) req += "Authorization: Bearer " + token + "\r\n";
  if (!body.empty())
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  asio::write(s, asio::buffer(req));
  std::string got;
  asio::error_code ec;
  asio::read(s, asio::dynamic_buffer(got), ec);
  if (got.rfind("HTTP/1.1 200", 0) != 0)
    throw std::runtime_error(method + " " + target + ": " + got.substr(0, got.find("\r\n")) + " " +
                             got.substr(got.find("\r\n\r\n") + 4, 300));
  return got.substr(got.find("\r\n\r\n") + 4);
}

struct timing {
  double median = 0, p99 = 0;
};

template <class F>
timing time_of(F request) {
  std::vector<double> ms;
  request();  // warm: prepared statements, the pool's connections, the server's cache
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    request();
    ms.push_back(bench::seconds_since(t0) * 1000);
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, std::size_t(double(ms.size()) * 0.99))]};
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::stol(argv[1]) : 1000000;
  bench::raw_connection c(bench::conninfo());
  asio::io_context io;
  durable::engine_options o;
  o.conninfo = bench::conninfo();
  o.schema = schema;
  durable::engine eng(io.get_executor(), o);
  bench::run_on(io, eng.migrate());
  seed(c, n);
  const std::string token = "bench-console-token-0123456789";
  durable::console_options co;
  co.port = 0;
  co.token = token;
  co.max_page = 500;
  durable::console console(io, eng, co);
  console.start();
  const std::string port = std::to_string(console.port());
  auto guard = asio::make_work_guard(io);
  std::thread server([&] { io.run(); });

  const std::string deep =
      value(c,
            "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US') || "
            "'Z|' || id FROM " +
                schema + ".workflows ORDER BY created_at DESC, id DESC OFFSET 500000 LIMIT 1");
  const std::string one = value(c, "SELECT id FROM " + schema +
                                       ".workflows WHERE id = "
                                       "'order-00000007'");
  // Where the first page of name=refund stops: the 100 000th succeeded workflow (the edge).
  const std::string stop =
      value(c,
            "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US') || "
            "'Z|' || id FROM " +
                schema +
                ".workflows WHERE status = 'succeeded' ORDER BY created_at DESC, id DESC "
                "OFFSET 99999 LIMIT 1");
  auto esc = [](std::string s) {
    std::string out;
    for (const char ch : s) {
      if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')
        out.push_back(ch);
      else {
        char b[4];
        std::snprintf(b, sizeof b, "%%%02X", static_cast<unsigned char>(ch));
        out += b;
      }
    }
    return out;
  };
  struct page {
    std::string label, method, target, body;
  };
  const std::vector<page> pages = {
      {"overview", "GET", "/api/overview", ""},
      {"workflows, first page (50)", "GET", "/api/workflows", ""},
      {"workflows, 500 rows", "GET", "/api/workflows?limit=500", ""},
      {"workflows, page at row 500 000 (cursor)", "GET", "/api/workflows?cursor=" + esc(deep), ""},
      {"workflows, status=dead_letter", "GET", "/api/workflows?status=dead_letter", ""},
      {"workflows, status=failed,parked", "GET", "/api/workflows?status=failed%2Cparked", ""},
      {"workflows, status=cancelled (none)", "GET", "/api/workflows?status=cancelled", ""},
      {"workflows, name=charge", "GET", "/api/workflows?name=charge", ""},
      {"workflows, name=refund (none; stops at max_scan)", "GET", "/api/workflows?name=refund", ""},
      {"workflows, executor=gone (none; stops at max_scan)", "GET", "/api/workflows?executor=gone",
       ""},
      {"workflows, name=refund, next page after the stop", "GET",
       "/api/workflows?name=refund&cursor=" + esc(stop), ""},
      {"workflows, status=failed&name=charge", "GET", "/api/workflows?status=failed&name=charge",
       ""},
      {"workflows, queue=emails since 1h", "GET", "/api/workflows?queue=emails&since=1h", ""},
      {"workflows, id_prefix=order-0099", "GET", "/api/workflows?id_prefix=order-0099", ""},
      {"workflows, text=order-0099 (search)", "GET", "/api/workflows?text=order-0099", ""},
      {"workflows, text=no-such-text (none; stops at max_scan)", "GET",
       "/api/workflows?text=no-such-text", ""},
      {"workflows, status=failed,dead_letter&changed_since=1h", "GET",
       "/api/workflows?status=failed%2Cdead_letter&changed_since=1h", ""},
      {"workflows, retrying=1, unfinished", "GET",
       "/api/workflows?status=pending%2Crunning%2Csleeping&retrying=1", ""},
      {"workflow (with its journal)", "GET", "/api/workflow?id=" + esc(one), ""},
      {"queues", "GET", "/api/queues", ""},
      {"executors", "GET", "/api/executors", ""},
      {"schedules", "GET", "/api/schedules", ""},
      {"audit", "GET", "/api/audit", ""},
      {"bulk dry run, status=dead_letter", "POST", "/api/bulk",
       R"({"action":"retry","filter":{"status":"dead_letter"}})"},
      {"bulk dry run, since=1h", "POST", "/api/bulk",
       R"({"action":"cancel","filter":{"since":"1h"}})"},
  };
  const auto floor = time_of([&] { http(port, "GET", "/api/session"); });
  std::printf("\n%ld workflows in %s; %d requests each after one to warm; ms\n\n", n,
              schema.c_str(), repeats);
  std::printf(
      "| request | median | p99 | median / floor | p99 < %.0f ms |\n|---|---|---|---|---|\n",
      target_ms);
  std::printf("| floor: GET /api/session (no database) | %.2f | %.2f | 1 | |\n", floor.median,
              floor.p99);
  bool all_ok = true;
  for (const auto& p : pages) {
    const auto t = time_of([&] { http(port, p.method, p.target, p.body, token); });
    const bool ok = t.p99 < target_ms;
    all_ok = all_ok && ok;
    std::printf("| %s | %.2f | %.2f | %.1f | %s |\n", p.label.c_str(), t.median, t.p99,
                t.median / floor.median, ok ? "yes" : "NO");
    std::fflush(stdout);
  }
  asio::post(io, [&] { console.stop(); });
  guard.reset();
  asio::post(io, [&] { io.stop(); });
  server.join();
  return all_ok ? 0 : 1;
}
