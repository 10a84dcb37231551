// Group commit: statements from many concurrent workflow runs (journal rows, finishes,
// starts) share one round trip and one commit, so one WAL flush makes many rows durable.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "durable/pg/pool.hpp"
#include "durable/store.hpp"

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
/// Journal rows are merged: all rows of a batch travel as one statement (arrays bound as
/// parameters), fenced row by row (I3), so a fenced-out row fails alone. (A batch with one
/// journal row sends it as step_append, the single-row form.) Should the merged
/// statement fail, its rows go out again one statement each (step_append), so that only a
/// faulty row gets an error.
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
    /// A batch stops growing once its values reach this size (large step outputs).
    std::size_t max_batch_bytes = std::size_t(4) << 20;
  };

  /// `st` builds the merged journal statement; without it, append() may not be used.
  group_committer(asio::any_io_executor ex, pg::pool& pool, options o, const store* st = nullptr)
      : ex_(std::move(ex)), pool_(&pool), st_(st), options_(o) {
    if (options_.max_batch == 0) options_.max_batch = 1;
    if (options_.max_in_flight == 0) options_.max_in_flight = 1;
  }

  /// Runs `st` in the next batch and returns its result once the batch committed. Throws
  /// the statement's own pg::sql_error, or the batch's connection error.
  [[nodiscard]] asio::awaitable<pg::result> run(pg::statement st) {
    return run_impl(std::move(st));
  }

  /// One journal row, as step_append takes it.
  struct journal_row {
    std::string workflow_id;
    std::int64_t epoch = 0;
    int seq = 0;
    std::string name, kind, status;
    std::optional<std::string> output, error;
    int attempts = 1;
    double started_at = 0;
  };

  /// Journals `row` in the next batch. Returns the verdict once its batch committed: written,
  /// or fenced_out (its workflow is owned under another epoch now, I3; with the server's
  /// SQLSTATE and message when the row went alone and the fence raised DU001). Throws the
  /// row's own error (a refusal) or the batch's otherwise.
  [[nodiscard]] asio::awaitable<fence_verdict> append(journal_row row) {
    return append_impl(std::move(row));
  }

  struct counters {
    std::uint64_t batches = 0;     ///< round trips sent by the committer
    std::uint64_t statements = 0;  ///< statements committed or failed through it
    std::size_t largest_batch = 0;
  };
  [[nodiscard]] const counters& stats() const noexcept { return counters_; }

  /// The object that owns this committer and its pool; a batch in flight keeps it alive.
  void set_owner(std::weak_ptr<void> owner) { owner_ = std::move(owner); }

  /// Called with a description of anything that escapes a flusher (nothing should: a
  /// batch's errors go to its submitters).
  void on_failure(std::function<void(const std::string&)> f) { on_failure_ = std::move(f); }

  /// When the oldest batch now in flight was sent, if any: the lease keeper withholds the
  /// heartbeat while journal writes hang, so that the lease does not outlive them.
  [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> oldest_in_flight() const {
    if (sent_at_.empty()) return std::nullopt;
    return *sent_at_.begin();
  }

  /// Cancels every batch in flight (shutdown past its deadline); their submitters get the
  /// error, and their statements' outcome is unknown.
  void cancel_all() {
    for (const auto& sig : flushers_) sig->emit(asio::cancellation_type::terminal);
  }

private:
  struct item {
    explicit item(const asio::any_io_executor& ex)
        : done(ex, asio::steady_timer::time_point::max()) {}
    pg::statement st;
    std::optional<journal_row> row;  // set for a journal row (merged), else `st` runs
    bool alone = false;              // a journal row sent as its own statement
    fence_verdict verdict;           // of a journal row
    pg::result res;

    /// Bytes of values this item sends.
    [[nodiscard]] std::size_t size() const {
      std::size_t n = 0;
      if (row) {
        n = row->workflow_id.size() + row->name.size() + 64;
        if (row->output) n += row->output->size();
        if (row->error) n += row->error->size();
      } else {
        for (const auto& p : st.params) n += p ? p->size() : 0;
      }
      return n;
    }
    std::exception_ptr err;
    bool finished = false;
    asio::steady_timer done;
  };
  using item_ptr = std::shared_ptr<item>;

  asio::awaitable<pg::result> run_impl(pg::statement st) {
    auto it = std::make_shared<item>(ex_);
    it->st = std::move(st);
    co_await submit(it);
    co_return std::move(it->res);
  }

  asio::awaitable<fence_verdict> append_impl(journal_row row) {
    if (!st_) throw error("group_committer::append: no store was given");
    auto it = std::make_shared<item>(ex_);
    it->row = std::move(row);
    co_await submit(it);
    co_return std::move(it->verdict);
  }

  /// Queues `it` and waits until its batch has committed; rethrows its error.
  asio::awaitable<void> submit(item_ptr it) {
    queue_.push_back(it);
    start_flushers();
    if (!it->finished) {
      asio::error_code ec;
      co_await it->done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (it->err) std::rethrow_exception(it->err);
  }

  void start_flushers() {
    // A flusher takes its batch when it first runs, so statements submitted in the same
    // turn of the event loop travel together.
    if (queue_.empty() || starting_ || in_flight_ >= options_.max_in_flight) return;
    starting_ = true;
    ++in_flight_;
    auto sig = std::make_shared<asio::cancellation_signal>();
    flushers_.insert(sig);
    asio::co_spawn(ex_, flush(this, owner_.lock()),
                   asio::bind_cancellation_slot(
                       sig->slot(), [this, sig, keep = owner_.lock()](std::exception_ptr e) {
                         flushers_.erase(sig);
                         if (!e) return;
                         std::string what = "unknown error";
                         try {
                           std::rethrow_exception(e);
                         } catch (const std::exception& x) {
                           what = x.what();
                         } catch (...) {
                           what = "an exception not derived from std::exception";
                         }
                         if (on_failure_) on_failure_("a group commit flusher failed: " + what);
                       }));
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
      std::size_t bytes = 0;
      while (!self->queue_.empty() && items.size() < self->options_.max_batch &&
             (items.empty() || bytes < self->options_.max_batch_bytes)) {
        bytes += self->queue_.front()->size();
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

  /// One statement writing every journal row among `rows`.
  pg::statement merged_rows(const std::vector<item_ptr>& rows) const {
    std::vector<std::string> ids, names, kinds, statuses;
    std::vector<std::int64_t> epochs;
    std::vector<int> seqs, attempts;
    std::vector<std::optional<std::string>> outputs, errors;
    std::vector<double> started;
    for (const auto& it : rows) {
      const journal_row& r = *it->row;
      ids.push_back(r.workflow_id);
      epochs.push_back(r.epoch);
      seqs.push_back(r.seq);
      names.push_back(r.name);
      kinds.push_back(r.kind);
      statuses.push_back(r.status);
      outputs.push_back(r.output);
      errors.push_back(r.error);
      attempts.push_back(r.attempts);
      started.push_back(r.started_at);
    }
    return st_
        ->steps_append_many(ids, epochs, seqs, names, kinds, statuses, outputs, errors, attempts,
                            started)
        .st;
  }

  /// One journal row alone (step_append: the fence raises DU001, so a result means written).
  pg::statement single_row(const journal_row& r) const {
    return st_
        ->step_append(r.workflow_id, r.epoch, r.seq, r.name, r.kind, r.status, r.output, r.error,
                      r.attempts, r.started_at)
        .st;
  }

  asio::awaitable<void> commit(std::vector<item_ptr> items) {
    while (!items.empty()) {
      // Journal rows first, as one statement; then the other statements, in order.
      std::vector<item_ptr> rows;
      std::vector<std::vector<item_ptr>> groups;  // the items behind each statement sent
      std::vector<pg::statement> batch;
      batch.reserve(items.size());
      for (const auto& it : items)
        if (it->row && !it->alone) rows.push_back(it);
      // A lone row takes step_append, which costs the server less than the merged form.
      if (rows.size() == 1) {
        rows.front()->alone = true;
        rows.clear();
      }
      if (!rows.empty()) {
        batch.push_back(merged_rows(rows));
        groups.push_back(rows);
      }
      for (const auto& it : items) {
        if (it->row && !it->alone) continue;
        batch.push_back(it->row ? single_row(*it->row) : it->st);
        groups.push_back({it});
      }
      ++counters_.batches;
      counters_.largest_batch = std::max(counters_.largest_batch, items.size());
      const auto sent = sent_at_.insert(std::chrono::steady_clock::now());
      struct unmark {
        std::multiset<std::chrono::steady_clock::time_point>& set;
        std::multiset<std::chrono::steady_clock::time_point>::iterator it;
        ~unmark() { set.erase(it); }
      } unmark_sent{sent_at_, sent};
      try {
        std::vector<pg::result> results;
        {
          auto c = co_await pool_->acquire();
          results = co_await c->run_batch(std::move(batch));
        }
        for (std::size_t g = 0; g < groups.size(); ++g) {
          if (groups[g].front()->alone) {
            groups[g].front()->verdict = {};  // written: step_append raises when fenced out
          } else if (groups[g].front()->row) {
            std::set<std::pair<std::string, int>> written;
            for (auto& w : store::rows<store::written_step>(results[g]))
              written.emplace(std::move(w.workflow_id), w.seq);
            for (const auto& it : groups[g])
              it->verdict.outcome = written.contains({it->row->workflow_id, it->row->seq})
                                        ? fence_outcome::written
                                        : fence_outcome::fenced_out;
          } else {
            groups[g].front()->res = std::move(results[g]);
          }
          for (const auto& it : groups[g]) finish(it);
        }
        counters_.statements += items.size();
        co_return;
      } catch (const pg::sql_error& e) {
        const int i = e.batch_index();
        if (i < 0 || std::size_t(i) >= groups.size()) {
          fail_all(items, std::current_exception());
          co_return;
        }
        // The server rolled the whole batch back: the failing statement's items get its
        // error (merged rows are tried again one by one), the others go out again.
        auto& failed = groups[std::size_t(i)];
        if (failed.front()->row && !failed.front()->alone) {
          for (auto& it : failed) it->alone = true;
        } else if (fence_verdict v = store::verdict(e); failed.front()->row && v.fenced_out()) {
          failed.front()->verdict = std::move(v);  // a lone row the fence rejected
          finish(failed.front());
          ++counters_.statements;
        } else {
          fail_all(failed, std::current_exception());
        }
        std::erase_if(items, [](const item_ptr& it) { return it->finished; });
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
  const store* st_;
  options options_;
  std::deque<item_ptr> queue_;
  std::weak_ptr<void> owner_;
  std::size_t in_flight_ = 0;
  bool starting_ = false;
  counters counters_;
  std::multiset<std::chrono::steady_clock::time_point> sent_at_;  // batches in flight
  std::set<std::shared_ptr<asio::cancellation_signal>> flushers_;
  std::function<void(const std::string&)> on_failure_;
};

}  // namespace durable::detail
