// The checks of durable/context.hpp that run around each step: included at its end when
// header-only, by durable/src.hpp otherwise.
#pragma once

namespace durable::detail {

DURABLE_DECL void require_live(run_state& s, int seq, const std::string& name) {
  if (s.released)  // unloaded or released already: the workflow caught that and went on
    throw run_released("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                       "' not started: this run was released (" +
                       (s.unloaded_until ? "the workflow is unloaded until its next attempt"
                                         : "the engine stops or lost its lease") +
                       "); the workflow continues in a later run");
  // After a journal write of unknown outcome, nothing more may be journaled in this run:
  // a later row could be built on a step result that never committed.
  // A released run ends without a verdict, whatever the workflow does with the exception.
  if (s.stopping && *s.stopping) {
    s.released = true;
    throw run_released("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                       "' not started because the engine is shutting down; another executor "
                       "resumes the workflow");
  }
  if (s.cancelled)
    throw run_cancelled("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                        "' not started: " + *s.cancelled);
  if (s.lease_expired && *s.lease_expired) {
    s.released = true;
    throw run_released("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                       "' not started because this executor could not renew its lease in time; "
                       "the workflow is resumed by replay once an executor reaches the database");
  }
  if (s.io_refused) throw error(*s.io_refused);
  if (s.io_failed)
    throw error("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                "' not run because an earlier journal write failed; the workflow is retried");
  if (!s.pool)
    throw error("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                "' has no journal row, and this replay has no database to run it against");
}

DURABLE_DECL void check_not_nested(run_state& s, const std::string& name) {
  if (s.step_functions_running == 0) return;
  s.misuse = "workflow '" + s.id + "' (" + s.name + "): step '" + name +
             "' was issued while the function of step '" +
             (s.running_step ? *s.running_step : std::string("(another step)")) +
             "' is running. A step cannot be issued from inside another step's function (step "
             "functions do plain work; issue the steps one after the other in the workflow), "
             "nor from a concurrent branch once another branch's step has begun (issue "
             "concurrent steps up front, then await them together, see I4 in "
             "docs/concepts.md). The workflow is parked: fix the code, then resume it";
  throw error(*s.misuse);
}

DURABLE_DECL void check_failure_is_the_steps(run_state& s, int seq, const std::string& name) {
  if (s.misuse) throw error(*s.misuse);
  if (s.released)
    throw run_released("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                       "' ended after its run was released; its outcome is not recorded");
  if (s.cancelled)
    throw run_cancelled("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                        "' was interrupted: " + *s.cancelled);
  if (s.stopping && *s.stopping) {
    s.released = true;
    throw run_released("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                       "' ended while the engine shut down; its outcome is not journaled and "
                       "another executor runs it again");
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
  s.misuse = "workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) + " '" + name +
             "' has a timeout, but " + why +
             ". The workflow is parked: fix the code, then resume it";
  throw error(*s.misuse);
}

DURABLE_DECL asio::awaitable<void> wait_until_due(run_state& s, int seq, const std::string& name,
                                                  const attempt_history* h) {
  if (!h || !h->next_attempt_at) co_return;
  const double left = *h->next_attempt_at - unix_seconds();
  if (left <= 0) co_return;
  const auto pause = std::chrono::milliseconds(std::int64_t(left * 1000) + 1);
  const std::string what = "the next attempt of step " + std::to_string(seq) + " '" + name + "'";
  co_await pause_or_unload(s, seq, name, pause, what);
}

DURABLE_DECL asio::awaitable<void> pause_or_unload(run_state& s, int seq, const std::string& name,
                                                   std::chrono::milliseconds pause,
                                                   const std::string& what) {
  // Only a long wait unloads: a short one may be no more than the gap between this host's
  // clock and the server's, and unloading for it would only cost a claim.
  if (!s.committer || pause < s.unload_after || pause < std::chrono::seconds(1)) {
    co_await sleep_for(pause);
    co_return;
  }
  fenced_write w = s.st->workflow_sleep(s.id, s.epoch, double(pause.count()));
  const std::string if_fenced = "workflow '" + s.id +
                                "': another executor took it over before it could be unloaded; "
                                "this run stops";
  co_await write_fenced(s, seq, name, w, if_fenced);
  unload(s, pause,
         "workflow '" + s.id + "': " + what + " is due in " + std::to_string(pause.count()) +
             " ms; the workflow is unloaded until then");
}

DURABLE_DECL asio::awaitable<void> write_fenced(run_state& s, int seq, const std::string& name,
                                                fenced_write& w, const std::string& if_fenced) {
  try {
    pg::statement st = std::move(w.st);
    pg::result r;
    if (s.committer) {
      r = co_await s.committer->run(std::move(st));
    } else {
      auto conn = co_await s.pool->acquire();
      r = co_await conn->run(std::move(st));
    }
    if (w.verdict(r).fenced_out()) throw ownership_lost(s.id, if_fenced);
  } catch (const ownership_lost&) {
    throw;
  } catch (const std::exception& e) {
    note_io_failure(s, seq, name, e);
    throw;
  }
}

DURABLE_DECL void unload(run_state& s, std::chrono::milliseconds pause, const std::string& why) {
  s.released = true;
  s.unloaded_until = unix_seconds() + double(pause.count()) / 1000.0;
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
    unloads = s.committer && pause >= s.unload_after;
  }
  const std::string outcome = final ? "failed" : "retrying";
  const std::string err = failure.to_json();
  std::optional<double> pause_ms;
  if (!final) pause_ms = double(pause.count());
  fenced_write w = s.st->attempt_record(s.id, s.epoch, seq, attempt, name, kind, outcome, err,
                                        started, pause_ms, unloads);
  const std::string if_fenced = "workflow '" + s.id + "': the failed attempt " +
                                std::to_string(attempt) + " of step " + std::to_string(seq) + " '" +
                                name +
                                "' was not recorded because another executor took the workflow "
                                "over (or it was cancelled); this run stops";
  co_await write_fenced(s, seq, name, w, if_fenced);
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
