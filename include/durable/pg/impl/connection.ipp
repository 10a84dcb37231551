// Implementation of durable/pg/connection.hpp: included at its end when header-only, by
// durable/src.hpp otherwise.
#pragma once

#include <poll.h>

#include <algorithm>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <cctype>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

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

// ---- secrets in messages ----------------------------------------------------------------

inline std::string percent_decode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += char(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

/// The passwords a conninfo string or URL contains, as written and as libpq decodes them:
/// the URL's userinfo password, a `password` query parameter, a `password=` key/value
/// (quoted or not), and PGPASSWORD. Works on malformed input too (it is used for errors).
inline std::vector<std::string> conninfo_secrets(std::string_view ci) {
  std::vector<std::string> out;
  auto add = [&](std::string_view raw, bool url) {
    if (raw.empty()) return;
    out.emplace_back(raw);
    if (url) out.push_back(percent_decode(raw));
  };
  const bool is_url = ci.rfind("postgresql://", 0) == 0 || ci.rfind("postgres://", 0) == 0;
  if (is_url) {
    const std::string_view rest = ci.substr(ci.find("://") + 3);
    const std::string_view before_query = rest.substr(0, rest.find('?'));
    // libpq ends the userinfo at the first '@' unless a '/' comes first; a password with a
    // stray '/' or '@' is also covered by taking everything up to the last '@'.
    for (std::size_t at : {rest.find_first_of("@/"), before_query.rfind('@')}) {
      if (at == std::string_view::npos || rest[at] != '@') continue;
      const std::string_view userinfo = rest.substr(0, at);
      if (auto colon = userinfo.find(':'); colon != std::string_view::npos)
        add(userinfo.substr(colon + 1), true);
    }
    if (auto q = rest.find('?'); q != std::string_view::npos) {
      std::string_view query = rest.substr(q + 1);
      while (!query.empty()) {
        const std::string_view param = query.substr(0, query.find('&'));
        if (auto eq = param.find('=');
            eq != std::string_view::npos && percent_decode(param.substr(0, eq)) == "password")
          add(param.substr(eq + 1), true);
        query.remove_prefix(std::min(query.size(), param.size() + 1));
      }
    }
  } else {
    std::size_t i = 0;
    auto space = [&](std::size_t k) { return k < ci.size() && std::isspace((unsigned char)ci[k]); };
    while (i < ci.size()) {
      while (space(i)) ++i;
      const std::size_t key_start = i;
      while (i < ci.size() && ci[i] != '=' && !space(i)) ++i;
      const std::string_view key = ci.substr(key_start, i - key_start);
      while (space(i)) ++i;
      if (i >= ci.size() || ci[i] != '=') {
        if (i == key_start) ++i;  // never loop on the same character
        continue;
      }
      ++i;
      while (space(i)) ++i;
      std::string value;
      const std::size_t value_start = i;
      const bool quoted = i < ci.size() && ci[i] == '\'';
      if (quoted) ++i;
      while (i < ci.size() && (quoted ? ci[i] != '\'' : !space(i))) {
        if (ci[i] == '\\' && i + 1 < ci.size()) ++i;
        value += ci[i++];
      }
      if (quoted && i < ci.size()) ++i;
      if (key == "password") {
        add(value, false);
        add(ci.substr(value_start, i - value_start), false);
      }
    }
  }
  if (const char* env = std::getenv("PGPASSWORD"); env && *env) add(env, false);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

/// `message` without any password of `conninfo` (see conninfo_secrets) and without the
/// password of any URL or `password=` setting it quotes; each becomes "***".
DURABLE_DECL std::string redact(std::string message, std::string_view conninfo) {
  auto replace_all = [&](const std::string& secret) {
    for (std::size_t at = message.find(secret); at != std::string::npos;
         at = message.find(secret, at + 3))
      message.replace(at, secret.size(), "***");
  };
  for (const std::string& secret : conninfo_secrets(conninfo)) replace_all(secret);
  // Whatever the message still quotes: URL passwords (scheme://user:PASSWORD@) ...
  for (std::size_t at = message.find("://"); at != std::string::npos;
       at = message.find("://", at + 3)) {
    const std::size_t start = at + 3;
    const std::size_t end = message.find_first_of("@/ \t\n\"'", start);
    if (end == std::string::npos || message[end] != '@') continue;
    const std::size_t colon = message.find(':', start);
    if (colon < end) message.replace(colon + 1, end - colon - 1, "***");
  }
  // ... and password=VALUE settings, quoted or not.
  for (std::size_t at = message.find("password="); at != std::string::npos;
       at = message.find("password=", at + 1)) {
    const std::size_t start = at + 9;
    std::size_t end = start;
    if (end < message.size() && message[end] == '\'') {
      for (++end; end < message.size() && message[end] != '\''; ++end)
        if (message[end] == '\\') ++end;
      end = std::min(message.size(), end + 1);
    } else {
      while (end < message.size() && !std::isspace((unsigned char)message[end]) &&
             message[end] != '&' && message[end] != '"')
        ++end;
    }
    message.replace(start, end - start, "***");
  }
  return message;
}

inline conninfo_options parse_conninfo(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (!opts) {
    std::string msg = err ? err : "out of memory";
    if (err) PQfreemem(err);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    throw connection_error("invalid PostgreSQL connection string: " + redact(msg, conninfo));
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

// ---- where to connect -----------------------------------------------------------------------

inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

/// One entry of the host list: libpq's host, hostaddr and port for it.
struct connect_target {
  std::string host, hostaddr, port;
  /// host:port for messages (the socket directory for a Unix socket).
  [[nodiscard]] std::string name() const {
    std::string h = !host.empty() ? host : !hostaddr.empty() ? hostaddr : "(default)";
    if (h.find(':') != std::string::npos && h[0] != '/') h = "[" + h + "]";
    return h + ":" + (port.empty() ? "5432" : port);
  }
  /// A host name Asio must resolve (not an address, not a socket directory).
  [[nodiscard]] bool needs_resolve() const {
    if (host.empty() || !hostaddr.empty() || host[0] == '/' || host[0] == '@') return false;
    asio::error_code ec;
    (void)asio::ip::make_address(host, ec);
    return bool(ec);
  }
};

/// The host list of a conninfo (host=a,b port=1,2 or a multi-host URL), as libpq reads it:
/// host, hostaddr and port lists (or the PGHOST, PGHOSTADDR, PGPORT variables), a single
/// port applying to every host.
inline std::vector<connect_target> connect_targets(const conninfo_options& opts) {
  std::string host = opts.get("host"), hostaddr = opts.get("hostaddr"), port = opts.get("port");
  if (host.empty()) host = env_or("PGHOST");
  if (hostaddr.empty()) hostaddr = env_or("PGHOSTADDR");
  if (port.empty()) port = env_or("PGPORT");
  const auto hosts = split_list(host), addrs = split_list(hostaddr), ports = split_list(port);
  const std::size_t n = std::max(hosts.size(), addrs.size());
  if ((hosts.size() != 1 && hosts.size() != n) || (addrs.size() != 1 && addrs.size() != n))
    throw connection_error("invalid PostgreSQL connection string: " + std::to_string(hosts.size()) +
                           " host names but " + std::to_string(addrs.size()) + " host addresses");
  if (ports.size() != 1 && ports.size() != n)
    throw connection_error("invalid PostgreSQL connection string: could not match " +
                           std::to_string(ports.size()) + " port numbers to " + std::to_string(n) +
                           " hosts");
  for (const std::string& p : ports) {
    const bool digits = !p.empty() && p.size() <= 5 && std::all_of(p.begin(), p.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!p.empty() && (!digits || std::stoi(p) < 1 || std::stoi(p) > 65535))
      throw connection_error("invalid PostgreSQL connection string: invalid port number \"" + p +
                             "\" (a port is a number from 1 to 65535)");
  }
  std::vector<connect_target> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back({hosts.size() == 1 ? hosts[0] : hosts[i], addrs.size() == 1 ? addrs[0] : addrs[i],
                   ports.size() == 1 ? ports[0] : ports[i]});
  return out;
}

/// The connect timeout of a conninfo (connect_timeout, else PGCONNECT_TIMEOUT, else
/// default_connect_timeout), following libpq: 0 or less means none, 1 means 2 seconds.
inline std::optional<std::chrono::seconds> connect_timeout(const conninfo_options& opts) {
  std::string v = opts.get("connect_timeout");
  if (v.empty()) v = env_or("PGCONNECT_TIMEOUT");
  if (v.empty()) return default_connect_timeout;
  long seconds = 0;
  try {
    std::size_t used = 0;
    seconds = std::stol(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
  } catch (const std::exception&) {
    throw connection_error("invalid PostgreSQL connection string: invalid integer value \"" + v +
                           "\" for connect_timeout");
  }
  if (seconds <= 0) return std::nullopt;
  return std::chrono::seconds(std::max(seconds, 2L));
}

/// TCP keepalives on, with our defaults for whatever the caller did not set.
inline void default_keepalives(conninfo_options& opts) {
  const std::pair<const char*, const char*> defaults[] = {{"keepalives", "1"},
                                                          {"keepalives_idle", "60"},
                                                          {"keepalives_interval", "10"},
                                                          {"keepalives_count", "6"}};
  for (const auto& [key, value] : defaults)
    if (opts.get(key).empty()) opts.set(key, value);
}

/// One connection attempt to one address: PQconnectStartParams and PQconnectPoll until the
/// connection is up, it fails, or the deadline passes. Returns the connection, or null with
/// `error` set.
inline asio::awaitable<PGconn*> connect_one(
    const conninfo_options& opts, std::optional<std::chrono::steady_clock::time_point> deadline,
    std::chrono::seconds timeout, std::string& error) {
  using namespace asio::experimental::awaitable_operators;
  auto ex = co_await asio::this_coro::executor;
  std::vector<const char*> keys, values;
  for (std::size_t i = 0; i < opts.keys.size(); ++i) {
    keys.push_back(opts.keys[i].c_str());
    values.push_back(opts.values[i].c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  PGconn* raw = PQconnectStartParams(keys.data(), values.data(), 0);
  if (!raw) {
    error = "out of memory";
    co_return nullptr;
  }
  asio::posix::stream_descriptor sock(ex);
  // Whatever ends this coroutine early (a failure, a cancellation, the io_context destroyed
  // with the frame) finishes the half-open connection; libpq owns the descriptor.
  struct attempt {
    PGconn* raw;
    asio::posix::stream_descriptor& sock;
    attempt(PGconn* r, asio::posix::stream_descriptor& s) : raw(r), sock(s) {}
    attempt(const attempt&) = delete;
    attempt& operator=(const attempt&) = delete;
    ~attempt() {
      if (sock.is_open()) sock.release();
      if (raw) PQfinish(raw);
    }
    PGconn* take() {
      if (sock.is_open()) sock.release();
      return std::exchange(raw, nullptr);
    }
  } guard(raw, sock);
  asio::steady_timer timer(ex);
  timer.expires_at(deadline ? *deadline : std::chrono::steady_clock::time_point::max());
  auto give_up = [&](std::string why) { error = std::move(why); };
  if (PQstatus(raw) == CONNECTION_BAD) {
    give_up(trim_message(PQerrorMessage(raw)));
    co_return nullptr;
  }
  // The connection sequence may switch sockets, so the descriptor is registered anew before
  // every wait.
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  while (st != PGRES_POLLING_OK) {
    if (st == PGRES_POLLING_FAILED) {
      give_up(trim_message(PQerrorMessage(raw)));
      co_return nullptr;
    }
    if (const int fd = PQsocket(raw); fd >= 0) {
      if (sock.is_open()) sock.release();
      sock.assign(fd);
      const auto what = st == PGRES_POLLING_READING ? asio::posix::stream_descriptor::wait_read
                                                    : asio::posix::stream_descriptor::wait_write;
      auto ready =
          co_await (sock.async_wait(what, asio::experimental::as_tuple(asio::use_awaitable)) ||
                    timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable)));
      if (ready.index() == 1) {
        give_up("timed out after " + std::to_string(timeout.count()) +
                " s (connect_timeout) without a complete answer from the server");
        co_return nullptr;
      }
    }
    st = PQconnectPoll(raw);
  }
  co_return guard.take();
}

}  // namespace detail

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

DURABLE_DECL void connection::fail_lost(std::string_view during) {
  broken_ = true;
  throw connection_lost("connection to PostgreSQL lost while " + std::string(during) + ": " +
                        detail::trim_message(PQerrorMessage(conn_)) +
                        "; the outcome of a statement in flight is unknown");
}

DURABLE_DECL void connection::send_prepare(const std::string& name, const std::string& text) {
  if (!PQsendPrepare(conn_, name.c_str(), text.c_str(), 0, nullptr)) {
    broken_ = true;
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
    throw connection_lost("could not send statement '" + statement_label(s) +
                          "': " + detail::trim_message(PQerrorMessage(conn_)));
  }
  ++stats_.statements;
}

// ---- statement deadlines ----------------------------------------------------------------
//
// One timer per batch (not per wait, which would cost the hot path a timer each time): when it
// expires it cancels the socket wait in progress. The waits below then see `expired`, send the
// server a cancel request and wait once more, for cancel_grace; if that passes too, the
// connection is given up.

DURABLE_DECL void connection::arm_deadline(std::chrono::milliseconds in) {
  auto st = deadline_;
  const std::uint64_t generation = ++st->generation;
  st->expired = false;
  timer_.expires_after(in);
  timer_.async_wait([st, generation](const asio::error_code& ec) {
    if (ec || !st->owner || st->generation != generation) return;
    st->expired = true;
    asio::error_code ignored;
    st->owner->socket_.cancel(ignored);
  });
}

DURABLE_DECL void connection::disarm_deadline() noexcept {
  ++deadline_->generation;
  deadline_->expired = false;
  timer_.cancel();
}

DURABLE_DECL void connection::send_cancel() noexcept {
  // PQcancel blocks (it opens a new connection to the server), so it runs on a short-lived
  // thread of its own. The PGcancel object is independent of the connection.
  PGcancel* cancel = PQgetCancel(conn_);
  if (!cancel) return;  // then only the grace period is left
  try {
    std::thread([cancel] {
      char error[256];
      (void)PQcancel(cancel, error, int(sizeof error));
      PQfreeCancel(cancel);
    }).detach();
  } catch (...) {
    PQfreeCancel(cancel);
  }
}

DURABLE_DECL void connection::deadline_passed() {
  deadline_->expired = false;
  const std::string label = awaiting_ ? *awaiting_ : std::string("(batch)");
  if (!cancel_sent_) {
    cancel_sent_ = true;
    send_cancel();
    arm_deadline(options_.cancel_grace);
    return;
  }
  broken_ = true;
  disarm_deadline();
  throw statement_timeout(label, options_.statement_timeout, true);
}

DURABLE_DECL asio::awaitable<void> connection::wait_readable() {
  for (;;) {
    if (deadline_->expired) deadline_passed();
    try {
      co_await socket_.async_wait(asio::posix::stream_descriptor::wait_read, asio::use_awaitable);
      co_return;
    } catch (const asio::system_error& e) {
      if (e.code() != asio::error::operation_aborted || !deadline_->expired) throw;
    }
  }
}

DURABLE_DECL asio::awaitable<void> connection::flush() {
  for (;;) {
    const int r = PQflush(conn_);
    if (r == 0) co_return;
    if (r < 0) fail_lost("sending statements");
    if (deadline_->expired) deadline_passed();
    // The output buffer is full. The server may be blocked writing results to us, so wait
    // for either direction and read whatever arrived before trying to write again.
    using namespace asio::experimental::awaitable_operators;
    try {
      co_await (
          socket_.async_wait(asio::posix::stream_descriptor::wait_write, asio::use_awaitable) ||
          socket_.async_wait(asio::posix::stream_descriptor::wait_read, asio::use_awaitable));
    } catch (const asio::system_error& e) {
      if (e.code() != asio::error::operation_aborted || !deadline_->expired) throw;
      continue;
    }
    if (!PQconsumeInput(conn_)) fail_lost("sending statements");
  }
}

DURABLE_DECL asio::awaitable<PGresult*> connection::next_result() {
  for (;;) {
    if (!PQisBusy(conn_)) co_return PQgetResult(conn_);
    co_await wait_readable();
    if (!PQconsumeInput(conn_)) fail_lost("reading results");
  }
}

DURABLE_DECL asio::awaitable<std::vector<result>> connection::run_internal(
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
        throw error("statement '" + s.text +
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
  // Ends the deadline however this coroutine ends (its frame may also just be destroyed).
  struct deadline_guard {
    std::shared_ptr<deadline_state> st;
    ~deadline_guard() {
      if (connection* c = st->owner) {
        c->disarm_deadline();
        c->cancel_sent_ = false;
        c->awaiting_ = nullptr;
      }
    }
  } guard{deadline_};
  cancel_sent_ = false;
  awaiting_ = ops.empty() ? nullptr : &ops.front().label;
  if (options_.statement_timeout.count() > 0) arm_deadline(options_.statement_timeout);
  co_await flush();

  std::vector<result> out;
  out.reserve(batch.size());
  // The first error's fields; raised, as the class its SQLSTATE names, once the pipeline has
  // been read to its end.
  struct server_error {
    std::string sqlstate, message, statement, detail;
    int batch_index;
  };
  std::optional<server_error> first_error;
  for (const sent& op : ops) {
    awaiting_ = &op.label;
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
          // BEGIN/ROLLBACK/prepares count as the caller's next statement.
          first_error.emplace(server_error{
              state ? state : "", detail::trim_message(primary ? primary : PQresultErrorMessage(r)),
              op.label, detail ? detail : "", int(out.size())});
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
  if (cancel_sent_) {
    // The deadline passed and the server answered. If the cancel is what ended the batch
    // (57014), it has been used up. Otherwise the batch finished on its own before the
    // cancel arrived, which may still interrupt whatever this connection runs next: the
    // connection is retired, and the batch's own outcome is reported.
    if (first_error && first_error->sqlstate == "57014")
      throw statement_timeout(first_error->statement, options_.statement_timeout, false);
    broken_ = true;
  }
  if (first_error)
    throw_sql_error(std::move(first_error->sqlstate), std::move(first_error->message),
                    std::move(first_error->statement), std::move(first_error->detail),
                    first_error->batch_index);
  co_return out;
}

DURABLE_DECL asio::awaitable<std::vector<result>> transaction::commit_impl(
    std::vector<statement> last) {
  connection& c = active();
  if (c.begin_pending_ && last.empty()) {  // nothing was ever sent
    c.begin_pending_ = false;
    conn_ = nullptr;
    co_return std::vector<result>{};
  }
  if (!c.begin_pending_ && PQtransactionStatus(c.conn_) == PQTRANS_INERROR)
    throw error("cannot commit: a statement in this transaction failed, so it is rolled back");
  last.push_back(statement{"COMMIT", {}, false});
  auto results = co_await c.run_batch(std::move(last));
  const char* status = PQcmdStatus(results.back().native_handle());
  if (!status || std::strcmp(status, "COMMIT") != 0)
    throw error("the transaction was rolled back instead of committed");
  conn_ = nullptr;
  results.pop_back();
  co_return results;
}

DURABLE_DECL asio::awaitable<void> transaction::rollback() {
  connection& c = active();
  conn_ = nullptr;
  if (c.begin_pending_) {
    c.begin_pending_ = false;
    co_return;
  }
  statement s{"ROLLBACK", {}, false};
  co_await c.run(std::move(s));
}

DURABLE_DECL result exec_blocking(PGconn* conn, const statement& s) {
  if (s.prepared)
    throw error("exec_blocking needs SQL text, not the prepared statement '" + s.text + "'");
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
    throw_sql_error(state, primary ? primary : "", s.text.substr(0, 60));
  }
  return r;
}

}  // namespace durable::pg
