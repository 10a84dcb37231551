// A TCP proxy in front of the test server, on its own thread, that a test can turn into a
// dead network: `blackhole()` keeps every connection open but forwards nothing (the server
// seems to hang, as behind a broken link), `refuse()` closes everything and refuses new
// connections (the server seems down). The engine under test connects through it.
#pragma once

#include <libpq-fe.h>

#include <array>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/conninfo.hpp"
#include "support/db.hpp"

#include "support/loopback.hpp"

namespace test {

class tcp_proxy {
public:
  /// Forwards to the host and port of `conninfo` (the test server).
  explicit tcp_proxy(const std::string& conninfo) : acceptor_(io_) {
    char* err = nullptr;
    PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
    std::string host = "127.0.0.1", port = "5432";
    if (opts) {
      for (PQconninfoOption* o = opts; o->keyword; ++o) {
        if (!o->val) continue;
        if (std::string(o->keyword) == "host") host = o->val;
        if (std::string(o->keyword) == "port") port = o->val;
      }
      PQconninfoFree(opts);
    }
    if (err) PQfreemem(err);
    if (const char* p = std::getenv("PGPORT"); p && port == "5432") port = p;
    target_ =
        asio::ip::tcp::endpoint(asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host),
                                static_cast<unsigned short>(std::stoi(port)));
    port_ = listen_on_loopback(acceptor_);
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;
  ~tcp_proxy() {
    io_.stop();
    thread_.join();
  }

  /// `conninfo` with host and port pointing at this proxy.
  [[nodiscard]] std::string conninfo(const std::string& base) const {
    return with_option(with_option(base, "host", "127.0.0.1"), "port", std::to_string(port_));
  }

  /// Stop forwarding bytes (both ways); connections stay open, new ones are accepted.
  void blackhole() { mode_ = mode::blackhole; }
  /// Close every connection and refuse new ones.
  void refuse() {
    mode_ = mode::refuse;
    asio::post(io_, [this] {
      asio::error_code ec;
      acceptor_.close(ec);
      for (auto& p : pairs_) p->close();
    });
  }
  /// Forward again (after blackhole(); refuse() is final).
  void forward() { mode_ = mode::forward; }

private:
  enum class mode { forward, blackhole, refuse };
  struct pair : std::enable_shared_from_this<pair> {
    pair(asio::io_context& io, tcp_proxy& p) : client(io), server(io), proxy(p) {}
    asio::ip::tcp::socket client, server;
    tcp_proxy& proxy;
    std::array<char, 16384> up{}, down{};
    void close() {
      asio::error_code ec;
      client.close(ec);
      server.close(ec);
    }
    void pump(asio::ip::tcp::socket& from, asio::ip::tcp::socket& to,
              std::array<char, 16384>& buf) {
      auto self = shared_from_this();
      from.async_read_some(asio::buffer(buf),
                           [self, &from, &to, &buf](asio::error_code ec, std::size_t n) {
                             if (ec) return self->close();
                             self->deliver(from, to, buf, n);
                           });
    }
    void deliver(asio::ip::tcp::socket& from, asio::ip::tcp::socket& to,
                 std::array<char, 16384>& buf, std::size_t n) {
      auto self = shared_from_this();
      if (proxy.mode_ == mode::blackhole) {  // hold the bytes until forwarding resumes
        auto t = std::make_shared<asio::steady_timer>(client.get_executor(),
                                                      std::chrono::milliseconds(20));
        t->async_wait(
            [self, t, &from, &to, &buf, n](asio::error_code) { self->deliver(from, to, buf, n); });
        return;
      }
      if (proxy.mode_ == mode::refuse) return close();
      asio::async_write(to, asio::buffer(buf.data(), n),
                        [self, &from, &to, &buf](asio::error_code ec, std::size_t) {
                          if (ec) return self->close();
                          self->pump(from, to, buf);
                        });
    }
  };

  void accept() {
    acceptor_.async_accept([this](asio::error_code ec, asio::ip::tcp::socket s) {
      if (ec) return;
      auto p = std::make_shared<pair>(io_, *this);
      p->client = std::move(s);
      pairs_.push_back(p);
      asio::error_code cec;
      p->server.connect(target_, cec);
      if (cec) {
        p->close();
      } else {
        p->pump(p->client, p->server, p->up);
        p->pump(p->server, p->client, p->down);
      }
      accept();
    });
  }

  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::ip::tcp::endpoint target_;
  unsigned short port_ = 0;
  std::atomic<mode> mode_{mode::forward};
  std::vector<std::shared_ptr<pair>> pairs_;
  std::thread thread_;
};

}  // namespace test
