// A step's retry policy and what its function is told (step_info): the public vocabulary of
// ctx.step, ctx.transaction and ctx.map, apart from the context that runs them.
#pragma once

#include <chrono>
#include <exception>
#include <string>

namespace durable {

/// No timeout: ctx.recv, ctx.get_event and engine::get_event wait until the value arrives.
inline constexpr std::chrono::milliseconds forever = std::chrono::milliseconds::max();

/// Retry policy of a step. Every failed attempt is recorded in step_attempts (its error, its
/// time, the time of the next attempt) before the next one, so a crash in the middle of a
/// retry sequence continues the count instead of starting over. A backoff of at least
/// engine_options::unload_after releases the workflow (no coroutine, no connection held) until
/// the attempt is due. When no attempt is left, or the error is permanent (durable::
/// permanent_error, or `retry_if` says so), the step has failed for good: step_failed is
/// raised, and a workflow that lets it escape is dead-lettered for a person to retry.
/// Trivially copyable on purpose (GCC 12, see docs/concepts.md#gcc-12): the predicate is a
/// function pointer, a captureless lambda converts to it.
struct retry {
  int max_attempts = 1;                    ///< attempts in all, the first one included
  std::chrono::milliseconds initial{100};  ///< the pause after the first failure
  double factor = 2.0;                     ///< each pause is this many times the one before
  std::chrono::milliseconds max{std::chrono::seconds(30)};  ///< no pause is longer
  double jitter = 0.0;  ///< 0..1: each pause is drawn from [p * (1 - jitter), p * (1 + jitter)]
  /// Which errors are worth another attempt (null: all but permanent_error, which never
  /// is). durable::retry_on<E...> retries only the exception types listed.
  bool (*retry_if)(const std::exception&) = nullptr;
  /// Per attempt (0: none; steps whose function returns an asio::awaitable only): past it the
  /// attempt receives Asio cancellation (terminal), is abandoned without being waited for,
  /// and counts as a failed attempt with step_timeout.
  std::chrono::milliseconds timeout{0};
  /// ctx.transaction only: serialization failures and deadlocks run the function again in a
  /// fresh transaction up to this many times in a row; they are the database's, never
  /// recorded as the step's failures. Beyond that the run is retried as after any transient
  /// database failure (bounded by max_claims_without_progress, I9).
  int contention_attempts = 10;

  /// The pause after the n-th failed attempt (without jitter).
  [[nodiscard]] std::chrono::milliseconds delay(int failures) const {
    double d = double(initial.count());
    for (int i = 1; i < failures && d < double(max.count()); ++i) d *= factor;
    return std::chrono::milliseconds(std::int64_t(std::min(d, double(max.count()))));
  }
};

/// A retry_if predicate: retry only errors of the types listed (or derived from them).
template <class... E>
bool retry_on(const std::exception& e) noexcept {
  return ((dynamic_cast<const E*>(&e) != nullptr) || ...);
}

/// Passed to a step's function if it accepts one.
struct step_info {
  int seq;
  const std::string& name;
  int attempt;                  ///< 1 on the first attempt
  std::string idempotency_key;  ///< "<workflow id>:<seq>": stable across retries and replays
};

}  // namespace durable
