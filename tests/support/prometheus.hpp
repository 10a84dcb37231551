// Test helpers for metrics: Prometheus's own `promtool check metrics` (Debian package
// `prometheus`), a tiny HTTP client for scraping, idle and slow clients that try to starve an
// endpoint, and reading one sample from an exposition.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/detached.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace test {

// ---- promtool ---------------------------------------------------------------------------------

struct promtool_result {
  int status = -1;
  std::string output;
};

/// Runs `promtool check metrics` with `text` on its stdin. Fails the test if promtool is missing.
inline promtool_result promtool_check(const std::string& text) {
  const char* tool = "/usr/bin/promtool";
  if (::access(tool, X_OK) != 0) {
    FAIL(
        "promtool is missing (/usr/bin/promtool): install the Debian package `prometheus` "
        "(scripts/test installs it) to validate the metrics exposition");
  }
  char path[] = "/tmp/durable-metrics-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  const std::string cmd = std::string(tool) + " check metrics < " + path + " 2>&1";
  promtool_result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  ::unlink(path);
  return r;
}

inline void check_with_promtool(const std::string& text) {
  const auto r = promtool_check(text);
  INFO("exposition:\n" << text);
  INFO("promtool said:\n" << r.output);
  CHECK(r.status == 0);
  CHECK(r.output.empty());
}

// ---- a tiny HTTP client ------------------------------------------------------------------------

/// Sends `request` as is to 127.0.0.1:port and returns everything the server wrote until it
/// closed the connection (also when it closed before reading the whole request).
inline asio::awaitable<std::string> http_exchange(unsigned short port,
                                                  std::string_view request_view) {
  const std::string request(request_view);
  asio::ip::tcp::socket sock(co_await asio::this_coro::executor);
  const asio::ip::tcp::endpoint to(asio::ip::make_address("127.0.0.1"), port);
  co_await sock.async_connect(to, asio::use_awaitable);
  asio::error_code ec;
  co_await asio::async_write(sock, asio::buffer(request),
                             asio::redirect_error(asio::use_awaitable, ec));
  std::string reply;
  (void)co_await asio::async_read(sock, asio::dynamic_buffer(reply),
                                  asio::redirect_error(asio::use_awaitable, ec));
  co_return reply;
}

/// Clients that hold an HTTP endpoint on loopback without asking it anything (issue 18): idle ones
/// that connect and never send a byte, and slow-loris ones that send a request head a byte a
/// second. close() (or the destructor) closes them all; a slow one ends within a second then.
class hostile_clients {
public:
  hostile_clients(asio::any_io_executor ex, unsigned short port)
      : ex_(std::move(ex)), to_(asio::ip::make_address("127.0.0.1"), port) {}
  hostile_clients(const hostile_clients&) = delete;
  hostile_clients& operator=(const hostile_clients&) = delete;
  ~hostile_clients() { close(); }

  /// Opens `n` connections that send nothing.
  asio::awaitable<void> idle(int n) {
    for (int i = 0; i < n; ++i) {
      auto s = std::make_shared<asio::ip::tcp::socket>(ex_);
      co_await s->async_connect(to_, asio::use_awaitable);
      st_->sockets.push_back(s);
    }
  }
  /// Starts `n` clients that each send a request head one byte a second (60 bytes at most).
  void slow(int n) {
    for (int i = 0; i < n; ++i) {
      auto s = std::make_shared<asio::ip::tcp::socket>(ex_);
      st_->sockets.push_back(s);
      ++st_->slow_running;
      asio::co_spawn(ex_, trickle(st_, s, to_), asio::detached);
    }
  }
  /// Slow clients that found their connection closed by the server.
  [[nodiscard]] int slow_cut() const { return st_->slow_cut; }
  [[nodiscard]] int slow_running() const { return st_->slow_running; }
  void close() {
    st_->stop = true;
    asio::error_code ec;
    for (const auto& s : st_->sockets) s->close(ec);
  }

private:
  struct state {
    std::vector<std::shared_ptr<asio::ip::tcp::socket>> sockets;
    bool stop = false;
    int slow_running = 0;
    int slow_cut = 0;
  };

  static asio::awaitable<void> trickle(std::shared_ptr<state> st,
                                       std::shared_ptr<asio::ip::tcp::socket> s,
                                       asio::ip::tcp::endpoint to) {
    asio::error_code ec;
    co_await s->async_connect(to, asio::redirect_error(asio::use_awaitable, ec));
    const std::string head = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: 0123456789";
    for (std::size_t i = 0; !ec && !st->stop && i < head.size(); ++i) {
      co_await asio::async_write(*s, asio::buffer(head.data() + i, 1),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      asio::steady_timer pause(s->get_executor(), std::chrono::seconds(1));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (ec && !st->stop) ++st->slow_cut;
    --st->slow_running;
  }

  asio::any_io_executor ex_;
  asio::ip::tcp::endpoint to_;
  std::shared_ptr<state> st_ = std::make_shared<state>();
};

struct http_reply {
  std::string status_line;
  std::string content_type;
  std::string body;
};

inline http_reply parse_reply(const std::string& raw) {
  http_reply r;
  const auto head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return r;
  r.status_line = raw.substr(0, raw.find("\r\n"));
  const auto ct = raw.find("Content-Type: ");
  if (ct != std::string::npos && ct < head_end)
    r.content_type = raw.substr(ct + 14, raw.find("\r\n", ct) - ct - 14);
  r.body = raw.substr(head_end + 4);
  return r;
}

/// The value of the sample `series` (the whole text before the value, labels included).
inline std::optional<double> sample(const std::string& text, const std::string& series) {
  std::size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const auto end = text.find('\n', at);
      return std::stod(text.substr(at + series.size() + 1, end - at - series.size() - 1));
    }
    ++at;
  }
  return std::nullopt;
}

}  // namespace test
