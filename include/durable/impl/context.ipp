// The checks of durable/context.hpp that run around each step: included at its end when
// header-only, by durable/src.hpp otherwise.
#pragma once

namespace durable::detail {

DURABLE_DECL void require_live(run_state& s, int seq, const std::string& name) {
  require_running(s, seq, name);
  check_journal_room(s, seq, name);  // a step whose row could not be journaled does not run
}

DURABLE_DECL void require_running(run_state& s, int seq, const std::string& name) {
  const verdict& v = s.outcome.get();
  const std::string step = "workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name;
  switch (v.what) {
    case verdict::kind::continued:  // the workflow caught continue_as_new's signal, went on
      throw run_released(step + "' not started: this run continued as new (generation " +
                         std::to_string(v.next.generation) + " runs from the top)");
    case verdict::kind::released:  // unloaded or released already: the workflow went on
      throw run_released(step + "' not started: this run was released (" +
                         (s.unloaded_until ? "the workflow is unloaded until its next attempt"
                                           : "the engine stops or lost its lease") +
                         "); the workflow continues in a later run");
    default:
      break;
  }
  // A released run ends without a verdict, whatever the workflow does with the exception.
  const run_standing standing = s.io ? s.io->standing() : run_standing::owned;
  if (standing == run_standing::stopping) {
    const std::string why = step +
                            "' not started because the engine is shutting down; another "
                            "executor resumes the workflow";
    s.outcome.note(verdict::released(why));
    throw run_released(why);
  }
  if (v.what == verdict::kind::cancelled) throw run_cancelled(step + "' not started: " + v.reason);
  if (standing == run_standing::lease_expired) {
    const std::string why = step +
                            "' not started because this executor could not renew its lease in "
                            "time; the workflow is resumed by replay once an executor reaches "
                            "the database";
    s.outcome.note(verdict::released(why));
    throw run_released(why);
  }
  if (const std::string* refused = s.outcome.parked_for(park_cause::journal_refused))
    throw error(*refused);
  if (const std::string* big = s.outcome.parked_for(park_cause::value_too_large))
    throw value_too_large(s.id, *big);
  // After a journal write of unknown outcome, nothing more is journaled in this run (a row
  // could rest on a step result that never committed).
  if (v.what == verdict::kind::retry)
    throw error(step +
                "' not run because an earlier journal write failed; the workflow is "
                "retried");
  if (!s.io || !s.io->executes())
    throw journal_exhausted(step +
                            "' has no journal row, and this replay has no journal to run it "
                            "against");
}

/// Notes a misuse of the API (the workflow parks; the first misuse noted is the reason it
/// records) and returns the exception to throw, which says what this call did wrong.
inline error misuse(run_state& s, const std::string& reason) {
  s.outcome.note(verdict::parked(park_cause::misuse, reason));
  return error(reason);
}

DURABLE_DECL void refuse_continue_in_join(run_state& s) {
  if (s.joins_running == 0) return;
  throw misuse(s, "workflow '" + s.id + "' (" + s.name +
                      "): ctx.continue_as_new() was called inside a branch of ctx.all, ctx.any "
                      "or ctx.map. It ends the run, and the other branches' steps would be cut "
                      "off mid-flight; call it after the join, from the workflow itself. The "
                      "workflow is parked: fix the code, then resume it");
}

DURABLE_DECL asio::awaitable<void> continue_run(run_state& s, const std::string& inputs) {
  const std::string name = "continue_as_new";
  const int seq = s.next_seq;
  refuse_continue_in_join(s);
  // A misuse the workflow caught still parks it (going on would erase the record of it).
  if (const std::string* m = s.outcome.parked_for(park_cause::misuse)) throw error(*m);
  if (s.check_inputs) {
    try {
      (*s.check_inputs)(nlohmann::json::parse(inputs));
    } catch (const std::exception& e) {
      throw misuse(
          s, valid_utf8("workflow '" + s.id + "' (" + s.name +
                        "): ctx.continue_as_new() got the arguments " + inputs +
                        ", which do not decode as the workflow's parameters " +
                        (s.signature ? *s.signature : std::string("(unknown)")) + ": " + e.what() +
                        ". Nothing was written; the workflow is parked: fix the code, "
                        "then resume it"));
    }
  }
  check_fully_replayed(s);        // a journaled step beyond this point: the code changed (I5)
  require_running(s, seq, name);  // continuing needs no room in the journal: it empties it
  const continued_generation next =
      co_await journaling(s, seq, name, io_of(s).continue_as_new(s.id, s.epoch, inputs));
  s.outcome.note(verdict::continued(next_generation{next.epoch, next.generation, inputs}));
  throw continued_as_new{};
}

DURABLE_DECL void check_not_nested(run_state& s, const std::string& name) {
  if (const auto at = name.find('\0'); at != std::string::npos) {
    std::string shown;  // the name with each NUL as \0, to be read on a line
    for (const char c : name) shown += c ? std::string(1, c) : std::string("\\0");
    throw misuse(s, "workflow '" + s.id + "' (" + s.name + "): the step name '" + shown +
                        "' holds a NUL character (at byte " + std::to_string(at) +
                        "), which the journal cannot hold. The workflow is parked: fix the "
                        "code, then resume it");
  }
  if (s.step_functions_running == 0) return;
  throw misuse(s, "workflow '" + s.id + "' (" + s.name + "): step '" + name +
                      "' was issued while the function of step '" +
                      (s.running_step ? *s.running_step : std::string("(another step)")) +
                      "' is running. A step cannot be issued from inside another step's "
                      "function (step functions do plain work; issue the steps one after the "
                      "other in the workflow), nor from a concurrent branch once another "
                      "branch's step has begun (issue concurrent steps up front, then await them "
                      "together, see I4 in docs/concepts.md). The workflow is parked: fix the "
                      "code, then resume it");
}

DURABLE_DECL void check_failure_is_the_steps(run_state& s, int seq, const std::string& name) {
  if (const std::string* m = s.outcome.parked_for(park_cause::misuse)) throw error(*m);
  const verdict& v = s.outcome.get();
  const std::string step = "workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name;
  if (v.what == verdict::kind::released || v.what == verdict::kind::continued)
    throw run_released(step + "' ended after its run was released; its outcome is not recorded");
  if (v.what == verdict::kind::cancelled)
    throw run_cancelled(step + "' was interrupted: " + v.reason);
  if (s.io && s.io->standing() == run_standing::stopping) {
    const std::string why = step +
                            "' ended while the engine shut down; its outcome is not journaled "
                            "and another executor runs it again";
    s.outcome.note(verdict::released(why));
    throw run_released(why);
  }
}

DURABLE_DECL bool retryable(const retry& policy, std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const permanent_error&) {
    return false;
  } catch (const step_timeout&) {
    return true;  // the policy's own timeout: another attempt, while attempts remain
  } catch (const std::exception& x) {
    return !policy.retry_if || policy.retry_if(x);
  } catch (...) {
    return !policy.retry_if;  // a predicate cannot judge what it cannot see
  }
}

DURABLE_DECL void attempt_returned(const run_state& s, const step_info& info,
                                   const std::string& kind, const retry& policy) {
  if (!s.fail_attempt || info.attempt >= std::max(policy.max_attempts, 1)) return;
  if (kind != to_string(step_kind::step)) return;
  injected_failure f("the test kit failed attempt " + std::to_string(info.attempt) + " of step " +
                     std::to_string(info.seq) + " '" + info.name +
                     "' after its function ran (as if its reply were lost)");
  bool retries = false;  // the kit asks only where the policy retries (check_crashes learns so)
  try {
    retries = retryable(policy, std::make_exception_ptr(f));
  } catch (...) {  // a retry_if that throws on the kit's failure: no retry
  }
  if (retries && s.fail_attempt(info)) throw f;
}

DURABLE_DECL const attempt_history* attempt_state(run_state& s, int seq, const std::string& name,
                                                  const std::string& kind) {
  const auto it = s.attempts.find(seq);
  if (it == s.attempts.end()) return nullptr;
  const attempt_history& h = it->second;
  if (h.name != name || h.kind != kind) raise_nondeterminism(s, seq, h.name, h.kind, name, kind);
  if (h.failed) {
    // The step failed for good in an earlier run: raise the same failure again (I7: the
    // recorded outcome is the one the workflow sees, on every replay).
    if (s.counters) ++s.counters->steps_replayed;
    const auto j = nlohmann::json::parse(h.error, nullptr, false);
    const std::string type = j.is_object() ? j.value("type", "unknown") : "unknown";
    const std::string message = j.is_object() ? j.value("message", "") : h.error;
    s.dead_step = seq;
    s.dead_step_attempts = h.failures;
    throw step_failed(s.id, seq, name, type, message);
  }
  return &h;
}

DURABLE_DECL void refuse_timeout(run_state& s, int seq, const std::string& name, const char* why) {
  throw misuse(s, "workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) + " '" +
                      name + "' has a timeout, but " + why +
                      ". The workflow is parked: fix the code, then resume it");
}

DURABLE_DECL asio::awaitable<void> wait_until_due(run_state& s, int seq, const std::string& name,
                                                  const attempt_history* h) {
  if (!h || !h->next_attempt_at) co_return;
  const double left = *h->next_attempt_at - clock_earliest(s);  // never early
  if (left <= 0) co_return;
  const auto pause = std::chrono::milliseconds(std::int64_t(left * 1000) + 1);
  const std::string what = "the next attempt of step " + std::to_string(seq) + " '" + name + "'";
  co_await pause_or_unload(s, seq, name, pause, what, 1);  // from inside its step
}

DURABLE_DECL asio::awaitable<void> pause_or_unload(run_state& s, int seq, const std::string& name,
                                                   std::chrono::milliseconds pause,
                                                   const std::string& what, int own_steps) {
  // Only a long wait unloads: a short one may be no more than the gap between this host's
  // clock and the server's, and unloading for it would only cost a claim.
  if (!can_unload(s, own_steps) || pause < s.unload_after || pause < std::chrono::seconds(1)) {
    co_await sleep_for(s, pause);
    co_return;
  }
  const std::string if_fenced = "workflow '" + s.id +
                                "': another executor took it over before it could be unloaded; "
                                "this run stops";
  co_await journaling(s, seq, name, io_of(s).sleep(s.id, s.epoch, double(pause.count())),
                      &if_fenced);
  unload(s, pause,
         "workflow '" + s.id + "': " + what + " is due in " + std::to_string(pause.count()) +
             " ms; the workflow is unloaded until then");
}

DURABLE_DECL void unload(run_state& s, std::chrono::milliseconds pause, const std::string& why) {
  // The server set the wake-up from its own now() when the unload committed, a moment ago: the
  // latest that can have been bounds it, so that the runner's timer (which waits for the
  // earliest server time to pass this) looks only once the workflow is due on the server.
  s.unloaded_until = clock_latest(s) + double(pause.count()) / 1000.0;
  s.outcome.note(verdict::released(why));
  throw run_released(why);
}

DURABLE_DECL asio::awaitable<std::chrono::milliseconds> record_failure(
    run_state& s, int seq, const std::string& name, const std::string& kind, retry policy,
    int attempt, int failures, bool may_retry, const captured_error& failure, double started) {
  const bool final = !may_retry || failures >= std::max(policy.max_attempts, 1);
  std::chrono::milliseconds pause{0};
  bool unloads = false;
  if (!final) {
    double p = double(policy.delay(failures).count());
    if (policy.jitter > 0) {
      thread_local std::mt19937_64 gen{std::random_device{}()};
      const double j = std::min(policy.jitter, 1.0);
      p *= 1.0 - j + 2.0 * j * std::uniform_real_distribution<double>(0.0, 1.0)(gen);
    }
    pause = std::chrono::milliseconds(std::int64_t(p));
    unloads = can_unload(s, 1) && pause >= s.unload_after;  // 1: this step
  }
  const std::string outcome(to_string(final ? attempt_outcome::failed : attempt_outcome::retrying));
  const std::string err = failure.to_json();
  std::optional<double> pause_ms;
  if (!final) pause_ms = double(pause.count());
  attempt_row row{seq, attempt, name,     kind,    outcome,
                  err, started, pause_ms, unloads, std::max(policy.max_attempts, 1)};
  const std::string if_fenced = "workflow '" + s.id + "': the failed attempt " +
                                std::to_string(attempt) + " of step " + std::to_string(seq) + " '" +
                                name +
                                "' was not recorded because another executor took the workflow "
                                "over (or it was cancelled); this run stops";
  co_await journaling(s, seq, name, io_of(s).record_attempt(s.id, s.epoch, std::move(row)),
                      &if_fenced);
  const std::string what = "attempt " + std::to_string(attempt) + " of step " +
                           std::to_string(seq) + " '" + name + "' failed: " + failure.type + ": " +
                           failure.message;
  if (final) {
    s.dead_step = seq;
    s.dead_step_attempts = failures;
    throw step_failed(s.id, seq, name, failure.type, failure.message);
  }
  if (s.report_retry)
    s.report_retry(what + "; attempt " + std::to_string(attempt + 1) + " in " +
                   std::to_string(pause.count()) + " ms" +
                   (unloads ? " (unloaded until then)" : ""));
  if (unloads)
    unload(s, pause,
           "workflow '" + s.id + "': " + what + "; the next attempt is due in " +
               std::to_string(pause.count()) + " ms, so the workflow is unloaded until then");
  co_return pause;
}

DURABLE_DECL asio::awaitable<void> wait_for_abandoned(left_behind& lb) {
  // Not interruptible (no cancellation slot): the attempts were sent cancellation already,
  // and the frame they may refer to must outlive them.
  while (lb.running > 0) {
    asio::error_code ec;
    lb.ended.expires_at(asio::steady_timer::time_point::max());
    co_await lb.ended.async_wait(asio::bind_cancellation_slot(
        asio::cancellation_slot(), asio::redirect_error(asio::use_awaitable, ec)));
  }
}

}  // namespace durable::detail

namespace durable::detail {

DURABLE_DECL bool can_unload(const run_state& s, int own_steps) {
  // Never while concurrent branches run (it would stop their steps, which would run again
  // after the wake-up), nor on a journal that does not unload.
  return s.io && s.io->unloads() && s.joins_running == 0 && s.step_functions_running == own_steps;
}

DURABLE_DECL asio::awaitable<void> journal_value(run_state& s, int seq, const std::string& name,
                                                 const std::string& kind, const std::string& output,
                                                 double started) {
  const std::optional<std::string> out = output;
  const std::optional<std::string> no_error;
  co_await append(s, seq, name, kind, out, no_error, 1, started);
}

DURABLE_DECL asio::awaitable<std::optional<double>> wait_deadline(
    run_state& s, int seq, const std::string& name, std::chrono::milliseconds timeout) {
  const std::string kind = std::string(to_string(step_kind::deadline));
  if (const journal_entry* e = replay_entry(s, seq, name, kind)) {
    if (s.counters) ++s.counters->steps_replayed;
    co_return decode_text<double>(s, seq, *e, e->output);
  }
  if (timeout == forever) co_return std::nullopt;
  const double deadline = clock_now(s) + double(timeout.count()) / 1000.0;
  const std::string output = nlohmann::json(deadline).dump();
  co_await journal_value(s, seq, name, kind, output, journal_started_at(s));
  co_return deadline;
}

DURABLE_DECL asio::awaitable<bool> wait_for_arrival(
    run_state& s, int seq, const std::string& name, const std::string& key,
    const wait_target& wait_for, std::optional<double> deadline,
    const std::function<asio::awaitable<bool>()>& look, const std::function<bool()>& nothing_new) {
  using std::chrono::milliseconds;
  const double loaded = clock_now(s);
  const double in_run_for = double(s.unload_after.count()) / 1000.0;
  const asio::any_io_executor ex = co_await asio::this_coro::executor;
  waiter_registry::entry poke(s.waiters, key, ex, s.clock);
  // The caller looked once before: look again now that a notification reaches this waiter,
  // or a send between that look and this registration would wait for the next poll (unless
  // the caller knows that nothing came since: `nothing_new`).
  bool looked = false;
  if (!nothing_new || !nothing_new()) {
    looked = true;
    if (co_await look()) co_return true;
  }
  for (;;) {
    const double now = clock_now(s);
    if (deadline && now >= *deadline) {
      // No look since the caller's (or none at all): what came meanwhile, heard or not yet,
      // is taken before the wait gives up.
      if (looked) co_return false;
      const bool found = co_await look();
      co_return found;
    }
    const double left = deadline ? *deadline - now : 1e12;
    const double in_run_left = loaded + in_run_for - now;
    if (in_run_left <= 0 && left >= 1.0 && can_unload(s, 0)) {
      // A long wait: unloaded until what it waits for arrives (that wakes it at once) or the
      // recheck (or the deadline) is due.
      const double recheck_ms = std::min(left * 1000.0, double(s.wait_recheck.count()));
      unload_answer answer = unload_answer::fenced;
      try {
        answer = co_await io_of(s).unload_to_wait(s.id, s.epoch, wait_for, recheck_ms);
      } catch (const journal_fenced&) {
        answer = unload_answer::fenced;
      } catch (const std::exception& e) {
        note_io_failure(s, seq, name, e);
        throw;
      }
      if (answer == unload_answer::fenced)
        throw ownership_lost(s.id, "workflow '" + s.id +
                                       "': another executor took it over before it could be "
                                       "unloaded to wait; this run stops");
      if (answer == unload_answer::unloaded)
        unload(s, milliseconds(std::int64_t(recheck_ms)),
               "workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name + "' waits (" +
                   wait_for.tag() + "); the workflow is unloaded until it arrives");
      // 'busy': something for it is being sent right now; wait for it in the run.
    }
    double wait_ms = std::min(left * 1000.0, double(s.poll_interval.count()));
    if (in_run_left > 0) wait_ms = std::min(wait_ms, in_run_left * 1000.0 + 1.0);
    co_await poke.wait(milliseconds(std::max<std::int64_t>(1, std::int64_t(wait_ms))));
    require_live(s, seq, name);
    looked = true;
    if (co_await look()) co_return true;
  }
}

DURABLE_DECL void check_join(run_state& s, int issued_before, const char* what) {
  if (s.next_seq == issued_before || s.outcome.parked_for(park_cause::misuse)) return;
  throw misuse(s, "workflow '" + s.id + "' (" + s.name + "): a branch of ctx." + what +
                      "() issued step " + std::to_string(issued_before) +
                      " while the branches ran. Branches must be issued before they are joined "
                      "(a ctx.step, ctx.recv, a child's result...), so that step numbers follow "
                      "program order, not timing (I4). The workflow is parked: fix the code, "
                      "then resume it");
}

DURABLE_DECL asio::awaitable<void> join_branches(join_state& j) {
  // Waits for every branch. If this coroutine is cancelled (the workflow is cancelled, a
  // combinator around it gave up), the branches are cancelled and still waited for: they
  // refer to the workflow's frame.
  asio::error_code ec;
  while (j.running > 0) {
    j.wake.expires_at(asio::steady_timer::time_point::max());
    co_await j.wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    const asio::cancellation_state outer = co_await asio::this_coro::cancellation_state;
    if (outer.cancelled() != asio::cancellation_type::none) break;
  }
  if (j.running == 0) co_return;
  j.halt(SIZE_MAX);
  const bool throws = co_await asio::this_coro::throw_if_cancelled();
  co_await asio::this_coro::throw_if_cancelled(false);
  while (j.running > 0) {
    j.wake.expires_at(asio::steady_timer::time_point::max());
    co_await j.wake.async_wait(asio::bind_cancellation_slot(
        asio::cancellation_slot(), asio::redirect_error(asio::use_awaitable, ec)));
  }
  co_await asio::this_coro::throw_if_cancelled(throws);
  throw asio::system_error(asio::error::operation_aborted);
}

}  // namespace durable::detail

// ctx.recv, ctx.send, events and child workflows.
#include "durable/impl/context_waits.ipp"
