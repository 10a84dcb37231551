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

DURABLE_DECL const journal_entry* replay_entry(run_state& s, int seq, const std::string& name,
                                               const std::string& kind) {
  if (s.nondeterminism) throw *s.nondeterminism;
  if (std::size_t(seq) >= s.journal.size() || !s.journal[std::size_t(seq)]) return nullptr;
  const journal_entry& e = *s.journal[std::size_t(seq)];
  if (e.name == name && e.kind == kind) return &e;
  raise_nondeterminism(s, seq, e.name, e.kind, name, kind);
}

DURABLE_DECL void raise_nondeterminism(run_state& s, int seq, const std::string& journaled_name,
                                       const std::string& journaled_kind, const std::string& name,
                                       const std::string& kind) {
  const std::string journaled = describe_step(journaled_name, journaled_kind);
  const std::string requested = describe_step(name, kind);
  s.nondeterminism.emplace(
      s.id, seq, journaled, requested,
      "nondeterminism in workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) +
          " is journaled as " + journaled + " but the code now asks for " + requested +
          ". The workflow's code changed while it was in flight (a step was renamed, added or "
          "removed before this point). It is parked: deploy code that takes the journaled "
          "path for workflows started before the change, or cancel it; see "
          "docs/concepts.md#nondeterminism");
  throw *s.nondeterminism;
}

DURABLE_DECL void check_fully_replayed(run_state& s) {
  if (s.nondeterminism) throw *s.nondeterminism;
  for (std::size_t seq = std::size_t(s.next_seq); seq < s.journal.size(); ++seq) {
    if (!s.journal[seq]) continue;
    const std::string journaled = describe_step(s.journal[seq]->name, s.journal[seq]->kind);
    s.nondeterminism.emplace(
        s.id, int(seq), journaled, "",
        "nondeterminism in workflow '" + s.id + "' (" + s.name + "): the code returned after " +
            std::to_string(s.next_seq) + " steps but the journal holds step " +
            std::to_string(seq) + " " + journaled +
            " (a step was removed). It is parked: deploy code that takes the journaled path "
            "for workflows started before the change, or cancel it; see "
            "docs/concepts.md#nondeterminism");
    throw *s.nondeterminism;
  }
}

DURABLE_DECL asio::awaitable<pg::pool::lease> acquire(run_state& s) {
  try {
    co_return co_await s.pool->acquire();
  } catch (const std::exception& e) {
    s.io_failed = true;
    s.io_error = describe_io_failure(e);
    throw;
  }
}

DURABLE_DECL void note_io_failure(run_state& s, int seq, const std::string& name,
                                  const std::exception& e) {
  s.io_error = describe_io_failure(e);
  if (classify(e) == io_verdict::permanent) {
    if (!s.io_refused)
      s.io_refused =
          valid_utf8("workflow '" + s.id + "' (" + s.name + "): the journal row of step " +
                     std::to_string(seq) + " '" + name +
                     "' was refused by the server, which will refuse it again (" + s.io_error +
                     "). The workflow is parked and the step is not run again: fix "
                     "the cause (the value, the step name, the database's "
                     "permissions), then resume it");
  } else {
    s.io_failed = true;
  }
}

DURABLE_DECL std::string journal_fenced_message(const run_state& s, int seq,
                                                const std::string& name, const fence_verdict& v) {
  return "workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
         "' was not journaled because another executor took the workflow over (" +
         (v.server_message.empty() ? "it is no longer owned under epoch " + std::to_string(s.epoch)
                                   : v.server_message) +
         "); this run stops and the new owner continues";
}

DURABLE_DECL void check_journal_room(run_state& s, int seq, const std::string& name) {
  if (s.journal_full) throw journal_limit_exceeded(s.id, *s.journal_full);
  if (s.held_rows.contains(seq)) return;  // counted when it was issued (a retry, say)
  if (s.journal_limit == 0 || s.journal_rows < s.journal_limit) return;
  s.journal_full =
      "workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) + " '" + name +
      "' would be row " + std::to_string(s.journal_rows + 1) +
      " of its journal, beyond the limit of " + std::to_string(s.journal_limit) +
      " rows (engine_options::journal_limit). The step was not run and nothing was journaled; "
      "the workflow is parked. A workflow that runs for ever should call "
      "ctx.continue_as_new(...) to start again with an empty journal before it gets here; to "
      "finish this one, raise journal_limit and resume it. See docs/failures.md#journal-limit";
  throw journal_limit_exceeded(s.id, *s.journal_full);
}

DURABLE_DECL void reserve_row(run_state& s, int seq, const std::string& name) {
  if (s.held_rows.erase(seq) > 0) return;  // counted when the step was issued (row_hold)
  check_journal_room(s, seq, name);
  ++s.journal_rows;
  if (s.journal_warned || s.journal_limit == 0 || !s.report_warning) return;
  if (double(s.journal_rows) < s.journal_warning * double(s.journal_limit)) return;
  s.journal_warned = true;
  s.report_warning("workflow '" + s.id + "' (" + s.name + "): its journal holds " +
                   std::to_string(s.journal_rows) + " rows, " +
                   std::to_string(int(100.0 * double(s.journal_rows) / double(s.journal_limit))) +
                   " % of its limit of " + std::to_string(s.journal_limit) +
                   " rows (engine_options::journal_limit). At the limit its next step is not run "
                   "and it is parked. A workflow that runs for ever (a poller, a scheduler) "
                   "should call ctx.continue_as_new(...) to start again with an empty journal; "
                   "see docs/primitives.md#continue-as-new");
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
