// Group commit: statements from many concurrent workflow runs (journal rows, finishes,
// starts) share one round trip and one commit, so one WAL flush makes many rows durable.
#pragma once

#include <algorithm>
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

#include "durable/detail/config.hpp"
#include "durable/detail/metrics.hpp"
#include "durable/pg/pool.hpp"
#include "durable/store.hpp"

namespace durable::detail {

/// Collects statements submitted by concurrent coroutines and runs them in batches: each
/// batch is one pipeline ending in one Sync, i.e. one round trip and one implicit
/// transaction. A submitter resumes only after the commit of the batch holding its
/// statement was acknowledged, so nothing continues on a row that is not durable.
///
/// Batching costs no latency: a statement submitted while nothing is queued or in flight goes
/// out at once, with whatever else is submitted in the same turn of the event loop (a flusher
/// takes them after one `post`). With `send_alone`, if the last batch carried one statement too
/// (a lone workflow's steps), a connection is free and open, and the submitter runs on this
/// committer's executor, it goes from the submitter's own coroutine instead: no flusher is
/// spawned, nothing waits for a turn of the event loop or a wake-up (about 12 µs of a 250 µs
/// step; off by default, since it cost 9 % of the throughput of 2 000 queued workflows,
/// docs/performance.md run AA). Statements submitted while batches are out wait for the next
/// one, which takes all of them (up to `max_batch`), and up to `max_in_flight` batches are out
/// at once, the lone one included.
///
/// A lone statement's wait is the submitter's: cancelling the submitter (a run cancelled or
/// shut down) ends it at once with the outcome unknown, as the wait for a batch ends, and
/// gives the connection up, since its answer was not read. cancel_all() ends it too.
///
/// Journal rows are merged: all rows of a batch travel as one statement (arrays bound as
/// parameters), fenced row by row (I3), so a fenced-out row fails alone. (A batch with one
/// journal row sends it as step_write, the single-row form, which a claim does not wait for.)
/// Should the merged statement fail, its rows go out again one statement each (step_write), so that
/// only a faulty row gets an error.
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
    /// A statement submitted while nothing is queued or in flight (and the last batch carried
    /// one statement) goes out from its submitter's coroutine; false sends every statement
    /// through a flusher (engine_options::group_commit_send_alone).
    bool send_alone = false;
  };

  /// `st` builds the merged journal statement; without it, append() may not be used.
  group_committer(asio::any_io_executor ex, pg::pool& pool, options o, const store* st = nullptr)
      : ex_(std::move(ex)), pool_(&pool), st_(st), options_(o) {
    if (options_.max_batch == 0) options_.max_batch = 1;
    if (options_.max_in_flight == 0) options_.max_in_flight = 1;
  }

  /// Runs `st` in the next batch and returns its result once the batch committed. Throws
  /// the statement's own pg::sql_error, or the batch's connection error. `sent`, if given, is
  /// set when the batch carrying `st` goes to the server: until then, `st` has not committed.
  [[nodiscard]] asio::awaitable<pg::result> run(pg::statement st,
                                                std::shared_ptr<bool> sent = nullptr) {
    return run_impl(std::move(st), std::move(sent));
  }

  /// One journal row, as step_write takes it.
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
    std::uint64_t sent_alone = 0;  ///< of the batches, those sent from their submitter
  };
  [[nodiscard]] const counters& stats() const noexcept { return counters_; }

  /// Where journal write latencies, batch sizes and round-trip times are recorded (null: not).
  void set_metrics(engine_counters* m) noexcept { metrics_ = m; }

  /// The object that owns this committer and its pool; a batch in flight keeps it alive.
  void set_owner(std::weak_ptr<void> owner) { owner_ = std::move(owner); }

  /// Called with a description of anything that escapes a flusher (nothing should: a
  /// batch's errors go to its submitters).
  void on_failure(std::function<void(const std::string&)> f) { on_failure_ = std::move(f); }

  /// A batch in flight is not late for the time its values need to travel and be stored, at
  /// this many bytes a second (a local server writes large values at 25-50 MB/s).
  static constexpr double write_allowance_bytes_per_second = 8.0 * 1024 * 1024;

  /// The earliest time from which a batch now in flight counts as waiting, if any: when it was
  /// sent, plus the time its values need (write_allowance_bytes_per_second). The lease keeper
  /// withholds the heartbeat while journal writes hang, so that the lease does not outlive
  /// them; a large value that is still travelling does not hang.
  [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> oldest_in_flight() const {
    if (sent_at_.empty()) return std::nullopt;
    return *sent_at_.begin();
  }

  /// Cancels every batch in flight (shutdown past its deadline); their submitters get the
  /// error, and their statements' outcome is unknown.
  DURABLE_DECL void cancel_all();

private:
  struct item {
    explicit item(const asio::any_io_executor& ex)
        : done(ex, asio::steady_timer::time_point::max()) {}
    pg::statement st;
    std::optional<journal_row> row;  // set for a journal row (merged), else `st` runs
    bool alone = false;              // a journal row sent as its own statement
    std::shared_ptr<bool> sent;      // set when its batch is sent (run's `sent`)
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

  DURABLE_DECL asio::awaitable<pg::result> run_impl(pg::statement st, std::shared_ptr<bool> sent);

  DURABLE_DECL asio::awaitable<fence_verdict> append_impl(journal_row row);

  /// Queues `it` and waits until its batch has committed; rethrows its error.
  DURABLE_DECL asio::awaitable<void> submit(item_ptr it);

  /// Runs `it` alone on `conn` from the submitter's coroutine; rethrows its error.
  DURABLE_DECL asio::awaitable<void> submit_alone(item_ptr it, pg::pool::lease conn);

  DURABLE_DECL void start_flushers();

  DURABLE_DECL static void finish(const item_ptr& it);

  // `keep` holds the owner (and so this committer and its pool) while the flusher runs.
  DURABLE_DECL static asio::awaitable<void> flush(group_committer* self,
                                                  std::shared_ptr<void> keep);

  /// One statement writing every journal row among `rows`.
  DURABLE_DECL pg::statement merged_rows(const std::vector<item_ptr>& rows) const;

  /// One journal row alone (step_write: fenced out when it inserted no row).
  DURABLE_DECL pg::statement single_row(const journal_row& r) const;

  /// Sends `items` (on `conn` first, if given) until each has its outcome.
  DURABLE_DECL asio::awaitable<void> commit(std::vector<item_ptr> items,
                                            std::optional<pg::pool::lease> conn);

  DURABLE_DECL void fail_all(std::vector<item_ptr>& items, std::exception_ptr e);

  asio::any_io_executor ex_;
  pg::pool* pool_;
  const store* st_;
  options options_;
  std::deque<item_ptr> queue_;
  std::weak_ptr<void> owner_;
  std::size_t in_flight_ = 0;
  bool last_batch_lone_ = true;  // the last batch sent carried one statement
  bool starting_ = false;
  counters counters_;
  engine_counters* metrics_ = nullptr;
  std::multiset<std::chrono::steady_clock::time_point> sent_at_;  // batches in flight
  std::set<std::shared_ptr<asio::cancellation_signal>> flushers_;
  std::set<pg::connection*> sending_;  // connections of lone statements in flight (cancel_all)
  std::function<void(const std::string&)> on_failure_;
};

}  // namespace durable::detail

#if defined(DURABLE_HEADER_ONLY)
#include "durable/detail/impl/group_commit.ipp"
#endif
