// How one run of a workflow ends: one value, noted where the cause happens, with the precedence
// between causes defined here and nowhere else. Pure logic: no I/O, no Asio, no store.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace durable::detail {

/// What ctx.continue_as_new() committed: the workflow's next generation, to run at once.
struct next_generation {
  std::int64_t epoch = 0;
  std::int64_t generation = 0;
  std::string inputs;  // JSON array
};

/// Why a run parks its workflow (an operator resumes it once the cause is fixed). The order is
/// the precedence among parks: an earlier cause outranks a later one (see verdict::rank).
enum class park_cause : std::uint8_t {
  misuse,           ///< the code broke a rule (a nested step, a branch issued late, ...)
  journal_limit,    ///< a new step would go beyond engine_options::journal_limit
  journal_refused,  ///< the server refused a journal write it will refuse again
  nondeterminism,   ///< the code and the journal disagree (I5)
  codec,            ///< a journaled value no longer decodes
  requested,        ///< the workflow threw durable::workflow_parked
  journal_error,    ///< a journal row the code cannot use
  value_too_large,  ///< a value over engine_options::max_value_bytes was not written
};

/// The error type a park records in workflows.error (and the metric's label comes from it).
[[nodiscard]] constexpr std::string_view error_type(park_cause c) noexcept {
  switch (c) {
    case park_cause::misuse:
      return "durable::misuse";
    case park_cause::journal_limit:
      return "durable::journal_limit_exceeded";
    case park_cause::journal_refused:
      return "durable::journal_refused";
    case park_cause::nondeterminism:
      return "durable::nondeterminism_error";
    case park_cause::codec:
      return "durable::codec_error";
    case park_cause::requested:
      return "durable::workflow_parked";
    case park_cause::journal_error:
      return "durable::journal_error";
    case park_cause::value_too_large:
      return "durable::value_too_large";
  }
  return "durable::error";
}

/// The outcome of a run. A run starts `running` (no verdict yet); each cause notes its verdict
/// where it happens (verdict_slot::note), and the slot keeps the one of highest precedence:
///
///   continued > released > cancelled > parked(misuse) > parked(journal_limit)
///     > parked(journal_refused) > retry > parked(nondeterminism) > parked(codec)
///     > what the workflow's code did (succeeded, failed, dead-lettered, parked as requested)
///
/// except that a misuse and a continue never erase each other: the workflow is parked for the
/// misuse, under the next generation's epoch (resume then runs the new generation); once a
/// continue committed, every final state is written under that epoch. (park_cause::
/// journal_error is the claim's own park, before any run: it ranks with misuse.) Released and
/// cancelled are the engine's own decisions and outrank whatever the workflow's code did with the
/// exception that told it (I9: no exception of the engine's shutdown, lost lease or takeover is
/// ever a workflow's failure).
struct verdict {
  enum class kind : std::uint8_t {
    running,        ///< no verdict yet
    succeeded,      ///< the function returned: `output` is written with the status
    failed,         ///< the function threw: `error` is written, for good
    dead_lettered,  ///< a step failed for good and the workflow let it escape
    parked,         ///< `cause` and `reason`: an operator resumes it
    retry,          ///< the library's own I/O failed transiently (`io_error`): claim again
    cancelled,      ///< cancel() or the deadline; `elsewhere`: cancel() wrote the status
    released,       ///< nothing more is written by this run: another run continues
    continued,      ///< ctx.continue_as_new committed `next`, which runs now
  };

  kind what = kind::running;
  park_cause cause = park_cause::misuse;  // parked only
  std::string reason;  // parked, cancelled, released, dead_lettered: for status_reason/logs
  std::string error;   // failed, parked, dead_lettered, cancelled: JSON for workflows.error
  std::optional<std::string> output;  // succeeded: JSON text
  std::string io_error;               // retry: what failed, for the hook and workflows.last_error
  bool elsewhere = false;             // cancelled: the status is written already
  std::optional<std::int64_t> epoch;  // parked after a continue: the epoch to park under
  next_generation next;               // continued

  [[nodiscard]] static verdict succeeded(std::string output_json) {
    verdict v;
    v.what = kind::succeeded;
    v.output = std::move(output_json);
    return v;
  }
  [[nodiscard]] static verdict failed(std::string error_json) {
    verdict v;
    v.what = kind::failed;
    v.error = std::move(error_json);
    return v;
  }
  [[nodiscard]] static verdict dead_lettered(std::string reason, std::string error_json) {
    verdict v;
    v.what = kind::dead_lettered;
    v.reason = std::move(reason);
    v.error = std::move(error_json);
    return v;
  }
  /// `error_json` empty: {"type": error_type(cause), "message": reason} is written.
  [[nodiscard]] static verdict parked(park_cause c, std::string reason,
                                      std::string error_json = {}) {
    verdict v;
    v.what = kind::parked;
    v.cause = c;
    v.reason = std::move(reason);
    v.error = std::move(error_json);
    return v;
  }
  [[nodiscard]] static verdict retry(std::string io_error) {
    verdict v;
    v.what = kind::retry;
    v.io_error = std::move(io_error);
    return v;
  }
  [[nodiscard]] static verdict cancelled(std::string reason, bool elsewhere) {
    verdict v;
    v.what = kind::cancelled;
    v.reason = std::move(reason);
    v.elsewhere = elsewhere;
    return v;
  }
  [[nodiscard]] static verdict released(std::string reason) {
    verdict v;
    v.what = kind::released;
    v.reason = std::move(reason);
    return v;
  }
  [[nodiscard]] static verdict continued(next_generation n) {
    verdict v;
    v.what = kind::continued;
    v.next = std::move(n);
    return v;
  }

  /// The precedence: a verdict of higher rank replaces one of lower rank, never the reverse.
  [[nodiscard]] constexpr int rank() const noexcept {
    switch (what) {
      case kind::running:
        return 0;
      case kind::succeeded:
      case kind::failed:
      case kind::dead_lettered:
        return 1;  // the code's own outcome: one per run
      case kind::parked:
        switch (cause) {
          case park_cause::requested:
            return 1;
          case park_cause::codec:
            return 2;
          case park_cause::nondeterminism:
            return 3;
          case park_cause::journal_refused:
            return 5;
          case park_cause::journal_limit:
          case park_cause::value_too_large:
            return 6;
          case park_cause::misuse:
            return 7;
          case park_cause::journal_error:
            return 7;
        }
        return 1;
      case kind::retry:
        return 4;
      case kind::cancelled:
        return 8;
      case kind::released:
        return 9;
      case kind::continued:
        return 10;
    }
    return 0;
  }

  /// Whether this run still writes the workflow's final state (a status change).
  [[nodiscard]] constexpr bool writes_final_state() const noexcept {
    switch (what) {
      case kind::succeeded:
      case kind::failed:
      case kind::dead_lettered:
      case kind::parked:
        return true;
      case kind::cancelled:
        return !elsewhere;
      default:
        return false;
    }
  }
};

/// The one verdict of a run (see verdict for the precedence), and the few facts about the run
/// that stay true whatever outranks them later: a continue committed (the run is over, and any
/// final state is written under the new generation's epoch), a journal write failed (nothing
/// more may be journaled on top of it), a cancel arrived.
class verdict_slot {
public:
  /// Notes `v`; keeps whichever of it and the verdict noted before ranks higher (the earlier
  /// one on a tie: the first misuse is the one reported; of two retries, the later error).
  void note(verdict v) {
    switch (v.what) {
      case verdict::kind::continued:
        next_epoch_ = v.next.epoch;
        continued_ = true;
        break;
      case verdict::kind::retry:
        write_failed_ = true;
        if (v_.what == verdict::kind::retry) v_.io_error = v.io_error;  // the latest failure
        break;
      case verdict::kind::parked:
        if (v.cause == park_cause::journal_refused) write_failed_ = true;
        break;
      case verdict::kind::cancelled:
        cancel_noted_ = true;
        break;
      default:
        break;
    }
    const bool misuse = v.what == verdict::kind::parked && v.cause == park_cause::misuse;
    const bool parked_misuse = v_.what == verdict::kind::parked && v_.cause == park_cause::misuse;
    if (v_.what == verdict::kind::continued && misuse) {
      v_ = std::move(v);  // parked, under the new generation's epoch (epoch())
    } else if (v.what == verdict::kind::continued && parked_misuse) {
      // A misuse is never erased by a continue (continue_as_new refuses to commit after one).
    } else if (v.rank() > v_.rank()) {
      v_ = std::move(v);
    }
    if (next_epoch_) v_.epoch = next_epoch_;
  }
  [[nodiscard]] const verdict& get() const noexcept { return v_; }
  [[nodiscard]] verdict::kind what() const noexcept { return v_.what; }
  [[nodiscard]] bool is(verdict::kind k) const noexcept { return v_.what == k; }
  /// The reason of a park for `c`, when that is the verdict now.
  [[nodiscard]] const std::string* parked_for(park_cause c) const noexcept {
    return v_.what == verdict::kind::parked && v_.cause == c ? &v_.reason : nullptr;
  }
  /// Whether the run has been told to stop starting steps: released, cancelled or continued.
  [[nodiscard]] bool stopped() const noexcept {
    return continued_ || v_.what == verdict::kind::released || v_.what == verdict::kind::cancelled;
  }
  /// A continue_as_new committed in this run, whatever was noted after it.
  [[nodiscard]] bool continued() const noexcept { return continued_; }
  /// A journal write of this run failed (transiently, or refused for good), whatever was
  /// noted after it: no further step may run, its row could build on an unknown outcome.
  [[nodiscard]] bool write_failed() const noexcept { return write_failed_; }
  /// A cancel (cancel() or the deadline) was noted, whatever outranks it.
  [[nodiscard]] bool cancel_noted() const noexcept { return cancel_noted_; }

private:
  verdict v_;
  std::optional<std::int64_t> next_epoch_;
  bool continued_ = false;
  bool write_failed_ = false;
  bool cancel_noted_ = false;
};

}  // namespace durable::detail
