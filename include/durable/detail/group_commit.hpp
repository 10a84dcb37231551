// Group commit: statements from many concurrent workflow runs (journal rows, finishes,
// starts) share one round trip and one commit, so one WAL flush makes many rows durable.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "durable/pg/pool.hpp"

namespace durable::detail {

/// Collects statements submitted by concurrent coroutines and runs them in batches: each
/// batch is one pipeline ending in one Sync, i.e. one round trip and one implicit
/// transaction. A submitter resumes only after the commit of the batch holding its
/// statement was acknowledged, so nothing continues on a row that is not durable.
///
/// Batching costs no latency: a statement submitted while no batch is in flight goes out at
/// once (alone, as it would without group commit); statements submitted while
/// `max_in_flight` batches are out wait for the next one, which takes all of them (up to
/// `max_batch`).
///
/// A statement that fails does not take the others down with it: the server aborts the
/// whole batch, the failing statement gets its own error, and the rest go out again as a
/// new batch. A lost connection fails every statement of the batch (their outcome is
/// unknown, as it is for a single statement).
class group_committer {
public:
  struct options {
    std::size_t max_batch = 512;
    std::size_t max_in_flight = 2;
  };

  group_committer(asio::any_io_executor ex, pg::pool& pool, options o)
      : ex_(std::move(ex)), pool_(&pool), options_(o) {
    if (options_.max_batch == 0) options_.max_batch = 1;
    if (options_.max_in_flight == 0) options_.max_in_flight = 1;
  }

  /// Runs `st` in the next batch and returns its result once the batch committed. Throws
  /// the statement's own pg::sql_error, or the batch's connection error.
  [[nodiscard]] asio::awaitable<pg::result> run(pg::statement st) {
    return run_impl(std::move(st));
  }

  struct counters {
    std::uint64_t batches = 0;     ///< round trips sent by the committer
    std::uint64_t statements = 0;  ///< statements committed or failed through it
    std::size_t largest_batch = 0;
  };
  [[nodiscard]] const counters& stats() const noexcept { return counters_; }

  /// The object that owns this committer and its pool; a batch in flight keeps it alive.
  void set_owner(std::weak_ptr<void> owner) { owner_ = std::move(owner); }

private:
  struct item {
    explicit item(const asio::any_io_executor& ex)
        : done(ex, asio::steady_timer::time_point::max()) {}
    pg::statement st;
    pg::result res;
    std::exception_ptr err;
    bool finished = false;
    asio::steady_timer done;
  };
  using item_ptr = std::shared_ptr<item>;

  asio::awaitable<pg::result> run_impl(pg::statement st) {
    auto it = std::make_shared<item>(ex_);
    it->st = std::move(st);
    queue_.push_back(it);
    start_flushers();
    if (!it->finished) {
      asio::error_code ec;
      co_await it->done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (it->err) std::rethrow_exception(it->err);
    co_return std::move(it->res);
  }

  void start_flushers() {
    // A flusher takes its batch when it first runs, so statements submitted in the same
    // turn of the event loop travel together.
    if (queue_.empty() || starting_ || in_flight_ >= options_.max_in_flight) return;
    starting_ = true;
    ++in_flight_;
    asio::co_spawn(ex_, flush(this, owner_.lock()), asio::detached);
  }

  static void finish(const item_ptr& it) {
    it->finished = true;
    it->done.cancel();
  }

  // `keep` holds the owner (and so this committer and its pool) while the flusher runs.
  static asio::awaitable<void> flush(group_committer* self, std::shared_ptr<void> keep) {
    (void)keep;
    // Yield once (co_spawn may start this inline): statements submitted in the same turn
    // of the event loop join the batch.
    co_await asio::post(self->ex_, asio::use_awaitable);
    self->starting_ = false;
    while (!self->queue_.empty()) {
      std::vector<item_ptr> items;
      const std::size_t n = std::min(self->queue_.size(), self->options_.max_batch);
      items.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        items.push_back(std::move(self->queue_.front()));
        self->queue_.pop_front();
      }
      // More waiting than this batch takes: let another flusher start on them now.
      self->start_flushers();
      co_await self->commit(std::move(items));
    }
    --self->in_flight_;
    self->start_flushers();
  }

  asio::awaitable<void> commit(std::vector<item_ptr> items) {
    while (!items.empty()) {
      std::vector<pg::statement> batch;
      batch.reserve(items.size());
      for (const auto& it : items) batch.push_back(it->st);
      ++counters_.batches;
      counters_.largest_batch = std::max(counters_.largest_batch, items.size());
      try {
        std::vector<pg::result> results;
        {
          auto c = co_await pool_->acquire();
          results = co_await c->run_batch(std::move(batch));
        }
        for (std::size_t i = 0; i < items.size(); ++i) {
          items[i]->res = std::move(results[i]);
          finish(items[i]);
        }
        counters_.statements += items.size();
        co_return;
      } catch (const pg::sql_error& e) {
        const int i = e.batch_index();
        if (i < 0 || std::size_t(i) >= items.size()) {
          fail_all(items, std::current_exception());
          co_return;
        }
        // The server rolled the whole batch back: the failing statement gets its error,
        // the others go out again.
        items[std::size_t(i)]->err = std::current_exception();
        finish(items[std::size_t(i)]);
        ++counters_.statements;
        items.erase(items.begin() + i);
      } catch (...) {
        fail_all(items, std::current_exception());
        co_return;
      }
    }
  }

  void fail_all(std::vector<item_ptr>& items, std::exception_ptr e) {
    for (auto& it : items) {
      it->err = e;
      finish(it);
    }
    counters_.statements += items.size();
  }

  asio::any_io_executor ex_;
  pg::pool* pool_;
  options options_;
  std::deque<item_ptr> queue_;
  std::weak_ptr<void> owner_;
  std::size_t in_flight_ = 0;
  bool starting_ = false;
  counters counters_;
};

}  // namespace durable::detail
