// The replay core's cursor over one workflow's journal: the rows loaded (by step number), the
// next step number (I4), the determinism checks (I5), the recorded attempts of steps without a
// row, the rows held for steps in flight, the journal-limit accounting, and the run's verdict.
// Pure logic: it includes nothing from the runtime, the store or durable/pg (a test checks).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "durable/detail/config.hpp"
#include "durable/detail/replay/verdict.hpp"
#include "durable/error.hpp"
#include "durable/states.hpp"

namespace durable::detail {

/// One journaled step, as loaded. Output and error stay JSON text until a step asks for
/// them, so loading a journal costs no parsing.
struct journal_entry {
  std::string name;
  std::string kind;
  bool failed = false;
  std::string output;  // JSON text; empty for void
  std::string error;   // JSON text {"type": ..., "message": ...} when failed
};

/// The recorded attempts of a step that has no journal row yet (step_attempts).
struct attempt_history {
  std::string name, kind;  // of the step that made them (checked against the code, I5)
  int last_attempt = 0;    // the highest attempt number recorded (numbers never restart)
  int failures = 0;        // failed attempts since the last operator retry ('reset')
  bool failed = false;     // the last one was final: the step failed for good
  std::string error;       // JSON {"type", "message"} of the last failure
  std::optional<double> next_attempt_at;  // Unix seconds, while retrying

  void add(int attempt, const std::string& outcome, const std::optional<std::string>& err,
           const std::optional<double>& next) {
    last_attempt = std::max(last_attempt, attempt);
    if (outcome == to_string(attempt_outcome::due)) {  // resume(): the next attempt is due now
      next_attempt_at.reset();
      return;
    }
    if (outcome == to_string(attempt_outcome::reset)) {
      failures = 0;
      failed = false;
      next_attempt_at.reset();
      return;
    }
    ++failures;
    failed = outcome == to_string(attempt_outcome::failed);
    error = err.value_or("{}");
    next_attempt_at = next;
  }
};

/// One run's position in its workflow's journal, and what the run has learned so far.
struct cursor {
  std::string id;
  std::string name;
  std::int64_t epoch = 0;
  // ctx.continue_as_new() starts the workflow again under the same id with an empty journal;
  // every key derived from a step number (child ids, idempotency keys of steps and sends)
  // includes the generation from 1 on, so that no generation collides with another.
  std::int64_t generation = 0;
  std::vector<std::optional<journal_entry>> journal;  // indexed by seq
  // Journal rows: those loaded, plus those this run journaled or is journaling (counted
  // when the step is issued, before its function runs, so that concurrent branches cannot
  // pass the limit together nor run a step whose row would be refused).
  std::size_t journal_rows = 0;
  // Steps counted in journal_rows since they were issued whose rows are not written yet
  // (row_hold): their write uses the count, and a step that ends without a row gives it back.
  std::set<int> held_rows;
  std::size_t journal_limit = 0;  // engine_options::journal_limit (0: none)
  double journal_warning = 0.8;   // engine_options::journal_warning
  bool journal_warned = false;    // once per run
  // Set when a new step would go beyond journal_limit: no further step runs in this run.
  std::optional<std::string> journal_full;
  // Tells the engine's event hook of a journal nearing its limit.
  std::function<void(const std::string&)> report_warning;
  int next_seq = 0;
  int current_seq = -1;
  // Set once the code and the journal disagree (I5): raised again at every later step, even
  // if the workflow's code catches it.
  std::optional<nondeterminism_error> nondeterminism;
  // The test kit's harness replays a journal its own run of the same code wrote: a mismatch
  // there is the workflow branching on something not journaled, not a change of code.
  bool same_code = false;
  // Failed attempts recorded for steps without a journal row, by step number.
  std::map<int, attempt_history> attempts;
  // The step whose final failure (permanent, or attempts exhausted) was raised in this run:
  // if the workflow lets it escape, the workflow is dead-lettered.
  std::optional<int> dead_step;
  int dead_step_attempts = 0;
  // How the run ends (see verdict for the precedence between causes).
  verdict_slot outcome;

  /// Most step numbers a journal of n rows may skip: gaps come only from concurrent steps
  /// whose later rows committed before an earlier one (I4), so they are small.
  static constexpr std::int64_t max_gap = 1 << 16;

  /// Adds a loaded row, in any order. Returns an explanation instead if the row cannot be used
  /// (a step number below zero, repeated, or far beyond the rows loaded: `loading` rows in
  /// all, when known), which parks the workflow.
  [[nodiscard]] std::optional<std::string> add_entry(std::int64_t seq, journal_entry e,
                                                     std::size_t loading = 0) {
    const std::size_t rows = std::max(journal_rows, loading);
    if (seq < 0 || seq > std::int64_t(rows) + max_gap ||
        (std::size_t(seq) < journal.size() && journal[std::size_t(seq)]))
      return "workflow '" + id + "' (" + name + "): its journal holds a row with step number " +
             std::to_string(seq) + " among " + std::to_string(rows) +
             " rows, which no run of this library writes (step numbers start at 0 and follow "
             "program order). It is parked: inspect and repair its rows in the steps table, "
             "then resume it";
    if (std::size_t(seq) >= journal.size()) {
      journal.reserve(std::max(rows, std::size_t(seq) + 1));
      journal.resize(std::size_t(seq) + 1);
    }
    journal[std::size_t(seq)] = std::move(e);
    ++journal_rows;
    return std::nullopt;
  }

  /// The journal's entry at `seq`, unchecked (null when none).
  [[nodiscard]] const journal_entry* at(int seq) const noexcept {
    if (seq < 0 || std::size_t(seq) >= journal.size() || !journal[std::size_t(seq)]) return nullptr;
    return &*journal[std::size_t(seq)];
  }
  /// True while the next step will come from the journal.
  [[nodiscard]] bool replaying() const noexcept { return at(next_seq) != nullptr; }

  /// "<gen>.<seq>" from generation 1 on, "<seq>" in generation 0 (the format before
  /// continue_as_new existed): the suffix of idempotency keys and child ids.
  [[nodiscard]] std::string step_tag(int seq) const {
    if (generation == 0) return std::to_string(seq);
    return std::to_string(generation) + "." + std::to_string(seq);
  }
  /// The idempotency key of step `seq`: "<id>:<seq>", or "<id>:<gen>.<seq>" from generation 1.
  [[nodiscard]] std::string key(int seq) const { return id + ":" + step_tag(seq); }
  /// The id of the child started by step `seq`: "<id>/<seq>", or "<id>/<gen>.<seq>".
  [[nodiscard]] std::string child_id(int seq) const { return id + "/" + step_tag(seq); }
};

/// "'name'" for a plain step, "'name' (kind)" otherwise: how messages name a step.
inline std::string describe_step(const std::string& name, const std::string& kind) {
  return kind == to_string(step_kind::step) ? "'" + name + "'" : "'" + name + "' (" + kind + ")";
}

/// Notes that the workflow parks with `reason` for `cause` and returns the reason (for the
/// exception the caller throws).
inline std::string note_park(cursor& s, park_cause cause, std::string reason) {
  s.outcome.note(verdict::parked(cause, reason));
  return reason;
}

/// The park of nondeterminism `e` (I5), with the details an operator needs in workflows.error.
DURABLE_DECL verdict nondeterminism_park(const nondeterminism_error& e);

/// I5: the journal's entry at `seq`, after checking it is the step the code asks for; null
/// when the step has no row yet and must run.
DURABLE_DECL const journal_entry* replay_entry(cursor& s, int seq, const std::string& name,
                                               const std::string& kind);

/// I5: step `seq` is recorded (in the journal or its attempts) as another step than the code
/// asks for. Parks the workflow (nondeterminism_error).
[[noreturn]] DURABLE_DECL void raise_nondeterminism(cursor& s, int seq,
                                                    const std::string& journaled_name,
                                                    const std::string& journaled_kind,
                                                    const std::string& name,
                                                    const std::string& kind);

/// I5 at the end of a run: journaled steps the code no longer reached mean it changed.
DURABLE_DECL void check_fully_replayed(cursor& s);

/// The journal limit: throws journal_limit_exceeded (and notes the park) when step `seq`
/// would be a row beyond engine_options::journal_limit. Checked before a new step runs, so
/// that nothing runs whose row could not be journaled.
DURABLE_DECL void check_journal_room(cursor& s, int seq, const std::string& name);

/// Counts the row of step `seq` before it is written (check_journal_room first), and reports
/// once per run when the journal reaches journal_warning of its limit. A write that turns out
/// to journal nothing gives the row back (release_row). A step held since it was issued
/// (row_hold) was counted then: its write uses that count.
DURABLE_DECL void reserve_row(cursor& s, int seq, const std::string& name);
inline void release_row(cursor& s) noexcept {
  if (s.journal_rows > 0) --s.journal_rows;
}

/// Counts the row of step `seq` from the moment it is issued until it is written (its write
/// takes the count over) or, if it ends without a row, until the hold goes out of scope (the
/// count is given back). For steps whose function runs before the write (ctx.step,
/// ctx.transaction, ctx.any): a concurrent branch issued meanwhile sees the row counted, and a
/// step beyond the limit is refused before its function runs.
class row_hold {
public:
  row_hold(cursor& s, int seq, const std::string& name) : s_(s), seq_(seq) {
    reserve_row(s, seq, name);
    s.held_rows.insert(seq);
  }
  row_hold(const row_hold&) = delete;
  row_hold& operator=(const row_hold&) = delete;
  ~row_hold() {
    if (s_.held_rows.erase(seq_) > 0) release_row(s_);
  }
  /// The write of the row failed (nothing journaled) and the step goes on: held again.
  void again() { s_.held_rows.insert(seq_); }

private:
  cursor& s_;
  int seq_;
};

}  // namespace durable::detail

#if defined(DURABLE_HEADER_ONLY)
#include "durable/detail/replay/impl/cursor.ipp"
#endif
