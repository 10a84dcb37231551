// The `durable metrics` verb: the database's gauges (what every executor shares: workflows by
// status, queues, executors, inboxes) in the Prometheus text format, printed or served.
#include <unistd.h>

#include <algorithm>
#include <asio/ip/tcp.hpp>
#include <asio/signal_set.hpp>
#include <csignal>
#include <cstdio>
#include <string>
#include <utility>

#include "cli.hpp"
#include "durable/metrics_server.hpp"
#include "durable/prometheus.hpp"

namespace durable_cli {

namespace {

double number(const ojson& v) { return v.is_number() ? v.get<double>() : 0.0; }

/// The database's gauges (what every executor shares: workflows by status, queues, executors,
/// inboxes) as a Prometheus exposition. The engine's own metrics (steps, journal write latency,
/// group commits) are per process: the application serves them (docs/metrics.md).
asio::awaitable<std::string> database_exposition(session& s, double lease_s) {
  auto stats_q = s.st().admin_stats(lease_s);
  const auto stats_rows = co_await s.rows_of(std::move(stats_q));
  auto queues_q = s.st().admin_queues();
  const auto queues = co_await s.rows_of(std::move(queues_q));
  auto executors_q = s.st().admin_executors(lease_s);
  const auto executors = co_await s.rows_of(std::move(executors_q));
  const ojson& st = stats_rows.at(0);
  durable::prometheus_writer w;
  const std::string schema = s.eng.schema_name();
  {
    const durable::metric_label l[] = {{"schema", schema}};
    w.gauge("durable_store_schema_version", "Schema version of durable's tables.",
            number(st["schema_version"]), l);
    for (const durable::workflow_state state : durable::all_workflow_states) {
      const std::string status(durable::to_string(state));
      const auto it = st["workflows"].find(status);
      const durable::metric_label ls[] = {{"schema", schema}, {"status", status}};
      w.gauge("durable_store_workflows", "Workflows in the database, by status.",
              it == st["workflows"].end() ? 0.0 : number(*it), ls);
    }
    if (!st["journal_rows_estimate"].is_null())
      w.gauge("durable_store_journal_rows_estimate",
              "Journal rows (steps) in the database, as the planner estimates them.",
              number(st["journal_rows_estimate"]), l);
    w.gauge("durable_store_steps_retrying", "Steps waiting for their next attempt.",
            number(st["steps_retrying"]), l);
    w.gauge("durable_store_failed_last_hour",
            "Workflows that failed or were dead-lettered in the last hour.",
            number(st["failed_last_hour"]), l);
    w.gauge("durable_store_messages_unconsumed", "Messages sent and not yet received.",
            number(st["messages_unconsumed"]), l);
  }
  const std::pair<const char*, const char*> per_queue[] = {
      {"queued", "Workflows queued and due, waiting for room."},
      {"delayed", "Workflows queued with a delay that has not passed."},
      {"running", "Workflows of the queue that run now."},
      {"sleeping", "Workflows of the queue that sleep or wait."},
      {"oldest_queued_s", "Age of the oldest queued workflow (0: none)."}};
  for (const auto& [key, help] : per_queue) {
    const std::string name =
        std::string("durable_store_queue_") +
        (std::string(key) == "oldest_queued_s" ? "oldest_queued_seconds" : std::string(key));
    for (const auto& q : queues) {
      const std::string queue = q["queue"].get<std::string>();
      const durable::metric_label l[] = {{"schema", schema}, {"queue", queue}};
      w.gauge(name, help, number(q[key]), l);
    }
  }
  for (const char* state : {"alive", "dead", "released"}) {
    double n = 0;
    for (const auto& e : executors)
      if (e["state"] == state) ++n;
    const durable::metric_label l[] = {{"schema", schema}, {"state", state}};
    w.gauge("durable_store_executors",
            "Registered executors, by state (alive: heartbeat within "
            "the lease).",
            n, l);
  }
  for (const char* state : {"alive", "dead", "released"}) {
    double owned = 0;
    for (const auto& e : executors)
      if (e["state"] == state) owned += number(e["owned"]);
    const durable::metric_label l[] = {{"schema", schema}, {"state", state}};
    w.gauge("durable_store_owned_workflows",
            "Unfinished workflows owned by executors, by the executor's state.", owned, l);
  }
  co_return w.take();
}

}  // namespace

/// "HOST:PORT" ("[::1]:9464" for IPv6) as an endpoint.
asio::ip::tcp::endpoint parse_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw failure(bad_usage, "--listen: '" + one_line(text) +
                                 "' is not HOST:PORT (127.0.0.1:9464, [::1]:9464)");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port_text = text.substr(colon + 1);
  unsigned long port = 0;
  std::size_t used = 0;
  try {
    port = std::stoul(port_text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != port_text.size() || port > 65535)
    throw failure(bad_usage, "--listen: '" + one_line(port_text) + "' is not a port (0 to 65535)");
  asio::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec)
    throw failure(bad_usage,
                  "--listen: '" + one_line(host) + "' is not an IP address: " + ec.message());
  return {address, static_cast<unsigned short>(port)};
}

int cmd_metrics(session& s, double lease_s, const std::string& listen) {
  if (listen.empty()) {
    std::string text = run(s.io, database_exposition(s, lease_s));
    if (::isatty(STDOUT_FILENO)) {
      // Read by a person: queue and schema names may hold what a terminal acts on. Piped (to a
      // scraper, a file), the exposition is exact.
      std::string shown;
      for (std::size_t at = 0; at < text.size();) {
        const std::size_t end = std::min(text.find('\n', at), text.size());
        shown += one_line(text.substr(at, end - at)) + "\n";
        at = end + 1;
      }
      text = std::move(shown);
    }
    std::fputs(text.c_str(), stdout);
    return done;
  }
  const auto where = parse_listen(listen);
  durable::metrics_server_options o;
  o.on_listening = [](const asio::ip::tcp::endpoint& at) {
    std::fprintf(
        stderr, "durable: serving the database's metrics at http://%s/metrics\n",
        (at.address().is_v6() ? "[" + at.address().to_string() + "]" : at.address().to_string())
            .append(":" + std::to_string(at.port()))
            .c_str());
  };
  o.exposition = [&s, lease_s]() { return database_exposition(s, lease_s); };
  asio::signal_set stop(s.io, SIGINT, SIGTERM);
  stop.async_wait([&s](const asio::error_code&, int) { s.io.stop(); });
  try {
    (void)run(s.io, durable::serve_metrics(s.eng, where, std::move(o)));
  } catch (const asio::system_error& e) {
    throw failure(not_done, "--listen " + one_line(listen) + ": " + e.what());
  }
  return done;
}

}  // namespace durable_cli
