// What a workflow sees: journaled steps, transactional steps, and journaled inputs from the
// outside world (time, randomness, ids).
#pragma once

#include <algorithm>
#include <asio/awaitable.hpp>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <variant>

#include "durable/codec.hpp"
#include "durable/detail/config.hpp"
#include "durable/detail/run_state.hpp"
#include "durable/error.hpp"
#include "durable/pg/connection.hpp"

namespace durable {

/// Retry policy of a step: attempts within one run, with exponential backoff. The journal
/// records only the final outcome and the number of attempts.
struct retry {
  int max_attempts = 1;
  std::chrono::milliseconds initial{100};
  double factor = 2.0;
  std::chrono::milliseconds max{std::chrono::seconds(30)};

  [[nodiscard]] std::chrono::milliseconds delay(int attempt) const {
    double d = double(initial.count());
    for (int i = 1; i < attempt; ++i) d *= factor;
    return std::chrono::milliseconds(std::int64_t(std::min(d, double(max.count()))));
  }
};

/// Passed to a step's function if it accepts one.
struct step_info {
  int seq;
  const std::string& name;
  int attempt;                  ///< 1 on the first attempt
  std::string idempotency_key;  ///< "<workflow id>:<seq>": stable across retries and replays
};

namespace detail {
template <class T>
struct awaitable_value {
  static constexpr bool is_awaitable = false;
  using type = T;
};
template <class T, class E>
struct awaitable_value<asio::awaitable<T, E>> {
  static constexpr bool is_awaitable = true;
  using type = T;
};

template <class F>
auto call_step(F& fn, const step_info& info) {
  if constexpr (std::is_invocable_v<F&, const step_info&>)
    return std::invoke(fn, info);
  else
    return std::invoke(fn);
}

template <class F>
using step_return_t = decltype(call_step(std::declval<F&>(), std::declval<const step_info&>()));

template <class F>
using step_value_t = typename awaitable_value<step_return_t<F>>::type;

/// void results travel as monostate inside the replay core.
template <class T>
using stored_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

template <class T>
T decode_journaled(run_state& s, int seq, const journal_entry& e) {
  if constexpr (std::is_void_v<T>) {
    return;
  } else {
    try {
      return durable::decode<T>(nlohmann::json::parse(e.output));
    } catch (const std::exception& x) {
      s.park_reason = "workflow '" + s.id + "' (" + s.name + "): the journaled output of step " +
                      std::to_string(seq) + " '" + e.name + "' no longer decodes as " +
                      std::string(type_name<T>()) + ": " + x.what() +
                      ". The step's result type changed while the workflow was in flight; it is "
                      "parked until code that reads the old value is deployed";
      throw codec_error(std::string(type_name<T>()), *s.park_reason);
    }
  }
}

template <class T>
T replay_value(run_state& s, int seq, const journal_entry& e) {
  if (s.counters) ++s.counters->steps_replayed;
  if (e.failed) {
    auto j = nlohmann::json::parse(e.error, nullptr, false);
    std::string type = j.is_object() ? j.value("type", "unknown") : "unknown";
    std::string message = j.is_object() ? j.value("message", "") : e.error;
    throw step_failed(s.id, seq, e.name, std::move(type), std::move(message));
  }
  return decode_journaled<T>(s, seq, e);
}

/// GCC 12 miscompiles a temporary closure with non-trivially-copyable captures (a std::string
/// captured by value, say) created inside a co_await expression: the temporary is relocated
/// bytewise and its destructor frees memory it does not own. `F` is the step function's type as
/// deduced by a forwarding reference: an lvalue (a named closure) is not a temporary and is
/// safe, so only prvalue/xvalue closures are checked. The check turns the silent corruption into
/// a compile error; see docs/concepts.md#gcc-12.
template <class F>
constexpr void check_step_function() {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13 && \
    !defined(DURABLE_NO_GCC12_CAPTURE_CHECK)
  static_assert(std::is_lvalue_reference_v<F> || std::is_trivially_copyable_v<std::decay_t<F>>,
                "durable: with GCC 12 a step function must be trivially copyable: capture by "
                "reference ([&]) instead of copying strings or containers into the lambda "
                "(GCC 12 corrupts such closures inside co_await). See docs/concepts.md#gcc-12");
#endif
}

DURABLE_DECL void require_live(run_state& s, int seq, const std::string& name);
/// A step issued while a step function of the same run executes: from inside that function
/// (a nested step), or from a branch that runs beside it, which would number steps by
/// timing instead of program order (I4). Rejected at once; the workflow is parked.
DURABLE_DECL void check_not_nested(run_state& s, const std::string& name);

/// Counts a step function as running for check_not_nested() while it is in scope.
/// (On the path of every new step: a counter and a pointer, no copies.)
class step_function_scope {
public:
  step_function_scope(run_state& s, const std::string& name) : s_(s), name_(&name) {
    ++s_.step_functions_running;
    s_.running_step = name_;
  }
  step_function_scope(const step_function_scope&) = delete;
  step_function_scope& operator=(const step_function_scope&) = delete;
  ~step_function_scope() {
    --s_.step_functions_running;
    if (s_.running_step == name_) s_.running_step = nullptr;  // never left dangling
  }

private:
  run_state& s_;
  const std::string* name_;
};

/// After a step function failed: errors that are not the step's own (a nested step, the
/// engine shutting down and cancelling it) are raised as they are, never journaled.
DURABLE_DECL void check_failure_is_the_steps(run_state& s, int seq, const std::string& name);
}  // namespace detail

class context {
public:
  explicit context(detail::run_state& s) noexcept : s_(&s) {}
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  [[nodiscard]] const std::string& workflow_id() const noexcept { return s_->id; }
  [[nodiscard]] const std::string& workflow_name() const noexcept { return s_->name; }

  /// The idempotency key of the step running now: "<workflow id>:<step number>", the same on
  /// every retry and replay. Hand it to external APIs so a repeated call is harmless. With
  /// concurrent steps, take the key from the step_info the step function can accept.
  [[nodiscard]] std::string idempotency_key() const {
    if (s_->current_seq < 0)
      throw error("workflow '" + s_->id + "': idempotency_key() called outside a step");
    return s_->key(s_->current_seq);
  }

  /// True while the next step will come from the journal.
  [[nodiscard]] bool replaying() const noexcept {
    return std::size_t(s_->next_seq) < s_->journal.size() && s_->journal[std::size_t(s_->next_seq)];
  }

  /// Runs `fn` once and journals its result before the workflow continues; on replay returns
  /// the journaled result without calling `fn`. `fn` returns a value, void, or an
  /// asio::awaitable of either, and may take a `const step_info&`. If it throws (after
  /// `policy`'s retries), the error is journaled and raised as step_failed, now and on every
  /// replay. The step's number is taken here, when the step is issued (I4).
  template <class F>
  [[nodiscard]] asio::awaitable<detail::step_value_t<std::decay_t<F>>> step(std::string name,
                                                                            F&& fn,
                                                                            retry policy = {}) {
    using T = detail::step_value_t<std::decay_t<F>>;
    detail::check_step_function<F>();
    detail::check_not_nested(*s_, name);
    return run_step<T>(s_->next_seq++, std::move(name), "step", std::forward<F>(fn), policy);
  }

  /// Runs `fn(tx)` in a database transaction that commits together with the step's journal
  /// row: exactly once. `fn` returns asio::awaitable<T> and issues its SQL through `tx`.
  template <class F>
  [[nodiscard]] auto transaction(std::string name, F&& fn, retry policy = {}) -> asio::awaitable<
      typename detail::awaitable_value<std::invoke_result_t<F&, pg::transaction&>>::type> {
    using T = typename detail::awaitable_value<std::invoke_result_t<F&, pg::transaction&>>::type;
    detail::check_step_function<F>();
    detail::check_not_nested(*s_, name);
    return run_transaction<T>(s_->next_seq++, std::move(name), std::forward<F>(fn), policy);
  }

  /// The wall-clock time, journaled (I6): a replay sees the time of the first run.
  [[nodiscard]] asio::awaitable<std::chrono::system_clock::time_point> now() {
    detail::check_not_nested(*s_, "now");
    return now_impl(s_->next_seq++);
  }

  /// 64 random bits, journaled (I6).
  [[nodiscard]] asio::awaitable<std::uint64_t> random() {
    detail::check_not_nested(*s_, "random");
    return run_step<std::uint64_t>(s_->next_seq++, "random", "random", [] { return random_u64(); },
                                   {});
  }

  /// A random (version 4) UUID, journaled (I6).
  [[nodiscard]] asio::awaitable<std::string> uuid() {
    detail::check_not_nested(*s_, "uuid");
    return run_step<std::string>(s_->next_seq++, "uuid", "uuid", [] { return make_uuid(); }, {});
  }

private:
  static std::uint64_t random_u64() {
    thread_local std::mt19937_64 gen{std::random_device{}()};
    return gen();
  }
  static std::string make_uuid() {
    std::uint64_t hi = random_u64(), lo = random_u64();
    hi = (hi & 0xffffffffffff0fffull) | 0x0000000000004000ull;  // version 4
    lo = (lo & 0x3fffffffffffffffull) | 0x8000000000000000ull;  // variant 10
    char buf[37];
    std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", unsigned(hi >> 32),
                  unsigned((hi >> 16) & 0xffff), unsigned(hi & 0xffff), unsigned(lo >> 48),
                  static_cast<unsigned long long>(lo & 0xffffffffffffull));
    return buf;
  }

  asio::awaitable<std::chrono::system_clock::time_point> now_impl(int seq) {
    using namespace std::chrono;
    auto step = run_step<std::int64_t>(
        seq, "now", "now",
        [] { return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count(); },
        {});
    const auto us = co_await std::move(step);
    co_return system_clock::time_point(duration_cast<system_clock::duration>(microseconds(us)));
  }

  template <class T, class F>
  asio::awaitable<T> run_step(int seq, std::string name, std::string kind, F fn, retry policy) {
    detail::run_state& s = *s_;
    if (const detail::journal_entry* e = detail::replay_entry(s, seq, name, kind))
      co_return detail::replay_value<T>(s, seq, *e);
    detail::require_live(s, seq, name);
    // From here until its row is committed the step is in progress: its function, the pauses
    // between attempts, and the journal write. A step issued meanwhile is refused (I4).
    detail::step_function_scope scope(s, name);

    const double started = detail::unix_seconds();
    std::optional<detail::stored_t<T>> value;
    detail::captured_error failure;
    int attempt = 0;
    for (;;) {
      ++attempt;
      s.current_seq = seq;
      const step_info info{seq, name, attempt, s.key(seq)};
      try {
        if constexpr (detail::awaitable_value<detail::step_return_t<F>>::is_awaitable) {
          if constexpr (std::is_void_v<T>) {
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
      } catch (...) {
        failure = detail::capture(std::current_exception());
      }
      if (!value) detail::check_failure_is_the_steps(s, seq, name);
      if (value || attempt >= std::max(policy.max_attempts, 1)) break;
      co_await detail::sleep_for(policy.delay(attempt));
    }

    // Named, not temporaries: GCC 12 corrupts owning temporaries inside co_await.
    std::optional<std::string> output, error_json;
    if (!value) {
      error_json = failure.to_json();
      co_await detail::append(s, seq, name, kind, output, error_json, attempt, started);
      throw step_failed(s.id, seq, name, failure.type, failure.message);
    }
    if constexpr (!std::is_void_v<T>) output = durable::encode<T>(*value).dump();
    co_await detail::append(s, seq, name, kind, output, error_json, attempt, started);
    if constexpr (!std::is_void_v<T>) co_return std::move(*value);
  }

  template <class T, class F>
  asio::awaitable<T> run_transaction(int seq, std::string name, F fn, retry policy) {
    detail::run_state& s = *s_;
    const std::string kind = "transaction";
    if (const detail::journal_entry* e = detail::replay_entry(s, seq, name, kind))
      co_return detail::replay_value<T>(s, seq, *e);
    detail::require_live(s, seq, name);
    detail::step_function_scope scope(s, name);  // in progress until its row commits (I4)

    const double started = detail::unix_seconds();
    detail::captured_error failure;
    for (int attempt = 1;; ++attempt) {
      s.current_seq = seq;
      std::optional<detail::stored_t<T>> value;
      {  // the connection goes back to the pool before a failure is journaled
        auto conn = co_await detail::acquire(s);
        std::optional<pg::transaction> tx;
        tx.emplace(conn->begin());
        try {
          if constexpr (std::is_void_v<T>) {
            co_await fn(*tx);
            value.emplace();
          } else {
            value.emplace(co_await fn(*tx));
          }
        } catch (const pg::sql_error& e) {
          // A serialization failure, deadlock, timeout or cancel is the database's, not the
          // step's: the run is retried (the function runs again in a fresh transaction).
          if (detail::classify(e) == detail::io_verdict::transient) {
            s.io_failed = true;
            s.io_error = detail::describe_io_failure(e);
            throw;
          }
          failure = detail::capture(std::current_exception());
        } catch (const pg::connection_error& e) {
          // The database, not the step, failed: retry the workflow instead of journaling it.
          s.io_failed = true;
          s.io_error = detail::describe_io_failure(e);
          throw;
        } catch (...) {
          failure = detail::capture(std::current_exception());
        }
        if (!value) detail::check_failure_is_the_steps(s, seq, name);
        if (value) {
          std::optional<std::string> output;
          if constexpr (!std::is_void_v<T>) output = durable::encode<T>(*value).dump();
          try {
            // The journal row rides in the same round trip as COMMIT, inside the transaction:
            // the user's writes and the row commit together or not at all.
            const std::string succeeded = "succeeded";
            fenced_write write = s.st->step_append(s.id, s.epoch, seq, name, kind, succeeded,
                                                   output, std::nullopt, attempt, started);
            std::vector<pg::statement> row;
            row.push_back(std::move(write.st));
            co_await tx->commit(std::move(row));
          } catch (const pg::sql_error& e) {
            const fence_verdict verdict = store::verdict(e);
            if (verdict.fenced_out())
              throw ownership_lost(s.id, "workflow '" + s.id + "': transaction step " +
                                             std::to_string(seq) + " '" + name +
                                             "' rolled back because another executor took "
                                             "the workflow over; this run stops");
            // The journal row (statement 0) refused (verdict failed), or any transient error:
            // the library's failure, never journaled as the step's. COMMIT refused (a deferred
            // constraint of the user's tables): the step's own failure.
            if (e.batch_index() == 0 || detail::classify(e) == detail::io_verdict::transient) {
              detail::note_io_failure(s, seq, name, e);
              throw;
            }
            failure = detail::capture(std::current_exception());
            value.reset();
          } catch (const pg::connection_error& e) {
            s.io_failed = true;
            s.io_error = detail::describe_io_failure(e);
            throw;
          } catch (const durable::error&) {
            // The function left the transaction failed (it caught a failing statement and
            // returned): it rolls back, and that is the step's failure.
            failure = detail::capture(std::current_exception());
            value.reset();
          }
          if (value) {
            if (s.counters) ++s.counters->steps_executed;
            if constexpr (!std::is_void_v<T>)
              co_return std::move(*value);
            else
              co_return;
          }
        }
        tx.reset();  // rolls back with the connection's next statement
      }
      if (attempt >= std::max(policy.max_attempts, 1)) {
        const std::optional<std::string> no_output, error_json = failure.to_json();
        co_await detail::append(s, seq, name, kind, no_output, error_json, attempt, started);
        throw step_failed(s.id, seq, name, failure.type, failure.message);
      }
      co_await detail::sleep_for(policy.delay(attempt));
    }
  }

  detail::run_state* s_;
};

}  // namespace durable

#if defined(DURABLE_HEADER_ONLY)
#include "durable/impl/context.ipp"
#endif
