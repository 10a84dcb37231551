// A bounded pool of connections. A caller that finds every connection busy waits for one
// to come back instead of failing; a broken connection is replaced on the next acquire.
#pragma once

#include <poll.h>

#include <asio/experimental/channel.hpp>
#include <memory>
#include <string>
#include <vector>

#include "durable/pg/connection.hpp"

namespace durable::pg {

class pool {
public:
  /// A connection on loan; returns to the pool when destroyed. Must not outlive the pool.
  class lease {
  public:
    lease(lease&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)), index_(o.index_) {}
    lease& operator=(lease&&) = delete;
    ~lease() {
      if (pool_) pool_->release(index_);
    }
    connection& operator*() const noexcept { return *pool_->slots_[index_]; }
    connection* operator->() const noexcept { return pool_->slots_[index_].get(); }

  private:
    friend class pool;
    lease(pool* p, std::size_t i) noexcept : pool_(p), index_(i) {}
    pool* pool_;
    std::size_t index_;
  };

  /// `size` connections at most, opened lazily with `conninfo`; `catalog` names the
  /// statements each connection prepares on first use.
  pool(asio::any_io_executor ex, std::string conninfo, std::size_t size,
       std::shared_ptr<const statement_catalog> catalog = {})
      : conninfo_(std::move(conninfo)),
        catalog_(std::move(catalog)),
        slots_(size),
        free_(ex, size) {
    if (size == 0) throw durable::error("a connection pool needs at least one connection");
    for (std::size_t i = 0; i < size; ++i) (void)free_.try_send(asio::error_code{}, i);
  }
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  /// Waits until a connection is free, connecting it if needed.
  [[nodiscard]] asio::awaitable<lease> acquire() {
    const std::size_t i = co_await free_.async_receive(asio::use_awaitable);
    std::unique_ptr<connection>& slot = slots_[i];
    if (slot && !alive(*slot)) retire(i);
    if (!slot) {
      try {
        slot = co_await connection::connect(conninfo_, catalog_);
      } catch (...) {
        (void)free_.try_send(asio::error_code{}, i);
        throw;
      }
    }
    co_return lease(this, i);
  }

  [[nodiscard]] std::size_t size() const noexcept { return slots_.size(); }
  [[nodiscard]] const std::string& conninfo() const noexcept { return conninfo_; }

  /// Statements and round trips of every connection this pool has had.
  [[nodiscard]] connection_stats stats() const noexcept {
    connection_stats s = retired_;
    for (const auto& c : slots_)
      if (c) {
        s.round_trips += c->stats().round_trips;
        s.statements += c->stats().statements;
      }
    return s;
  }

private:
  // An idle connection has nothing to say; if its socket is readable the server has sent
  // an error or closed it (a restart, a terminated backend). Costs one poll(2), no I/O.
  static bool alive(connection& c) {
    if (!c.is_open()) return false;
    pollfd p{PQsocket(c.native_handle()), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    return PQconsumeInput(c.native_handle()) == 1 && c.is_open() &&
           PQstatus(c.native_handle()) == CONNECTION_OK;
  }
  void retire(std::size_t i) {
    retired_.round_trips += slots_[i]->stats().round_trips;
    retired_.statements += slots_[i]->stats().statements;
    slots_[i].reset();
  }
  void release(std::size_t i) noexcept {
    if (slots_[i] && !slots_[i]->is_open()) retire(i);
    (void)free_.try_send(asio::error_code{}, i);
  }

  std::string conninfo_;
  std::shared_ptr<const statement_catalog> catalog_;
  std::vector<std::unique_ptr<connection>> slots_;
  asio::experimental::channel<void(asio::error_code, std::size_t)> free_;
  connection_stats retired_;
};

}  // namespace durable::pg
