// The bodies of ctx.step and ctx.transaction: replay or run, retries with their recorded
// attempts, timeouts, and the one journal row (I2, fenced by the epoch, I3).
#pragma once

#include "durable/detail/encode_text.hpp"
#include "durable/detail/spans.hpp"
#include "durable/detail/step.hpp"

namespace durable::detail {

/// 64 random bits (jitter of transaction retries, ctx.random).
inline std::uint64_t random_u64() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return gen();
}

/// The random bits of ctx.random() and ctx.uuid() at step `seq` (`draw` 0 or 1): random_u64(),
/// or the test kit's run_state::random_bits.
inline std::uint64_t random_bits(const run_state& s, int seq, int draw) {
  return s.random_bits ? s.random_bits(s, seq, draw) : random_u64();
}

template <class T, class F>
asio::awaitable<T> run_step(run_state& s, int seq, std::string name, std::string kind, F fn,
                            retry policy) {
  if (const detail::journal_entry* e = detail::replay_entry(s, seq, name, kind))
    co_return detail::replay_value<T>(s, seq, *e);
  const detail::attempt_history* history = detail::attempt_state(s, seq, name, kind);
  detail::require_live(s, seq, name);
  constexpr bool is_awaitable = detail::awaitable_value<detail::step_return_t<F>>::is_awaitable;
  if (!is_awaitable && policy.timeout.count() > 0)
    detail::refuse_timeout(s, seq, name,
                           "its function cannot be cancelled: a timeout needs a step function "
                           "that returns an asio::awaitable (a synchronous function blocks the "
                           "event loop until it returns)");
  // Its row is counted from now on (the journal limit): a concurrent branch issued while
  // its function runs sees it, and nothing runs beyond the limit.
  detail::row_hold hold(s, seq, name);
  // From here until its row is committed the step is in progress: its function, the pauses
  // between attempts, and the journal write. A step issued meanwhile is refused (I4).
  detail::step_function_scope scope(s, name);
  // A span for the steps of the workflow's own functions (not for sleep, now(), patches).
  const bool traced = kind == to_string(step_kind::step);
  detail::span_guard step_span(s, span_kind::step, seq, name, kind, 0, traced);
  if (history && history->next_attempt_at) co_await detail::wait_until_due(s, seq, name, history);

  int attempt = history ? history->last_attempt : 0;
  int failures = history ? history->failures : 0;
  std::shared_ptr<detail::left_behind> abandoned;  // attempts left at their timeout
  std::optional<detail::stored_t<T>> result;
  std::exception_ptr stop;
  try {
    for (;;) {
      if (attempt > (history ? history->last_attempt : 0))
        detail::require_live(s, seq, name);  // the pause may have outlasted the lease
      ++attempt;
      ++failures;
      s.current_seq = seq;
      const double started = detail::journal_started_at(s);
      const step_info info{seq, name, attempt, s.key(seq)};
      std::optional<detail::stored_t<T>> value;
      detail::captured_error failure;
      std::exception_ptr thrown;
      bool may_retry = false;
      detail::span_guard attempt_span(s, span_kind::attempt, seq, name, kind, attempt, traced);
      try {
        const detail::attempt_scope in_attempt(s, info, kind, is_awaitable);
        if constexpr (is_awaitable) {
          if (policy.timeout.count() > 0) {
            // An attempt left behind at its timeout owns a copy of the function, and hands
            // its value through asio::co_spawn, which needs a default-constructible result.
            if constexpr (std::is_copy_constructible_v<F> &&
                          (std::is_void_v<T> || std::is_default_constructible_v<T>)) {
              auto ex = co_await asio::this_coro::executor;
              if (!abandoned) abandoned = std::make_shared<detail::left_behind>(ex);
              auto timed =
                  detail::timed_call<T>(ex, fn, info, policy.timeout, abandoned, s.id, s.clock);
              value.emplace(co_await std::move(timed));
            } else {
              detail::refuse_timeout(s, seq, name,
                                     "a step with a timeout needs a copyable function and a "
                                     "default-constructible result (an attempt abandoned at "
                                     "its timeout keeps a copy of the function)");
            }
          } else if constexpr (std::is_void_v<T>) {
            co_await detail::call_step(fn, info);
            value.emplace();
          } else {
            value.emplace(co_await detail::call_step(fn, info));
          }
        } else {
          if constexpr (std::is_void_v<T>) {
            detail::call_step(fn, info);
            value.emplace();
          } else {
            value.emplace(detail::call_step(fn, info));
          }
        }
        detail::attempt_returned(s, info, kind, policy);
      } catch (...) {
        value.reset();  // set when the test kit failed an attempt whose function returned
        thrown = std::current_exception();
        failure = detail::capture(thrown);
        may_retry = detail::retryable(policy, thrown);
      }
      attempt_span.end(!value, failure.message);
      if (value) {
        // Named, not temporaries: GCC 12 corrupts owning temporaries inside co_await.
        std::optional<std::string> output;
        const std::optional<std::string> no_error;
        if constexpr (!std::is_void_v<T>) {
          // Encoded here unless large (a coroutine of its own only then).
          std::shared_ptr<nlohmann::json> tree;
          output = detail::journal_text_here(*value, tree);
          if (!output) output = co_await detail::journal_text_off_loop(*value, tree);
        }
        // started_at: this attempt's (the failed ones before it have rows of their own).
        co_await detail::append(s, seq, name, kind, output, no_error, attempt, started);
        step_span.end(false, {});
        result = std::move(value);
        break;
      }
      detail::check_failure_is_the_steps(s, seq, name);
      {
        // Cancelled from outside (ctx.all/any gave up on this branch): not the step's
        // failure, nothing is recorded; the step runs again if the workflow gets here again.
        const asio::cancellation_state outer = co_await asio::this_coro::cancellation_state;
        if (outer.cancelled() != asio::cancellation_type::none) std::rethrow_exception(thrown);
      }
      const auto pause = co_await detail::record_failure(s, seq, name, kind, policy, attempt,
                                                         failures, may_retry, failure, started);
      co_await detail::sleep_for(s, pause);
    }
  } catch (...) {
    stop = std::current_exception();
    step_span.end(stop);
  }
  if (abandoned && abandoned->running > 0) {
    // Waited for even when the run is being cancelled (a cancelled coroutine would throw at
    // the co_await instead of entering it): the frame they may refer to must outlive them.
    const bool throws = co_await asio::this_coro::throw_if_cancelled();
    co_await asio::this_coro::throw_if_cancelled(false);
    co_await detail::wait_for_abandoned(*abandoned);
    co_await asio::this_coro::throw_if_cancelled(throws);
  }
  if (stop) std::rethrow_exception(stop);
  if constexpr (!std::is_void_v<T>) co_return std::move(*result);
}

template <class T, class F>
asio::awaitable<T> run_transaction(run_state& s, int seq, std::string name, F fn, retry policy) {
  const std::string kind = std::string(to_string(step_kind::transaction));
  if (const detail::journal_entry* e = detail::replay_entry(s, seq, name, kind))
    co_return detail::replay_value<T>(s, seq, *e);
  const detail::attempt_history* history = detail::attempt_state(s, seq, name, kind);
  detail::require_live(s, seq, name);
  if (policy.timeout.count() > 0)
    detail::refuse_timeout(s, seq, name,
                           "a transactional step cannot be abandoned (use SET LOCAL "
                           "statement_timeout in the transaction instead)");
  detail::row_hold hold(s, seq, name);         // its row counted from now on (journal limit)
  detail::step_function_scope scope(s, name);  // in progress until its row commits (I4)
  // Its span ends when its row commits; one the run leaves (a failure, a stop) ends failed.
  detail::span_guard step_span(s, span_kind::step, seq, name, kind);
  if (history && history->next_attempt_at) co_await detail::wait_until_due(s, seq, name, history);

  int attempt = history ? history->last_attempt : 0;
  int failures = history ? history->failures : 0;
  int contended_in_a_row = 0;
  for (;;) {
    s.current_seq = seq;
    const double started = detail::journal_started_at(s);
    std::optional<detail::stored_t<T>> value;
    detail::captured_error failure;
    bool may_retry = false;
    std::string contention;  // the serialization failure or deadlock, if that was it
    {  // the transaction (and its connection) ends before a failure is recorded
      std::unique_ptr<journal_transaction> tx;
      try {
        tx = co_await detail::io_of(s).begin_transaction(s.id, seq, name);
      } catch (const journal_unsupported& e) {
        // A journal without a database: not the workflow's failure, and it cannot run here.
        s.outcome.note(detail::verdict::parked(detail::park_cause::journal_refused, e.what()));
        throw;
      } catch (const std::exception& e) {
        // No transaction to run it in: the database's failure, never the step's.
        s.outcome.note(detail::verdict::retry(detail::io_of(s).judge(e).description));
        throw;
      }
      // The test kit's hooks only: an engine's run builds no step_info here.
      std::optional<step_info> kit_info;
      if (s.on_attempt || s.observer)
        kit_info.emplace(step_info{seq, name, attempt + 1, s.key(seq)});
      try {
        std::optional<detail::attempt_scope> in_attempt;
        if (kit_info) in_attempt.emplace(s, *kit_info, kind, true);
        if constexpr (std::is_void_v<T>) {
          co_await fn(tx->sql());
          value.emplace();
        } else {
          value.emplace(co_await fn(tx->sql()));
        }
      } catch (const pg::sql_error& e) {
        if (detail::is_contention(e)) {
          contention = detail::describe_io_failure(e);
        } else if (detail::classify(e) == detail::io_verdict::transient) {
          // A timeout, a cancel, a lost server is the database's, not the step's: the run
          // is retried (the function runs again in a fresh transaction).
          s.outcome.note(detail::verdict::retry(detail::describe_io_failure(e)));
          throw;
        } else {
          failure = detail::capture(std::current_exception());
          may_retry = detail::retryable(policy, std::current_exception());
        }
      } catch (const pg::connection_error& e) {
        // The database, not the step, failed: retry the workflow instead of recording it.
        s.outcome.note(detail::verdict::retry(detail::describe_io_failure(e)));
        throw;
      } catch (...) {
        failure = detail::capture(std::current_exception());
        may_retry = detail::retryable(policy, std::current_exception());
      }
      if (!value && contention.empty()) detail::check_failure_is_the_steps(s, seq, name);
      if (value) {
        std::optional<std::string> output;
        if constexpr (!std::is_void_v<T>) {
          std::shared_ptr<nlohmann::json> tree;
          output = detail::journal_text_here(*value, tree);
          if (!output) output = co_await detail::journal_text_off_loop(*value, tree);
        }
        // Counted since the step was issued (the hold); held again below if the
        // transaction does not commit.
        detail::reserve_row(s, seq, name);
        try {
          // The journal row commits inside the transaction: the user's writes and the row
          // commit together or not at all.
          // (A named row, moved: GCC 12 destroys an aggregate temporary passed by value to a
          // coroutine twice.)
          step_row row{seq, name, kind, output, std::nullopt, attempt + 1, started};
          co_await tx->commit(s.id, s.epoch, std::move(row));
        } catch (const journal_fenced&) {
          throw ownership_lost(s.id, "workflow '" + s.id + "': transaction step " +
                                         std::to_string(seq) + " '" + name +
                                         "' rolled back because another executor took "
                                         "the workflow over; this run stops");
        } catch (const pg::sql_error& e) {
          if (e.batch_index() != 0 && detail::is_contention(e)) {
            contention = detail::describe_io_failure(e);  // COMMIT lost a race (SERIALIZABLE)
          } else if (e.batch_index() == 0 || detail::classify(e) == detail::io_verdict::transient) {
            // The journal row (statement 0) refused, or any transient error: the
            // library's failure, never recorded as the step's. COMMIT refused (a deferred
            // constraint of the user's tables): the step's own failure.
            detail::note_io_failure(s, seq, name, e);
            throw;
          } else {
            failure = detail::capture(std::current_exception());
            may_retry = detail::retryable(policy, std::current_exception());
          }
          value.reset();
        } catch (const pg::connection_error& e) {
          s.outcome.note(detail::verdict::retry(detail::describe_io_failure(e)));
          throw;
        } catch (const pg::error&) {
          // The function left the transaction failed (it caught a failing statement and
          // returned): it rolls back, and that is the step's failure.
          failure = detail::capture(std::current_exception());
          may_retry = detail::retryable(policy, std::current_exception());
          value.reset();
        }
        if (value) {
          if (s.counters) ++s.counters->steps_executed;
          step_span.end(false, {});
          if constexpr (!std::is_void_v<T>)
            co_return std::move(*value);
          else
            co_return;
        }
        hold.again();
      }
      tx.reset();  // rolls back with the connection's next statement
    }
    if (!contention.empty()) {
      // Lost a race with another transaction: the database's doing, not the step's. Run
      // the function again in a fresh transaction after a short, growing, jittered pause.
      if (++contended_in_a_row >= std::max(policy.contention_attempts, 1)) {
        s.outcome.note(detail::verdict::retry(contention));
        throw error("workflow '" + s.id + "': transaction step " + std::to_string(seq) + " '" +
                    name + "' lost " + std::to_string(contended_in_a_row) + " races in a row (" +
                    contention + "); the workflow is retried");
      }
      co_await detail::sleep_for(
          s, std::chrono::milliseconds(
                 1 + random_u64() % std::uint64_t(5 << std::min(contended_in_a_row, 6))));
      continue;
    }
    contended_in_a_row = 0;
    ++attempt;
    ++failures;
    const auto pause = co_await detail::record_failure(s, seq, name, kind, policy, attempt,
                                                       failures, may_retry, failure, started);
    co_await detail::sleep_for(s, pause);
  }
}

}  // namespace durable::detail
