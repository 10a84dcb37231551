// The checks of durable/context.hpp that run around each step: included at its end when
// header-only, by durable/src.hpp otherwise.
#pragma once

namespace durable::detail {

DURABLE_DECL void require_live(run_state& s, int seq, const std::string& name) {
  // After a journal write of unknown outcome, nothing more may be journaled in this run:
  // a later row could be built on a step result that never committed.
  // A released run ends without a verdict, whatever the workflow does with the exception.
  if (s.stopping && *s.stopping) {
    s.released = true;
    throw run_released("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                       "' not started because the engine is shutting down; another executor "
                       "resumes the workflow");
  }
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
  if (s.stopping && *s.stopping) {
    s.released = true;
    throw run_released("workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
                       "' ended while the engine shut down; its outcome is not journaled and "
                       "another executor runs it again");
  }
}

}  // namespace durable::detail
