// The members of durable::detail::group_committer: included at the end of
// durable/detail/group_commit.hpp when header-only, by durable/src.hpp otherwise.
#pragma once

namespace durable::detail {

DURABLE_DECL void group_committer::cancel_all() {
  for (const auto& sig : flushers_) sig->emit(asio::cancellation_type::terminal);
  for (pg::connection* c : sending_) c->interrupt();  // lone statements' waits
}

/// What the submitter of a statement learns when its wait was cancelled before the answer.
[[noreturn]] inline void throw_group_wait_cancelled() {
  throw asio::system_error(asio::error::operation_aborted,
                           "the wait for a group commit was cancelled; the statement's outcome "
                           "is unknown");
}

DURABLE_DECL asio::awaitable<pg::result> group_committer::run_impl(pg::statement st,
                                                                   std::shared_ptr<bool> sent) {
  auto it = std::make_shared<item>(ex_);
  it->st = std::move(st);
  it->sent = std::move(sent);
  co_await submit(it);
  co_return std::move(it->res);
}

DURABLE_DECL asio::awaitable<fence_verdict> group_committer::append_impl(journal_row row) {
  if (!st_) throw error("group_committer::append: no store was given");
  auto it = std::make_shared<item>(ex_);
  it->row = std::move(row);
  const auto submitted = std::chrono::steady_clock::now();
  co_await submit(it);
  if (metrics_)
    metrics_->journal_write_seconds.observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count());
  co_return std::move(it->verdict);
}

DURABLE_DECL asio::awaitable<void> group_committer::submit(item_ptr it) {
  // Nothing queued or in flight, the last batch a lone statement too (under load batches carry
  // many: a statement sent alone there would take a batch's place with one row, and cost the
  // others their commit), a connection free and the submitter on this committer's executor:
  // the statement goes out now, from here.
  if (options_.send_alone && last_batch_lone_ && queue_.empty() && in_flight_ == 0 && !starting_) {
    // Named, not a temporary inside the condition: GCC 12 and co_await (docs/concepts.md).
    const asio::any_io_executor here = co_await asio::this_coro::executor;
    if (here == ex_)
      if (std::optional<pg::pool::lease> conn = pool_->try_acquire()) {
        co_await submit_alone(std::move(it), std::move(*conn));
        co_return;
      }
  }
  queue_.push_back(it);
  start_flushers();
  if (!it->finished) {
    asio::error_code ec;
    co_await it->done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    // The waiter was cancelled (cancel(), a deadline, shutdown) before its batch came back:
    // the statement may still commit, so its outcome is unknown here, never "written".
    if (!it->finished) throw_group_wait_cancelled();
  }
  if (it->err) std::rethrow_exception(it->err);
}

DURABLE_DECL asio::awaitable<void> group_committer::submit_alone(item_ptr it,
                                                                 pg::pool::lease conn) {
  // Counted as a batch in flight, so that statements submitted meanwhile start a flusher only
  // while max_in_flight allows; the owner is held as a flusher holds it.
  const std::shared_ptr<void> keep = owner_.lock();
  ++in_flight_;
  struct count_out {  // once, even if GCC 12 destroys it twice (docs/concepts.md)
    group_committer* self;
    ~count_out() {
      if (self) --std::exchange(self, nullptr)->in_flight_;
    }
  };
  {
    const count_out out{this};
    // Named, not temporaries: GCC 12 miscompiles prvalue arguments of a coroutine in co_await.
    std::vector<item_ptr> alone{it};
    std::optional<pg::pool::lease> lent(std::move(conn));
    co_await commit(std::move(alone), std::move(lent));
  }
  start_flushers();  // for what came while this one was out
  if (!it->err) co_return;
  // The submitter was cancelled while its statement was out: the same error as a cancelled
  // wait for a batch (commit() saw its wait end with operation_aborted).
  try {
    std::rethrow_exception(it->err);
  } catch (const asio::system_error& e) {
    if (e.code() == asio::error::operation_aborted) throw_group_wait_cancelled();
    throw;
  }
}

DURABLE_DECL void group_committer::start_flushers() {
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

DURABLE_DECL void group_committer::finish(const item_ptr& it) {
  it->finished = true;
  it->done.cancel();
}

DURABLE_DECL asio::awaitable<void> group_committer::flush(group_committer* self,
                                                          std::shared_ptr<void> keep) {
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
    std::optional<pg::pool::lease> none;  // named: no prvalue argument inside co_await
    co_await self->commit(std::move(items), std::move(none));
  }
  --self->in_flight_;
  self->start_flushers();
}

DURABLE_DECL pg::statement group_committer::merged_rows(const std::vector<item_ptr>& rows) const {
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

DURABLE_DECL pg::statement group_committer::single_row(const journal_row& r) const {
  return st_
      ->step_write(r.workflow_id, r.epoch, r.seq, r.name, r.kind, r.status, r.output, r.error,
                   r.attempts, r.started_at)
      .st;
}

DURABLE_DECL asio::awaitable<void> group_committer::commit(std::vector<item_ptr> items,
                                                           std::optional<pg::pool::lease> conn) {
  while (!items.empty()) {
    // Journal rows first, as one statement; then the other statements, in order.
    std::vector<item_ptr> rows;
    std::vector<std::vector<item_ptr>> groups;  // the items behind each statement sent
    std::vector<pg::statement> batch;
    batch.reserve(items.size());
    for (const auto& it : items)
      if (it->row && !it->alone) rows.push_back(it);
    // A lone row takes step_write, which costs the server less than the merged form.
    if (rows.size() == 1) {
      rows.front()->alone = true;
      rows.clear();
    }
    // A statement that cannot be built (a text with a NUL: pg::detail::refuse_nul) fails its
    // own items and nothing else, as a statement the server refuses does: merged rows are
    // built again one by one, and a lone row that cannot be built gets the error.
    if (!rows.empty()) {
      try {
        batch.push_back(merged_rows(rows));
      } catch (const pg::sql_error&) {
        for (const auto& it : rows) it->alone = true;
        continue;
      }
      groups.push_back(rows);
    }
    for (const auto& it : items) {
      if (it->row && !it->alone) continue;
      try {
        batch.push_back(it->row ? single_row(*it->row) : it->st);
      } catch (const pg::sql_error&) {
        std::vector<item_ptr> one{it};
        fail_all(one, std::current_exception());
        continue;
      }
      groups.push_back({it});
    }
    std::erase_if(items, [](const item_ptr& it) { return it->finished; });
    if (items.empty()) co_return;
    ++counters_.batches;
    counters_.largest_batch = std::max(counters_.largest_batch, items.size());
    last_batch_lone_ = items.size() == 1;
    // Journal rows in flight are what the lease keeper watches (a write that hangs must not
    // keep the lease fresh): stamped once the batch has its connection, and only if it carries
    // journal rows, so that waiting for the pool or a start's insert does not count.
    const bool carries_rows =
        std::any_of(items.begin(), items.end(), [](const item_ptr& it) { return bool(it->row); });
    struct unmark {
      std::multiset<std::chrono::steady_clock::time_point>& set;
      std::optional<std::multiset<std::chrono::steady_clock::time_point>::iterator> it;
      ~unmark() {
        if (it) set.erase(*it);
      }
    } unmark_sent{sent_at_, std::nullopt};
    if (metrics_) metrics_->group_commit_batch_size.observe(double(items.size()));
    try {
      std::vector<pg::result> results;
      {
        std::optional<pg::pool::lease> c = std::move(conn);
        conn.reset();
        // A lone statement's wait is its submitter's: cancel_all() reaches it through its
        // connection (a flusher's, through the flusher's cancellation signal).
        struct unsending {
          std::set<pg::connection*>& set;
          pg::connection* c;
          ~unsending() {
            if (c) set.erase(c);
          }
        } unsending_at_end{sending_, nullptr};
        if (c) {
          ++counters_.sent_alone;
          unsending_at_end.c = &**c;
          sending_.insert(unsending_at_end.c);
        } else {
          c.emplace(co_await pool_->acquire());
        }
        const auto sent = std::chrono::steady_clock::now();
        for (const auto& it : items)
          if (it->sent) *it->sent = true;
        if (carries_rows) {
          std::size_t bytes = 0;
          for (const auto& it : items) bytes += it->size();
          const auto allowance = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(double(bytes) / write_allowance_bytes_per_second));
          unmark_sent.it = sent_at_.insert(sent + allowance);
        }
        results = co_await (*c)->run_batch(std::move(batch));
        if (metrics_)
          metrics_->group_commit_seconds.observe(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count());
      }
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (groups[g].front()->alone) {
          // step_write inserts no row when fenced out.
          if (results[g].affected() == 0)
            groups[g].front()->verdict.outcome = fence_outcome::fenced_out;
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

DURABLE_DECL void group_committer::fail_all(std::vector<item_ptr>& items, std::exception_ptr e) {
  for (auto& it : items) {
    it->err = e;
    finish(it);
  }
  counters_.statements += items.size();
}

}  // namespace durable::detail
