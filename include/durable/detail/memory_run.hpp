// Runs a workflow's code on an in-memory journal (detail/replay/memory_journal.hpp) the way an
// engine's run does: claimed (a new epoch, the journal and attempts loaded), run by replay to
// one verdict, and its final state written, fenced. No database and no engine: the basis of
// the server-free tests of the replay logic and of the test kit.
#pragma once

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "durable/detail/replay/memory_journal.hpp"
#include "durable/detail/run_body.hpp"

namespace durable::detail {

struct memory_run_options {
  std::size_t journal_limit = 0;               // engine_options::journal_limit
  double journal_warning = 0.8;                // engine_options::journal_warning
  std::size_t max_value_bytes = 0;             // engine_options::max_value_bytes
  std::chrono::milliseconds poll_interval{2};  // between looks of a wait
};

struct memory_run_result {
  verdict outcome;
  std::shared_ptr<run_state> run;              // the cursor as the run left it
  std::vector<std::string> retries, warnings;  // what the engine's event hook would report
};

/// Claims workflow `id` of `j` and runs `body(ctx)` (returning the output as JSON, nullopt for
/// void) on a fresh io_context until the run ends. A verdict that writes a final state writes
/// it to `j` under the run's epoch; a continued run leaves the next generation to the caller
/// (run it again).
template <class Body>
memory_run_result run_in_memory(memory_journal& j, const std::string& id, Body body,
                                const memory_run_options& o = {}) {
  memory_run_result r;
  r.run = std::make_shared<run_state>();
  run_state& run = *r.run;
  if (auto bad = j.claim(id, run)) {
    r.outcome = verdict::parked(park_cause::journal_refused, *bad);
    const final_state f = final_state_of(r.outcome);
    j.finish(id, run.epoch, std::string(to_string(f.status)), f.output, f.error, f.reason);
    return r;
  }
  run.io = &j;
  run.journal_limit = o.journal_limit;
  run.max_value_bytes = o.max_value_bytes;
  run.journal_warning = o.journal_warning;
  run.poll_interval = o.poll_interval;
  run.report_retry = [&r](const std::string& what) { r.retries.push_back(what); };
  run.report_warning = [&r](const std::string& what) { r.warnings.push_back(what); };
  asio::io_context io;
  // run_body notes whatever the workflow throws; anything else escaping it is the library's
  // and is raised to the caller, never dropped.
  std::exception_ptr escaped_run;
  asio::co_spawn(io, run_body(run, std::move(body)),
                 [&escaped_run](std::exception_ptr e) { escaped_run = e; });
  io.run();
  if (escaped_run) std::rethrow_exception(escaped_run);
  run.finishing = true;
  r.outcome = run.outcome.get();
  if (r.outcome.writes_final_state()) {
    if (r.outcome.epoch) run.epoch = *r.outcome.epoch;
    const final_state f = final_state_of(r.outcome);
    if (!j.finish(id, run.epoch, std::string(to_string(f.status)), f.output, f.error, f.reason))
      r.outcome = verdict::released("a newer epoch owns the workflow");
  }
  // The run state outlives this call (the caller inspects it): nothing in it may refer to `r`
  // or to the journal any more.
  run.report_retry = nullptr;
  run.report_warning = nullptr;
  run.io = nullptr;
  return r;
}

}  // namespace durable::detail
