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
#include "durable/testing/replay.hpp"
#include "durable/testing/service.hpp"

namespace durable::testing {

/// Where a case kills the process.
enum class interruption {
  after_row,   ///< right after the row is journaled (committed)
  lost_reply,  ///< the step's function ran, its row was not journaled (the reply is lost)
  in_backoff,  ///< the step's first attempt failed (injected) and the process dies in the backoff
  before_end,  ///< the workflow's code returned; the process dies before its end is recorded
};

[[nodiscard]] constexpr std::string_view to_string(interruption i) noexcept {
  switch (i) {
    case interruption::after_row:
      return "after its row";
    case interruption::lost_reply:
      return "lost reply";
    case interruption::in_backoff:
      return "in its retry backoff";
    case interruption::before_end:
      return "before its end is recorded";
  }
  return "?";
}

/// One case: the row it interrupts, how, and what went wrong (empty: it passed). A before_end
/// case has the workflow's number of rows as `seq`, and no step.
struct crash_case {
  std::string workflow_id;
  int seq = 0;
  std::string step, kind;
  interruption how = interruption::after_row;
  bool happened = false;  ///< the process was killed (a backoff needs a policy that retries)
  std::string problem;    ///< empty: the case passed
};

/// A service (testing::service) called more than once with one idempotency key in one case:
/// the repeats were answered from the first reply, as the real service must answer them.
struct service_repeat {
  std::string service, key;
  int calls = 0;        ///< the most calls with the key in one case
  std::string in_case;  ///< the first case with that many
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
  std::vector<service_repeat> repeats;
  std::vector<std::string> services;  ///< the names of the services the kit watched
  std::vector<std::string> notes;     ///< what the kit could not check, in words

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
  /// Throw check_failed with the summary when a case fails (else only the report says so). A
  /// problem of the uninterrupted run (it waits, parks, repeats a call without its key, or
  /// after_case throws on it) is thrown in any case.
  bool throw_on_failure = true;
  /// The in-backoff cases (one more run per step whose retry policy retries).
  bool backoffs = true;
  /// Compare each case's output (or error) with the uninterrupted run's, not only its status.
  /// A workflow whose result holds ctx.now() differs in the backoff cases (the backoff moves
  /// the clock): keep time out of the result, or set this to false.
  bool compare_output = true;
  /// Called after the uninterrupted run (a case with seq -1) and after every case that passed
  /// the kit's own checks, with its harness (inspect it, and the services, which hold that
  /// case's calls). Throw to fail the case: the exception's what() becomes its problem (in the
  /// uninterrupted run, check_crashes throws check_failed with it, whatever throw_on_failure
  /// says: there would be nothing sound to compare the cases with).
  std::function<void(const harness&, const crash_case&)> after_case;
};

namespace crash_detail {

/// One case's run: the harness, and the processes each key's step function ran in.
struct case_run {
  std::unique_ptr<harness> h;
  std::map<std::string, std::vector<int>> executions;        // key -> process of each attempt
  std::map<std::string, std::pair<std::string, int>> names;  // key -> step name, seq
  std::map<const service_base*, std::size_t> first_call;     // each service's first of the case
};

inline std::string outcome_of(const harness& h, const std::string& id) {
  const workflow_record w = h.workflow(id);
  if (w.output) return w.output->dump();
  if (w.error_type) return *w.error_type + ": " + w.error_message.value_or("");
  return w.reason.value_or("");
}

inline std::unique_ptr<case_run> begin_case(const harness& proto, const std::string& label) {
  auto c = std::make_unique<case_run>();
  c->h = proto.fresh();
  c->h->name_case(label);
  for (service_base* svc : c->h->services()) {
    if (!svc->keeps_across_cases()) svc->reset();
    c->first_call[svc] = svc->calls().size();
  }
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
DURABLE_DECL crash_report
check_crashes_with(const harness& proto, const crash_options& o, const std::string& name,
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

#if defined(DURABLE_HEADER_ONLY)
#include "durable/testing/impl/check_crashes.ipp"
#endif
