// The non-template functions of durable/detail/run_state.hpp: included at the end of
// durable/detail/run_state.hpp when header-only, by durable/src.hpp otherwise.
#pragma once

namespace durable::detail {

DURABLE_DECL captured_error capture(std::exception_ptr e) {
  // Messages go into JSON and into PostgreSQL text: invalid UTF-8 bytes are replaced.
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return {valid_utf8(demangle(typeid(x).name())), valid_utf8(x.what())};
  } catch (...) {
    const std::type_info* t = abi::__cxa_current_exception_type();
    return {t ? valid_utf8(demangle(t->name())) : "unknown",
            "(an exception not derived from std::exception)"};
  }
}

DURABLE_DECL asio::awaitable<pg::pool::lease> acquire(run_state& s) {
  try {
    co_return co_await s.pool->acquire();
  } catch (const std::exception& e) {
    s.outcome.note(verdict::retry(describe_io_failure(e)));
    throw;
  }
}

DURABLE_DECL void note_io_failure(run_state& s, int seq, const std::string& name,
                                  const std::exception& e) {
  const std::string what = describe_io_failure(e);
  if (classify(e) == io_verdict::permanent)
    s.outcome.note(verdict::parked(
        park_cause::journal_refused,
        valid_utf8("workflow '" + s.id + "' (" + s.name + "): the journal row of step " +
                   std::to_string(seq) + " '" + name +
                   "' was refused by the server, which will refuse it again (" + what +
                   "). The workflow is parked and the step is not run again: fix "
                   "the cause (the value, the step name, the database's "
                   "permissions), then resume it")));
  else
    s.outcome.note(verdict::retry(what));
}

DURABLE_DECL std::string journal_fenced_message(const run_state& s, int seq,
                                                const std::string& name, const fence_verdict& v) {
  return "workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
         "' was not journaled because another executor took the workflow over (" +
         (v.server_message.empty() ? "it is no longer owned under epoch " + std::to_string(s.epoch)
                                   : v.server_message) +
         "); this run stops and the new owner continues";
}

DURABLE_DECL asio::awaitable<void> append(run_state& s, int seq, const std::string& name,
                                          const std::string& kind,
                                          const std::optional<std::string>& output,
                                          const std::optional<std::string>& error, int attempts,
                                          double started_at) {
  reserve_row(s, seq, name);
  try {
    const std::string status = error ? "failed" : "succeeded";
    if (s.committer) {
      group_committer::journal_row row{s.id,   s.epoch, seq,   name,     kind,
                                       status, output,  error, attempts, started_at};
      fence_verdict v;
      if (s.joins_running > 0) {
        // A branch that ctx.all/any halts while its row is in flight waits for the outcome
        // instead: the row committed or not, and that is no I/O failure.
        auto ex = co_await asio::this_coro::executor;
        v = co_await shielded(ex, s.committer->append(std::move(row)));
      } else {
        v = co_await s.committer->append(std::move(row));
      }
      if (!v.written()) throw ownership_lost(s.id, journal_fenced_message(s, seq, name, v));
    } else {
      fenced_write row = s.st->step_append(s.id, s.epoch, seq, name, kind, status, output, error,
                                           attempts, started_at);
      auto conn = co_await s.pool->acquire();
      co_await conn->run(std::move(row.st));
    }
  } catch (const ownership_lost&) {
    throw;
  } catch (const pg::sql_error& e) {
    const fence_verdict v = store::verdict(e);
    if (v.fenced_out()) throw ownership_lost(s.id, journal_fenced_message(s, seq, name, v));
    note_io_failure(s, seq, name, e);
    throw;
  } catch (const std::exception& e) {
    note_io_failure(s, seq, name, e);
    throw;
  }
  if (s.counters) ++s.counters->steps_executed;
}

DURABLE_DECL asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

}  // namespace durable::detail
