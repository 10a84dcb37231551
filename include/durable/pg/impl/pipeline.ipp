// Part of the implementation of durable/pg/connection.hpp (included by impl/connection.ipp):
// the pipeline machinery under run() and transactions: statement deadlines and the server-side
// cancel, waiting on the socket, flushing, reading results (run_internal), commit and rollback,
// and the blocking exec_blocking for a connection the application owns.
#pragma once

#include <algorithm>
#include <asio/redirect_error.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

namespace durable::pg {

// ---- statement deadlines ----------------------------------------------------------------
//
// One timer per batch (not per wait, which would cost the hot path a timer each time): when it
// expires it cancels the socket wait in progress. The waits below then see `expired`, send the
// server a cancel request and wait once more, for cancel_grace; if that passes too, the
// connection is given up.

DURABLE_DECL void connection::arm_deadline(std::chrono::milliseconds in) {
  auto st = deadline_;
  const std::uint64_t generation = ++st->generation;
  st->expired = false;
  timer_.expires_after(in);
  timer_.async_wait([st, generation](const asio::error_code& ec) {
    if (ec || !st->owner || st->generation != generation) return;
    st->expired = true;
    asio::error_code ignored;
    st->owner->socket_.cancel(ignored);
  });
}

DURABLE_DECL void connection::disarm_deadline() noexcept {
  ++deadline_->generation;
  deadline_->expired = false;
  timer_.cancel();
}

DURABLE_DECL void connection::send_cancel() noexcept {
  // PQcancel blocks (it opens a new connection to the server), so it runs on a short-lived
  // thread of its own. The PGcancel object is independent of the connection.
  cancel_done_.reset();
  PGcancel* cancel = PQgetCancel(conn_);
  if (!cancel) return;  // then only the grace period is left
  auto done = std::make_shared<std::atomic<bool>>(false);
  try {
    std::thread([cancel, done] {
      char error[256];
      (void)PQcancel(cancel, error, int(sizeof error));  // returns once the server processed it
      PQfreeCancel(cancel);
      done->store(true, std::memory_order_release);
    }).detach();
    cancel_done_ = std::move(done);
  } catch (...) {
    PQfreeCancel(cancel);
  }
}

DURABLE_DECL asio::awaitable<bool> connection::cancel_processed() {
  const auto done = cancel_done_;
  if (!done) co_return true;
  // Polled: the thread that sends the request may outlive this connection and its io_context,
  // so it touches nothing but the flag.
  asio::steady_timer pause(socket_.get_executor());
  const auto until = std::chrono::steady_clock::now() + options_.cancel_grace;
  while (!done->load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() >= until) co_return false;
    pause.expires_after(std::chrono::milliseconds(1));
    asio::error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return true;
}

DURABLE_DECL void connection::deadline_passed() {
  deadline_->expired = false;
  const std::string label = awaiting_ ? *awaiting_ : std::string("(batch)");
  if (!cancel_sent_) {
    cancel_sent_ = true;
    send_cancel();
    arm_deadline(options_.cancel_grace);
    return;
  }
  broken_ = true;
  disarm_deadline();
  throw statement_timeout(label, options_.statement_timeout, true);
}

DURABLE_DECL asio::awaitable<void> connection::wait_readable() {
  for (;;) {
    if (deadline_->expired) deadline_passed();
    try {
      co_await socket_.async_wait(asio::posix::stream_descriptor::wait_read, asio::use_awaitable);
      co_return;
    } catch (const asio::system_error& e) {
      if (e.code() != asio::error::operation_aborted || !deadline_->expired) throw;
    }
  }
}

DURABLE_DECL asio::awaitable<void> connection::flush() {
  for (;;) {
    const int r = PQflush(conn_);
    if (r == 0) co_return;
    if (r < 0) fail_lost("sending statements");
    if (deadline_->expired) deadline_passed();
    // The output buffer is full. The server may be blocked writing results to us, so wait
    // for either direction and read whatever arrived before trying to write again.
    using namespace asio::experimental::awaitable_operators;
    try {
      co_await (
          socket_.async_wait(asio::posix::stream_descriptor::wait_write, asio::use_awaitable) ||
          socket_.async_wait(asio::posix::stream_descriptor::wait_read, asio::use_awaitable));
    } catch (const asio::system_error& e) {
      if (e.code() != asio::error::operation_aborted || !deadline_->expired) throw;
      continue;
    }
    if (!PQconsumeInput(conn_)) fail_lost("sending statements");
  }
}

DURABLE_DECL asio::awaitable<PGresult*> connection::next_result() {
  for (;;) {
    if (!PQisBusy(conn_)) co_return PQgetResult(conn_);
    co_await wait_readable();
    if (!PQconsumeInput(conn_)) fail_lost("reading results");
  }
}

DURABLE_DECL asio::awaitable<std::vector<result>> connection::run_internal(
    std::vector<statement> batch, std::pair<std::string, std::string> explicit_prepare) {
  if (!conn_ || broken_)
    throw connection_lost("connection to PostgreSQL is broken; acquire a new one");
  if (in_flight_) {
    broken_ = true;
    throw connection_lost(
        "connection was abandoned in the middle of a round trip; acquire a new one");
  }
  struct sent {
    std::string label;
    const std::string* prepare_name;  // set for a lazy prepare
    bool returned;
  };
  std::vector<sent> ops;
  ops.reserve(batch.size() + 2);
  if (rollback_pending_) {
    send(statement{"ROLLBACK", {}, false});
    ops.push_back({"ROLLBACK", nullptr, false});
    rollback_pending_ = false;
  }
  if (begin_pending_) {
    send(statement{"BEGIN", {}, false});
    ops.push_back({"BEGIN", nullptr, false});
    begin_pending_ = false;
  }
  if (!explicit_prepare.first.empty()) {
    send_prepare(explicit_prepare.first, explicit_prepare.second);
    prepared_.push_back(explicit_prepare.first);
    ops.push_back({explicit_prepare.first, &explicit_prepare.first, false});
  }
  for (const statement& s : batch) {
    if (s.prepared && std::find(prepared_.begin(), prepared_.end(), s.text) == prepared_.end()) {
      const std::string* text = nullptr;
      if (catalog_)
        if (auto it = catalog_->find(s.text); it != catalog_->end()) text = &it->second;
      if (!text) {
        broken_ = !ops.empty();  // statements already queued cannot be taken back
        throw error("statement '" + s.text +
                    "' is not prepared on this connection and not in its catalog");
      }
      send_prepare(s.text, *text);
      prepared_.push_back(s.text);
      ops.push_back({s.text, &s.text, false});
    }
    send(s);
    ops.push_back({statement_label(s), nullptr, true});
  }
  if (!PQpipelineSync(conn_)) fail_lost("sending statements");
  in_flight_ = true;
  ++stats_.round_trips;
  // Ends the deadline however this coroutine ends (its frame may also just be destroyed).
  struct deadline_guard {
    std::shared_ptr<deadline_state> st;
    ~deadline_guard() {
      if (connection* c = st->owner) {
        c->disarm_deadline();
        c->cancel_sent_ = false;
        c->awaiting_ = nullptr;
      }
    }
  } guard{deadline_};
  cancel_sent_ = false;
  awaiting_ = ops.empty() ? nullptr : &ops.front().label;
  if (options_.statement_timeout.count() > 0) arm_deadline(options_.statement_timeout);
  co_await flush();

  std::vector<result> out;
  out.reserve(batch.size());
  // The first error's fields; raised, as the class its SQLSTATE names, once the pipeline has
  // been read to its end.
  struct server_error {
    std::string sqlstate, message, statement, detail;
    int batch_index;
  };
  std::optional<server_error> first_error;
  for (const sent& op : ops) {
    awaiting_ = &op.label;
    std::optional<result> kept;
    bool ok = true;
    for (;;) {
      PGresult* r = co_await next_result();
      if (!r) break;
      const ExecStatusType st = PQresultStatus(r);
      if (st == PGRES_FATAL_ERROR) {
        ok = false;
        if (PQstatus(conn_) == CONNECTION_BAD) {
          PQclear(r);
          fail_lost("running '" + op.label + "'");
        }
        if (!first_error) {
          const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
          const char* primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
          const char* detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
          // BEGIN/ROLLBACK/prepares count as the caller's next statement.
          first_error.emplace(server_error{
              state ? state : "", detail::trim_message(primary ? primary : PQresultErrorMessage(r)),
              op.label, detail ? detail : "", int(out.size())});
        }
        PQclear(r);
      } else if (st == PGRES_PIPELINE_ABORTED) {
        ok = false;
        PQclear(r);
      } else if (op.returned) {
        kept.emplace(r);
      } else {
        PQclear(r);
      }
    }
    if (op.prepare_name && !ok)
      prepared_.erase(std::find(prepared_.begin(), prepared_.end(), *op.prepare_name));
    if (op.returned) out.push_back(kept ? std::move(*kept) : result());
  }
  PGresult* sync = co_await next_result();
  const bool synced = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
  if (sync) PQclear(sync);
  if (!synced) fail_lost("waiting for the end of a pipeline");
  in_flight_ = false;
  if (cancel_sent_) {
    // The deadline passed and the server answered. If the cancel is what ended the batch
    // (57014), the connection can go on once the request has been processed: PostgreSQL
    // signals the backend twice for one request (its process, then its process group), and on
    // a loaded host the second signal, sent late, cancels whatever this connection runs next.
    // Once the cancel connection is closed both were sent, and the backend, idle by then,
    // ignores the second; a request not processed within cancel_grace retires the connection.
    // Otherwise the batch finished on its own before the cancel arrived, which may still
    // interrupt whatever this connection runs next: the connection is retired, and the
    // batch's own outcome is reported.
    if (first_error && first_error->sqlstate == "57014") {
      // Broken until the request is known to be processed: a wait cut short (the awaiting
      // coroutine cancelled) must not hand the connection on with the second signal pending.
      broken_ = true;
      const bool processed = co_await cancel_processed();
      broken_ = !processed;
      throw statement_timeout(first_error->statement, options_.statement_timeout, broken_);
    }
    broken_ = true;
  }
  if (first_error)
    throw_sql_error(std::move(first_error->sqlstate), std::move(first_error->message),
                    std::move(first_error->statement), std::move(first_error->detail),
                    first_error->batch_index);
  co_return out;
}

DURABLE_DECL asio::awaitable<std::vector<result>> transaction::commit_impl(
    std::vector<statement> last) {
  connection& c = active();
  if (c.begin_pending_ && last.empty()) {  // nothing was ever sent
    c.begin_pending_ = false;
    conn_ = nullptr;
    co_return std::vector<result>{};
  }
  if (!c.begin_pending_ && PQtransactionStatus(c.conn_) == PQTRANS_INERROR)
    throw error("cannot commit: a statement in this transaction failed, so it is rolled back");
  last.push_back(statement{"COMMIT", {}, false});
  auto results = co_await c.run_batch(std::move(last));
  const char* status = PQcmdStatus(results.back().native_handle());
  if (!status || std::strcmp(status, "COMMIT") != 0)
    throw error("the transaction was rolled back instead of committed");
  conn_ = nullptr;
  results.pop_back();
  co_return results;
}

DURABLE_DECL asio::awaitable<void> transaction::rollback() {
  connection& c = active();
  conn_ = nullptr;
  if (c.begin_pending_) {
    c.begin_pending_ = false;
    co_return;
  }
  statement s{"ROLLBACK", {}, false};
  co_await c.run(std::move(s));
}

DURABLE_DECL result exec_blocking(PGconn* conn, const statement& s) {
  if (s.prepared)
    throw error("exec_blocking needs SQL text, not the prepared statement '" + s.text + "'");
  std::vector<const char*> values;
  for (const auto& p : s.params) values.push_back(p ? p->c_str() : nullptr);
  result r(PQexecParams(conn, s.text.c_str(), int(values.size()), nullptr, values.data(), nullptr,
                        nullptr, 0));
  const ExecStatusType st = PQresultStatus(r.native_handle());
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
    const char* state = PQresultErrorField(r.native_handle(), PG_DIAG_SQLSTATE);
    const char* primary = PQresultErrorField(r.native_handle(), PG_DIAG_MESSAGE_PRIMARY);
    if (!state)
      throw connection_lost("exec_blocking: " + detail::trim_message(PQerrorMessage(conn)));
    throw_sql_error(state, primary ? primary : "", s.text.substr(0, 60));
  }
  return r;
}

}  // namespace durable::pg
