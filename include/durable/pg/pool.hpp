// A bounded pool of connections. A caller that finds every connection busy waits for one
// to come back instead of failing; a broken connection is replaced on the next acquire.
#pragma once

#include <poll.h>

#include <asio/experimental/channel.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "durable/pg/connection.hpp"

namespace durable::pg {

namespace detail {
struct pool_state {
  pool_state(asio::any_io_executor ex, std::string ci, std::size_t size,
             std::shared_ptr<const statement_catalog> cat, connection_options opts)
      : conninfo(std::move(ci)),
        catalog(std::move(cat)),
        options(opts),
        slots(size),
        free(ex, size) {}

  std::string conninfo;
  std::shared_ptr<const statement_catalog> catalog;
  connection_options options;
  std::vector<std::unique_ptr<connection>> slots;
  asio::experimental::channel<void(asio::error_code, std::size_t)> free;
  connection_stats retired;

  void retire(std::size_t i) {
    retired.round_trips += slots[i]->stats().round_trips;
    retired.statements += slots[i]->stats().statements;
    slots[i].reset();
  }
  // The most recently used connection goes out first (a stack), so that sequential work
  // stays on one warm connection and backend instead of rotating through all of them.
  std::vector<std::size_t> idle;

  void release(std::size_t i) noexcept {
    if (slots[i] && !slots[i]->is_open()) retire(i);
    idle.push_back(i);
    (void)free.try_send(asio::error_code{}, 0);
  }
  std::size_t take_idle() noexcept {
    const std::size_t i = idle.back();
    idle.pop_back();
    return i;
  }
};
}  // namespace detail

/// A bounded pool of connections, used from one thread (or strand) at a time.
class pool {
public:
  /// A connection on loan; returns to the pool when destroyed. It keeps the pool's state
  /// alive, so coroutine frames destroyed late (with their io_context) stay safe.
  class lease {
  public:
    lease(lease&& o) noexcept : state_(std::move(o.state_)), index_(o.index_) {}
    lease& operator=(lease&&) = delete;
    ~lease() {
      if (state_) state_->release(index_);
    }
    connection& operator*() const noexcept { return *state_->slots[index_]; }
    connection* operator->() const noexcept { return state_->slots[index_].get(); }

  private:
    friend class pool;
    lease(std::shared_ptr<detail::pool_state> s, std::size_t i) noexcept
        : state_(std::move(s)), index_(i) {}
    std::shared_ptr<detail::pool_state> state_;
    std::size_t index_;
  };

  /// `size` connections at most, opened lazily with `conninfo`; `catalog` names the
  /// statements each connection prepares on first use; `options` apply to every connection
  /// (e.g. the statement deadline).
  pool(asio::any_io_executor ex, std::string conninfo, std::size_t size,
       std::shared_ptr<const statement_catalog> catalog = {}, connection_options options = {}) {
    if (size == 0) throw error("a connection pool needs at least one connection");
    state_ = std::make_shared<detail::pool_state>(ex, std::move(conninfo), size, std::move(catalog),
                                                  options);
    // The channel counts free connections (its values are unused); `idle` says which.
    for (std::size_t i = size; i-- > 0;) {
      state_->idle.push_back(i);
      (void)state_->free.try_send(asio::error_code{}, 0);
    }
  }
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  /// Waits until a connection is free, connecting it if needed.
  [[nodiscard]] asio::awaitable<lease> acquire() {
    auto state = state_;
    // A free connection is taken at once, without the round through the executor that an
    // asynchronous receive costs even when a value is ready. (Waiters, if any, hold every
    // value: try_receive succeeds only when nobody waits.)
    if (!state->free.try_receive([](asio::error_code, std::size_t) {}))
      (void)co_await state->free.async_receive(asio::use_awaitable);
    const std::size_t i = take(*state);
    std::unique_ptr<connection>& slot = state->slots[i];
    if (!slot) {
      try {
        slot = co_await connection::connect(state->conninfo, state->catalog, state->options);
      } catch (...) {
        state->release(i);
        throw;
      }
    }
    co_return lease(std::move(state), i);
  }

  /// A connection now, if one is free, open and alive; nothing otherwise (every connection
  /// is lent out or waited for, or the free one needs connecting first). Never suspends.
  [[nodiscard]] std::optional<lease> try_acquire() {
    if (!state_->free.try_receive([](asio::error_code, std::size_t) {})) return std::nullopt;
    const std::size_t i = take(*state_);
    if (!state_->slots[i]) {
      state_->release(i);
      return std::nullopt;
    }
    return lease(state_, i);
  }

  [[nodiscard]] std::size_t size() const noexcept { return state_->slots.size(); }
  [[nodiscard]] const std::string& conninfo() const noexcept { return state_->conninfo; }
  [[nodiscard]] const connection_options& options() const noexcept { return state_->options; }

  /// Statements and round trips of every connection this pool has had.
  [[nodiscard]] connection_stats stats() const noexcept {
    connection_stats s = state_->retired;
    for (const auto& c : state_->slots)
      if (c) {
        s.round_trips += c->stats().round_trips;
        s.statements += c->stats().statements;
      }
    return s;
  }

private:
  // The slot of a free connection (its count already taken from `free`), emptied if the
  // connection there is dead.
  static std::size_t take(detail::pool_state& state) {
    const std::size_t i = state.take_idle();
    if (state.slots[i] && !alive(*state.slots[i])) state.retire(i);
    return i;
  }

  // An idle connection has nothing to say; if its socket is readable the server has sent
  // an error or closed it (a restart, a terminated backend). Costs one poll(2), no I/O.
  static bool alive(connection& c) {
    if (!c.is_open()) return false;
    // A server going down sends a FATAL message and then closes: the first read returns the
    // message, a second one sees the end of the stream and marks the connection bad.
    for (int i = 0; i < 3; ++i) {
      pollfd p{PQsocket(c.native_handle()), POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      if (PQconsumeInput(c.native_handle()) != 1) return false;
    }
    return c.is_open();
  }

  std::shared_ptr<detail::pool_state> state_;
};

}  // namespace durable::pg
