// prometheus_text() and serve_metrics(): included at the end of durable/metrics_server.hpp when
// header-only, by durable/src.hpp otherwise.
#pragma once

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
#include <memory>
#include <set>
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

struct metrics_server_state {
  metrics_server_state(engine& e, metrics_server_options o)
      : eng(e), options(std::move(o)), acceptor(e.executor()), pause(e.executor()) {}
  engine& eng;  // outlives the server (the engine outlives the operations started on it)
  metrics_server_options options;
  asio::ip::tcp::acceptor acceptor;
  asio::steady_timer pause;  // after a failed accept; close() cuts it short
  std::set<std::shared_ptr<asio::ip::tcp::socket>> connections;
  asio::cancellation_signal stop_watching;  // ends the eng.until_shutdown() that closes us
  bool closed = false;

  void close() {
    if (closed) return;
    closed = true;
    asio::error_code ec;
    acceptor.close(ec);
    pause.cancel();
    for (const auto& c : connections) c->close(ec);
  }
};

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

/// Reads one request of a connection and answers it.
inline asio::awaitable<void> metrics_connection(std::shared_ptr<metrics_server_state> m,
                                                std::shared_ptr<asio::ip::tcp::socket> sock) {
  constexpr std::size_t max_head = 8192;
  std::string in;
  asio::error_code ec;
  auto read = asio::async_read_until(*sock, asio::dynamic_buffer(in, max_head), "\r\n\r\n",
                                     asio::redirect_error(asio::use_awaitable, ec));
  const auto got = co_await within(std::move(read), m->options.timeout);
  if (!got) co_return;  // too slow: closed
  std::string response;
  const std::string plain = "text/plain; charset=utf-8";
  if (ec == asio::error::not_found) {
    const std::string body = "request head too large\n";
    response = http_response("431 Request Header Fields Too Large", plain, body, false);
  } else if (ec) {
    co_return;  // the client went away before its request was complete
  } else {
    const std::string_view head_text(in.data(), *got);
    const std::string_view line = head_text.substr(0, head_text.find("\r\n"));
    const auto sp1 = line.find(' ');
    const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    const bool well_formed = sp1 != std::string_view::npos && sp2 != std::string_view::npos &&
                             line.find(' ', sp2 + 1) == std::string_view::npos &&
                             line.substr(sp2 + 1).starts_with("HTTP/1.") && sp1 > 0 &&
                             sp2 > sp1 + 1 && line[sp1 + 1] == '/';
    if (!well_formed) {
      const std::string body = "malformed request\n";
      response = http_response("400 Bad Request", plain, body, false);
    } else {
      const std::string_view method = line.substr(0, sp1);
      std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
      target = target.substr(0, target.find('?'));
      const bool head = method == "HEAD";
      if (method != "GET" && !head) {
        const std::string body = "only GET and HEAD\n";
        response =
            http_response("405 Method Not Allowed", plain, body, false, "Allow: GET, HEAD\r\n");
      } else if (target != "/metrics") {
        const std::string body = "not found; the metrics are at /metrics\n";
        response = http_response("404 Not Found", plain, body, head);
      } else if (m->options.exposition) {
        std::string body;
        bool produced = true;
        try {
          body = co_await m->options.exposition();
        } catch (const std::exception& e) {
          produced = false;
          m->eng.report_background_failure(
              "metrics", std::string("the metrics exposition failed: ") + e.what());
        }
        if (produced) {
          response = http_response("200 OK", prometheus_writer::content_type, body, head);
        } else {
          const std::string failure = "the metrics could not be produced; see the log\n";
          response = http_response("500 Internal Server Error", plain, failure, head);
        }
      } else {
        const std::string body = co_await prometheus_text_on_strand(m->eng);
        response = http_response("200 OK", prometheus_writer::content_type, body, head);
      }
    }
  }
  if (m->closed) co_return;
  auto write = asio::async_write(*sock, asio::buffer(response),
                                 asio::redirect_error(asio::use_awaitable, ec));
  (void)co_await within(std::move(write), m->options.timeout);
  sock->shutdown(asio::ip::tcp::socket::shutdown_both, ec);
}

inline asio::awaitable<void> accept_loop(engine& eng, std::shared_ptr<metrics_server_state> m);

inline asio::awaitable<void> serve_metrics_impl(engine& eng, asio::ip::tcp::endpoint where,
                                                metrics_server_options options) {
  auto m = std::make_shared<metrics_server_state>(eng, std::move(options));
  m->acceptor.open(where.protocol());
  m->acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
  m->acceptor.bind(where);
  m->acceptor.listen();
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
inline asio::awaitable<void> accept_loop(engine& eng, std::shared_ptr<metrics_server_state> m) {
  if (m->options.on_listening) m->options.on_listening(m->acceptor.local_endpoint());
  co_await asio::this_coro::throw_if_cancelled(false);
  auto failed = [&](const std::string& what) { eng.report_background_failure("metrics", what); };
  while (!m->closed && !eng.shutting_down()) {
    auto sock = std::make_shared<asio::ip::tcp::socket>(eng.executor());
    asio::error_code ec;
    co_await m->acceptor.async_accept(*sock, asio::redirect_error(asio::use_awaitable, ec));
    const auto cs = co_await asio::this_coro::cancellation_state;
    if (m->closed || eng.shutting_down() || cs.cancelled() != asio::cancellation_type::none) break;
    if (ec) {  // out of descriptors, say: report, wait a little, go on
      failed("the metrics endpoint could not accept a connection: " + ec.message());
      m->pause.expires_after(std::chrono::milliseconds(200));
      co_await m->pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (m->connections.size() >= m->options.max_connections) {
      sock->close(ec);
      continue;
    }
    m->connections.insert(sock);
    asio::co_spawn(eng.executor(), metrics_connection(m, sock), [m, sock](std::exception_ptr e) {
      m->connections.erase(sock);
      asio::error_code ignored;
      sock->close(ignored);
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
