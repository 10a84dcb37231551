// Journals from production as test fixtures (durable/testing.hpp): replay() runs the current
// build's workflow code against a journal that `durable export` wrote, without executing
// anything, and reports OK or the first step where the code no longer takes the journaled path,
// with the fix. See docs/testing.md.
#pragma once

#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "durable/detail/memory_run.hpp"
#include "durable/detail/virtual_clock.hpp"
#include "durable/testing/harness.hpp"

namespace durable::testing {

/// What replay() found for one workflow of the export.
struct replay_result {
  std::string workflow_id, name;
  bool ok = true;
  int rows = 0;           ///< journal rows of the export
  int seq = -1;           ///< the first mismatching step (ok: -1)
  std::string journaled;  ///< what the journal holds there ("'name' (kind)"), if anything
  std::string requested;  ///< what the code asked for there, empty if it returned earlier
  std::string message;    ///< one readable paragraph: OK, or the mismatch and the fix
};

struct replay_report {
  std::string source;  ///< the file (or "document")
  std::vector<replay_result> workflows;
  [[nodiscard]] bool ok() const {
    for (const auto& w : workflows)
      if (!w.ok) return false;
    return true;
  }
  /// The first mismatch, or null.
  [[nodiscard]] const replay_result* mismatch() const {
    for (const auto& w : workflows)
      if (!w.ok) return &w;
    return nullptr;
  }
  [[nodiscard]] std::string summary() const {
    std::string out = "replay of " + source + ": " + (ok() ? "OK" : "MISMATCH") + "\n";
    for (const auto& w : workflows) out += "  " + w.message + "\n";
    return out;
  }
};

namespace replay_detail {

inline std::string fix_for(const replay_result& r) {
  return " To keep the workflows started before the change on their path: put the change "
         "behind ctx.patched(\"<change id>\") (the old journals take the old branch), or fork "
         "them from before step " +
         std::to_string(r.seq) + " (durable fork ID --from-step " + std::to_string(r.seq) +
         ") so that they run the new code from there, or register the new code under a new "
         "workflow name and let the old ones finish on the old code (docs/versioning.md).";
}

/// Loads the export's workflow `w` into `j` as its rows hold it.
inline void load(detail::memory_journal& j, const nlohmann::json& w) {
  const std::string id = w.at("id").get<std::string>();
  auto& rec = j.create(id, w.at("name").get<std::string>(), w.at("inputs").dump());
  rec.status = w.value("status", std::string(to_string(workflow_state::running)));
  rec.generation = w.value("generation", std::int64_t(0));
  if (w.contains("output") && !w["output"].is_null()) rec.output = w["output"].dump();
  if (w.contains("error") && !w["error"].is_null()) rec.error = w["error"].dump();
  if (w.contains("status_reason") && w["status_reason"].is_string())
    rec.reason = w["status_reason"].get<std::string>();
  if (w.contains("parent_id") && w["parent_id"].is_string())
    rec.parent = w["parent_id"].get<std::string>();
  for (const auto& s : w.value("steps", nlohmann::json::array())) {
    detail::step_row row;
    row.seq = s.at("seq").get<int>();
    row.name = s.at("name").get<std::string>();
    row.kind = s.at("kind").get<std::string>();
    if (s.contains("output") && !s["output"].is_null()) row.output = s["output"].dump();
    if (s.contains("error") && !s["error"].is_null()) row.error = s["error"].dump();
    row.attempts = s.value("attempts", 1);
    rec.steps.emplace(row.seq, std::move(row));
  }
  for (const auto& a : w.value("attempts", nlohmann::json::array())) {
    const std::string outcome = a.value("outcome", std::string());
    if (outcome != "retrying" && outcome != "failed") continue;  // reset/due: history only
    detail::memory_journal::recorded_attempt r;
    r.row.seq = a.at("seq").get<int>();
    r.row.attempt = a.at("attempt").get<int>();
    r.row.name = a.value("name", std::string());
    r.row.kind = a.value("kind", std::string());
    r.row.outcome = outcome;
    if (a.contains("error") && !a["error"].is_null()) r.row.error = a["error"].dump();
    rec.attempts.push_back(std::move(r));
  }
  for (const auto& e : w.value("events", nlohmann::json::array()))
    rec.events[e.at("key").get<std::string>()] = e.at("value").dump();
  for (const auto& v : w.value("streams", nlohmann::json::array())) {  // in offset order
    detail::memory_journal::stream_row row;
    row.position = v.at("position").get<std::int64_t>();
    if (!v.value("closes", false)) row.value = v.at("value").dump();
    row.generation = v.value("generation", std::int64_t(0));
    row.seq = v.value("seq", 0);
    rec.streams[v.at("key").get<std::string>()].push_back(std::move(row));
  }
}

/// Replays workflow `w` of the export `doc` with its registered code `reg`, on a journal that
/// holds every workflow of the export (a parent's replay reads its children's rows) and refuses
/// to execute, on a virtual clock that starts at `clock_start` (Unix seconds). `same_code`:
/// cursor::same_code (the journal is this code's own).
inline detail::memory_run_result replay_one(const nlohmann::json& doc,
                                            const harness::registered& reg, const nlohmann::json& w,
                                            double clock_start, bool same_code) {
  detail::memory_journal j;
  for (const auto& x : doc.at("workflows")) load(j, x);
  j.replay_only(true);
  detail::virtual_clock clock(clock_start);
  j.use_clock([&clock] { return clock.now(); });
  detail::memory_run_options o;
  o.clock = &clock;
  o.poll_interval = detail::virtual_clock::horizon;
  o.check_inputs = &reg.check_inputs;
  o.signature = &reg.signature;
  o.same_code = same_code;
  const harness::registered* r = &reg;
  const nlohmann::json inputs = w.at("inputs");
  auto body = [r, inputs](context& ctx) { return r->invoke(ctx, inputs); };
  return detail::run_in_memory(j, w.at("id").get<std::string>(), body, o);
}

/// Replays workflow `id` of `doc` (an export, as harness::export_journal writes it) with the code
/// registered in `h`, nothing executed, on a virtual clock that starts at `clock_start` (Unix
/// seconds): check_crashes' second replay of each case, under a moved clock. Returns the
/// nondeterminism it met, or empty if it took the journaled path.
inline std::string second_replay(const nlohmann::json& doc, const harness& h, const std::string& id,
                                 double clock_start) {
  const nlohmann::json* root = nullptr;
  for (const auto& w : doc.at("workflows"))
    if (w.at("id").get<std::string>() == id) root = &w;
  if (!root) return {};
  const harness::registered* reg = h.find_workflow(root->at("name").get<std::string>());
  if (!reg) return {};
  const detail::memory_run_result run = replay_one(doc, *reg, *root, clock_start, true);
  return run.run->nondeterminism ? std::string(run.run->nondeterminism->what()) : std::string();
}

}  // namespace replay_detail

/// Replays every workflow of an export document (admin_export's format, version 1) against
/// the workflows registered in `h`; nothing is executed and nothing is written anywhere.
inline replay_report replay_document(const nlohmann::json& doc, const harness& h,
                                     std::string source = "document") {
  replay_report report;
  report.source = std::move(source);
  if (!doc.is_object() || doc.value("format", std::string()) != "durable.journal")
    throw error("replay(" + report.source +
                "): not a journal made by 'durable export' (no \"format\": \"durable.journal\")");
  if (doc.value("version", 0) != 1)
    throw error("replay(" + report.source + "): version " +
                doc.value("version", nlohmann::json()).dump() +
                " of the journal format; this build reads version 1");
  const auto& all = doc.at("workflows");
  for (const auto& w : all) {
    replay_result r;
    r.workflow_id = w.at("id").get<std::string>();
    r.name = w.at("name").get<std::string>();
    r.rows = int(w.value("steps", nlohmann::json::array()).size());
    const std::string who = "workflow '" + r.workflow_id + "' (" + r.name + ")";
    const harness::registered* reg = h.find_workflow(r.name);
    if (!reg) {
      r.ok = false;
      r.message = who + ": no workflow named '" + r.name +
                  "' is registered with the harness, so its journal cannot be checked; register "
                  "it (or, if the name was retired on purpose, leave it out of the fixtures)";
      report.workflows.push_back(std::move(r));
      continue;
    }
    const detail::memory_run_result run =
        replay_detail::replay_one(doc, *reg, w, detail::unix_seconds(), false);
    const auto& nd = run.run->nondeterminism;
    if (nd) {
      r.ok = false;
      r.seq = nd->seq();
      r.journaled = nd->journaled();
      r.requested = nd->requested();
      r.message = who + ": MISMATCH at step " + std::to_string(r.seq) + ": journaled " +
                  (r.journaled.empty() ? "nothing" : r.journaled) + ", the code asks for " +
                  (r.requested.empty() ? "nothing (it returned earlier)" : r.requested) + "." +
                  replay_detail::fix_for(r);
      report.workflows.push_back(std::move(r));
      continue;
    }
    const detail::final_state f = detail::final_state_of(run.outcome);
    const std::string exported = w.value("status", std::string());
    const bool ran_out = f.error && f.error->find("journal_exhausted") != std::string::npos;
    // A workflow that ended by itself must end alike (a cancelled one was stopped from
    // outside: its journal merely ends).
    const bool ended_by_itself =
        exported == "succeeded" || exported == "failed" || exported == "dead_letter";
    const std::string now_ends(to_string(f.status));
    if (ran_out) {
      r.message = who + ": OK, its " + std::to_string(r.rows) +
                  " journaled steps replay; the workflow goes on from there (it was " + exported +
                  " when exported)";
    } else if (f.status == workflow_state::parked) {
      r.ok = false;
      r.seq = r.rows;
      r.message = who + ": the replay parked: " + f.reason.value_or("");
    } else if (ended_by_itself && now_ends != exported) {
      r.ok = false;
      r.seq = r.rows;
      r.message = who + ": MISMATCH: every step replays, but the workflow now ends " + now_ends +
                  (f.error ? " (" + *f.error + ")" : std::string()) + " where it ended " +
                  exported + " (the code after the last step changed)";
    } else if (f.status == workflow_state::succeeded &&
               nlohmann::json::parse(f.output.value_or("null")) !=
                   w.value("output", nlohmann::json())) {
      r.ok = false;
      r.seq = r.rows;
      r.message = who + ": MISMATCH: every step replays, but the result is now " +
                  f.output.value_or("null") + " where the journal holds " +
                  w.value("output", nlohmann::json()).dump() +
                  " (the code after the last step changed what it returns)";
    } else {
      r.message = who + ": OK, " + std::to_string(r.rows) + " steps replay and it ends " +
                  now_ends + " (it was " + exported + " when exported)";
    }
    report.workflows.push_back(std::move(r));
  }
  return report;
}

/// Replays the export in `file` (see replay_document).
inline replay_report replay(const std::string& file, const harness& h) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw error("replay: cannot open '" + file + "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw error("replay: '" + file + "' is not JSON: " + e.what());
  }
  return replay_document(doc, h, file);
}

}  // namespace durable::testing
