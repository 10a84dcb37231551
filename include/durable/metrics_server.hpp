// The engine's metrics in the Prometheus text format, and a minimal HTTP endpoint that serves
// them (docs/metrics.md). Not included by <durable.hpp>: it brings in Asio's TCP sockets.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <functional>
#include <string>

#include "durable/detail/config.hpp"
#include "durable/engine.hpp"
#include "durable/prometheus.hpp"

namespace durable {

/// The engine's metrics as a Prometheus text exposition (version 0.0.4; serve it with
/// prometheus_writer::content_type): its counters, histograms and local gauges, and the depth
/// of each queue it serves, read from the database now (one statement; if that fails, the rest
/// is still returned and the failure reported through the event hook and counted in
/// durable_background_failures_total{component="metrics"}).
[[nodiscard]] DURABLE_DECL asio::awaitable<std::string> prometheus_text(engine& eng);

/// Options of serve_metrics().
struct metrics_server_options {
  /// Receives the address the server listens on, once bound (with port 0, the port the system
  /// chose).
  std::function<void(const asio::ip::tcp::endpoint&)> on_listening{};
  /// Connections held open at once (at least 1). Each has its own coroutine, so a slow one holds
  /// up no other. When all are open, a new connection closes the oldest one whose request is
  /// not whole yet (an idle or slow client), or is itself closed if every one is answering.
  std::size_t max_connections = 16;
  /// A request's whole head must arrive within this long (a client that trickles it in is closed
  /// too), and its answer be written within as long.
  std::chrono::milliseconds timeout{10000};
  /// What `GET /metrics` serves instead of prometheus_text(eng), for example that text with the
  /// application's own metrics appended, or (the `durable metrics` program) gauges read from
  /// the database. Called on the engine's executor for each scrape; an exception it throws is
  /// reported, counted, and answered with 500.
  std::function<asio::awaitable<std::string>()> exposition{};
};

/// Serves `GET /metrics` (HTTP/1.1; also HEAD) at `where` with prometheus_text(eng), followed by
/// the server's own durable_metrics_server_connections and durable_metrics_server_refused_total:
/// 404 for another path, 405 for another method, 400 for a malformed request, 431 for a head
/// over 8 KiB, 413 for a request with a body; one request per connection. Binds first (an
/// address in use throws at once), then serves until the engine shuts down or the awaiting
/// coroutine is cancelled, and returns. A failure to accept or to answer is reported through the
/// engine's event hook (component "metrics") and counted; the server goes on. Clients closed or
/// refused without their metrics (timed out, evicted, turned away, too large, malformed) are
/// counted each, and reported through the hook at most once a minute. Runs on the engine's
/// executor.
///
///   asio::co_spawn(io, durable::serve_metrics(eng, {asio::ip::make_address("0.0.0.0"), 9464}),
///                  [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
[[nodiscard]] DURABLE_DECL asio::awaitable<void> serve_metrics(engine& eng,
                                                               asio::ip::tcp::endpoint where,
                                                               metrics_server_options options = {});

}  // namespace durable

#if defined(DURABLE_HEADER_ONLY)
#include "durable/impl/metrics_server.ipp"
#endif
