// Test helpers for metrics: Prometheus's own `promtool check metrics` (Debian package
// `prometheus`), a tiny HTTP client for scraping, and reading one sample from an exposition.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <asio/connect.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

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
/// closed the connection.
inline asio::awaitable<std::string> http_exchange(unsigned short port,
                                                  std::string_view request_view) {
  const std::string request(request_view);
  asio::ip::tcp::socket sock(co_await asio::this_coro::executor);
  const asio::ip::tcp::endpoint to(asio::ip::make_address("127.0.0.1"), port);
  co_await sock.async_connect(to, asio::use_awaitable);
  co_await asio::async_write(sock, asio::buffer(request), asio::use_awaitable);
  std::string reply;
  asio::error_code ec;
  (void)co_await asio::async_read(sock, asio::dynamic_buffer(reply),
                                  asio::redirect_error(asio::use_awaitable, ec));
  co_return reply;
}

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
