// prometheus_text() and serve_metrics(): included at the end of durable/metrics_server.hpp when
// header-only, by durable/src.hpp otherwise.
#pragma once

#include <algorithm>
#include <array>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/buffer.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/read_until.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <list>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "durable/detail/runtime/parts.ipp"

namespace durable {
namespace detail {

inline void write_counts(prometheus_writer& w, std::string_view name, std::string_view help,
                         std::string_view label, const labelled_counts& counts) {
  for (const auto& [value, n] : counts) {
    const metric_label l[] = {{label, value}};
    w.counter(name, help, double(n), l);
  }
}

/// The exposition; runs on the engine's strand. It reads the engine through its public calls
/// only: metrics(), stats(), queue_depths() and report_background_failure().
inline asio::awaitable<std::string> prometheus_text_on_strand(engine& eng) {
  std::vector<queue_depth> depths;
  bool depths_ok = true;
  try {
    depths = co_await eng.queue_depths();
  } catch (const std::exception& e) {
    depths_ok = false;
    eng.report_background_failure(
        "metrics", "reading the queue depths for the metrics failed: " + describe_io_failure(e) +
                       "; the exposition goes without them");
  }
  const engine_metrics c = eng.metrics();
  const engine_stats pool = eng.stats();
  prometheus_writer w;
  {
    const metric_label l[] = {{"executor", eng.executor_id()}, {"version", eng.app_version()}};
    w.gauge("durable_executor_info", "This engine: its executor id and application version.", 1, l);
  }
  w.counter("durable_steps_executed_total", "Steps this engine ran and journaled.",
            double(c.steps_executed));
  w.counter("durable_steps_replayed_total",
            "Steps answered from the journal without running (replay).", double(c.steps_replayed));
  w.counter("durable_journal_loads_total",
            "Queries that loaded journals of claimed workflows (one per claim batch).",
            double(c.journal_loads));
  write_counts(w, "durable_workflows_started_total",
               "Workflows this engine started: by start(), or dispatched from a queue.", "via",
               c.workflows_started);
  w.counter("durable_workflows_recovered_total",
            "Workflows of this executor resumed by replay: open(), recover_pending(), recover(), "
            "and maintenance's orphans.",
            double(c.workflows_recovered));
  w.counter("durable_workflows_taken_over_total",
            "Workflows taken over from executors whose lease ran out.",
            double(c.workflows_taken_over));
  w.counter("durable_schedule_slots_fired_total",
            "Schedule slots whose workflow this engine's maintenance started.",
            double(c.schedule_slots_fired));
  w.counter("durable_schedule_slots_missed_total",
            "Schedule slots found later than their late_after that did not run (catch-up policy).",
            double(c.schedule_slots_missed));
  w.counter("durable_schedule_slots_late_total",
            "Schedule slots found later than their late_after that ran (catch-up policy).",
            double(c.schedule_slots_late));
  write_counts(w, "durable_workflows_finished_total",
               "Workflow runs this engine ended as succeeded, failed or cancelled.", "status",
               c.workflows_finished);
  w.counter("durable_workflows_dead_lettered_total",
            "Workflows this engine dead-lettered: a step failed for good and the workflow let "
            "it escape.",
            double(c.workflows_dead_lettered));
  write_counts(w, "durable_workflows_parked_total",
               "Workflows this engine parked for an operator, by reason.", "reason",
               c.workflows_parked);
  w.counter("durable_ownership_lost_total",
            "Runs stopped because another executor took their workflow over.",
            double(c.ownership_lost));
  w.counter("durable_io_retries_total",
            "Runs stopped by a transient database failure, their workflow to be claimed again.",
            double(c.io_retries));
  write_counts(w, "durable_background_failures_total",
               "Failures of the engine's background parts (each one is also an event).",
               "component", c.background_failures);
  w.counter("durable_db_round_trips_total", "Round trips to PostgreSQL of the engine's pool.",
            double(pool.round_trips));
  w.counter("durable_db_statements_total", "Statements the engine's pool sent to PostgreSQL.",
            double(pool.statements));
  w.histogram("durable_journal_write_seconds",
              "Time from submitting a journal row to the group committer until its commit was "
              "acknowledged.",
              c.journal_write_seconds);
  w.histogram("durable_group_commit_batch_size",
              "Statements per group-commit round trip (journal rows, starts, finishes).",
              c.group_commit_batch_size);
  w.histogram("durable_group_commit_seconds",
              "Duration of each group-commit round trip, its commit included.",
              c.group_commit_seconds);
  w.gauge("durable_workflows_running", "Workflow runs in this process now.",
          double(c.workflows_running));
  w.gauge("durable_max_running", "engine_options::max_running of this engine.",
          double(c.max_running));
  w.gauge("durable_lease_expired",
          "1 while this executor could not renew its lease in time (it takes no new work).",
          c.lease_expired ? 1 : 0);
  w.gauge("durable_queue_depth_ok",
          "1 if the queue depths below were read from the database for this scrape, else 0.",
          depths_ok ? 1 : 0);
  for (const auto& d : depths) {
    const metric_label l[] = {{"queue", d.queue}};
    w.gauge("durable_queue_depth",
            "Workflows of a queue waiting to be dispatched (delayed ones "
            "included), read from the database at scrape time.",
            double(d.queued), l);
  }
  for (const auto& d : depths) {
    const metric_label l[] = {{"queue", d.queue}};
    w.gauge("durable_queue_running", "Workflows of a queue running now, on any executor.",
            double(d.running), l);
  }
  co_return w.take();
}

/// One connection of the metrics server, listed by the server from its accept until its coroutine
/// ends or the server closes it to make room for a newer one.
struct metrics_connection_slot {
  explicit metrics_connection_slot(const asio::any_io_executor& ex) : sock(ex) {}
  asio::ip::tcp::socket sock;
  bool answering = false;  // its request was read whole: it is never evicted
  bool listed = false;
  std::list<std::shared_ptr<metrics_connection_slot>>::iterator at{};
};

/// Why the server closed or refused a client without serving it its metrics.
enum class metrics_refusal : std::size_t { timeout, evicted, rejected, too_large, malformed };
inline constexpr std::array<std::string_view, 5> metrics_refusal_names = {
    "timeout", "evicted", "rejected", "too_large", "malformed"};
/// Refusals are counted one by one but reported through the event hook at most this often: a
/// flood of idle clients must not become a flood of events.
inline constexpr std::chrono::seconds metrics_report_interval{60};

struct metrics_server_state : std::enable_shared_from_this<metrics_server_state> {
  metrics_server_state(engine& e, metrics_server_options o)
      : eng(e),
        options(std::move(o)),
        acceptor(e.executor()),
        pause(e.executor()),
        report_timer(e.executor()) {}
  engine& eng;  // outlives the server (the engine outlives the operations started on it)
  metrics_server_options options;
  asio::ip::tcp::acceptor acceptor;
  asio::steady_timer pause;         // after a failed accept; close() cuts it short
  asio::steady_timer report_timer;  // until the next report of refusals; close() cuts it short
  std::list<std::shared_ptr<metrics_connection_slot>> connections;       // oldest first
  std::array<std::uint64_t, metrics_refusal_names.size()> refused{};     // since the start
  std::array<std::uint64_t, metrics_refusal_names.size()> unreported{};  // since the last event
  bool report_due = false;                  // report_timer runs: refusals wait for it
  std::string where;                        // the address, for messages
  asio::cancellation_signal stop_watching;  // ends the eng.until_shutdown() that closes us
  bool closed = false;

  void close() {
    if (closed) return;
    closed = true;
    asio::error_code ec;
    acceptor.close(ec);
    pause.cancel();
    report_timer.cancel();
    for (const auto& c : connections) c->sock.close(ec);
  }

  void unlist(metrics_connection_slot& c) {
    if (!c.listed) return;
    connections.erase(c.at);
    c.listed = false;
  }

  /// Makes room for one more connection by closing the oldest one whose request is not whole
  /// yet (an idle or slow client); false if every connection is answering.
  bool make_room() {
    for (const auto& c : connections) {
      if (c->answering) continue;
      const auto victim = c;  // unlist() destroys the list's copy
      asio::error_code ec;
      victim->sock.close(ec);
      unlist(*victim);
      refuse(metrics_refusal::evicted);
      return true;
    }
    return false;
  }

  void refuse(metrics_refusal why) {
    ++refused[std::size_t(why)];
    ++unreported[std::size_t(why)];
    if (!report_due) report();
  }

  /// Reports the refusals not reported yet, if any, and holds the next report back for
  /// metrics_report_interval.
  void report() {
    std::uint64_t total = 0;
    for (const auto n : unreported) total += n;
    if (total == 0 || closed) {
      report_due = false;
      return;
    }
    const std::string limit = std::to_string(options.max_connections);
    const std::string phrases[] = {
        "sent no whole request within the timeout (" + std::to_string(options.timeout.count()) +
            " ms)",
        "were closed before their request was whole to make room for newer connections "
        "(max_connections " +
            limit + ")",
        "were turned away: all " + limit + " connections were answering",
        "sent a request over the size limit (431 or 413)", "sent a malformed request (400)"};
    std::string what = "the metrics endpoint at " + where + " refused " + std::to_string(total) +
                       (total == 1 ? " client" : " clients") + " without serving them the metrics";
    const char* sep = ": ";
    for (std::size_t i = 0; i < unreported.size(); ++i) {
      if (unreported[i] == 0) continue;
      what += sep + std::to_string(unreported[i]) + " " + phrases[i];
      sep = "; ";
    }
    what +=
        ". If these are not your scrapers, something idle or slow is connecting to the endpoint: "
        "find it, or raise max_connections (durable_metrics_server_refused_total counts each "
        "client; at most one such report a minute)";
    unreported = {};
    eng.report_background_failure("metrics", what);
    report_due = true;
    report_timer.expires_after(metrics_report_interval);
    // A weak pointer: the timer lives in the state, and a handler destroyed with its io_context
    // must not destroy the state from inside the timer's service.
    report_timer.async_wait([w = weak_from_this()](const asio::error_code&) {
      if (const auto m = w.lock()) m->report();
    });
  }
};

/// The server's own gauge and counters, appended to what it serves.
inline std::string metrics_server_text(const metrics_server_state& m) {
  prometheus_writer w;
  w.gauge("durable_metrics_server_connections",
          "Connections the metrics endpoint holds open now, this scrape's included.",
          double(m.connections.size()));
  for (std::size_t i = 0; i < m.refused.size(); ++i) {
    const metric_label l[] = {{"reason", metrics_refusal_names[i]}};
    w.counter("durable_metrics_server_refused_total",
              "Clients the metrics endpoint closed or refused without serving them, by reason: "
              "timeout (no whole request in time), evicted (closed for a newer connection), "
              "rejected (no room), too_large (431, 413), malformed (400).",
              double(m.refused[i]), l);
  }
  return w.take();
}

inline bool iequals_ascii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char ch) { return ch >= 'A' && ch <= 'Z' ? char(ch - 'A' + 'a') : ch; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

/// Whether a request head announces a body (a Content-Length over 0, or a Transfer-Encoding);
/// nullopt for a Content-Length that is not a number.
inline std::optional<bool> announces_body(std::string_view head) {
  bool body = false;
  for (std::size_t pos = head.find("\r\n"); pos != std::string_view::npos;) {
    const std::size_t start = pos + 2;
    pos = head.find("\r\n", start);
    const std::string_view line =
        head.substr(start, pos == std::string_view::npos ? pos : pos - start);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (iequals_ascii(line.substr(0, colon), "content-length")) {
      if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
      if (value.find_first_not_of('0') != std::string_view::npos) body = true;
    } else if (iequals_ascii(line.substr(0, colon), "transfer-encoding")) {
      body = true;
    }
  }
  return body;
}

inline std::string http_response(std::string_view status, std::string_view content_type,
                                 const std::string& body, bool head, std::string_view extra = {}) {
  std::string r = "HTTP/1.1 ";
  r += status;
  r += "\r\nContent-Type: ";
  r += content_type;
  r += "\r\nContent-Length: ";
  r += std::to_string(body.size());
  r += "\r\n";
  r += extra;
  r += "Connection: close\r\n\r\n";
  if (!head) r += body;
  return r;
}

/// The answer to a whole request head (its final empty line included).
inline asio::awaitable<std::string> metrics_answer(std::shared_ptr<metrics_server_state> m,
                                                   std::string_view head_text) {
  const std::string plain = "text/plain; charset=utf-8";
  const std::string_view line = head_text.substr(0, head_text.find("\r\n"));
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  const bool well_formed = sp1 != std::string_view::npos && sp2 != std::string_view::npos &&
                           line.find(' ', sp2 + 1) == std::string_view::npos &&
                           line.substr(sp2 + 1).starts_with("HTTP/1.") && sp1 > 0 &&
                           sp2 > sp1 + 1 && line[sp1 + 1] == '/';
  const auto body_announced = well_formed ? announces_body(head_text) : std::nullopt;
  if (!body_announced) {
    m->refuse(metrics_refusal::malformed);
    co_return http_response("400 Bad Request", plain, "malformed request\n", false);
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    co_return http_response("405 Method Not Allowed", plain, "only GET and HEAD\n", false,
                            "Allow: GET, HEAD\r\n");
  }
  if (*body_announced) {  // never read: a GET of the metrics takes no body
    m->refuse(metrics_refusal::too_large);
    co_return http_response("413 Content Too Large", plain, "a request takes no body here\n",
                            false);
  }
  if (target != "/metrics") {
    co_return http_response("404 Not Found", plain, "not found; the metrics are at /metrics\n",
                            head);
  }
  std::string body;
  if (m->options.exposition) {
    bool produced = true;
    try {
      body = co_await m->options.exposition();
    } catch (const std::exception& e) {
      produced = false;
      m->eng.report_background_failure("metrics",
                                       std::string("the metrics exposition failed: ") + e.what());
    }
    if (!produced) {
      co_return http_response("500 Internal Server Error", plain,
                              "the metrics could not be produced; see the log\n", head);
    }
  } else {
    body = co_await prometheus_text_on_strand(m->eng);
  }
  if (!body.empty() && body.back() != '\n') body += '\n';
  body += metrics_server_text(*m);
  co_return http_response("200 OK", prometheus_writer::content_type, body, head);
}

/// Reads one request of a connection and answers it. Each connection has its own coroutine:
/// one that is slow to send holds nobody else up.
inline asio::awaitable<void> metrics_connection(std::shared_ptr<metrics_server_state> m,
                                                std::shared_ptr<metrics_connection_slot> c) {
  constexpr std::size_t max_head = 8192;
  std::string in;
  asio::error_code ec;
  // One limit for the whole head, not per read: a client that sends a byte a second (slow
  // loris) is closed as surely as one that sends nothing.
  auto read = asio::async_read_until(c->sock, asio::dynamic_buffer(in, max_head), "\r\n\r\n",
                                     asio::redirect_error(asio::use_awaitable, ec));
  const auto got = co_await within(std::move(read), m->options.timeout);
  if (!got) {
    if (!m->closed) m->refuse(metrics_refusal::timeout);
    co_return;
  }
  if (ec && ec != asio::error::not_found) co_return;  // gone, evicted, or the server closed
  c->answering = true;
  std::string response;
  if (ec) {
    m->refuse(metrics_refusal::too_large);
    response = http_response("431 Request Header Fields Too Large", "text/plain; charset=utf-8",
                             "request head too large\n", false);
  } else {
    auto answer = metrics_answer(m, std::string_view(in.data(), *got));
    response = co_await std::move(answer);
  }
  if (m->closed) co_return;
  auto write = asio::async_write(c->sock, asio::buffer(response),
                                 asio::redirect_error(asio::use_awaitable, ec));
  (void)co_await within(std::move(write), m->options.timeout);
  c->sock.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
}

inline asio::awaitable<void> accept_loop(engine& eng, std::shared_ptr<metrics_server_state> m);

inline asio::awaitable<void> serve_metrics_impl(engine& eng, asio::ip::tcp::endpoint where,
                                                metrics_server_options options) {
  auto m = std::make_shared<metrics_server_state>(eng, std::move(options));
  m->options.max_connections = std::max<std::size_t>(m->options.max_connections, 1);
  m->acceptor.open(where.protocol());
  m->acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
  m->acceptor.bind(where);
  m->acceptor.listen();
  {
    const auto at = m->acceptor.local_endpoint();
    const std::string address = at.address().to_string();
    m->where =
        (at.address().is_v6() ? "[" + address + "]" : address) + ":" + std::to_string(at.port());
  }
  struct closer {
    std::shared_ptr<metrics_server_state> m;
    ~closer() { m->close(); }
  } close_at_end{m};
  // The server closes when the engine begins to shut down; when it ends first, it stops waiting
  // for that (the signal lives in `m`, which the completion keeps, as long as the operation).
  // Not from a destructor: a frame destroyed with its io_context (never resumed) must not emit
  // into timers whose services are already gone; that wait ends with the io_context anyway.
  const auto unwatch = [&m] { m->stop_watching.emit(asio::cancellation_type::terminal); };
  eng.until_shutdown(asio::bind_cancellation_slot(m->stop_watching.slot(),
                                                  [m](std::exception_ptr) { m->close(); }));
  if (eng.shutting_down()) {
    unwatch();
    co_return;
  }
  try {
    co_await accept_loop(eng, m);
  } catch (...) {
    unwatch();
    throw;
  }
  unwatch();
}

/// Accepts connections until the server closes or the engine shuts down (serve_metrics_impl).
/// At max_connections, a new connection takes the place of the oldest one still sending its
/// request: idle clients can hold the endpoint only until the next one arrives.
inline asio::awaitable<void> accept_loop(engine& eng, std::shared_ptr<metrics_server_state> m) {
  if (m->options.on_listening) m->options.on_listening(m->acceptor.local_endpoint());
  co_await asio::this_coro::throw_if_cancelled(false);
  auto failed = [&](const std::string& what) { eng.report_background_failure("metrics", what); };
  while (!m->closed && !eng.shutting_down()) {
    auto c = std::make_shared<metrics_connection_slot>(eng.executor());
    asio::error_code ec;
    co_await m->acceptor.async_accept(c->sock, asio::redirect_error(asio::use_awaitable, ec));
    const auto cs = co_await asio::this_coro::cancellation_state;
    if (m->closed || eng.shutting_down() || cs.cancelled() != asio::cancellation_type::none) break;
    if (ec) {  // out of descriptors, say: report, wait a little, go on
      failed("the metrics endpoint could not accept a connection: " + ec.message());
      m->pause.expires_after(std::chrono::milliseconds(200));
      co_await m->pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (m->connections.size() >= m->options.max_connections && !m->make_room()) {
      c->sock.close(ec);
      m->refuse(metrics_refusal::rejected);
      continue;
    }
    c->at = m->connections.insert(m->connections.end(), c);
    c->listed = true;
    asio::co_spawn(eng.executor(), metrics_connection(m, c), [m, c](std::exception_ptr e) {
      m->unlist(*c);
      asio::error_code ignored;
      c->sock.close(ignored);
      if (e && !m->closed) {
        m->eng.report_background_failure("metrics", "a metrics request failed: " + describe(e));
      }
    });
  }
}

}  // namespace detail

DURABLE_DECL asio::awaitable<std::string> prometheus_text(engine& eng) {
  return asio::co_spawn(eng.executor(), detail::prometheus_text_on_strand(eng),
                        asio::use_awaitable);
}

DURABLE_DECL asio::awaitable<void> serve_metrics(engine& eng, asio::ip::tcp::endpoint where,
                                                 metrics_server_options options) {
  return asio::co_spawn(eng.executor(), detail::serve_metrics_impl(eng, where, std::move(options)),
                        asio::use_awaitable);
}

}  // namespace durable
