// Implementation of durable/pg/connection.hpp: included at its end when header-only, by
// durable/src.hpp otherwise.
// The parts: impl/conninfo.ipp (conninfo, passwords in messages, one connection attempt), this
// file (connect, run, prepare, LISTEN/NOTIFY, sending a statement), impl/pipeline.ipp (deadlines,
// the socket, reading results, transactions).
#pragma once

#include <algorithm>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <optional>

#include "durable/pg/impl/conninfo.ipp"

namespace durable::pg {

DURABLE_DECL asio::awaitable<std::unique_ptr<connection>> connection::connect_impl(
    std::string conninfo, std::shared_ptr<const statement_catalog> catalog,
    connection_options options) {
  using namespace asio::experimental::awaitable_operators;
  auto ex = co_await asio::this_coro::executor;
  auto opts = detail::parse_conninfo(conninfo);
  const std::string where = detail::redact(opts.describe(), conninfo);
  std::optional<std::chrono::seconds> timeout;
  std::vector<detail::connect_target> targets;
  try {
    timeout = detail::connect_timeout(opts);
    targets = detail::connect_targets(opts);
  } catch (const connection_error& e) {  // they quote values of the conninfo
    throw connection_error(detail::redact(e.what(), conninfo));
  }
  detail::default_keepalives(opts);
  // libpq has no deadline of its own under PQconnectPoll, so the deadline is ours, and so is
  // the walk through the host list: libpq would resolve host names with a blocking
  // getaddrinfo(), so names are resolved here with Asio's resolver and libpq gets addresses
  // (hostaddr), keeping host for TLS and messages. Each host's resolution, and each address's
  // connection attempt (TCP, TLS, authentication), gets the whole timeout; a failed one falls
  // through to the next, as with libpq.
  auto deadline = [&]() -> std::optional<std::chrono::steady_clock::time_point> {
    if (!timeout) return std::nullopt;
    return std::chrono::steady_clock::now() + *timeout;
  };
  std::string errors;
  auto failed = [&](const detail::connect_target& t, const std::string& why,
                    const std::string& address = {}) {
    if (!errors.empty()) errors += "; ";
    errors += t.name();
    if (!address.empty() && address != t.host) errors += " (" + address + ")";
    errors += ": " + why;
  };
  PGconn* raw = nullptr;
  for (const detail::connect_target& t : targets) {
    std::vector<std::string> addresses;
    if (t.needs_resolve()) {
      asio::ip::tcp::resolver resolver(ex);
      asio::steady_timer timer(ex);
      timer.expires_at(timeout ? *deadline() : std::chrono::steady_clock::time_point::max());
      const std::string service = t.port.empty() ? "5432" : t.port;
      auto done =
          co_await (resolver.async_resolve(t.host, service,
                                           asio::experimental::as_tuple(asio::use_awaitable)) ||
                    timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable)));
      if (done.index() == 1) {
        failed(t, "resolving the host name \"" + t.host + "\" timed out after " +
                      std::to_string(timeout->count()) + " s (connect_timeout)");
        continue;
      }
      auto& [ec, endpoints] = std::get<0>(done);
      if (ec) {
        failed(t, "could not resolve host name \"" + t.host + "\": " + ec.message() +
                      "; check the host in the connection string or PGHOST");
        continue;
      }
      for (const auto& e : endpoints) {
        auto a = e.endpoint().address().to_string();
        if (std::find(addresses.begin(), addresses.end(), a) == addresses.end())
          addresses.push_back(a);
      }
    } else {
      addresses.push_back(t.hostaddr);
    }
    for (const std::string& address : addresses) {
      detail::conninfo_options one = opts;
      one.set("host", t.host);
      one.set("hostaddr", address);
      one.set("port", t.port);
      std::string why;
      raw = co_await detail::connect_one(one, deadline(), timeout.value_or(std::chrono::seconds(0)),
                                         why);
      if (raw) break;
      failed(t, why, address);
    }
    if (raw) break;
  }
  if (!raw)
    throw connection_error("could not connect to PostgreSQL (" + where +
                           "): " + detail::redact(errors, conninfo));

  std::unique_ptr<connection> c(new connection(ex, raw, std::move(catalog), options));
  c->socket_.assign(PQsocket(raw));
  // Notices (e.g. "already exists, skipping") are not errors; a library must not print them.
  PQsetNoticeProcessor(
      raw, [](void*, const char*) {}, nullptr);
  if (PQsetnonblocking(raw, 1) != 0 || PQenterPipelineMode(raw) != 1)
    throw connection_error(
        "could not switch the PostgreSQL connection to non-blocking "
        "pipeline mode: " +
        detail::trim_message(PQerrorMessage(raw)));
  co_return c;
}

DURABLE_DECL asio::awaitable<result> connection::run_one(statement s) {
  std::vector<statement> batch;
  batch.push_back(std::move(s));
  auto results = co_await run_internal(std::move(batch));
  co_return std::move(results.front());
}

DURABLE_DECL asio::awaitable<std::vector<result>> connection::run_batch(
    std::vector<statement> batch) {
  return run_internal(std::move(batch));
}

DURABLE_DECL asio::awaitable<void> connection::prepare_impl(std::string name, std::string text) {
  if (std::find(prepared_.begin(), prepared_.end(), name) != prepared_.end()) co_return;
  std::pair<std::string, std::string> p(std::move(name), std::move(text));
  std::vector<statement> none;
  co_await run_internal(std::move(none), std::move(p));
}

DURABLE_DECL transaction connection::begin() {
  if (begin_pending_ || (!rollback_pending_ && PQtransactionStatus(conn_) != PQTRANS_IDLE))
    throw error("a transaction is already open on this connection; finish it first");
  return transaction(*this);
}

DURABLE_DECL std::string connection::quote_identifier(std::string_view id) const {
  char* q = PQescapeIdentifier(conn_, id.data(), id.size());
  if (!q) throw error("invalid identifier: " + detail::trim_message(PQerrorMessage(conn_)));
  std::string s(q);
  PQfreemem(q);
  return s;
}

DURABLE_DECL asio::awaitable<void> connection::listen(std::string_view channel) {
  // LISTEN takes an identifier, not a value: it is quoted by libpq, never spliced raw.
  statement s{"LISTEN " + quote_identifier(channel), {}, false};
  co_await run(std::move(s));
}

DURABLE_DECL asio::awaitable<void> connection::unlisten(std::string_view channel) {
  statement s{"UNLISTEN " + quote_identifier(channel), {}, false};
  co_await run(std::move(s));
}

DURABLE_DECL asio::awaitable<notification> connection::wait_notification() {
  for (;;) {
    if (PGnotify* n = PQnotifies(conn_)) {
      notification out{n->relname ? n->relname : "", n->extra ? n->extra : "", n->be_pid};
      PQfreemem(n);
      co_return out;
    }
    if (in_flight_) throw error("wait_notification() while a statement is in flight");
    co_await wait_readable();
    if (!PQconsumeInput(conn_)) fail_lost("waiting for notifications");
  }
}

DURABLE_DECL std::string connection::statement_label(const statement& s) const {
  if (s.prepared) return s.text;
  std::string_view t = s.text;
  t = t.substr(0, std::min(t.find('\n'), std::size_t(60)));
  return std::string(t) + (t.size() < s.text.size() ? "..." : "");
}

DURABLE_DECL void connection::forget_closed_socket() noexcept {
  if (!socket_.is_open()) return;
  if (conn_ && PQsocket(conn_) == socket_.native_handle()) return;  // still libpq's, open
  // Closed by libpq already: deregistering now cannot touch a descriptor that reuses the
  // number, because nothing has run since libpq closed it.
  (void)socket_.release();
}

DURABLE_DECL void connection::fail_lost(std::string_view during) {
  broken_ = true;
  forget_closed_socket();
  throw connection_lost("connection to PostgreSQL lost while " + std::string(during) + ": " +
                        detail::trim_message(PQerrorMessage(conn_)) +
                        "; the outcome of a statement in flight is unknown");
}

DURABLE_DECL void connection::send_prepare(const std::string& name, const std::string& text) {
  if (!PQsendPrepare(conn_, name.c_str(), text.c_str(), 0, nullptr)) {
    broken_ = true;
    forget_closed_socket();
    throw connection_lost("could not send prepare of '" + name +
                          "': " + detail::trim_message(PQerrorMessage(conn_)));
  }
}

DURABLE_DECL void connection::send(const statement& s) {
  const int n = int(s.params.size());
  const char* small[16];
  std::vector<const char*> large;
  const char** values = small;
  if (n > 16) {
    large.resize(std::size_t(n));
    values = large.data();
  }
  for (int i = 0; i < n; ++i)
    values[i] = s.params[std::size_t(i)] ? s.params[std::size_t(i)]->c_str() : nullptr;
  const int ok =
      s.prepared
          ? PQsendQueryPrepared(conn_, s.text.c_str(), n, values, nullptr, nullptr, 0)
          : PQsendQueryParams(conn_, s.text.c_str(), n, nullptr, values, nullptr, nullptr, 0);
  if (!ok) {
    broken_ = true;
    forget_closed_socket();
    throw connection_lost("could not send statement '" + statement_label(s) +
                          "': " + detail::trim_message(PQerrorMessage(conn_)));
  }
  ++stats_.statements;
}

}  // namespace durable::pg

#include "durable/pg/impl/pipeline.ipp"
