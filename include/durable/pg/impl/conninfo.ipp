// Part of the implementation of durable/pg/connection.hpp (included by impl/connection.ipp):
// reading a conninfo string or URL (its hosts, ports, timeouts and keepalives), keeping its
// passwords out of messages (redact), and one connection attempt to one address (connect_one).
#pragma once

#include <algorithm>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <cctype>
#include <chrono>
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

}  // namespace durable::pg
