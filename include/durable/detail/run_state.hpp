// The state of one workflow run: its loaded journal, the step cursor, and the services
// the replay core needs. A user never names anything here.
#pragma once

#include <cxxabi.h>

#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

#include "durable/detail/failure.hpp"
#include "durable/detail/group_commit.hpp"
#include "durable/error.hpp"
#include "durable/pg/pool.hpp"
#include "durable/store.hpp"

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

/// Counters that tests and benchmarks read to prove I/O counts (I1, I2).
struct engine_counters {
  std::uint64_t journal_loads = 0;
  std::uint64_t steps_replayed = 0;
  std::uint64_t steps_executed = 0;
  std::uint64_t ownership_lost = 0;  ///< runs stopped because another executor took over
};

/// Thrown at a step boundary when the engine shuts down: the run stops without writing,
/// and another executor resumes the workflow.
class run_released : public error {
public:
  using error::error;
};

struct run_state {
  std::string id;
  std::string name;
  std::int64_t epoch = 0;
  std::vector<std::optional<journal_entry>> journal;  // indexed by seq
  std::size_t journal_rows = 0;
  int next_seq = 0;
  int current_seq = -1;
  // Set once the code and the journal disagree (I5); the run is then parked even if the
  // workflow's code catches the exception.
  std::optional<nondeterminism_error> nondeterminism;
  std::optional<std::string> park_reason;
  // Set when the library's own I/O failed transiently: the workflow is retried, not failed.
  bool io_failed = false;
  // Set when the server refused a write it will refuse again (invalid encoding, value too
  // large, permission denied...): the workflow is parked with this reason, nothing re-runs.
  std::optional<std::string> io_refused;
  // What the last I/O failure was, for the hook and for workflows.last_error.
  std::string io_error;
  // A step issued while another step's function runs (a nested step): a programming error
  // that parks the workflow with this reason instead of journaling anything.
  std::optional<std::string> misuse;
  int step_functions_running = 0;  // step functions (of this run) executing now
  std::string running_step;        // the innermost of them, for messages

  // Services; `pool` is null for an in-memory replay, which may not execute anything.
  pg::pool* pool = nullptr;
  group_committer* committer = nullptr;  // journal rows share commits with other runs
  const store* st = nullptr;
  engine_counters* counters = nullptr;
  const bool* stopping = nullptr;       // the engine is shutting down
  const bool* lease_expired = nullptr;  // this executor could not renew its lease in time
  const void* launch_token = nullptr;   // identifies this run's entry in the engine's map

  /// Most step numbers a journal of n rows may skip: gaps come only from concurrent steps
  /// whose later rows committed before an earlier one (I4), so they are small.
  static constexpr std::int64_t max_gap = 1 << 16;

  /// Adds a loaded row. Returns an explanation instead if the row cannot be used (a step
  /// number below zero, repeated, or far beyond the rows loaded), which parks the workflow.
  [[nodiscard]] std::optional<std::string> add_entry(std::int64_t seq, journal_entry e) {
    if (seq < 0 || seq > std::int64_t(journal_rows) + max_gap ||
        (std::size_t(seq) < journal.size() && journal[std::size_t(seq)]))
      return "workflow '" + id + "' (" + name + "): its journal holds a row with step number " +
             std::to_string(seq) + " after " + std::to_string(journal_rows) +
             " rows, which no run of this library writes (step numbers start at 0 and follow "
             "program order). It is parked: inspect and repair its rows in the steps table, "
             "then resume it";
    if (std::size_t(seq) >= journal.size()) journal.resize(std::size_t(seq) + 1);
    journal[std::size_t(seq)] = std::move(e);
    ++journal_rows;
    return std::nullopt;
  }

  [[nodiscard]] std::string key(int seq) const { return id + ":" + std::to_string(seq); }
};

inline std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  if (out.rfind("std::__cxx11::", 0) == 0) out = "std::" + out.substr(14);
  return out;
}

/// The type name and message of an exception, for the journal.
struct captured_error {
  std::string type;
  std::string message;
  [[nodiscard]] std::string to_json() const {
    return nlohmann::json{{"type", type}, {"message", message}}.dump();
  }
};

inline captured_error capture(std::exception_ptr e) {
  // Messages go into JSON and into PostgreSQL text: invalid UTF-8 bytes are replaced.
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return {valid_utf8(demangle(typeid(x).name())), valid_utf8(x.what())};
  } catch (...) {
    const std::type_info* t = abi::__cxa_current_exception_type();
    return {t ? valid_utf8(demangle(t->name())) : "unknown",
            "(an exception not derived from std::exception)"};
  }
}

inline std::string describe_step(const std::string& name, const std::string& kind) {
  return kind == "step" ? "'" + name + "'" : "'" + name + "' (" + kind + ")";
}

/// I5: the journal's entry at `seq`, after checking it is the step the code asks for; null
/// when the step has no row yet and must run.
inline const journal_entry* replay_entry(run_state& s, int seq, const std::string& name,
                                         const std::string& kind) {
  if (s.nondeterminism) throw *s.nondeterminism;
  if (std::size_t(seq) >= s.journal.size() || !s.journal[std::size_t(seq)]) return nullptr;
  const journal_entry& e = *s.journal[std::size_t(seq)];
  if (e.name == name && e.kind == kind) return &e;
  const std::string journaled = describe_step(e.name, e.kind);
  const std::string requested = describe_step(name, kind);
  s.nondeterminism.emplace(
      s.id, seq, journaled, requested,
      "nondeterminism in workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) +
          " is journaled as " + journaled + " but the code now asks for " + requested +
          ". The workflow's code changed while it was in flight (a step was renamed, added or "
          "removed before this point). It is parked: deploy code that takes the journaled "
          "path for workflows started before the change, or cancel it; see "
          "docs/concepts.md#nondeterminism");
  throw *s.nondeterminism;
}

/// I5 at the end of a run: journaled steps the code no longer reached mean it changed.
inline void check_fully_replayed(run_state& s) {
  if (s.nondeterminism) throw *s.nondeterminism;
  for (std::size_t seq = std::size_t(s.next_seq); seq < s.journal.size(); ++seq) {
    if (!s.journal[seq]) continue;
    const std::string journaled = describe_step(s.journal[seq]->name, s.journal[seq]->kind);
    s.nondeterminism.emplace(
        s.id, int(seq), journaled, "",
        "nondeterminism in workflow '" + s.id + "' (" + s.name + "): the code returned after " +
            std::to_string(s.next_seq) + " steps but the journal holds step " +
            std::to_string(seq) + " " + journaled +
            " (a step was removed). It is parked: deploy code that takes the journaled path "
            "for workflows started before the change, or cancel it; see "
            "docs/concepts.md#nondeterminism");
    throw *s.nondeterminism;
  }
}

/// A pooled connection for the run; failing to get one marks the run for a retry.
inline asio::awaitable<pg::pool::lease> acquire(run_state& s) {
  try {
    co_return co_await s.pool->acquire();
  } catch (const std::exception& e) {
    s.io_failed = true;
    s.io_error = describe_io_failure(e);
    throw;
  }
}

/// Records a failure of the library's own I/O while journaling step `seq`: a transient one
/// retries the run; one the server will repeat parks the workflow (the step is not re-run).
inline void note_io_failure(run_state& s, int seq, const std::string& name,
                            const std::exception& e) {
  s.io_error = describe_io_failure(e);
  if (classify(e) == io_verdict::permanent) {
    if (!s.io_refused)
      s.io_refused =
          valid_utf8("workflow '" + s.id + "' (" + s.name + "): the journal row of step " +
                     std::to_string(seq) + " '" + name +
                     "' was refused by the server, which will refuse it again (" + s.io_error +
                     "). The workflow is parked and the step is not run again: fix "
                     "the cause (the value, the step name, the database's "
                     "permissions), then resume it");
  } else {
    s.io_failed = true;
  }
}

/// Why step `seq` was not journaled: the fence (I3) rejected its row. The verdict carries the
/// fence's message when the server raised it (DU001).
inline std::string journal_fenced_message(const run_state& s, int seq, const std::string& name,
                                          const fence_verdict& v) {
  return "workflow '" + s.id + "': step " + std::to_string(seq) + " '" + name +
         "' was not journaled because another executor took the workflow over (" +
         (v.server_message.empty() ? "it is no longer owned under epoch " + std::to_string(s.epoch)
                                   : v.server_message) +
         "); this run stops and the new owner continues";
}

/// Journals one step (I2: one round trip, fenced by the epoch in the same statement, I3).
/// Through the group committer the round trip and its commit are shared with other runs;
/// the step still resumes only once its row is committed.
inline asio::awaitable<void> append(run_state& s, int seq, const std::string& name,
                                    const std::string& kind,
                                    const std::optional<std::string>& output,
                                    const std::optional<std::string>& error, int attempts,
                                    double started_at) {
  try {
    const std::string status = error ? "failed" : "succeeded";
    if (s.committer) {
      group_committer::journal_row row{s.id,   s.epoch, seq,   name,     kind,
                                       status, output,  error, attempts, started_at};
      const fence_verdict v = co_await s.committer->append(std::move(row));
      if (!v.written()) throw ownership_lost(s.id, journal_fenced_message(s, seq, name, v));
    } else {
      fenced_write row = s.st->step_append(s.id, s.epoch, seq, name, kind, status, output, error,
                                           attempts, started_at);
      auto conn = co_await s.pool->acquire();
      co_await conn->run(std::move(row.st));
    }
  } catch (const ownership_lost&) {
    throw;
  } catch (const pg::sql_error& e) {
    const fence_verdict v = store::verdict(e);
    if (v.fenced_out()) throw ownership_lost(s.id, journal_fenced_message(s, seq, name, v));
    note_io_failure(s, seq, name, e);
    throw;
  } catch (const std::exception& e) {
    note_io_failure(s, seq, name, e);
    throw;
  }
  if (s.counters) ++s.counters->steps_executed;
}

inline double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

inline asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

}  // namespace durable::detail
