// Implementation of workflow_handle (durable/workflow_handle.hpp; included by impl/engine.ipp):
// reading a workflow's status and waiting for its end.
#pragma once

#include <algorithm>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/redirect_error.hpp>
#include <asio/this_coro.hpp>
#include <chrono>
#include <optional>
#include <string_view>
#include <utility>

#include "durable/detail/runtime/parts.ipp"
#include "durable/detail/runtime/within.ipp"

namespace durable {

DURABLE_DECL asio::awaitable<workflow_status> workflow_handle::status_impl() const {
  auto get = s_->st.workflow_get(id_);
  auto c = co_await s_->pool.acquire();
  auto r = co_await store::fetch_one(*c, std::move(get));
  if (!r) throw error("workflow '" + id_ + "' does not exist");
  co_return workflow_status{
      std::move(r->status), std::move(r->reason),      r->epoch,
      r->attempts,          std::move(r->executor_id), std::move(r->traceparent)};
}

namespace detail {

/// What result() returns or throws for workflow `id` in `status` (any other status: nullopt,
/// it has not ended).
inline std::optional<std::string> ended_with(const std::string& id, const std::string& status,
                                             const std::optional<std::string>& reason,
                                             const std::optional<std::string>& output,
                                             const std::optional<std::string>& err) {
  if (status == "succeeded") return output.value_or("null");
  if (status != "failed" && status != "parked" && status != "cancelled" && status != "dead_letter")
    return std::nullopt;
  auto j = nlohmann::json::parse(err.value_or("{}"), nullptr, false);
  if (!j.is_object()) j = nlohmann::json::object();
  const std::string type = j.value("type", "unknown");
  const std::string message = j.value("message", reason.value_or(""));
  if (status == "parked" && type == "durable::nondeterminism_error")
    throw nondeterminism_error(id, j.value("seq", -1), j.value("journaled", ""),
                               j.value("requested", ""), message);
  if (status == "parked") throw workflow_parked(id, reason.value_or(message));
  if (status == "cancelled")
    throw workflow_cancelled(id,
                             "workflow '" + id + "' was cancelled: " + reason.value_or(message));
  if (status == "dead_letter")
    throw workflow_dead_letter(
        id, j.value("seq", -1), j.value("step", ""), type, message, j.value("attempts", 0),
        "workflow '" + id + "' is dead-lettered: " + reason.value_or(message));
  throw workflow_failed(id, type, message);
}

}  // namespace detail

namespace detail {

/// Seconds with one decimal ("4.8 s") for messages.
inline std::string seconds_text(std::chrono::steady_clock::duration d) {
  const auto tenths = std::chrono::duration_cast<std::chrono::milliseconds>(d).count() / 100;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " s";
}

/// A read of a wait for another process's workflow (`what`: "result()", "get_event('k')")
/// failed on the way to the database (`e` is transient): noted in `w` (for the wait's own
/// error), and reported once for the engine (component "wait") until some read works again.
inline void wait_read_failed(engine_state& s, std::string_view what, const std::string& id,
                             result_wait& w, const std::exception& e) {
  const auto now = std::chrono::steady_clock::now();
  w.reading_since.reset();
  w.failure = describe_io_failure(e);
  if (!w.failing_since) w.failing_since = now;
  if (!w.counted) {
    w.counted = true;
    ++s.wait_reads.failing;
  }
  if (s.wait_reads.since) return;
  s.wait_reads.since = now;
  s.report(severity::warning, "wait", id,
           std::string(what) + " could not read workflow '" + id + "': " + w.failure +
               "; it waits for the database and reads again with backoff (10 ms to 1 s)");
}

/// A read of such a wait worked: the outage, if one was reported, is over (whichever wait sees
/// it first says so).
inline void wait_read_worked(engine_state& s, std::string_view what, const std::string& id,
                             result_wait& w) {
  w.reading_since.reset();
  w.failing_since.reset();
  if (w.counted) {
    w.counted = false;
    --s.wait_reads.failing;
  }
  if (!s.wait_reads.since) return;
  const auto since = *std::exchange(s.wait_reads.since, std::nullopt);
  s.report(severity::info, "wait", id,
           std::string(what) + " reads again after " +
               seconds_text(std::chrono::steady_clock::now() - since) +
               " without an answer from the database");
}

/// Held by a wait while it runs: one that ends while its reads fail (its limit passed, it was
/// cancelled, shutdown) is no longer counted, and once no wait is left failing, the outage is
/// forgotten unannounced (nobody saw it end) so that the next one is reported.
class wait_reads_scope {
public:
  wait_reads_scope(engine_state& s, result_wait& w) : s_(s), w_(w) {}
  wait_reads_scope(const wait_reads_scope&) = delete;
  wait_reads_scope& operator=(const wait_reads_scope&) = delete;
  ~wait_reads_scope() {
    if (!w_.counted) return;
    w_.counted = false;
    if (--s_.wait_reads.failing == 0) s_.wait_reads.since.reset();
  }

private:
  engine_state& s_;
  result_wait& w_;
};

/// Waits until the run of workflow `id` in this process ends, and any run that follows it here
/// at once (the next generation of ctx.continue_as_new, a recover()); returns the last one.
/// The workflow must be running here.
inline asio::awaitable<std::shared_ptr<run_state>> local_runs_end(std::shared_ptr<engine_state> s,
                                                                  std::string id) {
  const auto it = s->running.find(id);
  std::shared_ptr<run_state> run = it->second.run;
  auto done = it->second.done;
  asio::error_code ec;
  co_await done->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  for (auto next = s->running.find(id); next != s->running.end() && next->second.done != done;
       next = s->running.find(id)) {
    run = next->second.run;
    done = next->second.done;
    co_await done->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return run;
}

/// The pause before a wait reads again after `failed` reads in a row went unanswered: 10 ms,
/// doubling up to 1 s.
inline std::chrono::milliseconds unanswered_pause(int failed) {
  return std::chrono::milliseconds(std::min(10 << std::min(std::max(failed - 1, 0), 7), 1000));
}

/// The pause of a wait that reads another process's data (get_event, read_stream) after a read
/// that found nothing, or that the database did not answer (`unanswered`): until `poke` is
/// poked (a notification), or the next poll (poll_interval; after unanswered reads, their
/// backoff). False once `timeout` from `start` has passed: then the unanswered read's error is
/// thrown, if there was one, so that only a deadline passing while the database does not
/// answer throws. A cancellation of the caller's is thrown as operation_aborted.
inline asio::awaitable<bool> pause_before_reading_again(const engine_state& s,
                                                        waiter_registry::entry& poke,
                                                        std::chrono::steady_clock::time_point start,
                                                        std::chrono::milliseconds timeout,
                                                        const std::exception_ptr& unanswered,
                                                        int& unanswered_reads) {
  if (unanswered) {
    const auto cs = co_await asio::this_coro::cancellation_state;
    if (cs.cancelled() != asio::cancellation_type::none)  // the caller's, not the database's
      throw asio::system_error(asio::error::operation_aborted);
  }
  auto wait = unanswered ? unanswered_pause(++unanswered_reads) : s.options.poll_interval;
  if (timeout != forever) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        start + timeout - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      if (unanswered) std::rethrow_exception(unanswered);
      co_return false;
    }
    wait = std::min(wait, left);
  }
  // A notification pokes the wait; polling covers for lost ones (and for engines whose
  // listener is off or not connected yet).
  co_await poke.wait(wait);
  co_return true;
}

}  // namespace detail

DURABLE_DECL asio::awaitable<std::string> workflow_handle::wait_output_impl(
    std::shared_ptr<detail::result_wait> progress) const {
  auto s = s_;
  const detail::wait_reads_scope counted(*s, *progress);
  // A workflow of another process: its end is told on the result channel once result() has
  // marked it awaited (migration 15). The waiter is registered before the first read, and the
  // mark and the end are ordered by the row's lock, so an end is either read or told.
  detail::waiter_registry::entry told(&s->waiters, "r:" + id_, s->ex);
  const detail::remote_wait listening(s);
  // An id too long for a notification (migration 15) is never marked: it is polled for.
  const bool pushable = s->options.push_results && id_.size() < 7900;
  bool marked = false;
  int backoff = 0;  // polls since the last wait for a notification: 1 ms, doubling to 500 ms
  int unanswered_reads = 0;  // reads in a row the database did not answer
  for (;;) {
    if (auto outcome = told.take_told(); outcome && outcome->size() > 1) {
      // The outcome came with the notification: 's' and the output, or 'f' and the error.
      const std::string json = outcome->substr(1);
      if ((*outcome)[0] == 's') co_return json;
      if ((*outcome)[0] == 'f' &&
          nlohmann::json::parse(json, nullptr, false).contains("message"))  // else read it
        (void)detail::ended_with(id_, "failed", std::nullopt, std::nullopt, json);
    }
    // A workflow that runs here: its end is a local signal, and its run tells what it wrote,
    // so neither a read before nor one after is needed. (Not while this engine's lease has
    // lapsed: another executor may have taken the workflow over and ended it while the run
    // here is still inside a step; the read below sees that at once.)
    if (const auto here = s->running.find(id_); here != s->running.end() && !s->lease_expired) {
      if (!progress->looked) {
        progress->looked = true;
        progress->first_look.cancel();
      }
      progress->status = "running";
      // A run whose final state already went to the server may have committed it before this
      // call, and an operator may have acted on the workflow since (a retry of the dead letter
      // it wrote): then what it wrote is not news, and the row is read once it has ended. One
      // still queued for its batch commits after this call.
      const auto& sent = here->second.run->final_sent;
      const bool ended_before = sent && *sent;
      const auto run = co_await detail::local_runs_end(s, id_);
      if (const auto& f = run->written_final; f && !ended_before)
        if (auto out = detail::ended_with(id_, std::string(to_string(f->status)), f->reason,
                                          f->output, f->error))
          co_return std::move(*out);
      // Not ended by a run here (released, unloaded, retried, cancelled), or ended before this
      // call: look again (a run here now, such as the retry's, is waited for; else a read).
      continue;
    }
    std::optional<store::workflow_record> r;
    // The read below is newer than any poke so far (a listener's "look again", an end told
    // without its outcome): only one that comes during or after it wakes the next wait.
    told.forget_pokes();
    std::exception_ptr unanswered;  // a read the database did not answer
    progress->reading_since = std::chrono::steady_clock::now();
    try {
      auto c = co_await s->pool.acquire();
      // Mark it once the listener listens (a mark while it does not would only cost a NOTIFY
      // nobody hears), unless it runs here, where its end is a local signal.
      if (!marked && pushable && !s->push_unavailable && s->listening &&
          !s->running.contains(id_)) {
        bool missing_column = false;
        try {
          auto mark = s->st.workflow_await(id_);
          r = co_await store::fetch_one(*c, std::move(mark));
        } catch (const pg::sql_error& e) {
          if (e.sqlstate() != "42703") throw;  // undefined_column: see below
          missing_column = true;
        }
        if (missing_column && !s->push_unavailable) {
          s->push_unavailable = true;
          s->report(severity::warning, "result", id_,
                    "push_results is on, but schema '" + s->options.schema +
                        "' has no workflows.awaited column (migration 15 is not applied): "
                        "result() polls for the ends of other processes' workflows; run "
                        "migrate() (or 'durable migrate') to have them told");
        }
        marked = r.has_value();  // a row: unfinished and marked; none: ended or missing
      }
      if (!r) {  // not marked now (ended or missing), or marked before: read it
        auto get = s->st.workflow_get(id_);
        r = co_await store::fetch_one(*c, std::move(get));
      }
    } catch (const pg::error& e) {
      // The way to the database failed (a restart, a failover with no primary yet): wait for
      // it, unless this wait was cancelled or the server refused the statement.
      if (detail::classify(e) == detail::io_verdict::permanent || s->stopping) throw;
      detail::wait_read_failed(*s, "result()", id_, *progress, e);
      unanswered = std::current_exception();
    }
    if (!progress->looked) {
      progress->looked = true;
      progress->first_look.cancel();
    }
    if (unanswered) {
      const auto cs = co_await asio::this_coro::cancellation_state;
      if (cs.cancelled() != asio::cancellation_type::none)  // the caller's, not the database's
        throw asio::system_error(asio::error::operation_aborted);
      // A failover may have lost the mark (an asynchronous standby): mark it again once read.
      marked = false;
      // The listener's reconnect pokes this wait: it reads at once when the server is back.
      ++unanswered_reads;  // (counted apart: Clang's -Wunsequenced in a co_await expression)
      const auto pause = detail::unanswered_pause(unanswered_reads);
      co_await told.wait(pause);
      continue;
    }
    unanswered_reads = 0;
    detail::wait_read_worked(*s, "result()", id_, *progress);
    if (!r) throw error("workflow '" + id_ + "' does not exist");
    progress->status = r->status;
    if (auto out = detail::ended_with(id_, r->status, r->reason, r->output, r->error))
      co_return std::move(*out);
    if (s->running.contains(id_)) {
      (void)co_await detail::local_runs_end(s, id_);
    } else if (s->listening && marked) {
      // Told when it ends; poll_interval only bounds the wait should a notification be lost.
      backoff = 0;
      co_await told.wait(s->options.poll_interval);
    } else {  // not pushed (push_results or listen off, no listener yet): poll, backing off
      const int exponent = std::min(backoff, 9);
      ++backoff;
      co_await told.wait(std::chrono::milliseconds(std::min(1 << exponent, 500)));
    }
  }
}

DURABLE_DECL asio::awaitable<workflow_status> workflow_handle::status_hop() const {
  return detail::on_strand(s_, status_impl());
}

namespace detail {

/// result(timeout)'s limit: `limit` from now; but a limit under a second does not end a wait
/// before its first read answered or failed, or the second passed (so that result(0ms) of an
/// ended workflow returns it).
inline asio::awaitable<void> result_limit(std::shared_ptr<result_wait> progress,
                                          std::chrono::milliseconds limit) {
  using namespace asio::experimental::awaitable_operators;
  constexpr std::chrono::milliseconds first_read_allowance = std::chrono::seconds(1);
  asio::steady_timer t(co_await asio::this_coro::executor, limit);
  co_await t.async_wait(asio::use_awaitable);
  if (progress->looked || limit >= first_read_allowance) co_return;
  t.expires_after(first_read_allowance - limit);
  asio::error_code looked, passed;
  auto first_read =
      progress->first_look.async_wait(asio::redirect_error(asio::use_awaitable, looked));
  auto allowance = t.async_wait(asio::redirect_error(asio::use_awaitable, passed));
  auto race = std::move(first_read) || std::move(allowance);
  (void)co_await std::move(race);
}

}  // namespace detail

DURABLE_DECL asio::awaitable<std::string> workflow_handle::wait_output_within(
    std::chrono::milliseconds timeout) const {
  auto progress = std::make_shared<detail::result_wait>(s_->ex);
  if (timeout == forever) co_return co_await wait_output_impl(progress);
  timeout = std::max(timeout, std::chrono::milliseconds::zero());
  auto out = co_await detail::first_of(wait_output_impl(progress),
                                       detail::result_limit(progress, timeout));
  if (out) co_return std::move(*out);
  const auto now = std::chrono::steady_clock::now();
  const std::string what =
      "workflow '" + id_ + "' did not end within " + std::to_string(timeout.count()) + " ms";
  if (progress->failing_since)
    throw result_timeout(id_,
                         what + ": the database has not served its reads for " +
                             detail::seconds_text(now - *progress->failing_since) + " (" +
                             progress->failure +
                             "); nothing was changed: wait again once the database is back",
                         true);
  if (progress->reading_since && now - *progress->reading_since >= std::chrono::seconds(1))
    throw result_timeout(id_,
                         what + ": its read has waited " +
                             detail::seconds_text(now - *progress->reading_since) +
                             " for the database's answer; nothing was changed: wait again once "
                             "the database answers",
                         true);
  throw result_timeout(
      id_,
      what + ": it is " +
          (progress->status.empty() ? std::string("not read yet") : "still " + progress->status) +
          "; nothing was changed: wait again, or see 'durable show " + id_ + "'",
      false);
}

DURABLE_DECL asio::awaitable<std::string> workflow_handle::wait_output(
    std::chrono::milliseconds timeout) const {
  return detail::on_strand(s_, wait_output_within(timeout));
}

}  // namespace durable
