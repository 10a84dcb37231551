// Crash at every step (durable/testing/check_crashes.hpp): included at its end when header-only,
// by durable/src.hpp otherwise (durable::compiled).
#pragma once

#include <cstdio>

namespace durable::testing {

namespace crash_detail {

inline std::string case_name(const crash_case& c) {
  if (c.how == interruption::before_end)
    return std::string(to_string(c.how)) + ", of '" + c.workflow_id + "'";
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

/// The calls of `svc` in the case `run` (from the case's start).
inline std::vector<service_call> calls_in(const case_run& run, const service_base& svc) {
  const auto& all = svc.calls();
  const auto it = run.first_call.find(&svc);
  const std::size_t from = it == run.first_call.end() ? 0 : std::min(it->second, all.size());
  return {all.begin() + std::ptrdiff_t(from), all.end()};
}

inline std::string times(std::size_t n) {
  return n == 1 ? "once" : n == 2 ? "twice" : std::to_string(n) + " times";
}

/// A call that acted: the fake's function ran and returned (what a real service did).
inline bool acted(const service_call& c) { return !c.repeated && !c.failed; }

/// Calls outside any step that acted, per service.
inline std::map<std::string, std::size_t> outside_calls(const case_run& run) {
  std::map<std::string, std::size_t> out;
  for (const service_base* svc : run.h->services())
    for (const service_call& c : calls_in(run, *svc))
      if (acted(c) && c.outside_step()) ++out[svc->name()];
  return out;
}

/// What the services' calls in one case show to be wrong, in words (empty: nothing).
inline std::vector<std::string> effect_problems(const case_run& run, const std::string& root,
                                                const std::map<std::string, std::size_t>& base) {
  std::vector<std::string> problems;
  for (const service_base* svc : run.h->services()) {
    const std::vector<service_call> calls = calls_in(run, *svc);
    const std::string who = "service '" + svc->name() + "'";
    std::size_t outside = 0;
    struct per_step {
      std::string step;
      std::set<std::pair<int, int>> executions;  // (process, attempt) of the calls that acted
      std::size_t acted = 0;
      std::vector<std::string> keys;  // distinct, in order
      bool keyless = false;
    };
    std::map<std::pair<std::string, int>, per_step> steps;
    for (const service_call& c : calls) {
      if (c.conflicting)
        problems.push_back(
            who + " was called with key '" + c.key.value_or("") + "' for " +
            (c.outside_step() ? std::string("a call outside any step")
                              : "step " + std::to_string(c.seq) + " '" + c.step + "'") +
            " with another request than the first call with that key: the real service answers "
            "the first call's reply (or refuses), so this request never happens; give each "
            "request a key of its own (ctx.idempotency_key() names one step: two requests in "
            "one step need two keys, such as that key + \":2\")");
      if (!acted(c) || c.unplaced) continue;
      if (c.outside_step()) {
        ++outside;
        continue;
      }
      per_step& p = steps[{c.workflow_id, c.seq}];
      p.step = c.step;
      p.executions.insert({c.process, c.attempt});
      ++p.acted;
      if (!c.key)
        p.keyless = true;
      else if (std::find(p.keys.begin(), p.keys.end(), *c.key) == p.keys.end())
        p.keys.push_back(*c.key);
    }
    const auto b = base.find(svc->name());
    const std::size_t before = b == base.end() ? 0 : b->second;
    if (outside > before)
      problems.push_back(who + " was called outside any step (" + times(outside) + " here, " +
                         (before == 0 ? std::string("never") : times(before)) +
                         " in the uninterrupted run): it runs again on every replay; move it "
                         "into a step");
    for (const auto& [at, p] : steps) {
      // One execution of a step may call a service several times (two charges); a second
      // execution (a retry, a run after a lost reply) that acts again is a repeat.
      if (p.executions.size() < 2 || svc->is_idempotent()) continue;
      const std::string where = "step " + std::to_string(at.second) + " '" + p.step + "'" +
                                (at.first == root ? "" : " of '" + at.first + "'");
      if (p.keyless) {
        problems.push_back(who + " was called " + times(p.acted) + " for " + where +
                           " with no idempotency key: a lost reply bills twice; pass "
                           "ctx.idempotency_key() (the same in every attempt) and let the "
                           "service deduplicate on it");
      } else {
        std::string keys;
        for (const std::string& k : p.keys) keys += (keys.empty() ? "'" : ", '") + k + "'";
        problems.push_back(who + " was called " + times(p.acted) + " for " + where +
                           " with different idempotency keys (" + keys +
                           "): a lost reply bills twice; pass ctx.idempotency_key(), which is "
                           "the same in every attempt");
      }
    }
  }
  return problems;
}

/// Calls whose step could not be told, per service.
inline void note_unplaced(const case_run& run, std::map<std::string, std::size_t>& most) {
  for (const service_base* svc : run.h->services()) {
    std::size_t n = 0;
    for (const service_call& c : calls_in(run, *svc)) n += c.unplaced ? 1 : 0;
    most[svc->name()] = std::max(most[svc->name()], n);
  }
}

/// Each service's calls with one key in this case, where there were more than one.
inline void note_repeats(const case_run& run, const std::string& label,
                         std::map<std::pair<std::string, std::string>, service_repeat>& most) {
  for (const service_base* svc : run.h->services()) {
    std::map<std::string, int> per_key;
    for (const service_call& c : calls_in(run, *svc))
      if (c.key && !c.failed) ++per_key[*c.key];
    for (const auto& [key, n] : per_key) {
      if (n < 2) continue;
      service_repeat& r = most[{svc->name(), key}];
      if (n > r.calls) r = service_repeat{svc->name(), key, n, label};
    }
  }
}

}  // namespace crash_detail

DURABLE_DECL std::string crash_report::summary() const {
  using crash_detail::pad;
  std::size_t failed = 0;
  for (const auto& c : cases)
    if (!c.problem.empty()) ++failed;
  std::string out = "check_crashes('" + name + "' as '" + workflow_id +
                    "'): " + std::to_string(cases.size()) + " cases, " +
                    std::to_string(cases.size() - failed) + " passed, " + std::to_string(failed) +
                    " failed\n";
  out += "uninterrupted run: " + status + " " + outcome + "\n";
  out +=
      "runs of each step function per idempotency key, at most, in one case (a step runs "
      "again after a lost reply or a failed attempt, by design):\n";
  out += "  " + pad("key", 34) + pad("step", 24) + "runs\n";
  for (const auto& s : steps) {
    out += "  " + pad(s.key, 34) + pad("'" + s.step + "'", 24) + std::to_string(s.most);
    if (s.most > 1 && s.kind == to_string(step_kind::transaction))
      out += "  (" + s.in_case + "): rolled back, committed once";
    else if (s.most > 1)
      out += "  (" + s.in_case + ")";
    out += "\n";
  }
  if (services.empty()) {
    out +=
        "external calls: no testing::service declared, so the kit cannot see what the steps "
        "call (docs/testing.md, \"External effects\")\n";
  } else {
    std::string names;
    for (const auto& n : services) names += (names.empty() ? "'" : ", '") + n + "'";
    out += "external calls (services " + names + "):";
    if (repeats.empty()) out += " no call was repeated with a key";
    out += "\n";
    for (const auto& r : repeats)
      out += "  service '" + r.service + "' was called " + std::to_string(r.calls) +
             " times with key '" + r.key + "' (" + r.in_case +
             "): the repeats got the first reply; the real service must deduplicate on that "
             "key as the fake does\n";
    for (const auto& n : notes) out += "  " + n + "\n";
  }
  if (failed > 0) {
    out += "failed cases:\n";
    for (const auto& c : cases)
      if (!c.problem.empty()) out += "  " + crash_detail::case_name(c) + ": " + c.problem + "\n";
  }
  return out;
}

DURABLE_DECL crash_report
check_crashes_with(const harness& proto, const crash_options& o, const std::string& name,
                   const std::function<void(harness&, const std::string&)>& start) {
  using crash_detail::case_run;
  crash_report report;
  report.name = name;
  report.workflow_id = o.id.empty() ? name + "-under-test" : o.id;
  const std::string& id = report.workflow_id;

  // The uninterrupted run, which every case must end like. It also learns which steps retry
  // (the kit is asked whether to fail an attempt only where the step's policy would retry).
  auto base = crash_detail::begin_case(proto, "uninterrupted");
  struct end_of_check {  // the services' calls after check_crashes name no case
    harness* h;
    ~end_of_check() { h->name_case(""); }
  } end_of_check{base->h.get()};
  std::set<std::string> retrying;
  base->h->fail_attempt([&retrying](const step_info& i) {
    retrying.insert(i.idempotency_key);
    return false;
  });
  start(*base->h, id);
  if (o.setup) o.setup(*base->h);
  base->h->run();
  for (const service_base* svc : base->h->services()) report.services.push_back(svc->name());
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
  for (const std::string& wid : base->h->workflows()) {
    const std::vector<step_record> rows = base->h->journal(wid);
    for (const step_record& r : rows) {
      kinds[wid + ":" + std::to_string(r.seq)] = r.kind;
      crash_case c{wid, r.seq, r.name, r.kind, interruption::after_row, false, {}};
      points.push_back(c);
      c.how = interruption::lost_reply;
      points.push_back(c);
      if (o.backoffs && r.kind == to_string(step_kind::step) &&
          retrying.contains(wid + ":" + std::to_string(r.seq))) {
        c.how = interruption::in_backoff;
        points.push_back(c);
      }
    }
    // The end of a workflow that ended by itself: what its code does after its last step
    // runs again when that end is lost.
    const std::string st = base->h->status(wid);
    if (st == to_string(workflow_state::succeeded) || st == to_string(workflow_state::failed) ||
        st == to_string(workflow_state::dead_letter))
      points.push_back(
          crash_case{wid, int(rows.size()), "", "", interruption::before_end, false, {}});
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
  // The rules of the services, and the test's own, on the uninterrupted run.
  const std::map<std::string, std::size_t> base_outside = crash_detail::outside_calls(*base);
  std::map<std::pair<std::string, std::string>, service_repeat> repeats;
  crash_detail::note_repeats(*base, "uninterrupted", repeats);
  std::map<std::string, std::size_t> unplaced;
  crash_detail::note_unplaced(*base, unplaced);
  // (A call outside any step shows in the cases, which repeat it.)
  if (const auto p = crash_detail::effect_problems(*base, id, base_outside); !p.empty())
    throw check_failed("check_crashes('" + name + "'): the uninterrupted run: " + p.front());
  if (o.after_case) {
    const crash_case uninterrupted{id, -1, "", "", interruption::after_row, false, {}};
    try {
      o.after_case(*base->h, uninterrupted);
    } catch (const std::exception& e) {
      throw check_failed("check_crashes('" + name +
                         "'): after_case failed on the uninterrupted run: " + e.what());
    }
  }

  for (crash_case c : points) {
    auto run = crash_detail::begin_case(proto, crash_detail::case_name(c));
    harness& h = *run->h;
    const std::string key = c.workflow_id + ":" + std::to_string(c.seq);
    using moment = detail::memory_journal::crash_moment;
    const moment at = c.how == interruption::after_row    ? moment::after_row
                      : c.how == interruption::lost_reply ? moment::before_row
                      : c.how == interruption::in_backoff ? moment::in_backoff
                                                          : moment::before_finish;
    if (c.how == interruption::in_backoff) {
      auto injected = std::make_shared<bool>(false);
      h.fail_attempt([key, injected](const step_info& i) {
        if (*injected || i.idempotency_key != key) return false;
        *injected = true;
        return true;
      });
    }
    h.store().crash_at({c.workflow_id,
                        at == moment::before_finish ? detail::memory_journal::finish_seq : c.seq,
                        at});
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
      // What the services saw (a call outside any step, a repeat without a key): the cause,
      // so it comes before the symptoms (a result that differs) in the problem.
      std::string effects;
      for (const std::string& line : crash_detail::effect_problems(*run, id, base_outside))
        effects += (effects.empty() ? "" : "; ") + line;
      if (!effects.empty()) c.problem = effects + (c.problem.empty() ? "" : "; " + c.problem);
    } catch (const std::exception& e) {
      c.problem = std::string("the harness failed: ") + e.what();
    }
    if (c.problem.empty() && o.after_case) {
      try {
        o.after_case(h, c);
      } catch (const std::exception& e) {
        c.problem = std::string("after_case: ") + e.what();
      }
    }
    count(*run, crash_detail::case_name(c));
    crash_detail::note_repeats(*run, crash_detail::case_name(c), repeats);
    crash_detail::note_unplaced(*run, unplaced);
    // A second replay of the journal this case wrote, on a clock a day and an hour later
    // (ctx.now(), ctx.random() and ctx.uuid() are journaled, so nothing may differ). Last: the
    // code it runs outside steps may call services, which the case's checks must not count.
    if (c.problem.empty()) {
      try {
        const std::string d = replay_detail::second_replay(
            h.export_journal(id), h, id, harness_detail::seconds_of(h.now()) + 25 * 3600.0);
        if (!d.empty())
          c.problem =
              "a second replay of the journal this case wrote, on a clock moved by a day "
              "and an hour, took another path: " +
              d;
      } catch (const std::exception& e) {
        c.problem = std::string("the second replay failed: ") + e.what();
      }
    }
    report.cases.push_back(std::move(c));
  }
  for (auto& [key, s] : most) report.steps.push_back(s);
  for (auto& [key, r] : repeats) report.repeats.push_back(r);
  for (const auto& [svc, n] : unplaced)
    if (n > 0)
      report.notes.push_back(
          "service '" + svc + "': up to " + std::to_string(n) +
          " calls in one case carried no key while several steps that await were under way, "
          "so the kit could not tell their step and did not check them; pass the step's "
          "idempotency key");
  std::sort(report.steps.begin(), report.steps.end(),
            [](const step_executions& a, const step_executions& b) {
              return a.workflow_id != b.workflow_id ? a.workflow_id < b.workflow_id : a.seq < b.seq;
            });
  if (o.throw_on_failure && !report.ok()) throw check_failed(report.summary());
  return report;
}

}  // namespace durable::testing
