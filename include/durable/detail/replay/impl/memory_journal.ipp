// The in-memory journal (detail/replay/memory_journal.hpp): included at its end when
// header-only, by durable/src.hpp otherwise.
#pragma once

#include <chrono>

namespace durable::detail {

namespace memory_journal_detail {
inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}
/// A JSON string literal of `s` (ids are plain text; quotes and backslashes escaped).
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[(c >> 4) & 0xf];
      out += hex[c & 0xf];
    } else {
      out += c;
    }
  }
  return out + "\"";
}
}  // namespace memory_journal_detail

DURABLE_DECL memory_journal::workflow_record& memory_journal::create(const std::string& id,
                                                                     const std::string& name,
                                                                     std::string inputs) {
  if (workflows_.contains(id))
    throw error("memory journal: workflow '" + id + "' exists already; pick another id");
  workflow_record& w = workflows_[id];
  w.name = name;
  w.inputs = std::move(inputs);
  return w;
}

DURABLE_DECL memory_journal::workflow_record& memory_journal::at(const std::string& id) {
  auto it = workflows_.find(id);
  if (it == workflows_.end()) throw error("memory journal: no workflow '" + id + "'");
  return it->second;
}
DURABLE_DECL const memory_journal::workflow_record& memory_journal::at(
    const std::string& id) const {
  auto it = workflows_.find(id);
  if (it == workflows_.end()) throw error("memory journal: no workflow '" + id + "'");
  return it->second;
}

DURABLE_DECL std::optional<std::string> memory_journal::claim(const std::string& id, cursor& c) {
  workflow_record& w = at(id);
  ++w.epoch;
  w.status = to_string(workflow_state::running);
  c.id = id;
  c.name = w.name;
  c.epoch = w.epoch;
  c.generation = w.generation;
  for (const auto& [seq, row] : w.steps) {
    journal_entry e{row.name, row.kind, row.error.has_value(), row.output.value_or(""),
                    row.error.value_or("")};
    if (auto bad = c.add_entry(seq, std::move(e))) return bad;
  }
  for (const recorded_attempt& a : w.attempts) {
    if (w.steps.contains(a.row.seq)) continue;  // attempts_load: only steps without a row
    attempt_history& h = c.attempts[a.row.seq];
    if (h.name.empty()) {
      h.name = a.row.name;
      h.kind = a.row.kind;
    }
    const std::optional<std::string> err =
        a.row.error.empty() ? std::nullopt : std::optional<std::string>(a.row.error);
    h.add(a.row.attempt, a.row.outcome, err, a.next_attempt_at);
  }
  return std::nullopt;
}

DURABLE_DECL bool memory_journal::finish(const std::string& id, std::int64_t epoch,
                                         std::string status, std::optional<std::string> output,
                                         std::optional<std::string> error,
                                         std::optional<std::string> reason) {
  if (crashed_) throw process_died("the process died (a crash the test kit staged)");
  // Staged for the end of a run that ended by itself (the harness's own parks are not).
  if (crash_ && (status == to_string(workflow_state::succeeded) ||
                 status == to_string(workflow_state::failed) ||
                 status == to_string(workflow_state::dead_letter)))
    crash_if(id, finish_seq, crash_moment::before_finish);
  workflow_record& w = at(id);
  if (w.epoch != epoch) return false;
  w.status = std::move(status);
  w.output = std::move(output);
  w.error = std::move(error);
  w.reason = std::move(reason);
  ++writes_;
  if (w.parent) poke(*w.parent);  // its parent looks again (it may wait for this end)
  return true;
}

DURABLE_DECL void memory_journal::deliver(const std::string& to, const std::string& topic,
                                          std::string payload, std::optional<std::string> key) {
  workflow_record& w = at(to);
  if (key)
    for (const message& m : w.inbox)
      if (m.key == key) return;  // once per key
  w.inbox.push_back(message{topic, std::move(payload), std::move(key), std::nullopt});
  poke(to);
}

DURABLE_DECL double memory_journal::now() const noexcept {
  return clock_ ? clock_() : memory_journal_detail::now_seconds();
}

DURABLE_DECL void memory_journal::poke(const std::string& key) {
  if (poke_) poke_(key);
}

DURABLE_DECL void memory_journal::crash_if(const std::string& id, int seq, crash_moment m) {
  if (!crash_ || crash_->id != id || crash_->seq != seq || crash_->at != m) return;
  crashed_ = true;
  if (m == crash_moment::before_finish)
    throw process_died("the test kit killed the process before the end of workflow '" + id +
                       "' was recorded");
  throw process_died("the test kit killed the process at step " + std::to_string(seq) +
                     " of workflow '" + id + "'");
}

DURABLE_DECL io_judgement memory_journal::judge(const std::exception& e) const {
  if (const auto* f = dynamic_cast<const fault*>(&e)) return {f->permanent(), f->what()};
  // A refusal of this journal (a repeated step number, an unknown workflow) recurs.
  return {true, e.what()};
}

DURABLE_DECL void memory_journal::inject() {
  if (crashed_) throw process_died("the process died (a crash the test kit staged)");
  if (faults_left_ > 0 && fault_) {
    --faults_left_;
    throw *fault_;
  }
}

DURABLE_DECL memory_journal::workflow_record& memory_journal::writable(const std::string& id,
                                                                       std::int64_t epoch) {
  inject();
  auto it = workflows_.find(id);
  if (it == workflows_.end() || it->second.epoch != epoch)
    throw journal_fenced("workflow " + id + " is not owned under epoch " + std::to_string(epoch));
  ++writes_;
  return it->second;
}

DURABLE_DECL void memory_journal::check_free(const workflow_record& w, const std::string& id,
                                             int seq) const {
  if (w.steps.contains(seq))
    throw error("memory journal: workflow '" + id + "' has a row for step " + std::to_string(seq) +
                " already (the steps table's primary key refuses a second one)");
}

DURABLE_DECL asio::awaitable<void> memory_journal::append(const std::string& id, std::int64_t epoch,
                                                          step_row row) {
  workflow_record& w = writable(id, epoch);
  check_free(w, id, row.seq);
  const int seq = row.seq;
  crash_if(id, seq, crash_moment::before_row);
  w.steps.emplace(seq, std::move(row));
  crash_if(id, seq, crash_moment::after_row);
  co_return;
}

DURABLE_DECL asio::awaitable<void> memory_journal::record_attempt(const std::string& id,
                                                                  std::int64_t epoch,
                                                                  attempt_row a) {
  workflow_record& w = writable(id, epoch);
  std::optional<double> next;
  if (a.pause_ms) next = now() + *a.pause_ms / 1000.0;
  const int seq = a.seq;
  const bool retrying = a.outcome == to_string(attempt_outcome::retrying);
  w.attempts.push_back(recorded_attempt{std::move(a), next});
  if (retrying) crash_if(id, seq, crash_moment::in_backoff);
  co_return;
}

DURABLE_DECL asio::awaitable<std::unique_ptr<journal_transaction>>
memory_journal::begin_transaction(const std::string& id, int seq, const std::string& name) {
  if (transactions_) co_return co_await transactions_(id, seq, name);
  throw journal_unsupported(
      "workflow '" + id + "': transactional step " + std::to_string(seq) + " '" + name +
      "' needs a database, and this journal keeps its rows in memory: nothing was run or "
      "committed. Give the test a database (durable::testing::harness_options::database), or "
      "test the step's SQL against a real server");
}

DURABLE_DECL asio::awaitable<void> memory_journal::append_with(
    const std::string& id, std::int64_t epoch, step_row row,
    std::function<asio::awaitable<void>()> commit) {
  {
    workflow_record& w = writable(id, epoch);
    check_free(w, id, row.seq);
    crash_if(id, row.seq, crash_moment::before_row);  // the transaction rolls back with it
  }
  co_await commit();
  // Committed: the row is too, as the engine's one COMMIT holds both, even if the process
  // died meanwhile (a crash staged in a concurrent branch) or a newer epoch took over.
  workflow_record& w = at(id);
  const int seq = row.seq;
  w.steps.emplace(seq, std::move(row));
  ++writes_;
  crash_if(id, seq, crash_moment::after_row);
}

DURABLE_DECL asio::awaitable<void> memory_journal::sleep(const std::string& id, std::int64_t epoch,
                                                         double) {
  workflow_record& w = writable(id, epoch);
  w.status = to_string(workflow_state::sleeping);
  ++w.epoch;  // unloaded: no run owns it until it is claimed again
  co_return;
}

DURABLE_DECL asio::awaitable<unload_answer> memory_journal::unload_to_wait(const std::string& id,
                                                                           std::int64_t epoch,
                                                                           const wait_target&,
                                                                           double) {
  try {
    (void)writable(id, epoch);
  } catch (const journal_fenced&) {
    co_return unload_answer::fenced;
  }
  co_return unload_answer::busy;  // never unloads: the run waits on
}

DURABLE_DECL asio::awaitable<continued_generation> memory_journal::continue_as_new(
    const std::string& id, std::int64_t epoch, const std::string& inputs) {
  workflow_record& w = writable(id, epoch);
  w.steps.clear();
  w.attempts.clear();
  std::erase_if(w.inbox, [](const message& m) { return m.consumed_seq && !m.key; });
  w.inputs = inputs;
  ++w.generation;
  ++w.epoch;
  w.status = to_string(workflow_state::running);
  w.output.reset();
  w.error.reset();
  w.reason.reset();
  co_return continued_generation{w.epoch, w.generation};
}

DURABLE_DECL asio::awaitable<taken_message> memory_journal::take_message(const std::string& id,
                                                                         std::int64_t epoch,
                                                                         int seq,
                                                                         const std::string& topic,
                                                                         double started_at) {
  // As message_take: without a message nothing is written (nor fenced); with one, the take and
  // its row are one fenced write.
  auto it = workflows_.find(id);
  if (it == workflows_.end()) co_return taken_message{};
  auto& inbox = it->second.inbox;
  const auto unconsumed = [&topic](const message& m) {
    return m.topic == topic && !m.consumed_seq;
  };
  for (auto mi = inbox.begin(); mi != inbox.end(); ++mi) {
    message& m = *mi;
    if (!unconsumed(m)) continue;
    workflow_record& w = writable(id, epoch);
    check_free(w, id, seq);
    crash_if(id, seq, crash_moment::before_row);
    m.consumed_seq = seq;
    std::string out = "[" + m.payload + "]";
    w.steps.emplace(seq, step_row{seq, topic, std::string(to_string(step_kind::recv)), out,
                                  std::nullopt, 1, started_at});
    crash_if(id, seq, crash_moment::after_row);
    co_return taken_message{std::move(out), std::any_of(std::next(mi), inbox.end(), unconsumed)};
  }
  co_return taken_message{};
}

DURABLE_DECL asio::awaitable<bool> memory_journal::send(const std::string& id, std::int64_t epoch,
                                                        int seq, const std::string& to,
                                                        const std::string& topic,
                                                        const std::string& payload,
                                                        const std::string& key, double started_at) {
  if (!workflows_.contains(to)) co_return false;
  workflow_record& w = writable(id, epoch);
  check_free(w, id, seq);
  crash_if(id, seq, crash_moment::before_row);
  deliver(to, topic, payload, key);
  w.steps.emplace(seq,
                  step_row{seq, topic, std::string(to_string(step_kind::send)),
                           memory_journal_detail::json_string(to), std::nullopt, 1, started_at});
  crash_if(id, seq, crash_moment::after_row);
  co_return true;
}

DURABLE_DECL asio::awaitable<bool> memory_journal::set_event(const std::string& id,
                                                             std::int64_t epoch, int seq,
                                                             const std::string& key,
                                                             const std::string& value,
                                                             double started_at) {
  workflow_record& w = writable(id, epoch);
  check_free(w, id, seq);
  crash_if(id, seq, crash_moment::before_row);
  w.events[key] = value;
  w.steps.emplace(seq, step_row{seq, key, std::string(to_string(step_kind::set_event)),
                                std::nullopt, std::nullopt, 1, started_at});
  poke("e:" + id);
  crash_if(id, seq, crash_moment::after_row);
  co_return true;
}

DURABLE_DECL asio::awaitable<std::optional<std::string>> memory_journal::get_event(
    const std::string& workflow_id, const std::string& key) {
  inject();
  auto w = workflows_.find(workflow_id);
  if (w == workflows_.end()) co_return std::nullopt;
  auto e = w->second.events.find(key);
  if (e == w->second.events.end()) co_return std::nullopt;
  co_return e->second;
}

DURABLE_DECL asio::awaitable<stream_write_outcome> memory_journal::write_stream(
    const std::string& id, std::int64_t epoch, int seq, const std::string& key,
    const std::optional<std::string>& value, double started_at) {
  workflow_record& w = writable(id, epoch);
  auto& rows = w.streams[key];
  const bool closed = !rows.empty() && !rows.back().value;
  if (closed && value)
    co_return stream_write_outcome{false, rows.back().position, rows.back().seq,
                                   static_cast<int>(rows.back().generation)};
  check_free(w, id, seq);
  crash_if(id, seq, crash_moment::before_row);
  const std::int64_t offset = rows.empty() ? 0 : rows.back().position + (closed ? 0 : 1);
  if (!closed) rows.push_back(stream_row{offset, value, w.generation, seq});
  const auto kind = value ? step_kind::write_stream : step_kind::close_stream;
  w.steps.emplace(seq, step_row{seq, key, std::string(to_string(kind)), std::to_string(offset),
                                std::nullopt, 1, started_at});
  poke("s:" + id);
  crash_if(id, seq, crash_moment::after_row);
  co_return stream_write_outcome{true, offset, -1, -1};
}

DURABLE_DECL asio::awaitable<bool> memory_journal::start_child(
    const std::string& id, std::int64_t epoch, int seq, const std::string& child_id,
    const std::string& name, const std::string& inputs, double started_at, const std::string&,
    const std::string&) {
  if (auto other = workflows_.find(child_id);
      other != workflows_.end() && (other->second.parent != id || other->second.name != name))
    co_return false;  // the id is another workflow's
  workflow_record& w = writable(id, epoch);
  check_free(w, id, seq);
  crash_if(id, seq, crash_moment::before_row);
  if (!workflows_.contains(child_id)) {  // else a child left by a run whose row did not commit
    workflow_record& c = workflows_[child_id];
    c.name = name;
    c.inputs = inputs;
    c.status = to_string(workflow_state::sleeping);  // due at once for whoever runs `name`
    c.parent = id;
  }
  workflows_.at(id).steps.emplace(
      seq, step_row{seq, name, std::string(to_string(step_kind::child)),
                    memory_journal_detail::json_string(child_id), std::nullopt, 1, started_at});
  crash_if(id, seq, crash_moment::after_row);
  co_return true;
}

DURABLE_DECL asio::awaitable<std::optional<workflow_outcome>> memory_journal::workflow(
    const std::string& workflow_id) {
  inject();
  auto it = workflows_.find(workflow_id);
  if (it == workflows_.end()) co_return std::nullopt;
  const workflow_record& w = it->second;
  co_return workflow_outcome{w.name, w.status, w.output, w.error, w.reason};
}

}  // namespace durable::detail
