// The journal interface kept in memory: the journals, attempts, messages, events and children
// of the workflows of one process, with the same fencing (I3), primary keys and one-statement
// semantics as the engine's tables, and no database. It backs the server-free tests of the
// replay logic and the test kit. It never unloads a run (waits and backoffs stay in the run),
// and refuses transactional steps (they need a database). Single-threaded, like a run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durable/detail/config.hpp"
#include "durable/detail/replay/cursor.hpp"
#include "durable/detail/replay/journal.hpp"
#include "durable/error.hpp"
#include "durable/states.hpp"

namespace durable::detail {

class memory_journal final : public journal {
public:
  /// A failure of the journal's own I/O, injected by a test (fail_next): transient unless
  /// `permanent`, as a server's error would be.
  class fault : public error {
  public:
    fault(const std::string& what, bool permanent) : error(what), permanent_(permanent) {}
    [[nodiscard]] bool permanent() const noexcept { return permanent_; }

  private:
    bool permanent_;
  };

  struct message {
    std::string topic, payload;  // payload: JSON
    std::optional<std::string> key;
    std::optional<int> consumed_seq;  // the recv step that took it
  };

  /// A failed attempt as recorded, with the time its next attempt is due.
  struct recorded_attempt {
    attempt_row row;
    std::optional<double> next_attempt_at;  // Unix seconds
  };

  /// Where a staged crash kills the process whose run writes there (crash_at): right after
  /// step `seq`'s row of workflow `id` is written, instead of writing it (the step's function
  /// ran; its result is lost), or right after a failed attempt of it is recorded for a retry
  /// (in the middle of the backoff), or when the run's final state is about to be written
  /// (before_finish: its code returned, its end is lost; `seq` is finish_seq).
  enum class crash_moment { after_row, before_row, in_backoff, before_finish };
  static constexpr int finish_seq = -1;
  struct crash_point {
    std::string id;
    int seq = 0;
    crash_moment at = crash_moment::after_row;
  };
  /// Thrown by every write and read once a staged crash happened: the process is dead and its
  /// runs write nothing more (whoever drives them abandons them at once).
  class process_died : public error {
  public:
    using error::error;
  };

  /// A row of a stream: its offset, its value (JSON; none: the close, the stream's last row),
  /// and the step (and generation) that wrote it.
  struct stream_row {
    std::int64_t position = 0;
    std::optional<std::string> value;
    std::int64_t generation = 0;
    int seq = 0;
  };

  /// One workflow, as its rows in the engine's tables would hold it.
  struct workflow_record {
    std::string name;
    std::string status{to_string(workflow_state::running)};
    std::string inputs = "[]";  // JSON array
    std::int64_t epoch = 1;
    std::int64_t generation = 0;
    std::optional<std::string> output, error, reason, parent;
    std::optional<double> deadline;  // Unix seconds, on now()'s clock
    std::optional<double> wake_at;   // sleeping until then (a child: due at once)
    std::map<int, step_row> steps;
    std::vector<recorded_attempt> attempts;
    std::vector<message> inbox;
    std::map<std::string, std::string, std::less<>> events;
    /// Each stream's rows in offset order, as the table streams holds them.
    std::map<std::string, std::vector<stream_row>, std::less<>> streams;
  };

  // ---- what a test or the test kit does around runs -----------------------------------------

  /// Creates workflow `id` (status running, epoch 1); throws if the id is taken.
  DURABLE_DECL workflow_record& create(const std::string& id, const std::string& name,
                                       std::string inputs = "[]");
  /// Workflow `id`; throws if there is none.
  DURABLE_DECL workflow_record& at(const std::string& id);
  DURABLE_DECL const workflow_record& at(const std::string& id) const;
  [[nodiscard]] bool contains(const std::string& id) const { return workflows_.contains(id); }
  [[nodiscard]] const std::map<std::string, workflow_record, std::less<>>& workflows() const {
    return workflows_;
  }

  /// Claims workflow `id` for a new run, as an executor taking it over would: the epoch is
  /// bumped (a run under the old epoch is fenced out from now on), and `c` is loaded with its
  /// journal and attempts. Returns an explanation when a row cannot be used (it parks).
  DURABLE_DECL std::optional<std::string> claim(const std::string& id, cursor& c);
  /// Writes the final state of a run under `epoch` (fenced: false if another epoch owns it).
  DURABLE_DECL bool finish(const std::string& id, std::int64_t epoch, std::string status,
                           std::optional<std::string> output, std::optional<std::string> error,
                           std::optional<std::string> reason);
  /// A message from outside the workflows (engine::send): queued once per `key`.
  DURABLE_DECL void deliver(const std::string& to, const std::string& topic, std::string payload,
                            std::optional<std::string> key = std::nullopt);

  /// The next `count` writes or reads fail with `f` (nothing is written by them).
  void fail_next(fault f, int count = 1) {
    fault_.emplace(std::move(f));
    faults_left_ = count;
  }
  /// now() and the due times recorded are read from `now` (Unix seconds: the test kit's
  /// virtual clock); unset: this host's clock.
  void use_clock(std::function<double()> now) { clock_ = std::move(now); }
  /// Called with the key of the waiters to wake when what they wait for arrives: a message
  /// for a workflow (its id), an event ("e:" and its id), a child's end (its parent's id).
  void notify(std::function<void(const std::string&)> poke) { poke_ = std::move(poke); }

  /// Where transactional steps run (the test kit's database); unset: they are refused.
  using transaction_source = std::function<asio::awaitable<std::unique_ptr<journal_transaction>>(
      const std::string& id, int seq, const std::string& name)>;
  void use_transactions(transaction_source s) { transactions_ = std::move(s); }
  /// Journals a transactional step's row, with `commit` (the step's SQL transaction's COMMIT)
  /// run after the fence check and before the row is written: the SQL and the row commit
  /// together or not at all, as the engine's one-transaction commit does (a crash staged before
  /// the row rolls the transaction back).
  DURABLE_DECL asio::awaitable<void> append_with(const std::string& id, std::int64_t epoch,
                                                 step_row row,
                                                 std::function<asio::awaitable<void>()> commit);

  /// Stages a crash (see crash_point); one at a time.
  void crash_at(crash_point p) { crash_ = std::move(p); }
  /// Whether the staged crash happened: the process that ran into it is dead.
  [[nodiscard]] bool crashed() const noexcept { return crashed_; }
  /// The dead process is gone (its runs abandoned): writes are accepted again, from the runs
  /// of a new one (each claim bumps the epoch, so nothing of the old runs could land anyway).
  void revive() noexcept {
    crashed_ = false;
    crash_.reset();
  }

  /// What runs see at their next step boundary (stopping: the engine shuts down).
  void set_standing(run_standing s) noexcept { standing_ = s; }
  /// Writes so far (each operation that writes counts once).
  [[nodiscard]] int writes() const noexcept { return writes_; }

  // ---- the journal interface ----------------------------------------------------------------

  [[nodiscard]] run_standing standing() const noexcept override { return standing_; }
  [[nodiscard]] bool executes() const noexcept override { return !replay_only_; }
  /// A journal that only replays: a step without a row is refused (journal_exhausted), as a
  /// check of code against a journal from production needs.
  void replay_only(bool only) noexcept { replay_only_ = only; }
  [[nodiscard]] bool unloads() const noexcept override { return false; }
  [[nodiscard]] DURABLE_DECL io_judgement judge(const std::exception& e) const override;
  /// This host's wall clock: the journal lives in this process.
  [[nodiscard]] DURABLE_DECL double now() const noexcept override;

  DURABLE_DECL asio::awaitable<void> append(const std::string& id, std::int64_t epoch,
                                            step_row row) override;
  DURABLE_DECL asio::awaitable<void> record_attempt(const std::string& id, std::int64_t epoch,
                                                    attempt_row a) override;
  DURABLE_DECL asio::awaitable<std::unique_ptr<journal_transaction>> begin_transaction(
      const std::string& id, int seq, const std::string& name) override;
  DURABLE_DECL asio::awaitable<void> sleep(const std::string& id, std::int64_t epoch,
                                           double pause_ms) override;
  DURABLE_DECL asio::awaitable<unload_answer> unload_to_wait(const std::string& id,
                                                             std::int64_t epoch,
                                                             const wait_target& what,
                                                             double recheck_ms) override;
  DURABLE_DECL asio::awaitable<continued_generation> continue_as_new(
      const std::string& id, std::int64_t epoch, const std::string& inputs) override;
  DURABLE_DECL asio::awaitable<taken_message> take_message(const std::string& id,
                                                           std::int64_t epoch, int seq,
                                                           const std::string& topic,
                                                           double started_at) override;
  DURABLE_DECL asio::awaitable<bool> send(const std::string& id, std::int64_t epoch, int seq,
                                          const std::string& to, const std::string& topic,
                                          const std::string& payload, const std::string& key,
                                          double started_at) override;
  DURABLE_DECL asio::awaitable<bool> set_event(const std::string& id, std::int64_t epoch, int seq,
                                               const std::string& key, const std::string& value,
                                               double started_at) override;
  DURABLE_DECL asio::awaitable<std::optional<std::string>> get_event(
      const std::string& workflow_id, const std::string& key) override;
  DURABLE_DECL asio::awaitable<stream_write_outcome> write_stream(
      const std::string& id, std::int64_t epoch, int seq, const std::string& key,
      const std::optional<std::string>& value, double started_at) override;
  DURABLE_DECL asio::awaitable<bool> start_child(const std::string& id, std::int64_t epoch, int seq,
                                                 const std::string& child_id,
                                                 const std::string& name, const std::string& inputs,
                                                 double started_at, const std::string& app_version,
                                                 const std::string& span_id) override;
  DURABLE_DECL asio::awaitable<std::optional<workflow_outcome>> workflow(
      const std::string& workflow_id) override;

private:
  /// Throws the injected fault, while one is due (before every write and read).
  DURABLE_DECL void inject();
  /// Before every write: an injected fault, then the fence (I3). Returns the owner.
  DURABLE_DECL workflow_record& writable(const std::string& id, std::int64_t epoch);
  /// steps' primary key: a second row for one step number is refused (nothing written).
  DURABLE_DECL void check_free(const workflow_record& w, const std::string& id, int seq) const;

  /// A staged crash that is due at (id, seq) and `m`: dies (throws process_died).
  DURABLE_DECL void crash_if(const std::string& id, int seq, crash_moment m);
  DURABLE_DECL void poke(const std::string& key);

  std::map<std::string, workflow_record, std::less<>> workflows_;
  std::function<double()> clock_;
  std::function<void(const std::string&)> poke_;
  transaction_source transactions_;
  std::optional<crash_point> crash_;
  bool crashed_ = false;
  bool replay_only_ = false;
  run_standing standing_ = run_standing::owned;
  std::optional<fault> fault_;
  int faults_left_ = 0;
  int writes_ = 0;
};

}  // namespace durable::detail

#if defined(DURABLE_HEADER_ONLY)
#include "durable/detail/replay/impl/memory_journal.ipp"
#endif
