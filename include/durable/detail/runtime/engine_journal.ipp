// The engine's journal (detail/runtime/engine_journal.hpp): included by detail/runtime/parts.ipp.
#pragma once

#include "durable/detail/failure.hpp"
#include "durable/detail/runtime/engine_journal.hpp"
#include "durable/pg/connection.hpp"

namespace durable::detail {

DURABLE_DECL io_judgement engine_journal::judge(const std::exception& e) const {
  return {classify(e) == io_verdict::permanent, describe_io_failure(e)};
}

DURABLE_DECL asio::awaitable<pg::result> engine_journal::write(pg::statement st) {
  try {
    co_return co_await committer_.run(std::move(st));
  } catch (const pg::sql_error& e) {
    const fence_verdict v = store::verdict(e);
    if (v.fenced_out()) throw journal_fenced(v.server_message);
    throw;
  }
}

DURABLE_DECL asio::awaitable<void> engine_journal::append(const std::string& id, std::int64_t epoch,
                                                          step_row row) {
  const std::string status(to_string(row.error ? step_status::failed : step_status::succeeded));
  group_committer::journal_row r{id,
                                 epoch,
                                 row.seq,
                                 std::move(row.name),
                                 std::move(row.kind),
                                 status,
                                 std::move(row.output),
                                 std::move(row.error),
                                 row.attempts,
                                 row.started_at};
  fence_verdict v;
  const int seq = r.seq;
  bool taken = false;
  try {
    v = co_await committer_.append(std::move(r));
  } catch (const pg::unique_violation&) {
    taken = true;  // (no co_await in a handler)
  } catch (const pg::sql_error& e) {
    const fence_verdict refused = store::verdict(e);
    if (refused.fenced_out()) throw journal_fenced(refused.server_message);
    throw;
  }
  if (taken) {
    // The step has a row this run did not load. Only the workflow's owner may claim it again
    // to replay that row: a run that lost the workflow meets the new owner's row here, and
    // stops.
    std::optional<std::int64_t> owner_epoch;
    {
      auto conn = co_await pool_.acquire();
      if (auto w = co_await store::fetch_one(*conn, st_.workflow_get(id))) owner_epoch = w->epoch;
    }
    if (!owner_epoch) throw journal_fenced("the workflow no longer exists");
    if (*owner_epoch != epoch)
      throw journal_fenced("it is owned under epoch " + std::to_string(*owner_epoch) +
                           " now, and that run journaled this step first");
    throw journal_row_taken(
        "workflow '" + id + "': step " + std::to_string(seq) +
        " already has a journal row, written by a run that lost the workflow to this one while "
        "its write was in flight; nothing was written, and the workflow is claimed again to "
        "replay that row");
  }
  if (!v.written()) throw journal_fenced(v.server_message);
}

DURABLE_DECL asio::awaitable<void> engine_journal::record_attempt(const std::string& id,
                                                                  std::int64_t epoch,
                                                                  attempt_row a) {
  const std::optional<int> allowed =
      a.max_attempts > 0 ? std::optional<int>(a.max_attempts) : std::nullopt;
  fenced_write w = st_.attempt_record(id, epoch, a.seq, a.attempt, a.name, a.kind, a.outcome,
                                      a.error, a.started_at, a.pause_ms, a.unloads, allowed);
  const pg::result r = co_await write(std::move(w.st));
  if (w.verdict(r).fenced_out()) throw journal_fenced();
}

/// A transactional step's transaction on a pooled connection (the connection goes back to the
/// pool after the transaction ends: members are destroyed in reverse order).
class engine_transaction final : public journal_transaction {
public:
  engine_transaction(pg::pool::lease conn, const store& st)
      : conn_(std::move(conn)), st_(st), tx_(conn_->begin()) {}
  pg::transaction& sql() override { return tx_; }
  asio::awaitable<void> commit(const std::string& id, std::int64_t epoch, step_row row) override {
    // The journal row rides in the same round trip as COMMIT, inside the transaction: the
    // user's writes and the row commit together or not at all.
    const std::string status(to_string(row.error ? step_status::failed : step_status::succeeded));
    fenced_write write = st_.step_append(id, epoch, row.seq, row.name, row.kind, status, row.output,
                                         row.error, row.attempts, row.started_at);
    std::vector<pg::statement> rows;
    rows.push_back(std::move(write.st));
    try {
      co_await tx_.commit(std::move(rows));
    } catch (const pg::sql_error& e) {
      const fence_verdict v = store::verdict(e);
      if (v.fenced_out()) throw journal_fenced(v.server_message);
      throw;
    }
  }

private:
  pg::pool::lease conn_;
  const store& st_;
  pg::transaction tx_;
};

DURABLE_DECL asio::awaitable<std::unique_ptr<journal_transaction>>
engine_journal::begin_transaction(const std::string&, int, const std::string&) {
  pg::pool::lease conn = co_await pool_.acquire();
  co_return std::make_unique<engine_transaction>(std::move(conn), st_);
}

DURABLE_DECL asio::awaitable<void> engine_journal::sleep(const std::string& id, std::int64_t epoch,
                                                         double pause_ms) {
  fenced_write w = st_.workflow_sleep(id, epoch, pause_ms);
  const pg::result r = co_await write(std::move(w.st));
  if (w.verdict(r).fenced_out()) throw journal_fenced();
}

DURABLE_DECL asio::awaitable<unload_answer> engine_journal::unload_to_wait(const std::string& id,
                                                                           std::int64_t epoch,
                                                                           const wait_target& what,
                                                                           double recheck_ms) {
  const store::wait_target target{what.kind, what.a, what.b};
  auto q = st_.workflow_wait(id, epoch, target, recheck_ms);
  const pg::result res = co_await write(std::move(q.st));
  const auto r = store::first<store::unload_outcome>(res);
  if (!r || r->outcome == "fenced") co_return unload_answer::fenced;
  co_return r->outcome == "unloaded" ? unload_answer::unloaded : unload_answer::busy;
}

DURABLE_DECL asio::awaitable<continued_generation> engine_journal::continue_as_new(
    const std::string& id, std::int64_t epoch, const std::string& inputs) {
  auto q = st_.workflow_continue(id, epoch, inputs);
  const pg::result r = co_await write(std::move(q.st));
  const auto next = store::first<store::continued_workflow>(r);
  if (!next) throw journal_fenced();  // cannot happen: the function raises DU001 instead
  co_return continued_generation{next->epoch, next->generation};
}

DURABLE_DECL asio::awaitable<taken_message> engine_journal::take_message(const std::string& id,
                                                                         std::int64_t epoch,
                                                                         int seq,
                                                                         const std::string& topic,
                                                                         double started_at) {
  auto q = st_.message_take(id, epoch, seq, topic, started_at);
  const pg::result r = co_await write(std::move(q.st));
  if (auto m = store::first<store::taken_message>(r))
    co_return taken_message{std::move(m->json), m->more};
  co_return taken_message{};
}

DURABLE_DECL asio::awaitable<bool> engine_journal::send(const std::string& id, std::int64_t epoch,
                                                        int seq, const std::string& to,
                                                        const std::string& topic,
                                                        const std::string& payload,
                                                        const std::string& key, double started_at) {
  auto q = st_.message_send_journaled(to, topic, payload, key, id, epoch, seq, started_at);
  const pg::result r = co_await write(std::move(q.st));
  const auto out = store::first<store::send_outcome>(r);
  co_return out && out->recipient_exists;
}

DURABLE_DECL asio::awaitable<bool> engine_journal::set_event(const std::string& id,
                                                             std::int64_t epoch, int seq,
                                                             const std::string& key,
                                                             const std::string& value,
                                                             double started_at) {
  auto q = st_.event_set(id, epoch, seq, key, value, started_at);
  const pg::result r = co_await write(std::move(q.st));
  co_return store::first<store::written_row>(r).has_value();
}

DURABLE_DECL asio::awaitable<std::optional<std::string>> engine_journal::get_event(
    const std::string& workflow_id, const std::string& key) {
  auto q = st_.event_get(workflow_id, key);
  auto conn = co_await pool_.acquire();
  auto v = co_await store::fetch_one(*conn, std::move(q));
  if (!v) co_return std::nullopt;
  co_return std::move(v->json);
}

DURABLE_DECL asio::awaitable<stream_write_outcome> engine_journal::write_stream(
    const std::string& id, std::int64_t epoch, int seq, const std::string& key,
    const std::optional<std::string>& value, double started_at) {
  const std::string kind(to_string(value ? step_kind::write_stream : step_kind::close_stream));
  auto q = st_.stream_write(id, epoch, seq, key, value, started_at, kind, st_.wait_channel());
  const pg::result r = co_await write(std::move(q.st));
  const auto row = store::first<store::stream_appended>(r);
  if (!row)
    throw error("workflow '" + id + "': step " + std::to_string(seq) + " (stream '" + key +
                "'): the append returned no row");
  co_return stream_write_outcome{row->written, row->position, row->closed_by.value_or(-1),
                                 row->closed_generation.value_or(-1)};
}

DURABLE_DECL asio::awaitable<bool> engine_journal::start_child(
    const std::string& id, std::int64_t epoch, int seq, const std::string& child_id,
    const std::string& name, const std::string& inputs, double started_at,
    const std::string& app_version, const std::string& span_id) {
  auto q =
      st_.child_start(child_id, name, inputs, id, epoch, seq, started_at, app_version, span_id);
  const pg::result r = co_await write(std::move(q.st));
  co_return store::first<store::written_row>(r).has_value();
}

DURABLE_DECL asio::awaitable<std::optional<workflow_outcome>> engine_journal::workflow(
    const std::string& workflow_id) {
  auto q = st_.workflow_get(workflow_id);
  auto conn = co_await pool_.acquire();
  auto w = co_await store::fetch_one(*conn, std::move(q));
  if (!w) co_return std::nullopt;
  co_return workflow_outcome{std::move(w->name), std::move(w->status), std::move(w->output),
                             std::move(w->error), std::move(w->reason)};
}

}  // namespace durable::detail
