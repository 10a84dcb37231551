// The non-template functions of durable/detail/replay/cursor.hpp: included at its end when
// header-only, by durable/src.hpp otherwise.
#pragma once

#include <nlohmann/json.hpp>

#include "durable/detail/utf8.hpp"

namespace durable::detail {

DURABLE_DECL verdict nondeterminism_park(const nondeterminism_error& e) {
  const std::string reason = valid_utf8(e.what());
  return verdict::parked(park_cause::nondeterminism, reason,
                         nlohmann::json{{"type", "durable::nondeterminism_error"},
                                        {"message", reason},
                                        {"seq", e.seq()},
                                        {"journaled", valid_utf8(e.journaled())},
                                        {"requested", valid_utf8(e.requested())}}
                             .dump());
}

/// Notes the park of the nondeterminism the cursor holds (I5).
inline void note_nondeterminism(cursor& s) {
  s.outcome.note(nondeterminism_park(*s.nondeterminism));
}

DURABLE_DECL const journal_entry* replay_entry(cursor& s, int seq, const std::string& name,
                                               const std::string& kind) {
  if (s.nondeterminism) throw *s.nondeterminism;
  if (std::size_t(seq) >= s.journal.size() || !s.journal[std::size_t(seq)]) return nullptr;
  const journal_entry& e = *s.journal[std::size_t(seq)];
  if (e.name == name && e.kind == kind) return &e;
  raise_nondeterminism(s, seq, e.name, e.kind, name, kind);
}

// What a mismatch between a run and its replay of the same code means (cursor::same_code).
inline constexpr const char* same_code_cause =
    "the workflow branches on something its journal does not hold (this host's clock, rand(), "
    "std::random_device, an environment variable, the order of an unordered container, a value "
    "read outside a step). Take time from ctx.now(), randomness from ctx.random() or "
    "ctx.uuid(), and anything read from outside from a step; see docs/testing.md";

DURABLE_DECL void raise_nondeterminism(cursor& s, int seq, const std::string& journaled_name,
                                       const std::string& journaled_kind, const std::string& name,
                                       const std::string& kind) {
  const std::string journaled = describe_step(journaled_name, journaled_kind);
  const std::string requested = describe_step(name, kind);
  if (s.same_code) {
    s.nondeterminism.emplace(
        s.id, seq, journaled, requested,
        "nondeterminism in workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) +
            " is journaled as " + journaled + " but its replay asks for " + requested +
            ". This run and its replay asked for different steps with the same " +
            "code: " + same_code_cause);
  } else {
    s.nondeterminism.emplace(
        s.id, seq, journaled, requested,
        "nondeterminism in workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) +
            " is journaled as " + journaled + " but the code now asks for " + requested +
            ". The workflow's code changed while it was in flight (a step was renamed, added or "
            "removed before this point). It is parked: deploy code that takes the journaled "
            "path for workflows started before the change, or cancel it; see "
            "docs/concepts.md#nondeterminism");
  }
  note_nondeterminism(s);
  throw *s.nondeterminism;
}

DURABLE_DECL void check_fully_replayed(cursor& s) {
  if (s.nondeterminism) throw *s.nondeterminism;
  for (std::size_t seq = std::size_t(s.next_seq); seq < s.journal.size(); ++seq) {
    if (!s.journal[seq]) continue;
    const std::string journaled = describe_step(s.journal[seq]->name, s.journal[seq]->kind);
    const std::string what = "nondeterminism in workflow '" + s.id + "' (" + s.name +
                             "): the code returned after " + std::to_string(s.next_seq) +
                             " steps but the journal holds step " + std::to_string(seq) + " " +
                             journaled;
    s.nondeterminism.emplace(
        s.id, int(seq), journaled, "",
        s.same_code ? what +
                          ". This run and its replay asked for different steps with the "
                          "same code: " +
                          same_code_cause
                    : what +
                          " (a step was removed). It is parked: deploy code that takes the "
                          "journaled path for workflows started before the change, or "
                          "cancel it; see docs/concepts.md#nondeterminism");
    note_nondeterminism(s);
    throw *s.nondeterminism;
  }
}

DURABLE_DECL void check_journal_room(cursor& s, int seq, const std::string& name) {
  if (s.journal_full) throw journal_limit_exceeded(s.id, *s.journal_full);
  if (s.held_rows.contains(seq)) return;  // counted when it was issued (a retry, say)
  if (s.journal_limit == 0 || s.journal_rows < s.journal_limit) return;
  s.journal_full =
      "workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) + " '" + name +
      "' would be row " + std::to_string(s.journal_rows + 1) +
      " of its journal, beyond the limit of " + std::to_string(s.journal_limit) +
      " rows (engine_options::journal_limit). The step was not run and nothing was journaled; "
      "the workflow is parked. A workflow that runs for ever should call "
      "ctx.continue_as_new(...) to start again with an empty journal before it gets here; to "
      "finish this one, raise journal_limit and resume it. See docs/failures.md#journal-limit";
  s.outcome.note(verdict::parked(park_cause::journal_limit, *s.journal_full));
  throw journal_limit_exceeded(s.id, *s.journal_full);
}

DURABLE_DECL void reserve_row(cursor& s, int seq, const std::string& name) {
  if (s.held_rows.erase(seq) > 0) return;  // counted when the step was issued (row_hold)
  check_journal_room(s, seq, name);
  ++s.journal_rows;
  if (s.journal_warned || s.journal_limit == 0 || !s.report_warning) return;
  if (double(s.journal_rows) < s.journal_warning * double(s.journal_limit)) return;
  s.journal_warned = true;
  s.report_warning("workflow '" + s.id + "' (" + s.name + "): its journal holds " +
                   std::to_string(s.journal_rows) + " rows, " +
                   std::to_string(int(100.0 * double(s.journal_rows) / double(s.journal_limit))) +
                   " % of its limit of " + std::to_string(s.journal_limit) +
                   " rows (engine_options::journal_limit). At the limit its next step is not run "
                   "and it is parked. A workflow that runs for ever (a poller, a scheduler) "
                   "should call ctx.continue_as_new(...) to start again with an empty journal; "
                   "see docs/primitives.md#continue-as-new");
}

}  // namespace durable::detail
