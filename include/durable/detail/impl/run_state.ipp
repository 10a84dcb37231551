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

DURABLE_DECL std::string error_json(std::string_view type, const std::string& message) {
  return nlohmann::json{{"type", type}, {"message", valid_utf8(message)}}.dump();
}

DURABLE_DECL verdict escaped(run_state& run, std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const continued_as_new&) {
    return {};  // noted when the next generation committed
  } catch (const ownership_lost& x) {
    if (run.counters) ++run.counters->ownership_lost;
    return verdict::released(x.what());
  } catch (const run_released& x) {
    return verdict::released(x.what());
  } catch (const nondeterminism_error& x) {
    // Noted by the cursor when it raised it (I5; a tie keeps that one); one the cursor did not
    // raise (a handle's output() that throws it, or the workflow's own) parks all the same.
    return nondeterminism_park(x);
  } catch (const workflow_parked& x) {
    return verdict::parked(park_cause::requested, valid_utf8(x.what()));
  } catch (const step_failed& x) {
    if (!run.dead_step || *run.dead_step != x.seq())
      return verdict::failed(capture(std::current_exception()).to_json());
    // The step failed for good and the workflow let it escape: a person decides.
    const int attempts = run.dead_step_attempts;
    return verdict::dead_lettered(
        valid_utf8("step " + std::to_string(x.seq()) + " '" + x.step_name() + "' failed " +
                   (attempts > 1 ? "after " + std::to_string(attempts) + " attempts"
                                 : std::string("permanently")) +
                   ": " + x.error_type() + ": " + x.error_message() +
                   ". Fix the cause, then retry the workflow, which runs the step again "
                   "('durable retry <id>' or engine::retry), or cancel it"),
        nlohmann::json{{"type", valid_utf8(x.error_type())},
                       {"message", valid_utf8(x.error_message())},
                       {"seq", x.seq()},
                       {"step", valid_utf8(x.step_name())},
                       {"attempts", attempts}}
            .dump());
  } catch (...) {
    return verdict::failed(capture(std::current_exception()).to_json());
  }
}

DURABLE_DECL final_state final_state_of(const verdict& v) {
  switch (v.what) {
    case verdict::kind::succeeded:
      return {workflow_state::succeeded, v.output.value_or("null"), {}, {}};
    case verdict::kind::failed:
      return {workflow_state::failed, {}, v.error, {}};
    case verdict::kind::dead_lettered:
      return {workflow_state::dead_letter, {}, v.error, v.reason};
    case verdict::kind::cancelled: {
      const std::string why = valid_utf8(v.reason);
      return {workflow_state::cancelled, {}, error_json("durable::deadline_exceeded", why), why};
    }
    default: {  // parked
      const std::string why = valid_utf8(v.reason);
      return {workflow_state::parked,
              {},
              v.error.empty() ? error_json(error_type(v.cause), why) : v.error,
              why};
    }
  }
}

DURABLE_DECL void note_read_failure(run_state& s, const std::exception& e) {
  if (!s.io) return;
  const io_judgement j = s.io->judge(e);
  if (!j.permanent) {
    s.outcome.note(verdict::retry(j.description));
    return;
  }
  // Refused, and it will be refused again: an operator looks (the failure model's park).
  s.outcome.note(
      verdict::parked(park_cause::journal_refused,
                      valid_utf8("workflow '" + s.id + "' (" + s.name +
                                 "): a read of its journal was refused (" + j.description +
                                 "), and would be again. It is parked: fix the cause (the "
                                 "database's permissions, its schema), then resume it")));
}

DURABLE_DECL void note_io_failure(run_state& s, int seq, const std::string& name,
                                  const std::exception& e) {
  io_judgement j = s.io ? s.io->judge(e) : io_judgement{false, valid_utf8(e.what())};
  const std::string& what = j.description;
  if (j.permanent)
    s.outcome.note(verdict::parked(
        park_cause::journal_refused,
        valid_utf8("workflow '" + s.id + "' (" + s.name + "): the journal row of step " +
                   std::to_string(seq) + " '" + name +
                   "' was refused by the server, which will refuse it again (" + what +
                   "). The workflow is parked and the step is not run again: fix "
                   "the cause (the value, the step name, the database's "
                   "permissions), then resume it")));
  else
    s.outcome.note(verdict::retry(what));
}

DURABLE_DECL std::string journal_fenced_message(const run_state& s, int seq,
                                                const std::string& name, const journal_fenced& f) {
  return "workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
         "' was not journaled because another executor took the workflow over (" +
         (f.owner_message().empty() ? "it is no longer owned under epoch " + std::to_string(s.epoch)
                                    : f.owner_message()) +
         "); this run stops and the new owner continues";
}

DURABLE_DECL void check_value_size(run_state& s, std::size_t bytes, const std::string& what,
                                   const char* then) {
  if (s.max_value_bytes == 0 || bytes <= s.max_value_bytes) return;
  std::string why = valid_utf8(
      "workflow '" + s.id + "' (" + s.name + "): " + what + " is " + std::to_string(bytes) +
      " bytes of JSON, over engine_options::max_value_bytes (" + std::to_string(s.max_value_bytes) +
      "). It was not written, and the workflow is parked; when it is resumed " + then +
      ". Keep large data outside the journal (an object store, a table of your own) and "
      "return a reference to it, or raise max_value_bytes (a write must end well within "
      "lease_timeout) and resume the workflow. See docs/failures.md#large-values");
  s.outcome.note(verdict::parked(park_cause::value_too_large, why));
  throw value_too_large(s.id, why);
}

DURABLE_DECL asio::awaitable<void> append(run_state& s, int seq, const std::string& name,
                                          const std::string& kind,
                                          const std::optional<std::string>& output,
                                          const std::optional<std::string>& error, int attempts,
                                          double started_at) {
  if (!s.io)
    throw durable::error("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                         "' cannot be journaled: this replay has no journal to write to");
  const auto step = [&] { return "step " + std::to_string(seq) + " '" + name + "'"; };
  if (output) check_value_size(s, output->size(), "the output of " + step(), "the step runs again");
  if (error) check_value_size(s, error->size(), "the error of " + step(), "the step runs again");
  reserve_row(s, seq, name);
  try {
    step_row row{seq, name, kind, output, error, attempts, started_at};
    if (s.joins_running > 0) {
      // A branch that ctx.all/any halts while its row is in flight waits for the outcome
      // instead: the row committed or not, and that is no I/O failure.
      auto ex = co_await asio::this_coro::executor;
      co_await shielded(ex, s.io->append(s.id, s.epoch, std::move(row)));
    } else {
      co_await s.io->append(s.id, s.epoch, std::move(row));
    }
  } catch (const journal_fenced& f) {
    throw ownership_lost(s.id, journal_fenced_message(s, seq, name, f));
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

DURABLE_DECL asio::awaitable<void> sleep_for(const run_state& s, std::chrono::milliseconds d) {
  if (!s.clock) {
    co_await sleep_for(d);
    co_return;
  }
  asio::steady_timer t(co_await asio::this_coro::executor);
  // Disarmed however the wait ends, the frame's destruction (an abandoned run) included.
  struct disarm_on_exit {
    virtual_clock* clock;
    asio::steady_timer* timer;
    ~disarm_on_exit() { disarm_timer(clock, *timer); }
  } guard{s.clock, &t};
  s.clock->arm(t, d);
  asio::error_code ec;
  co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  // The clock fires a timer by cancelling it: only a cancellation it did not make is one.
  if (ec && !s.clock->disarm(t)) throw asio::system_error(ec);
}

}  // namespace durable::detail
