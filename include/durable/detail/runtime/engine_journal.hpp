// The engine's journal: the replay core's journal interface (detail/replay/journal.hpp) over
// PostgreSQL. Step rows share commits with other runs through the group committer; every other
// write is one fenced statement of the store; reads take a pooled connection. One per engine,
// shared by its runs (each call names its run).
#pragma once

#include <asio/awaitable.hpp>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "durable/detail/config.hpp"
#include "durable/detail/group_commit.hpp"
#include "durable/detail/replay/journal.hpp"
#include "durable/detail/runtime/server_clock.hpp"
#include "durable/pg/pool.hpp"
#include "durable/store.hpp"

namespace durable::detail {

class engine_journal final : public journal {
public:
  /// Lends the engine's services and flags; they outlive every run.
  engine_journal(pg::pool& pool, group_committer& committer, const store& st, const bool& stopping,
                 const bool& lease_expired, const server_clock& clock) noexcept
      : pool_(pool),
        committer_(committer),
        st_(st),
        stopping_(stopping),
        lease_(lease_expired),
        clock_(clock) {}

  [[nodiscard]] run_standing standing() const noexcept override {
    if (stopping_) return run_standing::stopping;
    if (lease_) return run_standing::lease_expired;
    return run_standing::owned;
  }
  [[nodiscard]] bool executes() const noexcept override { return true; }
  [[nodiscard]] bool unloads() const noexcept override { return true; }
  [[nodiscard]] DURABLE_DECL io_judgement judge(const std::exception& e) const override;
  /// The server's clock (the lease keeper reads it at registration and every heartbeat).
  [[nodiscard]] double now() const noexcept override { return clock_.now(); }
  [[nodiscard]] double earliest_now() const noexcept override { return clock_.earliest(); }
  [[nodiscard]] double latest_now() const noexcept override { return clock_.latest(); }

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
  /// Runs a statement that writes for a run: through the group committer (its commit shared).
  /// The fence's DU001 becomes journal_fenced.
  DURABLE_DECL asio::awaitable<pg::result> write(pg::statement st);

  pg::pool& pool_;
  group_committer& committer_;
  const store& st_;
  const bool& stopping_;
  const bool& lease_;
  const server_clock& clock_;
};

}  // namespace durable::detail
