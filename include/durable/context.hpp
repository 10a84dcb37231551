// What a workflow sees: journaled steps, transactional steps, and journaled inputs from the
// outside world (time, randomness, ids).
#pragma once

#include <algorithm>
#include <array>
#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "durable/child_handle.hpp"
#include "durable/detail/join.hpp"
#include "durable/detail/step.hpp"
#include "durable/detail/step_run.hpp"
#include "durable/retry.hpp"

namespace durable {

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

  /// The rows this generation's journal holds: those loaded when the run began plus those it
  /// journaled since. engine_options::journal_limit bounds it (a new step beyond it parks the
  /// workflow); a workflow that runs for ever continues as new before it gets there:
  ///
  ///   if (ctx.journal_size() > 1000) co_return co_await ctx.continue_as_new<&poll>(cursor);
  [[nodiscard]] std::size_t journal_size() const noexcept { return s_->journal_rows; }

  /// How many times this workflow continued as new (0 for a workflow that never did).
  [[nodiscard]] std::int64_t generation() const noexcept { return s_->generation; }

  /// Ends this run and starts the workflow again from the top, under the same id, with `args`
  /// as its inputs and an empty journal: generation n + 1. One fenced statement replaces the
  /// inputs, deletes the journal, the recorded attempts and the consumed messages of
  /// generation n and bumps the generation; then the new generation starts at once in this
  /// process. Unconsumed messages stay for it, handles and result() keep working (same id).
  /// Crash-safe (a replay reaches this call again until it commits). It never completes: write
  ///
  ///   co_return co_await ctx.continue_as_new<&poll>(next_cursor);
  ///
  /// `Workflow` (a function or a captureless lambda with the workflow's signature) types the
  /// call at compile time: `args` must convert to its parameters, and the awaitable's type is
  /// its result type. The workflow that continues is this one (its registered name); refused
  /// (the workflow parked) inside a ctx.all/any/map branch, inside a step, or with arguments
  /// that do not decode as the registered parameters. See docs/primitives.md#continue-as-new.
  template <auto Workflow, class... A>
  [[nodiscard]] auto continue_as_new(const A&... args)
      -> asio::awaitable<typename detail::workflow_function_traits<
          std::remove_pointer_t<decltype(Workflow)>>::result> {
    using traits = detail::workflow_function_traits<std::remove_pointer_t<decltype(Workflow)>>;
    using params = typename traits::args;
    static_assert(std::tuple_size_v<params> == sizeof...(A),
                  "continue_as_new<Workflow>(args...): give as many arguments as the workflow "
                  "has parameters (after its context&)");
    return continue_typed<typename traits::result>(static_cast<params*>(nullptr), args...);
  }

  /// The same without a function to type it against: the result type `R` (void by default)
  /// is given, and the arguments are checked when the call runs against the parameters the
  /// workflow was registered with (a mismatch parks the workflow with a clear reason).
  ///
  ///   co_await ctx.continue_as_new(next_cursor);                     // a void workflow
  ///   co_return co_await ctx.continue_as_new<int>(next_cursor);      // an int one
  template <class R = void, class... A>
  [[nodiscard]] asio::awaitable<R> continue_as_new(const A&... args) {
    detail::refuse_continue_in_join(*s_);
    detail::check_not_nested(*s_, "continue_as_new");
    std::string inputs = detail::encode_inputs(args...).dump();
    return continue_impl<R>(std::move(inputs));
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
    return run_step<T>(s_->next_seq++, std::move(name), std::string(to_string(step_kind::step)),
                       std::forward<F>(fn), policy);
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

  /// The wall-clock time, journaled (I6): a replay sees the time of the first run. It is the
  /// database server's clock as this executor measures it (not this host's, which may be
  /// wrong), the clock sleep_until() and every other wake-up time are measured against.
  [[nodiscard]] asio::awaitable<std::chrono::system_clock::time_point> now() {
    detail::check_not_nested(*s_, "now");
    return now_impl(s_->next_seq++);
  }

  /// Durable sleep. The wake-up time is journaled (a step of kind "sleep"), so a replay sleeps
  /// only what is left, wherever and whenever it runs; a wake-up that fell in an outage comes
  /// right after it. A sleep of at least engine_options::unload_after unloads the workflow: its
  /// coroutine frame is destroyed, its ownership released, and whichever executor is free when
  /// it is due resumes it by replay (found by an index on workflows.wake_at). Shorter ones
  /// sleep in the run. Cancellation (cancel(), the deadline, shutdown) interrupts it. The
  /// wake-up time is on the database server's clock (see now()): an executor whose own clock is
  /// wrong still wakes it on time, also after taking the workflow over.
  [[nodiscard]] asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    detail::check_not_nested(*s_, "sleep");
    return sleep_impl(s_->next_seq++, us(detail::clock_now(*s_)) + std::int64_t(d.count()) * 1000);
  }

  /// Durable sleep until `t` (see sleep_for), a time on the server's clock: take it from
  /// ctx.now() (plus a duration), not from this host's system_clock, which may be wrong.
  [[nodiscard]] asio::awaitable<void> sleep_until(std::chrono::system_clock::time_point t) {
    using namespace std::chrono;
    detail::check_not_nested(*s_, "sleep");
    return sleep_impl(s_->next_seq++, duration_cast<microseconds>(t.time_since_epoch()).count());
  }

  /// Versioning: true for a workflow that reaches this point under code that has the change
  /// `change_id`, false for one that passed this point before the change was deployed (its
  /// journal holds the old code's step here). The answer is journaled (a step of kind "patch"
  /// named `change_id`) the first time, so replays agree; a false answer takes no step number.
  ///
  ///   if (co_await ctx.patched("fraud-check")) co_await ctx.step("fraud-check", ...);
  ///
  /// See docs/versioning.md, also for retiring a patch with deprecate_patch().
  [[nodiscard]] asio::awaitable<bool> patched(std::string change_id) {
    detail::check_not_nested(*s_, change_id);
    const int seq = s_->next_seq;
    if (const detail::journal_entry* e = journal_at(seq)) {
      if (e->kind != to_string(step_kind::patch) || e->name != change_id) return no_patch();
      ++s_->next_seq;
      return replayed_patch();
    }
    ++s_->next_seq;
    return record_patch(seq, std::move(change_id));
  }

  /// Retires a patch once no workflow that passed its point before the change is left: code
  /// that called patched(id) and kept only the new branch calls deprecate_patch(id) there. It
  /// consumes the patch's journal row where a workflow has one (so both kinds replay) and
  /// journals nothing; once no workflow has the row, the call can be removed.
  [[nodiscard]] asio::awaitable<void> deprecate_patch(std::string change_id) {
    detail::check_not_nested(*s_, change_id);
    if (const detail::journal_entry* e = journal_at(s_->next_seq);
        e && e->kind == to_string(step_kind::patch) && e->name == change_id) {
      ++s_->next_seq;
      if (s_->counters) ++s_->counters->steps_replayed;
    }
    return no_op();
  }

  // ---- messages ------------------------------------------------------------------------

  /// Sends `value` to workflow `workflow_id` under `topic`, exactly once: the message and the
  /// step's journal row commit in one statement (the message's idempotency key is this
  /// step's, "<workflow id>:<step>"). A recipient that does not exist fails the step for good
  /// (step_failed, journaled).
  template <class T>
  [[nodiscard]] asio::awaitable<void> send(std::string workflow_id, std::string topic,
                                           const T& value) {
    detail::check_not_nested(*s_, topic);
    std::string payload = durable::encode<T>(value).dump();
    return send_impl(s_->next_seq++, std::move(workflow_id), std::move(topic), std::move(payload));
  }

  /// The oldest message sent to this workflow under `topic` that no recv consumed yet, or
  /// nullopt once `timeout` passed without one. Consuming it and journaling it commit in one
  /// statement: no message is lost or delivered twice across crashes. The wait is durable
  /// (its deadline is journaled, a replay waits what is left); a notification wakes it, with
  /// polling as the fallback, and a wait longer than engine_options::unload_after unloads the
  /// workflow until a message comes. Takes two step numbers (the deadline, the message).
  template <class T>
  [[nodiscard]] asio::awaitable<std::optional<T>> recv(
      std::string topic, std::chrono::milliseconds timeout = forever) {
    detail::check_not_nested(*s_, topic);
    const int seq = s_->next_seq;
    s_->next_seq += 2;
    return recv_impl<T>(seq, std::move(topic), timeout);
  }

  // ---- events --------------------------------------------------------------------------

  /// Publishes `value` under `key` for anyone to read (engine::get_event, ctx.get_event): the
  /// latest value wins. Published and journaled in one statement.
  template <class T>
  [[nodiscard]] asio::awaitable<void> set_event(std::string key, const T& value) {
    detail::check_not_nested(*s_, key);
    std::string v = durable::encode<T>(value).dump();
    return set_event_impl(s_->next_seq++, std::move(key), std::move(v));
  }

  /// The value workflow `workflow_id` published under `key`, waiting up to `timeout` for it
  /// (nullopt then). Journaled: a replay returns what the first run read. Takes two step
  /// numbers (the deadline, the value).
  template <class T>
  [[nodiscard]] asio::awaitable<std::optional<T>> get_event(
      std::string workflow_id, std::string key, std::chrono::milliseconds timeout = forever) {
    detail::check_not_nested(*s_, key);
    const int seq = s_->next_seq;
    s_->next_seq += 2;
    return get_event_impl<T>(seq, std::move(workflow_id), std::move(key), timeout);
  }

  // ---- streams -------------------------------------------------------------------------

  /// Appends `value` to this workflow's stream `key`, for readers outside it
  /// (engine::read_stream, `durable stream`), and returns its offset (0, 1, ... in each
  /// stream). Appended and journaled in one statement: a replay returns the offset and
  /// appends nothing. A value after close_stream(key) fails for good (step_failed).
  template <class T>
  [[nodiscard]] asio::awaitable<std::int64_t> write_stream(std::string key, const T& value) {
    detail::check_not_nested(*s_, key);
    std::optional<std::string> v = durable::encode<T>(value).dump();
    return detail::append_to_stream(*s_, s_->next_seq++, std::move(key), std::move(v));
  }
  /// Closes stream `key`: its readers end after its last value. Returns the close's offset
  /// (the number of values). Closing again journals a step and changes nothing. A stream
  /// never closed ends for its readers when the workflow finishes.
  [[nodiscard]] asio::awaitable<std::int64_t> close_stream(std::string key) {
    detail::check_not_nested(*s_, key);
    return detail::append_to_stream(*s_, s_->next_seq++, std::move(key), std::nullopt);
  }

  // ---- child workflows -----------------------------------------------------------------

  /// Starts workflow `name` with `args` as a child of this one: its id is "<this id>/<step>",
  /// its parent_id this workflow's, so a replay reattaches to the same child instead of
  /// starting another; the child and this step's journal row commit together. Any executor
  /// that runs `name` picks it up. Cancelling this workflow cancels its unfinished children.
  template <class... Args>
  [[nodiscard]] asio::awaitable<child_handle> start_child(std::string name, const Args&... args) {
    detail::check_not_nested(*s_, name);
    std::string inputs = detail::encode_inputs(args...).dump();
    return start_child_impl(s_->next_seq++, std::move(name), std::move(inputs));
  }

  /// child_handle::result: the child's output, as a journaled step of this workflow.
  template <class R = void>
  [[nodiscard]] asio::awaitable<R> child_result(std::string child_id) {
    detail::check_not_nested(*s_, child_id);
    return child_result_impl<R>(s_->next_seq++, std::move(child_id));
  }

  // ---- fan-out and fan-in --------------------------------------------------------------

  /// Runs branches issued beforehand (steps, child results, receives: anything that took its
  /// step number when it was created) concurrently and returns all their values, in the
  /// order given. Step numbers come from the order the branches were issued, never from the
  /// order they complete, so a replay is identical whatever the timing. The first failure
  /// cancels the others (their steps are not recorded as failed) and is raised.
  ///
  ///   auto a = ctx.step("price", [&] { return price(sku); });  // step 0
  ///   auto b = ctx.step("stock", [&] { return stock(sku); });  // step 1
  ///   auto [p, n] = co_await ctx.all(std::move(a), std::move(b));
  template <class... T>
  [[nodiscard]] asio::awaitable<std::tuple<detail::stored_t<T>...>> all(
      asio::awaitable<T>&&... branches) {
    static_assert(sizeof...(T) > 0, "ctx.all needs at least one branch");
    return all_impl<T...>(std::tuple<asio::awaitable<T>...>(std::move(branches)...));
  }

  /// Runs branches issued beforehand concurrently until the first one ends; the others are
  /// cancelled. Which branch won is journaled (a step of kind "any"), so a replay returns the
  /// same branch's journaled outcome. The variant's index is the winner's position; a winner
  /// that failed raises its step_failed. Takes one step number, after the branches'.
  template <class... T>
  [[nodiscard]] asio::awaitable<std::variant<detail::stored_t<T>...>> any(
      asio::awaitable<T>&&... branches) {
    static_assert(sizeof...(T) > 0, "ctx.any needs at least one branch");
    detail::check_not_nested(*s_, "any");
    return any_impl<T...>(s_->next_seq++,
                          std::tuple<asio::awaitable<T>...>(std::move(branches)...));
  }

  /// A bounded map: one step per item ("name[i]", step numbers taken now in item order),
  /// at most `in_flight` running at once; returns the results in item order. The map owns
  /// `items` and its copy of `fn`, which receives each item by const reference (and, if it
  /// accepts one, the step_info): nothing refers to a loop variable of the caller. The first
  /// item that fails for good cancels the ones running and is raised; a replay returns the
  /// journaled results and runs only the missing items.
  template <class Item, class F>
  [[nodiscard]] auto map(std::string name, std::vector<Item> items, std::size_t in_flight, F&& fn,
                         retry policy = {}) {
    detail::check_step_function<F>();
    detail::check_not_nested(*s_, name);
    using state = detail::map_state<std::decay_t<F>, Item>;
    if (in_flight == 0)
      throw error("workflow '" + s_->id + "': ctx.map('" + name + "') needs in_flight >= 1");
    const int base = s_->next_seq;
    s_->next_seq += int(items.size());
    auto st =
        std::make_shared<state>(std::move(name), std::move(items), std::forward<F>(fn), policy);
    return map_impl<state>(base, in_flight, std::move(st));
  }

  /// 64 random bits, journaled (I6).
  [[nodiscard]] asio::awaitable<std::uint64_t> random() {
    detail::check_not_nested(*s_, "random");
    const int seq = s_->next_seq++;
    return run_step<std::uint64_t>(seq, "random", std::string(to_string(step_kind::random)),
                                   [s = s_, seq] { return detail::random_bits(*s, seq, 0); }, {});
  }

  /// A random (version 4) UUID, journaled (I6).
  [[nodiscard]] asio::awaitable<std::string> uuid() {
    detail::check_not_nested(*s_, "uuid");
    const int seq = s_->next_seq++;
    return run_step<std::string>(seq, "uuid", std::string(to_string(step_kind::uuid)),
                                 [s = s_, seq] { return make_uuid(*s, seq); }, {});
  }

private:
  static std::string make_uuid(const detail::run_state& s, int seq) {
    std::uint64_t hi = detail::random_bits(s, seq, 0), lo = detail::random_bits(s, seq, 1);
    hi = (hi & 0xffffffffffff0fffull) | 0x0000000000004000ull;  // version 4
    lo = (lo & 0x3fffffffffffffffull) | 0x8000000000000000ull;  // variant 10
    char buf[37];
    std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", unsigned(hi >> 32),
                  unsigned((hi >> 16) & 0xffff), unsigned(hi & 0xffff), unsigned(lo >> 48),
                  static_cast<unsigned long long>(lo & 0xffffffffffffull));
    return buf;
  }

  template <class R, class... P, class... A>
  asio::awaitable<R> continue_typed(std::tuple<P...>*, const A&... args) {
    static_assert((std::is_convertible_v<const A&, P> && ...),
                  "continue_as_new<Workflow>(args...): an argument does not convert to the "
                  "workflow's parameter type");
    detail::refuse_continue_in_join(*s_);
    detail::check_not_nested(*s_, "continue_as_new");
    std::string inputs = detail::encode_inputs<P...>(P(args)...).dump();
    return continue_impl<R>(std::move(inputs));
  }
  template <class R>
  asio::awaitable<R> continue_impl(std::string inputs) {
    co_await detail::continue_run(*s_, inputs);
    throw detail::continued_as_new{};  // not reached: continue_run always throws
  }

  /// Seconds since the Unix epoch (detail::clock_now, clock_earliest) in microseconds.
  static std::int64_t us(double unix_seconds) noexcept {
    return static_cast<std::int64_t>(std::llround(unix_seconds * 1e6));
  }

  asio::awaitable<std::chrono::system_clock::time_point> now_impl(int seq) {
    using namespace std::chrono;
    const detail::run_state* run = s_;
    auto step = run_step<std::int64_t>(seq, "now", std::string(to_string(step_kind::now)),
                                       [run] { return us(detail::clock_now(*run)); }, {});
    const auto us = co_await std::move(step);
    co_return system_clock::time_point(duration_cast<system_clock::duration>(microseconds(us)));
  }

  [[nodiscard]] const detail::journal_entry* journal_at(int seq) const {
    if (std::size_t(seq) >= s_->journal.size() || !s_->journal[std::size_t(seq)]) return nullptr;
    return &*s_->journal[std::size_t(seq)];
  }
  static asio::awaitable<bool> no_patch() { co_return false; }
  asio::awaitable<bool> replayed_patch() {
    if (s_->counters) ++s_->counters->steps_replayed;
    co_return true;
  }
  static asio::awaitable<void> no_op() { co_return; }
  asio::awaitable<bool> record_patch(int seq, std::string change_id) {
    auto step = run_step<void>(seq, std::move(change_id), std::string(to_string(step_kind::patch)),
                               [] {}, {});
    co_await std::move(step);
    co_return true;
  }

  asio::awaitable<void> sleep_impl(int seq, std::int64_t asked) {
    using namespace std::chrono;
    // The first run journals its wake-up time (server's clock); a replay measures what is left.
    auto step = run_step<std::int64_t>(seq, "sleep", std::string(to_string(step_kind::sleep)),
                                       [asked] { return asked; }, {});
    const std::int64_t wake_us = co_await std::move(step);
    // Measured from the earliest the clock can read (detail::clock_earliest): never early.
    const std::int64_t now = us(detail::clock_earliest(*s_));
    if (wake_us <= now) co_return;
    const auto left = milliseconds((wake_us - now + 999) / 1000);
    const std::string name = "sleep", what = "the wake-up of its sleep";
    detail::span_guard waiting(*s_, span_kind::wait, seq, name, name);  // unloading ends it
    co_await detail::pause_or_unload(*s_, seq, name, left, what, 0);
    waiting.end(false, {});
  }

  asio::awaitable<void> send_impl(int seq, std::string to, std::string topic, std::string payload) {
    co_await detail::send_message(*s_, seq, to, topic, payload);
  }
  template <class T>
  asio::awaitable<std::optional<T>> recv_impl(int seq, std::string topic,
                                              std::chrono::milliseconds timeout) {
    const std::string text = co_await detail::receive(*s_, seq, topic, timeout);
    const std::string kind = std::string(to_string(step_kind::recv));
    co_return detail::decode_arrival<T>(*s_, seq + 1, topic, kind, text);
  }
  asio::awaitable<void> set_event_impl(int seq, std::string key, std::string value) {
    co_await detail::publish_event(*s_, seq, key, value);
  }
  template <class T>
  asio::awaitable<std::optional<T>> get_event_impl(int seq, std::string workflow_id,
                                                   std::string key,
                                                   std::chrono::milliseconds timeout) {
    const std::string text = co_await detail::await_event(*s_, seq, workflow_id, key, timeout);
    const std::string kind = std::string(to_string(step_kind::get_event)),
                      name = workflow_id + ":" + key;
    co_return detail::decode_arrival<T>(*s_, seq + 1, name, kind, text);
  }
  asio::awaitable<child_handle> start_child_impl(int seq, std::string name, std::string inputs) {
    std::string id = co_await detail::start_child_workflow(*s_, seq, name, inputs);
    co_return child_handle(this, std::move(id));
  }
  template <class R>
  asio::awaitable<R> child_result_impl(int seq, std::string child_id) {
    const std::string text = co_await detail::await_child(*s_, seq, child_id);
    if constexpr (!std::is_void_v<R>) {
      const detail::journal_entry e{
          child_id, std::string(to_string(step_kind::child_result)), false, text, {}};
      co_return detail::decode_text<R>(*s_, seq, e, text);
    }
  }

  template <class... T>
  asio::awaitable<std::tuple<detail::stored_t<T>...>> all_impl(
      std::tuple<asio::awaitable<T>...> branches) {
    using values_t = std::tuple<std::optional<detail::stored_t<T>>...>;
    auto ex = co_await asio::this_coro::executor;
    auto j = std::make_shared<detail::join_state>(ex);
    auto values = std::make_shared<values_t>();
    const int before = s_->next_seq;
    {
      detail::join_scope scope(*s_);
      detail::spawn_all(ex, j, values, branches, std::index_sequence_for<T...>{});
      co_await detail::join_branches(*j);
    }
    detail::check_join(*s_, before, "all");
    if (j->error) std::rethrow_exception(j->error);
    co_return std::apply([](auto&... v) { return std::make_tuple(std::move(*v)...); }, *values);
  }
  template <class... T>
  asio::awaitable<std::variant<detail::stored_t<T>...>> any_impl(
      int seq, std::tuple<asio::awaitable<T>...> branches) {
    detail::run_state& s = *s_;
    const std::string name = "any", kind = std::string(to_string(step_kind::any));
    std::optional<std::size_t> journaled;
    if (const detail::journal_entry* e = detail::replay_entry(s, seq, name, kind)) {
      journaled = detail::decode_journaled<std::size_t>(s, seq, *e);
      if (s.counters) ++s.counters->steps_replayed;
      if (*journaled >= sizeof...(T)) {
        throw error(detail::note_park(
            s, detail::park_cause::codec,
            "workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) +
                " journaled branch " + std::to_string(*journaled) + " of ctx.any as the " +
                "winner, but the code has " + std::to_string(sizeof...(T)) +
                " branches there. It is parked until code that matches it is deployed"));
      }
    } else {
      detail::require_live(s, seq, name);
    }
    // The winner's row is counted now, before the branches run (the journal limit).
    std::optional<detail::row_hold> hold;
    if (!journaled) hold.emplace(s, seq, name);
    const double started = detail::journal_started_at(s);
    auto ex = co_await asio::this_coro::executor;
    auto j = std::make_shared<detail::join_state>(ex);
    auto v = std::make_shared<detail::any_values<T...>>();
    const int before = s.next_seq;
    {
      detail::join_scope scope(s, true);
      detail::spawn_any(ex, j, v, branches, journaled, std::index_sequence_for<T...>{});
      co_await detail::join_branches(*j);
    }
    detail::check_join(s, before, "any");
    // A failure that is no branch's own outcome (I/O, misuse, a lost lease) wins over any
    // winner: nothing is journaled.
    if (j->error || !j->winner) std::rethrow_exception(j->error);
    const std::size_t winner = *j->winner;
    if (!journaled) {
      const std::string output = std::to_string(winner);
      co_await detail::journal_value(s, seq, name, kind, output, started);
    }
    if (v->failures[winner]) std::rethrow_exception(v->failures[winner]);
    co_return detail::pick<std::variant<detail::stored_t<T>...>>(*v, winner,
                                                                 std::index_sequence_for<T...>{});
  }

  template <class State>
  asio::awaitable<void> map_worker(std::shared_ptr<detail::join_state> j, std::shared_ptr<State> st,
                                   int base, std::size_t self) {
    for (;;) {
      if (j->halted) co_return;
      const std::size_t i = st->next++;
      if (i >= st->items.size()) co_return;
      const typename State::call call{&st->fn, &st->items[i]};
      try {
        auto step = run_step<typename State::value>(
            base + int(i), st->name + "[" + std::to_string(i) + "]",
            std::string(to_string(step_kind::step)), call, st->policy);
        if constexpr (std::is_void_v<typename State::value>) {
          co_await std::move(step);
          st->results[i].emplace();
        } else {
          st->results[i].emplace(co_await std::move(step));
        }
      } catch (...) {
        j->fail(self, std::current_exception());
        co_return;
      }
    }
  }
  template <class State>
  asio::awaitable<std::vector<typename State::stored>> map_impl(int base, std::size_t in_flight,
                                                                std::shared_ptr<State> st) {
    auto ex = co_await asio::this_coro::executor;
    auto j = std::make_shared<detail::join_state>(ex);
    const std::size_t workers = std::min(in_flight, st->items.size());
    {
      detail::join_scope scope(*s_);
      for (std::size_t k = 0; k < workers; ++k) j->spawn(ex, j, map_worker(j, st, base, k));
      co_await detail::join_branches(*j);
    }
    if (j->error) std::rethrow_exception(j->error);
    std::vector<typename State::stored> out;
    out.reserve(st->results.size());
    for (auto& r : st->results) out.push_back(std::move(*r));
    co_return out;
  }

  template <class T, class F>
  asio::awaitable<T> run_step(int seq, std::string name, std::string kind, F fn, retry policy) {
    return detail::run_step<T>(*s_, seq, std::move(name), std::move(kind), std::move(fn), policy);
  }
  template <class T, class F>
  asio::awaitable<T> run_transaction(int seq, std::string name, F fn, retry policy) {
    return detail::run_transaction<T>(*s_, seq, std::move(name), std::move(fn), policy);
  }

  detail::run_state* s_;
};

template <class R>
asio::awaitable<R> child_handle::result() const {
  if (!ctx_) throw error("child_handle::result(): this handle refers to no child workflow");
  return ctx_->child_result<R>(id_);
}

}  // namespace durable

#if defined(DURABLE_HEADER_ONLY)
#include "durable/impl/context.ipp"
#endif
