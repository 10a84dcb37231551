// Runs a workflow's code on an in-memory journal (detail/replay/memory_journal.hpp) the way an
// engine's run does: claimed (a new epoch, the journal and attempts loaded), run by replay to
// one verdict, and its final state written, fenced. No database and no engine: the basis of
// the server-free tests of the replay logic and of the test kit (durable/testing.hpp), which
// launches many runs on one io_context and drives it, moving a virtual clock when every run
// waits.
#pragma once

#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "durable/detail/replay/memory_journal.hpp"
#include "durable/detail/run_body.hpp"
#include "durable/detail/virtual_clock.hpp"

namespace durable::detail {

struct memory_run_options {
  std::size_t journal_limit = 0;               // engine_options::journal_limit
  double journal_warning = 0.8;                // engine_options::journal_warning
  std::size_t max_value_bytes = 0;             // engine_options::max_value_bytes
  std::chrono::milliseconds poll_interval{2};  // between looks of a wait
  // The test kit's: the virtual clock of every wait, the waiters the journal pokes, the hooks
  // of run_state, and the registered workflow's argument check and signature.
  virtual_clock* clock = nullptr;
  waiter_registry* waiters = nullptr;
  std::function<void(const step_info&)> on_attempt;
  std::shared_ptr<attempt_observer> observer;
  std::function<bool(const step_info&)> fail_attempt;
  bool same_code = false;  // cursor::same_code: the journal is this code's own
  const std::function<void(const nlohmann::json&)>* check_inputs = nullptr;
  const std::string* signature = nullptr;
  std::uint64_t (*random_bits)(const run_state&, int seq, int draw) = nullptr;
};

struct memory_run_result {
  verdict outcome;
  std::shared_ptr<run_state> run;              // the cursor as the run left it
  std::vector<std::string> retries, warnings;  // what the engine's event hook would report
};

/// A run launched on an io_context that someone else drives (launch_in_memory).
struct memory_launch {
  memory_run_result result;
  bool ended = false;          // its verdict is known (and written, if it writes one)
  std::exception_ptr escaped;  // the library's own failure, which the driver raises
};

/// Waits until `deadline` (Unix seconds on the run's clock) and stops the run there, as the
/// engine's deadline timer does; returns quietly if the run ends first (it is cancelled).
inline asio::awaitable<void> enforce_deadline(std::shared_ptr<run_state> run, double deadline) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  // Disarmed however the wait ends, the frame's destruction (an abandoned run) included.
  // (Disarming twice is harmless: GCC 12 may destroy a coroutine's local twice.)
  struct disarm_on_exit {
    virtual_clock* clock;
    asio::steady_timer* timer;
    ~disarm_on_exit() { disarm_timer(clock, *timer); }
  } guard{run->clock, &t};
  const double left = deadline - clock_now(*run);
  arm_timer(run->clock, t, std::chrono::milliseconds(std::int64_t(std::max(left, 0.0) * 1000) + 1));
  asio::error_code ec;
  co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  const bool fired = disarm_timer(run->clock, t) || !ec;
  if (fired && !run->finishing)
    run->outcome.note(verdict::cancelled("its deadline passed before it finished", false));
}

template <class Body>
asio::awaitable<void> run_until_deadline(std::shared_ptr<run_state> run, Body body,
                                         double deadline) {
  using namespace asio::experimental::awaitable_operators;
  // Whichever ends first cancels the other: the deadline stops the run (terminal
  // cancellation, as the engine's cancel_local sends), and a run that ends disarms it.
  co_await (run_body(*run, std::move(body)) || enforce_deadline(run, deadline));
}

/// Claims workflow `id` of `j` and spawns its run of `body(ctx)` (returning the output as
/// JSON, nullopt for void) on `io`, which the caller drives. When the run ends its final state
/// is written to `j` under the run's epoch (a continued run leaves the next generation to the
/// caller); a run abandoned with `io` (a crash) writes nothing more.
template <class Body>
std::shared_ptr<memory_launch> launch_in_memory(asio::io_context& io, memory_journal& j,
                                                const std::string& id, Body body,
                                                const memory_run_options& o = {}) {
  auto l = std::make_shared<memory_launch>();
  l->result.run = std::make_shared<run_state>();
  std::shared_ptr<run_state> run = l->result.run;
  if (auto bad = j.claim(id, *run)) {
    l->result.outcome = verdict::parked(park_cause::journal_refused, *bad);
    const final_state f = final_state_of(l->result.outcome);
    j.finish(id, run->epoch, std::string(to_string(f.status)), f.output, f.error, f.reason);
    l->ended = true;
    return l;
  }
  run->io = &j;
  run->journal_limit = o.journal_limit;
  run->max_value_bytes = o.max_value_bytes;
  run->journal_warning = o.journal_warning;
  run->poll_interval = o.poll_interval;
  run->clock = o.clock;
  run->waiters = o.waiters;
  run->on_attempt = o.on_attempt;
  run->observer = o.observer;
  run->fail_attempt = o.fail_attempt;
  run->same_code = o.same_code;
  run->random_bits = o.random_bits;
  run->check_inputs = o.check_inputs;
  run->signature = o.signature;
  run->deadline = j.at(id).deadline;
  memory_launch* raw = l.get();
  run->report_retry = [raw](const std::string& what) { raw->result.retries.push_back(what); };
  run->report_warning = [raw](const std::string& what) { raw->result.warnings.push_back(what); };
  // The handler notes whatever escaped run_body (the library's failure, raised by the driver)
  // and writes the verdict. It never runs for a run abandoned with its io_context.
  auto done = [l, &j, id](std::exception_ptr e) {
    run_state& r = *l->result.run;
    l->escaped = e;
    r.finishing = true;
    l->result.outcome = r.outcome.get();
    if (!e && l->result.outcome.writes_final_state()) {
      if (l->result.outcome.epoch) r.epoch = *l->result.outcome.epoch;
      const final_state f = final_state_of(l->result.outcome);
      try {
        if (!j.finish(id, r.epoch, std::string(to_string(f.status)), f.output, f.error, f.reason))
          l->result.outcome = verdict::released("a newer epoch owns the workflow");
      } catch (...) {
        l->escaped = std::current_exception();
      }
    }
    // The run state outlives the launch's io_context (the caller inspects it): nothing in it
    // may refer to the launch or to the journal any more.
    r.report_retry = nullptr;
    r.report_warning = nullptr;
    r.on_attempt = nullptr;
    r.observer = nullptr;
    r.fail_attempt = nullptr;
    r.io = nullptr;
    r.clock = nullptr;
    r.waiters = nullptr;
    l->ended = true;
  };
  if (run->deadline) {
    if (*run->deadline <= clock_now(*run))
      run->outcome.note(verdict::cancelled("its deadline passed before it finished", false));
    asio::co_spawn(io, run_until_deadline(run, std::move(body), *run->deadline), std::move(done));
  } else {
    asio::co_spawn(io, run_body(*run, std::move(body)), std::move(done));
  }
  return l;
}

/// Runs `io` until it has nothing left to do, or `stop()` says so after a handler (a staged
/// crash). With a virtual clock, whenever no handler is ready the clock moves to the earliest
/// armed timer and fires it; only when none is armed does it wait for real work (a thread
/// encoding a large value). Returns false if stopped.
inline bool drive(asio::io_context& io, virtual_clock* clock,
                  const std::function<bool()>& stop = {}) {
  for (;;) {
    if (stop && stop()) return false;
    if (io.poll_one() > 0) continue;
    if (io.stopped()) return true;
    if (clock && clock->fire_next()) continue;
    if (io.run_one() == 0 && io.stopped()) return true;
  }
}

/// Claims workflow `id` of `j` and runs `body(ctx)` on a fresh io_context until the run ends
/// (launch_in_memory, driven to the end).
template <class Body>
memory_run_result run_in_memory(memory_journal& j, const std::string& id, Body body,
                                const memory_run_options& o = {}) {
  std::shared_ptr<memory_launch> l;
  {
    asio::io_context io;
    l = launch_in_memory(io, j, id, std::move(body), o);
    drive(io, o.clock);
  }
  if (l->escaped) std::rethrow_exception(l->escaped);
  return std::move(l->result);
}

}  // namespace durable::detail
