// Implementation of durable/pg/connection.hpp; included at its end.
#pragma once

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace durable::pg {
namespace detail {

/// A parsed conninfo (string or URL), owning its keys and values.
struct conninfo_options {
  std::vector<std::string> keys, values;

  [[nodiscard]] std::string get(std::string_view key) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return values[i];
    return {};
  }
  void set(std::string_view key, std::string value) {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) {
        values[i] = std::move(value);
        return;
      }
    keys.emplace_back(key);
    values.push_back(std::move(value));
  }
  /// Where we connect, for messages; never includes the password.
  [[nodiscard]] std::string describe() const {
    auto or_env = [&](std::string_view key, const char* env, const char* fallback) {
      std::string v = get(key);
      if (v.empty() && env && std::getenv(env)) v = std::getenv(env);
      return v.empty() ? std::string(fallback) : v;
    };
    return "host=" + or_env("host", "PGHOST", "(default)") +
           " port=" + or_env("port", "PGPORT", "5432") +
           " dbname=" + or_env("dbname", "PGDATABASE", "(default)") +
           " user=" + or_env("user", "PGUSER", "(default)");
  }
};

inline conninfo_options parse_conninfo(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (!opts) {
    std::string msg = err ? err : "out of memory";
    if (err) PQfreemem(err);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    throw connection_error("invalid PostgreSQL connection string: " + msg);
  }
  conninfo_options out;
  for (PQconninfoOption* o = opts; o->keyword; ++o)
    if (o->val) {
      out.keys.emplace_back(o->keyword);
      out.values.emplace_back(o->val);
    }
  PQconninfoFree(opts);
  return out;
}

inline std::string trim_message(const char* m) {
  std::string s = m ? m : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

inline std::string env_or(const char* name, std::string fallback = {}) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

}  // namespace detail

inline asio::awaitable<std::unique_ptr<connection>> connection::connect_impl(
    std::string conninfo, std::shared_ptr<const statement_catalog> catalog) {
  auto ex = co_await asio::this_coro::executor;
  auto opts = detail::parse_conninfo(conninfo);
  const std::string where = opts.describe();

  // libpq resolves host names with a blocking getaddrinfo(); resolve them here with Asio's
  // resolver instead and hand libpq the addresses (hostaddr), keeping host for TLS and errors.
  std::string host = opts.get("host");
  if (host.empty()) host = detail::env_or("PGHOST");
  std::string port = opts.get("port");
  if (port.empty()) port = detail::env_or("PGPORT", "5432");
  asio::error_code parse_ec;
  (void)asio::ip::make_address(host, parse_ec);
  const bool needs_resolve = !host.empty() && host[0] != '/' && host[0] != '@' &&
                             host.find(',') == std::string::npos &&
                             port.find(',') == std::string::npos && parse_ec &&
                             opts.get("hostaddr").empty() && detail::env_or("PGHOSTADDR").empty();
  if (needs_resolve) {
    asio::ip::tcp::resolver resolver(ex);
    asio::ip::tcp::resolver::results_type endpoints;
    try {
      endpoints = co_await resolver.async_resolve(host, port, asio::use_awaitable);
    } catch (const asio::system_error& e) {
      throw connection_error(
          "could not connect to PostgreSQL (" + where + "): could not resolve host name \"" + host +
          "\": " + e.code().message() + "; check the host in the connection string or PGHOST");
    }
    std::vector<std::string> addrs;
    for (const auto& e : endpoints) {
      auto a = e.endpoint().address().to_string();
      if (std::find(addrs.begin(), addrs.end(), a) == addrs.end()) addrs.push_back(a);
    }
    std::string hosts, hostaddrs, ports;
    for (std::size_t i = 0; i < addrs.size(); ++i) {
      const char* sep = i ? "," : "";
      hosts += sep + host;
      hostaddrs += sep + addrs[i];
      ports += sep + port;
    }
    opts.set("host", hosts);
    opts.set("hostaddr", hostaddrs);
    opts.set("port", ports);
  }

  std::vector<const char*> keys, values;
  for (std::size_t i = 0; i < opts.keys.size(); ++i) {
    keys.push_back(opts.keys[i].c_str());
    values.push_back(opts.values[i].c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  PGconn* raw = PQconnectStartParams(keys.data(), values.data(), 0);
  if (!raw) throw connection_error("could not connect to PostgreSQL: out of memory");
  std::unique_ptr<connection> c(new connection(ex, raw, std::move(catalog)));
  auto failed = [&] {
    return connection_error("could not connect to PostgreSQL (" + where +
                            "): " + detail::trim_message(PQerrorMessage(raw)));
  };
  if (PQstatus(raw) == CONNECTION_BAD) throw failed();

  // The connection sequence may switch sockets (several addresses), so the descriptor is
  // registered anew before every wait.
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  for (;;) {
    if (st == PGRES_POLLING_OK) break;
    if (st == PGRES_POLLING_FAILED) throw failed();
    int fd = PQsocket(raw);
    if (fd >= 0) {
      if (c->socket_.is_open()) c->socket_.release();
      c->socket_.assign(fd);
      co_await c->socket_.async_wait(st == PGRES_POLLING_READING
                                         ? asio::posix::stream_descriptor::wait_read
                                         : asio::posix::stream_descriptor::wait_write,
                                     asio::use_awaitable);
    }
    st = PQconnectPoll(raw);
  }
  if (c->socket_.is_open()) c->socket_.release();
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

inline asio::awaitable<result> connection::run_one(statement s) {
  std::vector<statement> batch;
  batch.push_back(std::move(s));
  auto results = co_await run_internal(std::move(batch));
  co_return std::move(results.front());
}

inline asio::awaitable<std::vector<result>> connection::run_batch(std::vector<statement> batch) {
  return run_internal(std::move(batch));
}

inline asio::awaitable<void> connection::prepare_impl(std::string name, std::string text) {
  if (std::find(prepared_.begin(), prepared_.end(), name) != prepared_.end()) co_return;
  std::pair<std::string, std::string> p(std::move(name), std::move(text));
  std::vector<statement> none;
  co_await run_internal(std::move(none), std::move(p));
}

inline transaction connection::begin() {
  if (begin_pending_ || (!rollback_pending_ && PQtransactionStatus(conn_) != PQTRANS_IDLE))
    throw durable::error("a transaction is already open on this connection; finish it first");
  return transaction(*this);
}

inline std::string connection::quote_identifier(std::string_view id) const {
  char* q = PQescapeIdentifier(conn_, id.data(), id.size());
  if (!q)
    throw durable::error("invalid identifier: " + detail::trim_message(PQerrorMessage(conn_)));
  std::string s(q);
  PQfreemem(q);
  return s;
}

inline asio::awaitable<void> connection::listen(std::string_view channel) {
  // LISTEN takes an identifier, not a value: it is quoted by libpq, never spliced raw.
  statement s{"LISTEN " + quote_identifier(channel), {}, false};
  co_await run(std::move(s));
}

inline asio::awaitable<void> connection::unlisten(std::string_view channel) {
  statement s{"UNLISTEN " + quote_identifier(channel), {}, false};
  co_await run(std::move(s));
}

inline asio::awaitable<notification> connection::wait_notification() {
  for (;;) {
    if (PGnotify* n = PQnotifies(conn_)) {
      notification out{n->relname ? n->relname : "", n->extra ? n->extra : "", n->be_pid};
      PQfreemem(n);
      co_return out;
    }
    if (in_flight_) throw durable::error("wait_notification() while a statement is in flight");
    co_await wait_readable();
    if (!PQconsumeInput(conn_)) fail_lost("waiting for notifications");
  }
}

inline std::string connection::statement_label(const statement& s) const {
  if (s.prepared) return s.text;
  std::string_view t = s.text;
  t = t.substr(0, std::min(t.find('\n'), std::size_t(60)));
  return std::string(t) + (t.size() < s.text.size() ? "..." : "");
}

inline void connection::fail_lost(std::string_view during) {
  broken_ = true;
  throw connection_lost("connection to PostgreSQL lost while " + std::string(during) + ": " +
                        detail::trim_message(PQerrorMessage(conn_)) +
                        "; the outcome of a statement in flight is unknown");
}

inline void connection::send_prepare(const std::string& name, const std::string& text) {
  if (!PQsendPrepare(conn_, name.c_str(), text.c_str(), 0, nullptr)) {
    broken_ = true;
    throw connection_lost("could not send prepare of '" + name +
                          "': " + detail::trim_message(PQerrorMessage(conn_)));
  }
}

inline void connection::send(const statement& s) {
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
    throw connection_lost("could not send statement '" + statement_label(s) +
                          "': " + detail::trim_message(PQerrorMessage(conn_)));
  }
  ++stats_.statements;
}

inline asio::awaitable<void> connection::wait_readable() {
  co_await socket_.async_wait(asio::posix::stream_descriptor::wait_read, asio::use_awaitable);
}

inline asio::awaitable<void> connection::flush() {
  for (;;) {
    const int r = PQflush(conn_);
    if (r == 0) co_return;
    if (r < 0) fail_lost("sending statements");
    // The output buffer is full. The server may be blocked writing results to us, so wait
    // for either direction and read whatever arrived before trying to write again.
    using namespace asio::experimental::awaitable_operators;
    co_await (socket_.async_wait(asio::posix::stream_descriptor::wait_write, asio::use_awaitable) ||
              socket_.async_wait(asio::posix::stream_descriptor::wait_read, asio::use_awaitable));
    if (!PQconsumeInput(conn_)) fail_lost("sending statements");
  }
}

inline asio::awaitable<PGresult*> connection::next_result() {
  for (;;) {
    if (!PQisBusy(conn_)) co_return PQgetResult(conn_);
    co_await wait_readable();
    if (!PQconsumeInput(conn_)) fail_lost("reading results");
  }
}

inline asio::awaitable<std::vector<result>> connection::run_internal(
    std::vector<statement> batch, std::pair<std::string, std::string> explicit_prepare) {
  if (!conn_ || broken_)
    throw connection_lost("connection to PostgreSQL is broken; acquire a new one");
  if (in_flight_) {
    broken_ = true;
    throw connection_lost(
        "connection was abandoned in the middle of a round trip; acquire a new one");
  }
  struct sent {
    std::string label;
    const std::string* prepare_name;  // set for a lazy prepare
    bool returned;
  };
  std::vector<sent> ops;
  ops.reserve(batch.size() + 2);
  if (rollback_pending_) {
    send(statement{"ROLLBACK", {}, false});
    ops.push_back({"ROLLBACK", nullptr, false});
    rollback_pending_ = false;
  }
  if (begin_pending_) {
    send(statement{"BEGIN", {}, false});
    ops.push_back({"BEGIN", nullptr, false});
    begin_pending_ = false;
  }
  if (!explicit_prepare.first.empty()) {
    send_prepare(explicit_prepare.first, explicit_prepare.second);
    prepared_.push_back(explicit_prepare.first);
    ops.push_back({explicit_prepare.first, &explicit_prepare.first, false});
  }
  for (const statement& s : batch) {
    if (s.prepared && std::find(prepared_.begin(), prepared_.end(), s.text) == prepared_.end()) {
      const std::string* text = nullptr;
      if (catalog_)
        if (auto it = catalog_->find(s.text); it != catalog_->end()) text = &it->second;
      if (!text) {
        broken_ = !ops.empty();  // statements already queued cannot be taken back
        throw durable::error("statement '" + s.text +
                             "' is not prepared on this connection and not in its catalog");
      }
      send_prepare(s.text, *text);
      prepared_.push_back(s.text);
      ops.push_back({s.text, &s.text, false});
    }
    send(s);
    ops.push_back({statement_label(s), nullptr, true});
  }
  if (!PQpipelineSync(conn_)) fail_lost("sending statements");
  in_flight_ = true;
  ++stats_.round_trips;
  co_await flush();

  std::vector<result> out;
  out.reserve(batch.size());
  std::optional<sql_error> first_error;
  for (const sent& op : ops) {
    std::optional<result> kept;
    bool ok = true;
    for (;;) {
      PGresult* r = co_await next_result();
      if (!r) break;
      const ExecStatusType st = PQresultStatus(r);
      if (st == PGRES_FATAL_ERROR) {
        ok = false;
        if (PQstatus(conn_) == CONNECTION_BAD) {
          PQclear(r);
          fail_lost("running '" + op.label + "'");
        }
        if (!first_error) {
          const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
          const char* primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
          const char* detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
          first_error.emplace(state ? state : "",
                              detail::trim_message(primary ? primary : PQresultErrorMessage(r)),
                              op.label, detail ? detail : "");
          // BEGIN/ROLLBACK/prepares count as the caller's next statement.
          first_error->set_batch_index(int(out.size()));
        }
        PQclear(r);
      } else if (st == PGRES_PIPELINE_ABORTED) {
        ok = false;
        PQclear(r);
      } else if (op.returned) {
        kept.emplace(r);
      } else {
        PQclear(r);
      }
    }
    if (op.prepare_name && !ok)
      prepared_.erase(std::find(prepared_.begin(), prepared_.end(), *op.prepare_name));
    if (op.returned) out.push_back(kept ? std::move(*kept) : result());
  }
  PGresult* sync = co_await next_result();
  const bool synced = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
  if (sync) PQclear(sync);
  if (!synced) fail_lost("waiting for the end of a pipeline");
  in_flight_ = false;
  if (first_error) throw std::move(*first_error);
  co_return out;
}

inline asio::awaitable<std::vector<result>> transaction::commit_impl(std::vector<statement> last) {
  connection& c = active();
  if (c.begin_pending_ && last.empty()) {  // nothing was ever sent
    c.begin_pending_ = false;
    conn_ = nullptr;
    co_return std::vector<result>{};
  }
  if (!c.begin_pending_ && PQtransactionStatus(c.conn_) == PQTRANS_INERROR)
    throw durable::error(
        "cannot commit: a statement in this transaction failed, so it is rolled back");
  last.push_back(statement{"COMMIT", {}, false});
  auto results = co_await c.run_batch(std::move(last));
  const char* status = PQcmdStatus(results.back().native_handle());
  if (!status || std::strcmp(status, "COMMIT") != 0)
    throw durable::error("the transaction was rolled back instead of committed");
  conn_ = nullptr;
  results.pop_back();
  co_return results;
}

inline asio::awaitable<void> transaction::rollback() {
  connection& c = active();
  conn_ = nullptr;
  if (c.begin_pending_) {
    c.begin_pending_ = false;
    co_return;
  }
  statement s{"ROLLBACK", {}, false};
  co_await c.run(std::move(s));
}

inline result exec_blocking(PGconn* conn, const statement& s) {
  if (s.prepared)
    throw durable::error("exec_blocking needs SQL text, not the prepared statement '" + s.text +
                         "'");
  std::vector<const char*> values;
  for (const auto& p : s.params) values.push_back(p ? p->c_str() : nullptr);
  result r(PQexecParams(conn, s.text.c_str(), int(values.size()), nullptr, values.data(), nullptr,
                        nullptr, 0));
  const ExecStatusType st = PQresultStatus(r.native_handle());
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
    const char* state = PQresultErrorField(r.native_handle(), PG_DIAG_SQLSTATE);
    const char* primary = PQresultErrorField(r.native_handle(), PG_DIAG_MESSAGE_PRIMARY);
    if (!state)
      throw connection_lost("exec_blocking: " + detail::trim_message(PQerrorMessage(conn)));
    throw sql_error(state, primary ? primary : "", s.text.substr(0, 60));
  }
  return r;
}

}  // namespace durable::pg
