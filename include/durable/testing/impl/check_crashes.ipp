// Crash at every step (durable/testing/check_crashes.hpp): included at its end.
#pragma once

#include <cstdio>

namespace durable::testing {

namespace crash_detail {

inline std::string case_name(const crash_case& c) {
  return std::string(to_string(c.how)) + " at step " + std::to_string(c.seq) + " '" + c.step +
         "' (" + c.kind + ") of '" + c.workflow_id + "'";
}

inline std::string pad(std::string s, std::size_t n) {
  if (s.size() < n) s.append(n - s.size(), ' ');
  return s;
}

/// The rows whose kind means a function of the workflow's ran (a step, a transaction).
inline bool runs_a_function(const std::string& kind) {
  return kind == to_string(step_kind::step) || kind == to_string(step_kind::transaction);
}

}  // namespace crash_detail

inline std::string crash_report::summary() const {
  using crash_detail::pad;
  std::size_t failed = 0, skipped = 0;
  for (const auto& c : cases) {
    if (!c.problem.empty()) ++failed;
    if (!c.happened && c.how == interruption::in_backoff) ++skipped;
  }
  std::string out = "check_crashes('" + name + "' as '" + workflow_id +
                    "'): " + std::to_string(cases.size()) + " cases, " +
                    std::to_string(cases.size() - failed) + " passed, " + std::to_string(failed) +
                    " failed";
  if (skipped > 0)
    out += " (" + std::to_string(skipped) + " backoff cases had no retry to interrupt)";
  out += "\nuninterrupted run: " + status + " " + outcome + "\n";
  out += "executions of each step function per idempotency key, at most, over every case:\n";
  out += "  " + pad("key", 34) + pad("step", 24) + "runs\n";
  for (const auto& s : steps) {
    out += "  " + pad(s.key, 34) + pad("'" + s.step + "'", 24) + std::to_string(s.most);
    if (s.most > 1 && s.kind == to_string(step_kind::transaction))
      out += "  (" + s.in_case + "): rolled back, committed once";
    else if (s.most > 1)
      out += "  (" + s.in_case + "): the call it makes must be idempotent";
    out += "\n";
  }
  if (failed > 0) {
    out += "failed cases:\n";
    for (const auto& c : cases)
      if (!c.problem.empty()) out += "  " + crash_detail::case_name(c) + ": " + c.problem + "\n";
  }
  return out;
}

inline crash_report check_crashes_with(
    const harness& proto, const crash_options& o, const std::string& name,
    const std::function<void(harness&, const std::string&)>& start) {
  using crash_detail::case_run;
  crash_report report;
  report.name = name;
  report.workflow_id = o.id.empty() ? name + "-under-test" : o.id;
  const std::string& id = report.workflow_id;

  // The uninterrupted run, which every case must end like.
  auto base = crash_detail::begin_case(proto);
  start(*base->h, id);
  if (o.setup) o.setup(*base->h);
  base->h->run();
  report.status = base->h->status(id);
  report.outcome = crash_detail::outcome_of(*base->h, id);
  if (report.status == to_string(workflow_state::pending) ||
      report.status == to_string(workflow_state::running) ||
      report.status == to_string(workflow_state::sleeping))
    throw check_failed("check_crashes('" + name +
                       "'): the uninterrupted run did not finish (it is " + report.status +
                       "): it waits for something the test must give it; send it in "
                       "crash_options::setup");
  if (report.status == to_string(workflow_state::parked))
    throw check_failed("check_crashes('" + name + "'): the uninterrupted run parked (" +
                       base->h->workflow(id).reason.value_or("") +
                       "), so there is nothing to compare the interrupted runs with; fix that "
                       "first");
  std::map<std::string, std::string> kinds;  // key -> the kind of its row

  // Its rows, every workflow's (children too), in order: the points to interrupt.
  std::vector<crash_case> points;
  for (const std::string& wid : base->h->workflows())
    for (const step_record& r : base->h->journal(wid)) {
      kinds[wid + ":" + std::to_string(r.seq)] = r.kind;
      crash_case c{wid, r.seq, r.name, r.kind, interruption::after_row, false, {}};
      points.push_back(c);
      c.how = interruption::lost_reply;
      points.push_back(c);
      if (o.backoffs && r.kind == to_string(step_kind::step)) {
        c.how = interruption::in_backoff;
        points.push_back(c);
      }
    }
  std::map<std::string, step_executions> most;
  auto count = [&](const case_run& run, const std::string& label) {
    for (const auto& [key, processes] : run.executions) {
      auto& s = most[key];
      if (s.key.empty()) {
        s.key = key;
        s.step = run.names.at(key).first;
        s.seq = run.names.at(key).second;
        s.workflow_id = key.substr(0, key.rfind(':'));
        if (auto k = kinds.find(key); k != kinds.end()) s.kind = k->second;
      }
      if (int(processes.size()) > s.most) {
        s.most = int(processes.size());
        s.in_case = label;
      }
    }
  };
  count(*base, "uninterrupted");

  for (crash_case c : points) {
    auto run = crash_detail::begin_case(proto);
    harness& h = *run->h;
    const std::string key = c.workflow_id + ":" + std::to_string(c.seq);
    using moment = detail::memory_journal::crash_moment;
    const moment at = c.how == interruption::after_row    ? moment::after_row
                      : c.how == interruption::lost_reply ? moment::before_row
                                                          : moment::in_backoff;
    if (c.how == interruption::in_backoff) {
      auto injected = std::make_shared<bool>(false);
      h.fail_attempt([key, injected](const step_info& i) {
        if (*injected || i.idempotency_key != key) return false;
        *injected = true;
        return true;
      });
    }
    h.store().crash_at({c.workflow_id, c.seq, at});
    try {
      start(h, id);
      if (o.setup) o.setup(h);
      h.run();
      c.happened = h.process() > 1;
      // What the dead process had journaled: none of these steps may run again.
      std::set<std::string> journaled;
      for (const std::string& wid : h.workflows())
        for (const step_record& r : h.journal(wid))
          if (crash_detail::runs_a_function(r.kind))
            journaled.insert(wid + ":" + std::to_string(r.seq));
      if (c.happened) h.run();
      const std::string status = h.status(id);
      const std::string outcome = crash_detail::outcome_of(h, id);
      if (status != report.status || (o.compare_output && outcome != report.outcome)) {
        c.problem = "the workflow ended " + status + " " + outcome +
                    ", where the uninterrupted run ended " + report.status + " " + report.outcome;
      } else if (!c.happened && c.how != interruption::in_backoff) {
        c.problem =
            "the run never reached this row: it took another path than the uninterrupted run "
            "before it (the workflow is not deterministic)";
      } else if (c.happened) {
        for (const auto& [k, processes] : run->executions)
          if (journaled.contains(k) && std::count(processes.begin(), processes.end(), 2) > 0) {
            c.problem = "step " + k + " '" + run->names.at(k).first +
                        "' ran again after the crash although its row was journaled before it";
            break;
          }
        const bool reruns =
            c.how == interruption::in_backoff ||
            (c.how == interruption::lost_reply && crash_detail::runs_a_function(c.kind));
        if (c.problem.empty() && reruns) {
          const auto& p = run->executions[key];
          if (std::count(p.begin(), p.end(), 1) == 0 || std::count(p.begin(), p.end(), 2) == 0)
            c.problem = "the interrupted step did not run again under its idempotency key '" + key +
                        "' after the crash";
        }
      }
    } catch (const std::exception& e) {
      c.problem = std::string("the harness failed: ") + e.what();
    }
    count(*run, crash_detail::case_name(c));
    report.cases.push_back(std::move(c));
  }
  for (auto& [key, s] : most) report.steps.push_back(s);
  std::sort(report.steps.begin(), report.steps.end(),
            [](const step_executions& a, const step_executions& b) {
              return a.workflow_id != b.workflow_id ? a.workflow_id < b.workflow_id : a.seq < b.seq;
            });
  if (o.throw_on_failure && !report.ok()) throw check_failed(report.summary());
  return report;
}

}  // namespace durable::testing
