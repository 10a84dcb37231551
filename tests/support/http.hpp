// A tiny HTTP/1.1 service on loopback, standing in for a paid external API that honours
// idempotency keys, and a client for it. Both use standalone Asio only.
//
// billing_service runs on its own thread and io_context and answers
//
//   POST /classify HTTP/1.1
//   Idempotency-Key: <key>
//   Content-Length: <n>
//
//   <document text>
//
// The first request for a key that gets as far as doing the work "bills" the key once and stores
// the label label_for(body); a later request with a known key returns the stored label (the label
// of the first body, whatever the new body is) and bills nothing. What a request gets depends on
// the mode at the moment its request has been read completely:
//
//   ok               200, body = the label
//   unavailable      503, nothing done, nothing billed
//   bad_request      400, nothing done, nothing billed
//   hang             reads the request, never answers; the connection stays open until the client
//                    closes it or the service stops (a step blocked on a socket)
//   drop_after_work  does the work (bills a new key, stores the label), then closes the connection
//                    without writing any reply; every request until the mode changes
//
// drop_next(n) makes exactly the next n requests that would get 200 behave like drop_after_work,
// whatever the mode is set to (it counts down only on requests that would succeed).
//
// Every request read completely counts in calls() and calls(key), whatever its mode and outcome;
// a client that disconnects before its request is complete counts nowhere. Requests for another
// path get 404, another method 405, a request without Idempotency-Key 400 (all counted in
// calls()). Each connection carries one request (the reply says "Connection: close").
//
// The service never throws out of its thread: errors of a connection are written to stderr and
// end that connection only. The destructor closes the listener and every connection, lets their
// coroutines finish, and joins the thread.
//
// With fork() (tests/test_crash.cpp style): create the service in the parent; children may post
// to it (its counters live in the parent) but must not use or destroy their copy of it (they end
// with _exit). A child forked while a connection is open holds a copy of its descriptor, so that
// connection stays open until the child exits, even after the service closed it.
//
// GCC 12 (docs/concepts.md#gcc-12): post() is a plain function that moves its strings into the
// coroutine post_impl(); the coroutines here build every string into a named local before the
// co_await that uses it.
#pragma once

#include <array>
#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/read_until.hpp>
#include <asio/redirect_error.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <cctype>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "support/loopback.hpp"

namespace test {

namespace http_detail {

inline constexpr std::size_t max_head = 64 * 1024;         // request line / status line + headers
inline constexpr std::size_t max_body = 16 * 1024 * 1024;  // either direction

inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

/// The head of a message (everything before the empty line), split into its first line and
/// headers.
struct head {
  std::string first_line;
  std::map<std::string, std::string> headers;  // names lower-cased; the last one of a name wins

  [[nodiscard]] const std::string* find(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? nullptr : &it->second;
  }
};

/// Parses `text` (the head without its final "\r\n\r\n"); false if malformed.
inline bool parse_head(std::string_view text, head& out) {
  std::size_t pos = text.find("\r\n");
  out.first_line = std::string(text.substr(0, pos));
  while (pos != std::string_view::npos) {
    const std::size_t start = pos + 2;
    pos = text.find("\r\n", start);
    const std::string_view line =
        text.substr(start, pos == std::string_view::npos ? pos : pos - start);
    if (line.empty()) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    std::string name(trim(line.substr(0, colon)));
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(trim(line.substr(colon + 1)));
  }
  return !out.first_line.empty();
}

/// The value of Content-Length, 0 if absent, -1 if malformed or over max_body.
inline long long content_length(const head& h) {
  const std::string* v = h.find("content-length");
  if (!v) return 0;
  if (v->empty() || v->size() > 10) return -1;
  long long n = 0;
  for (char c : *v) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n > static_cast<long long>(max_body) ? -1 : n;
}

inline bool expected_disconnect(const std::error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::operation_aborted ||
         ec == asio::error::bad_descriptor;
}

}  // namespace http_detail

/// What post() returns.
struct http_response {
  int status = 0;
  std::string body;
};

class billing_service {
public:
  enum class mode { ok, unavailable, bad_request, hang, drop_after_work };

  /// Listens on 127.0.0.1 with an ephemeral port and starts serving on its own thread.
  billing_service() : acceptor_(io_) {
    port_ = listen_on_loopback(acceptor_);
    accept();
    thread_ = std::thread([this] { run(); });
  }
  billing_service(const billing_service&) = delete;
  billing_service& operator=(const billing_service&) = delete;

  /// Closes the listener and every open connection (a hanging request ends there), waits for
  /// the connections' coroutines to finish, and joins the thread.
  ~billing_service() {
    asio::post(io_, [this] {
      stopping_ = true;
      asio::error_code ec;
      acceptor_.close(ec);
      for (asio::ip::tcp::socket* s : open_) {
        s->shutdown(asio::ip::tcp::socket::shutdown_both, ec);
        s->close(ec);
      }
    });
    thread_.join();
  }

  [[nodiscard]] unsigned short port() const { return port_; }
  [[nodiscard]] static std::string host() { return "127.0.0.1"; }

  /// The label of a document: "long" if it has more than 10 bytes, else "short".
  [[nodiscard]] static std::string label_for(std::string_view body) {
    return body.size() > 10 ? "long" : "short";
  }

  /// Takes effect for every request whose reading completes from now on. Thread-safe.
  void set_mode(mode m) { mode_ = m; }
  [[nodiscard]] mode get_mode() const { return mode_; }
  /// The next `n` requests that would get 200 do the work and are dropped without a reply
  /// instead (replaces any count not used up yet). Thread-safe.
  void drop_next(int n) { drops_ = n; }
  /// How many of the drop_next() requests are still to come.
  [[nodiscard]] int drops_pending() const { return drops_; }

  /// Requests read completely, whatever they got.
  [[nodiscard]] int calls() const { return calls_; }
  /// Requests read completely with this idempotency key.
  [[nodiscard]] int calls(const std::string& key) const {
    std::lock_guard lock(mutex_);
    auto it = keys_.find(key);
    return it == keys_.end() ? 0 : it->second.calls;
  }
  /// Keys billed (each key is billed at most once).
  [[nodiscard]] int bills() const {
    std::lock_guard lock(mutex_);
    return bills_;
  }
  /// 1 if `key` was billed, else 0.
  [[nodiscard]] int bills(const std::string& key) const {
    std::lock_guard lock(mutex_);
    auto it = keys_.find(key);
    return it != keys_.end() && it->second.billed ? 1 : 0;
  }
  /// Requests held open by mode::hang right now (a test waits for 1 before cancelling).
  [[nodiscard]] int hanging() const { return hanging_; }

private:
  struct key_state {
    int calls = 0;
    bool billed = false;
    std::string label;
  };

  void run() {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {  // not expected: connection coroutines catch all
        std::fprintf(stderr, "billing_service: %s\n", e.what());
      } catch (...) {
        std::fprintf(stderr, "billing_service: unknown exception\n");
      }
    }
  }

  void accept() {
    acceptor_.async_accept([this](asio::error_code ec, asio::ip::tcp::socket s) {
      if (ec) {
        if (!stopping_ && ec != asio::error::operation_aborted)
          std::fprintf(stderr, "billing_service: accept: %s\n", ec.message().c_str());
        if (!stopping_ && acceptor_.is_open()) accept();
        return;
      }
      if (stopping_) return;
      asio::co_spawn(io_, serve(std::move(s)), [this](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::system_error& se) {
          if (!(stopping_ && http_detail::expected_disconnect(se.code())))
            std::fprintf(stderr, "billing_service: connection: %s\n", se.what());
        } catch (const std::exception& ex) {
          std::fprintf(stderr, "billing_service: connection: %s\n", ex.what());
        } catch (...) {
          std::fprintf(stderr, "billing_service: connection: unknown exception\n");
        }
      });
      accept();
    });
  }

  /// Removes the socket from open_ however its coroutine ends.
  struct registration {
    billing_service& svc;
    asio::ip::tcp::socket* s;
    ~registration() { svc.open_.erase(s); }
  };

  static std::string reply(int status, std::string_view reason, std::string_view body) {
    std::string r = "HTTP/1.1 " + std::to_string(status) + " ";
    r += reason;
    r += "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n";
    r += body;
    return r;
  }

  /// One connection, one request. Errors of the client's side end the connection quietly.
  asio::awaitable<void> serve(asio::ip::tcp::socket s) {
    open_.insert(&s);
    registration reg{*this, &s};
    if (stopping_) co_return;

    asio::error_code ec;
    std::string buf;
    const std::size_t head_end =
        co_await asio::async_read_until(s, asio::dynamic_buffer(buf, http_detail::max_head),
                                        "\r\n\r\n", asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (!stopping_ && !(ec == asio::error::eof && buf.empty()))
        std::fprintf(stderr, "billing_service: reading a request head: %s (%zu bytes read)\n",
                     ec.message().c_str(), buf.size());
      co_return;
    }
    http_detail::head h;
    const bool parsed = http_detail::parse_head(std::string_view(buf).substr(0, head_end - 4), h);
    const long long length = parsed ? http_detail::content_length(h) : -1;
    if (length < 0) {
      std::string r = reply(400, "Bad Request", "malformed request\n");
      co_await asio::async_write(s, asio::buffer(r), asio::redirect_error(asio::use_awaitable, ec));
      co_return;
    }
    if (buf.size() - head_end < static_cast<std::size_t>(length)) {
      const std::size_t missing = static_cast<std::size_t>(length) - (buf.size() - head_end);
      co_await asio::async_read(s, asio::dynamic_buffer(buf), asio::transfer_exactly(missing),
                                asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (!stopping_)
          std::fprintf(stderr, "billing_service: reading a request body: %s\n",
                       ec.message().c_str());
        co_return;
      }
    }
    const std::string body = buf.substr(head_end, static_cast<std::size_t>(length));
    ++calls_;

    outcome out = handle(h, body);
    if (out.what == action::hang) {
      // Keep the connection open, reading (and ignoring) whatever comes, until the client
      // closes it or the destructor closes the socket.
      ++hanging_;
      std::array<char, 256> sink{};
      for (;;) {
        co_await s.async_read_some(asio::buffer(sink),
                                   asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;
      }
      --hanging_;
      co_return;
    }
    if (out.what == action::drop) {
      s.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
      s.close(ec);
      co_return;
    }
    co_await asio::async_write(s, asio::buffer(out.response),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec && !stopping_)
      std::fprintf(stderr, "billing_service: writing a response: %s\n", ec.message().c_str());
    s.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  }

  enum class action { reply, hang, drop };
  struct outcome {
    action what = action::reply;
    std::string response;  // the whole response, for action::reply
  };

  /// What to do with a request read completely.
  outcome handle(const http_detail::head& h, const std::string& body) {
    const std::string_view line = h.first_line;
    const std::size_t sp1 = line.find(' ');
    const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos)
      return outcome{action::reply, reply(400, "Bad Request", "malformed request line\n")};
    const std::string_view method = line.substr(0, sp1);
    const std::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    if (path != "/classify")
      return outcome{action::reply, reply(404, "Not Found", "no such path\n")};
    if (method != "POST")
      return outcome{action::reply, reply(405, "Method Not Allowed", "POST only\n")};
    const std::string* key = h.find("idempotency-key");
    if (!key || key->empty())
      return outcome{action::reply, reply(400, "Bad Request", "Idempotency-Key is required\n")};
    {
      std::lock_guard lock(mutex_);
      ++keys_[*key].calls;
    }

    const mode m = mode_;
    switch (m) {
      case mode::unavailable:
        return outcome{action::reply, reply(503, "Service Unavailable", "try again later\n")};
      case mode::bad_request:
        return outcome{action::reply, reply(400, "Bad Request", "rejected\n")};
      case mode::hang:
        return {action::hang, {}};
      case mode::ok:
      case mode::drop_after_work:
        break;
    }
    bool drop = m == mode::drop_after_work;
    for (int n = drops_; !drop && n > 0;)
      if (drops_.compare_exchange_weak(n, n - 1)) drop = true;

    std::string label;
    {
      std::lock_guard lock(mutex_);
      key_state& k = keys_[*key];
      if (!k.billed) {  // the work
        k.billed = true;
        k.label = label_for(body);
        ++bills_;
      }
      label = k.label;
    }
    if (drop) return {action::drop, {}};
    return {action::reply, reply(200, "OK", label)};
  }

  // Declared before io_: connection coroutines touch them until io_ is gone.
  mutable std::mutex mutex_;
  std::map<std::string, key_state> keys_;  // guarded by mutex_
  int bills_ = 0;                          // guarded by mutex_
  std::atomic<mode> mode_{mode::ok};
  std::atomic<int> drops_{0};
  std::atomic<int> calls_{0};
  std::atomic<int> hanging_{0};
  std::set<asio::ip::tcp::socket*> open_;  // the io thread's only
  bool stopping_ = false;                  // the io thread's only

  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  std::thread thread_;
};

namespace http_detail {

/// The error for a connection that failed or was cancelled while `doing` something.
inline std::system_error failure(const std::error_code& ec, const std::string& doing,
                                 const std::string& host, unsigned short port) {
  const std::string what = ec == asio::error::operation_aborted
                               ? "cancelled while " + doing
                               : "connection failed or closed while " + doing;
  return std::system_error(ec, "test::post to " + host + ":" + std::to_string(port) + ": " + what);
}

inline asio::awaitable<http_response> post_impl(std::string host, unsigned short port,
                                                std::string path, std::string key,
                                                std::string body) {
  asio::ip::tcp::socket s(co_await asio::this_coro::executor);
  asio::error_code ec;
  const asio::ip::address address =
      asio::ip::make_address(host == "localhost" ? std::string("127.0.0.1") : host);
  const asio::ip::tcp::endpoint endpoint(address, port);
  co_await s.async_connect(endpoint, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) throw failure(ec, "connecting", host, port);

  std::string request =
      "POST " + path + " HTTP/1.1\r\nHost: " + host + ":" + std::to_string(port) +
      "\r\nIdempotency-Key: " + key +
      "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n";
  request += body;
  co_await asio::async_write(s, asio::buffer(request),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) throw failure(ec, "sending the request", host, port);

  std::string buf;
  const std::size_t head_end =
      co_await asio::async_read_until(s, asio::dynamic_buffer(buf, max_head), "\r\n\r\n",
                                      asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    const std::string doing =
        "waiting for the response head (" + std::to_string(buf.size()) + " bytes received)";
    throw failure(ec, doing, host, port);
  }
  head h;
  if (!parse_head(std::string_view(buf).substr(0, head_end - 4), h) ||
      h.first_line.compare(0, 5, "HTTP/") != 0 || h.first_line.size() < 12)
    throw std::runtime_error("test::post: malformed response head: " + buf.substr(0, head_end));
  http_response r;
  try {
    r.status = std::stoi(h.first_line.substr(h.first_line.find(' ') + 1, 3));
  } catch (const std::exception&) {
    throw std::runtime_error("test::post: malformed status line: " + h.first_line);
  }
  const long long length = content_length(h);
  if (length < 0)
    throw std::runtime_error("test::post: malformed Content-Length in: " + buf.substr(0, head_end));
  if (h.find("content-length")) {
    if (buf.size() - head_end < static_cast<std::size_t>(length)) {
      const std::size_t missing = static_cast<std::size_t>(length) - (buf.size() - head_end);
      co_await asio::async_read(s, asio::dynamic_buffer(buf), asio::transfer_exactly(missing),
                                asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        const std::string doing = "reading the response body (" +
                                  std::to_string(buf.size() - head_end) + " of " +
                                  std::to_string(length) + " bytes received)";
        throw failure(ec, doing, host, port);
      }
    }
    r.body = buf.substr(head_end, static_cast<std::size_t>(length));
  } else {  // no Content-Length: the body ends with the connection
    co_await asio::async_read(s, asio::dynamic_buffer(buf, max_head + max_body),
                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec && ec != asio::error::eof) throw failure(ec, "reading the response body", host, port);
    r.body = buf.substr(head_end);
  }
  co_return r;
}

}  // namespace http_detail

/// Sends `POST <path>` with `Idempotency-Key: <key>` and `body` to host:port (an IP address or
/// "localhost") on a new connection and reads the whole response. Throws std::system_error when
/// the connection fails or closes before a complete response arrived (the code says why: eof,
/// connection_reset, ...). Cancellable: terminal cancellation of the awaiting coroutine aborts
/// the pending operation and throws std::system_error with asio::error::operation_aborted.
/// A plain function (GCC 12): the strings move into the coroutine outside any co_await.
inline asio::awaitable<http_response> post(std::string host, unsigned short port, std::string path,
                                           std::string key, std::string body) {
  return http_detail::post_impl(std::move(host), port, std::move(path), std::move(key),
                                std::move(body));
}

}  // namespace test
