// Crash at every step (durable/testing.hpp): runs a workflow once to learn its journal, then
// once more for every row of it and every way of being interrupted there, killing the
// simulated process at that point and resuming the workflow by replay in a new one. See
// docs/testing.md.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "durable/testing/harness.hpp"

namespace durable::testing {

/// Where a case kills the process.
enum class interruption {
  after_row,   ///< right after the row is journaled (committed)
  lost_reply,  ///< the step's function ran, its row was not journaled (the reply is lost)
  in_backoff,  ///< the step's first attempt failed (injected) and the process dies in the backoff
};

[[nodiscard]] constexpr std::string_view to_string(interruption i) noexcept {
  switch (i) {
    case interruption::after_row:
      return "after its row";
    case interruption::lost_reply:
      return "lost reply";
    case interruption::in_backoff:
      return "in its retry backoff";
  }
  return "?";
}

/// One case: the row it interrupts, how, and what went wrong (empty: it passed).
struct crash_case {
  std::string workflow_id;
  int seq = 0;
  std::string step, kind;
  interruption how = interruption::after_row;
  bool happened = false;  ///< the process was killed (a backoff needs a policy that retries)
  std::string problem;    ///< empty: the case passed
};

/// How often one step's function ran for one idempotency key, at most, over every case.
struct step_executions {
  std::string key, workflow_id, step, kind;
  int seq = 0;
  int most = 0;         ///< the most executions in one case (1: never ran twice)
  std::string in_case;  ///< the first case in which it ran that often
};

struct crash_report {
  std::string name, workflow_id;
  std::string status;   ///< of the uninterrupted run
  std::string outcome;  ///< its output (JSON) or its error
  std::vector<crash_case> cases;
  std::vector<step_executions> steps;

  [[nodiscard]] bool ok() const {
    return std::none_of(cases.begin(), cases.end(),
                        [](const crash_case& c) { return !c.problem.empty(); });
  }
  /// A readable report: every step's executions per key, and every failed case.
  [[nodiscard]] std::string summary() const;
};

struct crash_options {
  /// The id of the workflow under test (default: its name and "-under-test").
  std::string id;
  /// Called after the start, before every run: give the workflow what it waits for (messages,
  /// events) here.
  std::function<void(harness&)> setup;
  /// Throw check_failed with the summary when a case fails (else only the report says so).
  bool throw_on_failure = true;
  /// The in-backoff cases (one more run per step).
  bool backoffs = true;
  /// Compare each case's output (or error) with the uninterrupted run's, not only its status.
  /// A workflow whose result holds ctx.now() differs in the backoff cases (the backoff moves
  /// the clock): keep time out of the result, or set this to false.
  bool compare_output = true;
};

namespace crash_detail {

/// One case's run: the harness, and the processes each key's step function ran in.
struct case_run {
  std::unique_ptr<harness> h;
  std::map<std::string, std::vector<int>> executions;        // key -> process of each attempt
  std::map<std::string, std::pair<std::string, int>> names;  // key -> step name, seq
};

inline std::string outcome_of(const harness& h, const std::string& id) {
  const workflow_record w = h.workflow(id);
  if (w.output) return w.output->dump();
  if (w.error_type) return *w.error_type + ": " + w.error_message.value_or("");
  return w.reason.value_or("");
}

inline std::unique_ptr<case_run> begin_case(const harness& proto) {
  auto c = std::make_unique<case_run>();
  c->h = proto.fresh();
  case_run* raw = c.get();
  c->h->on_attempt([raw](const step_info& i) {
    raw->executions[i.idempotency_key].push_back(raw->h->process());
    raw->names[i.idempotency_key] = {i.name, i.seq};
  });
  return c;
}

}  // namespace crash_detail

/// Runs every crash case of `start` (which starts the workflow `o.id` in the harness it is
/// given) and reports (see crash_report).
inline crash_report check_crashes_with(
    const harness& proto, const crash_options& o, const std::string& name,
    const std::function<void(harness&, const std::string&)>& start);

/// Crash at every step: `name` started with `args` in harnesses like `h` (its workflows and
/// options). Throws check_failed with the report's summary when a case fails.
template <class... Args>
crash_report check_crashes(const harness& h, const std::string& name, const Args&... args) {
  return check_crashes_with(h, crash_options{}, name,
                            [&](harness& x, const std::string& id) { x.start(name, id, args...); });
}
template <class... Args>
crash_report check_crashes(const harness& h, const crash_options& o, const std::string& name,
                           const Args&... args) {
  return check_crashes_with(h, o, name,
                            [&](harness& x, const std::string& id) { x.start(name, id, args...); });
}

}  // namespace durable::testing

#include "durable/testing/impl/check_crashes.ipp"
