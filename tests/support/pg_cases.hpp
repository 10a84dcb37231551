// Helpers of the PostgreSQL-layer cases (test_pg*.cpp): a connection to the server under test,
// the message of a failed connection, a pause, a wait for a statement held on a lock, and a port
// nobody listens on.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/steady_timer.hpp>
#include <chrono>
#include <durable/pg.hpp>
#include <memory>
#include <stdexcept>
#include <string>

#include "support/db.hpp"

namespace test {

inline asio::awaitable<std::unique_ptr<durable::pg::connection>> connect() {
  co_return co_await durable::pg::connection::connect(conninfo());
}

/// What connecting to `conninfo` throws (a connection_error's message), or "" if it connects.
inline std::string connect_error(const std::string& conninfo) {
  try {
    run([&]() -> asio::awaitable<void> {
      (void)co_await durable::pg::connection::connect(conninfo);
    }());
  } catch (const durable::pg::connection_error& e) {
    return e.what();
  }
  return "";
}

inline asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

/// Waits until a session of this database waits for a lock in a statement that names `table`
/// (and holds `verb`, if given): a write the test holds back with a lock of its own. Polls on
/// `c`; throws after 15 000 looks (30 s or more).
inline asio::awaitable<void> wait_lock_waiter(durable::pg::connection& c, std::string table,
                                              std::string verb = {}) {
  for (int i = 0;; ++i) {
    auto r = co_await c.exec(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database() AND position($1 in query) > 0 "
        "AND position($2 in query) > 0",
        table, verb);
    if (r[0].get<long>(0) > 0) co_return;
    if (i == 15000) throw std::runtime_error("no statement on " + table + " waited for a lock");
    co_await sleep_for(std::chrono::milliseconds(2));
  }
}

/// A loopback port that was free a moment ago (bound, then closed): connecting is refused.
inline int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace test
