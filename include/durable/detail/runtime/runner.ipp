// The runner: claims workflows (many per statement), loads their journals (one query, I1),
// runs them by replay, and dispatches on each run's verdict (detail/replay/verdict.hpp): the
// final state written (succeeded, failed, dead-lettered, parked, cancelled), nothing written
// (released), the next generation started (continued), or the workflow claimed again after a
// transient failure of the library's own I/O (retry, bounded by I9).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/redirect_error.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "durable/detail/engine_state.hpp"
#include "durable/detail/run_body.hpp"
#include "durable/detail/runtime/supervisor.ipp"

namespace durable::detail {

// ---- outcomes -------------------------------------------------------------------------------

/// Writes a workflow's final state (fenced by its epoch, I3). The verdict is fenced_out if a
/// newer epoch owns it now; a refusal throws.
inline asio::awaitable<fence_verdict> write_final(std::shared_ptr<engine_state> s, std::string id,
                                                  std::int64_t epoch, workflow_state status,
                                                  std::optional<std::string> output,
                                                  std::optional<std::string> error_json,
                                                  std::optional<std::string> reason,
                                                  std::shared_ptr<bool> sent = nullptr) {
  fenced_write finish = s->st.workflow_finish(id, epoch, status, output, error_json, reason);
  pg::statement st = std::move(finish.st);
  const pg::result r = co_await s->committer.run(std::move(st), std::move(sent));
  co_return finish.verdict(r);
}

/// Parks a workflow with `reason` (an operator resumes it once the cause is fixed); returns the
/// state written, or nothing when the fence refused it.
inline asio::awaitable<std::optional<final_state>> park(std::shared_ptr<engine_state> s,
                                                        std::string id, std::int64_t epoch,
                                                        std::string type, std::string reason) {
  reason = valid_utf8(reason);
  final_state parked{workflow_state::parked, std::nullopt, error_json(type, reason), reason};
  const fence_verdict v =
      co_await write_final(s, id, epoch, parked.status, parked.output, parked.error, parked.reason);
  if (v.fenced_out()) co_return std::nullopt;
  co_return parked;
}

asio::awaitable<void> execute(std::shared_ptr<engine_state> s, std::shared_ptr<run_state> run,
                              nlohmann::json inputs);

/// Removes a run's entry (only its own: a newer run of the workflow may have replaced it)
/// and wakes whoever waits on it.
inline void end_run(engine_state& s, const std::string& id, const void* token) {
  if (auto it = s.running.find(id); it != s.running.end() && it->second.done.get() == token) {
    it->second.done->cancel();
    if (it->second.deadline) it->second.deadline->cancel();
    s.running.erase(it);
    s.counters.running.store(s.running.size(), std::memory_order_relaxed);
  }
}

/// Unloaded until a retry, a sleep or a wait is due: any executor claims it then
/// (workflows_wake, at every maintenance tick); this one also looks at that moment instead of
/// waiting for its next tick. One timer, for the earliest of at most `max_local_wakes` due
/// times, so that memory stays flat however many workflows sleep (those beyond are found by
/// the tick). Due times are on the server's clock (engine_state::clock). (A little late: the
/// due time was set by the server's now() when the workflow was unloaded, a round trip after
/// this host computed it.)
inline constexpr std::size_t max_local_wakes = 256;

inline void arm_wake_timer(const std::shared_ptr<engine_state>& s) {
  if (s->local_wakes.empty() || s->stopping) return;
  if (!s->wake_timer) {
    s->wake_timer = std::make_shared<asio::steady_timer>(s->ex);
    s->sleepers.insert(s->wake_timer);  // shutdown cancels it
  }
  const double first = *s->local_wakes.begin();
  const auto due = std::chrono::milliseconds(
      std::int64_t(std::max(0.0, first - s->clock.earliest()) * 1000) + 50);
  s->wake_timer->expires_after(due);  // cancels the wait for a later one
  std::weak_ptr<engine_state> weak = s;
  s->wake_timer->async_wait([weak](const asio::error_code& ec) {
    auto st = weak.lock();
    if (ec || !st || st->stopping) return;
    const double now = st->clock.now();
    while (!st->local_wakes.empty() && *st->local_wakes.begin() <= now + 0.05)
      st->local_wakes.erase(st->local_wakes.begin());
    st->wake_due();
    arm_wake_timer(st);
  });
}

inline void schedule_wake(const std::shared_ptr<engine_state>& s, double due) {
  if (s->local_wakes.size() >= max_local_wakes) {
    if (due >= *s->local_wakes.rbegin()) return;
    s->local_wakes.erase(std::prev(s->local_wakes.end()));
  }
  const bool earliest = s->local_wakes.empty() || due < *s->local_wakes.begin();
  s->local_wakes.insert(due);
  if (earliest) arm_wake_timer(s);
}

/// Starts a run of a claimed workflow on the engine's executor.
inline void launch(std::shared_ptr<engine_state> s, std::shared_ptr<run_state> run,
                   nlohmann::json inputs) {
  run->io = &s->journal;
  run->counters = &s->counters;
  run->unload_after = s->options.unload_after;
  run->poll_interval = s->options.poll_interval;
  run->wait_recheck = s->options.wait_recheck;
  run->waiters = &s->waiters;
  run->app_version = &s->options.app_version;
  if (s->options.on_span) run->on_span = &s->options.on_span;
  std::weak_ptr<engine_state> reporter = s;
  run->report_retry = [reporter, id = run->id](const std::string& what) {
    if (auto st = reporter.lock()) st->report(severity::info, "retry", id, what);
  };
  run->journal_limit = s->options.journal_limit;
  run->journal_warning = s->options.journal_warning;
  run->max_value_bytes = s->options.max_value_bytes;
  run->report_warning = [reporter, id = run->id](const std::string& what) {
    if (auto st = reporter.lock()) st->report(severity::warning, "runner", id, what);
  };
  if (auto w = s->registry.find(run->name); w != s->registry.end()) {
    run->check_inputs = &w->second.check_inputs;
    run->signature = &w->second.signature;
  }
  auto done = std::make_shared<asio::steady_timer>(s->ex, asio::steady_timer::time_point::max());
  auto cancel = std::make_shared<asio::cancellation_signal>();
  if (auto old = s->running.find(run->id); old != s->running.end()) old->second.done->cancel();
  std::shared_ptr<asio::steady_timer> deadline;
  if (run->deadline) {
    // The deadline is stored with the workflow (it survives restarts); this timer enforces
    // it while the workflow runs here. One already past stops the run at its first step.
    const double left = *run->deadline - s->clock.now();
    if (left <= 0)
      run->outcome.note(verdict::cancelled("its deadline passed before it finished", false));
    deadline = std::make_shared<asio::steady_timer>(
        s->ex, std::chrono::milliseconds(std::int64_t(std::max(left, 0.0) * 1000) + 1));
    std::weak_ptr<engine_state> weak = s;
    const std::string id = run->id;
    deadline->async_wait([weak, id, token = done.get()](const asio::error_code& ec) {
      auto st = weak.lock();
      if (ec || !st) return;
      if (auto it = st->running.find(id); it != st->running.end() && it->second.done.get() == token)
        st->cancel_local(id, "its deadline passed before it finished", false);
    });
  }
  s->running[run->id] = local_run{done, cancel, run, deadline};
  s->counters.running.store(s->running.size(), std::memory_order_relaxed);
  run->launch_token = done.get();
  asio::co_spawn(
      s->ex, execute(s, run, std::move(inputs)),
      asio::bind_cancellation_slot(cancel->slot(), [s, run, done, cancel](std::exception_ptr e) {
        // execute() handles everything; this is the net under it (I9: no
        // exception leaves a workflow `running` here without a run).
        if (e)
          s->report(severity::error, "runner", run->id,
                    "the run ended with an unhandled exception: " + describe(e));
        end_run(*s, run->id, done.get());
      }));
}

/// Most workflows claimed by one statement.
inline constexpr std::size_t claim_batch = 100;

/// Claims the workflows `ids` for this executor (epoch bumped, I3) and loads their journals,
/// in one round trip (I1: one query per `claim_batch` ids loads every journal, all of them in
/// one pipeline), then starts their runs. Every workflow is claimed before any of them runs: a
/// run started early would compete with the later claims for the pool (open() with 300 runs
/// to resume and 8 connections waited for its own runs). A workflow the claim parks (I9) or whose
/// journal cannot be used is parked and reported. Returns the number of runs started. A run started
/// for `open`, `recover` or one of `orphans` (this executor's own, found running nowhere here)
/// counts as recovered.
inline asio::awaitable<std::size_t> claim_runs(
    std::shared_ptr<engine_state> s, std::vector<std::string> ids, std::string_view component,
    const std::set<std::string, std::less<>>* orphans = nullptr) {
  std::size_t started = 0;
  if (ids.empty()) co_return started;
  std::vector<pg::result> results;
  {
    std::vector<pg::statement> batch;
    for (std::size_t from = 0; from < ids.size(); from += claim_batch) {
      const std::vector<std::string> chunk(
          ids.begin() + std::ptrdiff_t(from),
          ids.begin() + std::ptrdiff_t(std::min(ids.size(), from + claim_batch)));
      batch.push_back(s->st
                          .workflows_claim(chunk, s->options.executor_id, s->names, s->versions,
                                           s->options.max_claims_without_progress)
                          .st);
      batch.push_back(s->st.journals_load(chunk).st);
      batch.push_back(s->st.attempts_load(chunk).st);
    }
    auto c = co_await s->pool.acquire();
    results = co_await c->run_batch(std::move(batch));
  }
  for (std::size_t at = 0; at + 2 < results.size(); at += 3) {
    const std::span<pg::result> r(results.data() + at, 3);
    ++s->counters.journal_loads;
    struct claimed {
      std::shared_ptr<run_state> run;
      std::string inputs;
      std::size_t rows = 0;                 // journal rows loaded for it
      std::optional<std::string> unusable;  // why its journal cannot be used
    };
    std::map<std::string, claimed, std::less<>> runs;
    for (auto& w : store::rows<store::claimed_workflow>(r[0])) {
      if (w.parked()) {
        s->counters.workflows_parked.add(s->counters.workflows_parked.index("no_progress"));
        s->report(severity::warning, component, w.id,
                  "parked by its claim: " + w.reason.value_or(""));
        continue;
      }
      auto run = std::make_shared<run_state>();
      run->id = w.id;
      run->name = std::move(w.name);
      run->epoch = w.epoch;
      run->generation = w.generation;
      run->holds_queue_slot = w.queued;
      run->traceparent = std::move(w.traceparent);
      // Times from the server, as the time left from its now(), become times on the server's
      // clock as this process measures it (server_clock): hosts' wall clocks may be wrong.
      if (w.deadline_in) run->deadline = s->clock.now() + *w.deadline_in;
      runs[w.id] =
          claimed{.run = std::move(run), .inputs = std::move(w.inputs), .rows = 0, .unusable = {}};
    }
    for (auto& a : store::rows<store::step_attempt>(r[2])) {
      const auto it = runs.find(a.workflow_id);
      if (it == runs.end()) continue;
      attempt_history& h = it->second.run->attempts[a.seq];
      if (h.name.empty()) {
        h.name = std::move(a.name);
        h.kind = std::move(a.kind);
      }
      std::optional<double> next;
      if (a.next_attempt_in) next = s->clock.now() + *a.next_attempt_in;
      h.add(a.attempt, a.outcome, a.error, next);
    }
    // The rows come in no order (journals_load): each is placed by its step number, and checked
    // against how many its workflow has. They are read in place (views into the result), and
    // each field is copied once, into its entry; a workflow's rows mostly come together, so the
    // workflow of the row before is tried first.
    const auto loaded = store::rows<store::loaded_step>(r[1]);
    auto run_of = [&runs, last = runs.end()](std::string_view id) mutable {
      if (last == runs.end() || last->first != id) last = runs.find(id);
      return last;
    };
    for (const auto& row : loaded)
      if (const auto it = run_of(row.workflow_id); it != runs.end()) ++it->second.rows;
    for (const auto& row : loaded) {
      const auto it = run_of(row.workflow_id);
      if (it == runs.end() || it->second.unusable) continue;
      journal_entry e;
      e.name = row.name;
      e.kind = row.kind;
      e.failed = row.failed;
      if (row.output) e.output = *row.output;
      if (row.error) e.error = *row.error;
      it->second.unusable = it->second.run->add_entry(row.seq, std::move(e), it->second.rows);
    }
    for (auto& [id, c] : runs) {
      const auto& run = c.run;
      if (c.unusable) {
        const std::string type = "durable::journal_error";
        co_await park(s, id, run->epoch, type, *c.unusable);
        s->counters.workflows_parked.add(s->counters.workflows_parked.index("journal_error"));
        s->report(severity::warning, component, id, "parked: " + *c.unusable);
        continue;
      }
      if (component != "runner")
        s->report(severity::info, component, id,
                  "claimed under epoch " + std::to_string(run->epoch) + " and resumed by replay");
      launch(s, run, nlohmann::json::parse(c.inputs));
      ++started;
      if (component == "open" || component == "recover" || (orphans && orphans->contains(id)))
        ++s->counters.workflows_recovered;
    }
  }
  co_return started;
}

// ---- a run ----------------------------------------------------------------------------------

/// The next generation a continue_as_new committed runs now, here (no claim, no journal to
/// load: it is empty), under the epoch the statement set.
inline void run_next_generation(const std::shared_ptr<engine_state>& s, const run_state& run,
                                const next_generation& next) {
  end_run(*s, run.id, run.launch_token);
  if (s->stopping) return;  // owned here still: shutdown hands it over with the lease
  auto n = std::make_shared<run_state>();
  n->id = run.id;
  n->name = run.name;
  n->epoch = next.epoch;
  n->generation = next.generation;
  n->deadline = run.deadline;
  n->holds_queue_slot = run.holds_queue_slot;
  n->traceparent = run.traceparent;
  auto inputs = nlohmann::json::parse(next.inputs);
  s->report(severity::debug, "runner", run.id,
            "continued as new: generation " + std::to_string(n->generation) +
                " starts under epoch " + std::to_string(n->epoch));
  launch(s, std::move(n), std::move(inputs));
}

/// What a run's span ends with: how the run ended, and why ("" when it succeeded).
inline std::string verdict_words(const verdict& v) {
  const auto message_of = [](const std::string& error_json) {
    const auto j = nlohmann::json::parse(error_json, nullptr, false);
    return j.is_object() ? j.value("message", error_json) : error_json;
  };
  switch (v.what) {
    case verdict::kind::failed:
      return "failed: " + message_of(v.error);
    case verdict::kind::dead_lettered:
      return "dead-lettered: " + v.reason;
    case verdict::kind::parked:
      return "parked: " + v.reason;
    case verdict::kind::retry:
      return "claimed again after a database failure: " + v.io_error;
    case verdict::kind::cancelled:
      return "cancelled: " + v.reason;
    case verdict::kind::released:
      return "released: " + v.reason;
    default:
      return {};
  }
}

/// Counts and reports how a run ended.
inline void account(engine_state& s, const std::string& id, const verdict& v) {
  auto& m = s.counters;
  auto finished = [&m](workflow_state status) {
    m.workflows_finished.add(m.workflows_finished.index(to_string(status)));
  };
  switch (v.what) {
    case verdict::kind::succeeded:
      finished(workflow_state::succeeded);
      break;
    case verdict::kind::failed:
      finished(workflow_state::failed);
      s.report(severity::info, "runner", id, "failed: " + v.error);
      break;
    case verdict::kind::cancelled:
      if (v.elsewhere) break;  // cancel() wrote the status: this run did not end it
      finished(workflow_state::cancelled);
      s.report(severity::info, "runner", id, "cancelled: " + v.reason);
      break;
    case verdict::kind::parked:
      m.workflows_parked.add(m.workflows_parked.index(park_reason(error_type(v.cause))));
      s.report(severity::warning, "runner", id, "parked: " + valid_utf8(v.reason));
      break;
    case verdict::kind::dead_lettered:
      ++m.workflows_dead_lettered;
      s.report(severity::warning, "runner", id, "dead-lettered: " + v.reason);
      break;
    case verdict::kind::retry:
      ++m.io_retries;
      break;
    default:
      break;  // released, continued: another run goes on
  }
}

// ---- a run ----------------------------------------------------------------------------------

/// The pause of a run before it claims its workflow again after an I/O error: `d`, unless
/// shutdown cuts it short or the lease keeper shortens it (the database works again; see
/// run_table::retry_pauses).
inline asio::awaitable<void> retry_pause(std::shared_ptr<engine_state> s,
                                         std::chrono::milliseconds d) {
  if (s->stopping) co_return;
  auto t = std::make_shared<asio::steady_timer>(s->ex, d);
  s->sleepers.insert(t);
  s->retry_pauses.insert(t);
  struct unmark {
    engine_state& s;
    std::shared_ptr<asio::steady_timer> t;
    ~unmark() {
      s.sleepers.erase(t);
      s.retry_pauses.erase(t);
    }
  } guard{*s, t};
  // A new expiry aborts the wait: wait again until the (earlier) time now set.
  while (!s->stopping && std::chrono::steady_clock::now() < t->expiry()) {
    asio::error_code ec;
    co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

inline asio::awaitable<void> execute(std::shared_ptr<engine_state> s,
                                     std::shared_ptr<run_state> run, nlohmann::json inputs) {
  // The run's span: from here (the replay included) to its verdict.
  span_guard run_span(*run, span_kind::run, -1, run->name, {});
  co_await run_body(*run, [&s, &run, &inputs](context& ctx) {
    return s->registry.at(run->name).invoke(ctx, inputs);
  });
  // A cancel() or the deadline cancelled the run's coroutine; what follows (the final state)
  // must still reach the database. The verdict is taken now: nothing noted later changes it.
  run->finishing = true;
  co_await asio::this_coro::reset_cancellation_state();
  verdict v = run->outcome.get();
  if (v.what == verdict::kind::continued) {
    run_span.end(false, "continued as new");
    run_next_generation(s, *run, v.next);
    co_return;
  }
  if (v.writes_final_state()) {
    const final_state f = final_state_of(v);
    if (v.epoch) run->epoch = *v.epoch;  // a misuse after a continue parks the new generation
    const std::int64_t epoch = run->epoch;
    bool refused = false;
    run->final_sent = std::make_shared<bool>(false);
    try {
      const fence_verdict written = co_await write_final(s, run->id, epoch, f.status, f.output,
                                                         f.error, f.reason, run->final_sent);
      if (written.fenced_out()) {  // I3: a newer epoch owns it now
        v = verdict::released("a newer epoch owns the workflow");
        ++s->counters.ownership_lost;
      } else {
        run->written_final = f;  // result() here takes it without reading it back
      }
    } catch (const std::exception& e) {
      refused = classify(e) == io_verdict::permanent && v.what != verdict::kind::parked;
      v = verdict::retry(describe_io_failure(e));
    }
    if (refused) {
      // The server refuses this final state (an output it cannot store, say): park with the
      // reason instead, which carries no output.
      const std::string why = "workflow '" + run->id + "' (" + run->name +
                              "): its final state could not be written (" + v.io_error +
                              "); it is parked instead";
      try {
        const std::string type = "durable::journal_refused";
        run->written_final = co_await park(s, run->id, epoch, type, why);
        v = verdict::parked(park_cause::journal_refused, why);
      } catch (const std::exception& again) {
        v.io_error = describe_io_failure(again);
      }
    }
  }
  if (run_span.active()) {  // the words only when a hook takes them (a parse, allocations)
    std::string words;
    try {
      words = verdict_words(v);
    } catch (const std::exception&) {
      words = "it did not succeed";
    }
    run_span.end(v.what != verdict::kind::succeeded && v.what != verdict::kind::released, words);
  }
  end_run(*s, run->id, run->launch_token);
  // A slot of some queue may have come free, or room here that a dispatch lacked. (The end of
  // a workflow start() launched frees no queue's slot: a dispatch that had room took what it
  // could, and an enqueue wakes the dispatcher itself.)
  if (run->holds_queue_slot || s->dispatch_lacked_room || s->wake_timers) s->wake_dispatcher();
  if (run->unloaded_until) schedule_wake(s, *run->unloaded_until);
  account(*s, run->id, v);
  if (v.what != verdict::kind::retry) co_return;

  // The outcome of the last write is unknown, or the database failed transiently: claim the
  // workflow again (new epoch) after a growing pause, and replay. I9 bounds how often.
  const std::string id = run->id;
  s->retrying.insert(id);
  struct unmark {
    std::shared_ptr<engine_state> s;
    std::string id;
    ~unmark() { s->retrying.erase(id); }
  } guard{s, id};
  try {  // best effort: shown when I9 parks the workflow
    fenced_write note = s->st.workflow_note_error(id, run->epoch, v.io_error);
    (void)co_await s->committer.run(std::move(note.st));
  } catch (const std::exception& e) {
    s->report(severity::debug, "runner", id,
              "could not record the last error: " + describe_io_failure(e));
  }
  std::string last = v.io_error;
  auto delay = s->options.io_retry_delay;
  s->last_io_failure = std::chrono::steady_clock::now();
  for (int attempt = 1; !s->stopping; ++attempt) {
    // Jitter (±25 %) keeps many runs that failed together from retrying together.
    const auto jittered = std::chrono::milliseconds(std::int64_t(
        double(delay.count()) * (0.75 + 0.5 * double(std::random_device{}() % 1000) / 1000.0)));
    s->report(severity::warning, "runner", id,
              "database I/O failed (" + last + "); claiming the workflow again in " +
                  std::to_string(jittered.count()) + " ms (retry " + std::to_string(attempt) + ")");
    co_await retry_pause(s, jittered);
    if (s->stopping || s->running.contains(id)) co_return;  // recover() may have resumed it
    try {
      std::vector<std::string> ids{id};
      (void)co_await claim_runs(s, std::move(ids), "runner");
      co_return;
    } catch (const std::exception& e) {
      last = describe_io_failure(e);
      s->last_io_failure = std::chrono::steady_clock::now();
      if (classify(e) == io_verdict::permanent) {
        // The claim itself is refused (permissions, a damaged schema): retrying cannot help.
        // The workflow stays owned here; maintenance tries again at its ticks and reports.
        s->report(severity::error, "runner", id,
                  "claiming the workflow again was refused (" + last +
                      "); it is left as it is until the cause is fixed");
        co_return;
      }
      delay = std::min(delay * 2, s->options.io_retry_max_delay);
    }
  }
}

}  // namespace durable::detail
