// Messages, events and child workflows of durable/context.hpp (ctx.recv, ctx.send,
// ctx.set_event, ctx.get_event, child workflows): included at the end of impl/context.ipp.
#pragma once

#include "durable/detail/spans.hpp"
#include "durable/trace.hpp"

namespace durable::detail {

/// Whether a take of `topic` would find nothing: the last one left none, and no send to this
/// workflow can have come since.
inline bool known_empty(const run_state& s, const std::string& topic) {
  const auto it = s.empty_topics.find(topic);
  return it != s.empty_topics.end() && s.waiters && s.waiters->quiet_since(s.id, it->second);
}

DURABLE_DECL asio::awaitable<bool> take_message(run_state& s, int seq, const std::string& topic,
                                                double started, std::optional<std::string>& got) {
  reserve_row(s, seq, topic);  // journaled if a message is there
  const std::uint64_t mark = s.waiters ? s.waiters->mark(s.id) : 0;
  taken_message m =
      co_await journaling(s, seq, topic, io_of(s).take_message(s.id, s.epoch, seq, topic, started));
  if (m.more)
    s.empty_topics.erase(topic);
  else
    s.empty_topics.insert_or_assign(topic, mark);
  if (m.message) {
    got = std::move(m.message);
    co_return true;
  }
  release_row(s);
  co_return false;
}

DURABLE_DECL asio::awaitable<std::string> receive(run_state& s, int seq, const std::string& topic,
                                                  std::chrono::milliseconds timeout) {
  const std::string kind = std::string(to_string(step_kind::recv));
  if (const journal_entry* e = replay_entry(s, seq + 1, topic, kind)) {
    if (s.counters) ++s.counters->steps_replayed;
    co_return e->output;
  }
  require_live(s, seq + 1, topic);
  if (s.anys_running > 0) {
    throw misuse(s, "workflow '" + s.id + "' (" + s.name + "): ctx.recv('" + topic +
                        "') is a branch of ctx.any. A losing recv may already have consumed its "
                        "message when the winner is known, and the message would be lost. Wait "
                        "for one topic with a timeout (ctx.recv(topic, timeout)) instead. The "
                        "workflow is parked: fix the code, then resume it");
  }
  const double started = journal_started_at(s);
  span_guard waiting(s, span_kind::wait, seq + 1, topic, kind);
  std::optional<std::string> got;
  const std::function<asio::awaitable<bool>()> look = [&s, seq, &topic, started, &got] {
    return take_message(s, seq + 1, topic, started, got);
  };
  // A receive that will wait does not send a take that would find nothing: the wait below is
  // poked by the next send (and looks once at its deadline if nothing poked it). One that
  // will not wait (no timeout) always looks.
  bool arrived = false;
  if (timeout.count() <= 0 || !known_empty(s, topic)) arrived = co_await look();
  if (!arrived && timeout.count() > 0) {
    const std::optional<double> deadline = co_await wait_deadline(s, seq, topic, timeout);
    const std::string key = s.id;
    const wait_target what{"msg", topic, {}};
    const std::function<bool()> nothing_new = [&s, &topic] { return known_empty(s, topic); };
    arrived = co_await wait_for_arrival(s, seq + 1, topic, key, what, deadline, look, nothing_new);
  }
  if (!arrived) {
    const std::string none = "null";
    co_await journal_value(s, seq + 1, topic, kind, none, started);
    waiting.end(false, {});
    co_return none;
  }
  waiting.end(false, {});
  if (s.counters) ++s.counters->steps_executed;
  co_return *got;
}

DURABLE_DECL asio::awaitable<void> send_message(run_state& s, int seq, const std::string& to,
                                                const std::string& topic,
                                                const std::string& payload) {
  const std::string kind = std::string(to_string(step_kind::send));
  if (const journal_entry* e = replay_entry(s, seq, topic, kind)) {
    replay_value<void>(s, seq, *e);
    co_return;
  }
  require_live(s, seq, topic);
  check_value_size(s, payload.size(),
                   "the message of step " + std::to_string(seq) + " (send '" + topic + "')",
                   "the send runs again");
  const double started = journal_started_at(s);
  const std::string key = s.key(seq);
  span_guard sending(s, span_kind::step, seq, topic, kind);
  reserve_row(s, seq, topic);
  const bool delivered = co_await journaling(
      s, seq, topic, io_of(s).send(s.id, s.epoch, seq, to, topic, payload, key, started));
  if (delivered) {
    sending.end(false, {});
    if (s.counters) ++s.counters->steps_executed;
    co_return;
  }
  release_row(s);  // nothing journaled: the failure below is
  // No such workflow: the step fails for good, journaled so that replays fail alike.
  const std::string type = "durable::error";
  const std::string message = "workflow '" + s.id + "': step " + std::to_string(seq) + " sends '" +
                              topic + "' to workflow '" + to + "', which does not exist";
  const std::optional<std::string> no_output;
  const std::optional<std::string> err = captured_error{type, message}.to_json();
  co_await append(s, seq, topic, kind, no_output, err, 1, started);
  throw step_failed(s.id, seq, topic, type, message);
}

DURABLE_DECL asio::awaitable<void> publish_event(run_state& s, int seq, const std::string& key,
                                                 const std::string& value) {
  const std::string kind = std::string(to_string(step_kind::set_event));
  if (const journal_entry* e = replay_entry(s, seq, key, kind)) {
    replay_value<void>(s, seq, *e);
    co_return;
  }
  require_live(s, seq, key);
  check_value_size(s, value.size(),
                   "the value of step " + std::to_string(seq) + " (set_event '" + key + "')",
                   "the step runs again");
  span_guard publishing(s, span_kind::step, seq, key, kind);
  reserve_row(s, seq, key);
  const bool published = co_await journaling(
      s, seq, key, io_of(s).set_event(s.id, s.epoch, seq, key, value, journal_started_at(s)));
  if (!published) throw error("workflow '" + s.id + "': event '" + key + "' was not published");
  publishing.end(false, {});
  if (s.counters) ++s.counters->steps_executed;
}

/// Waits until no other write of stream `key` of this run is under way, and marks one as under
/// way (end_stream_write ends it).
inline asio::awaitable<std::shared_ptr<asio::steady_timer>> begin_stream_write(
    run_state& s, const std::string& key) {
  for (auto busy = s.streams_writing.find(key); busy != s.streams_writing.end();
       busy = s.streams_writing.find(key)) {
    const std::shared_ptr<asio::steady_timer> next = busy->second;
    asio::error_code ec;
    co_await next->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  auto mine = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor,
                                                   asio::steady_timer::time_point::max());
  s.streams_writing.emplace(key, mine);
  co_return mine;
}

inline void end_stream_write(run_state& s, const std::string& key,
                             const std::shared_ptr<asio::steady_timer>& mine) {
  s.streams_writing.erase(key);
  mine->cancel();  // the writers waiting look again; one of them goes next
}

DURABLE_DECL asio::awaitable<std::int64_t> append_to_stream(run_state& s, int seq, std::string key,
                                                            std::optional<std::string> value) {
  const step_kind k = value ? step_kind::write_stream : step_kind::close_stream;
  const std::string kind(to_string(k));
  if (const journal_entry* e = replay_entry(s, seq, key, kind))
    co_return replay_value<std::int64_t>(s, seq, *e);
  require_live(s, seq, key);
  const std::string what = "step " + std::to_string(seq) + " (" +
                           (value ? "write_stream" : "close_stream") + " '" + key + "')";
  if (key.empty())
    throw misuse(s, "workflow '" + s.id + "' (" + s.name + "): " + what +
                        " names no stream: the key is empty. Give every stream a name. The "
                        "workflow is parked: fix the code, then resume it");
  if (s.anys_running > 0) {
    throw misuse(s, "workflow '" + s.id + "' (" + s.name + "): " + what +
                        " is a branch of ctx.any. A losing branch's write may already have "
                        "reached the readers (or closed the stream) when the winner is known, "
                        "and a replay would not write it. Write after ctx.any returns instead. "
                        "The workflow is parked: fix the code, then resume it");
  }
  if (value) check_value_size(s, value->size(), "the value of " + what, "the step runs again");
  const double started = journal_started_at(s);
  span_guard writing(s, span_kind::step, seq, key, kind);
  reserve_row(s, seq, key);  // (before the turn: a full journal throws, holding no turn)
  const std::shared_ptr<asio::steady_timer> turn = co_await begin_stream_write(s, key);
  stream_write_outcome out;
  try {
    out = co_await journaling(s, seq, key,
                              io_of(s).write_stream(s.id, s.epoch, seq, key, value, started));
  } catch (...) {
    end_stream_write(s, key, turn);  // (not in a destructor: a frame destroyed unwound nothing)
    throw;
  }
  end_stream_write(s, key, turn);
  if (out.written) {
    writing.end(false, {});
    if (s.counters) ++s.counters->steps_executed;
    co_return out.offset;
  }
  release_row(s);  // nothing journaled: the failure below is
  // A value after the close: the step fails for good, journaled so that replays fail alike.
  const std::string type = "durable::error";
  const std::string by = out.closed_generation >= 0 && out.closed_generation != s.generation
                             ? "step " + std::to_string(out.closed_by) + " of generation " +
                                   std::to_string(out.closed_generation)
                             : "step " + std::to_string(out.closed_by);
  const std::string message =
      "workflow '" + s.id + "': " + what + " writes to a stream that " + by +
      " closed (at offset " + std::to_string(out.offset) +
      "); nothing was written. Write every value before close_stream(), or use another key";
  const std::optional<std::string> no_output;
  const std::optional<std::string> err = captured_error{type, message}.to_json();
  co_await append(s, seq, key, kind, no_output, err, 1, started);
  writing.end(true, message);
  throw step_failed(s.id, seq, key, type, message);
}

DURABLE_DECL asio::awaitable<bool> look_for_event(run_state& s, int seq, const std::string& name,
                                                  const std::string& workflow_id,
                                                  const std::string& key, double started,
                                                  std::optional<std::string>& got) {
  std::optional<std::string> v;
  try {
    v = co_await io_of(s).get_event(workflow_id, key);
  } catch (const std::exception& e) {
    note_read_failure(s, e);
    throw;
  }
  if (!v) co_return false;
  got = "[" + *v + "]";
  const std::string kind = std::string(to_string(step_kind::get_event));
  co_await journal_value(s, seq, name, kind, *got, started);
  co_return true;
}

DURABLE_DECL asio::awaitable<std::string> await_event(run_state& s, int seq,
                                                      const std::string& workflow_id,
                                                      const std::string& key,
                                                      std::chrono::milliseconds timeout) {
  const std::string kind = std::string(to_string(step_kind::get_event));
  const std::string name = workflow_id + ":" + key;
  if (const journal_entry* e = replay_entry(s, seq + 1, name, kind)) {
    if (s.counters) ++s.counters->steps_replayed;
    co_return e->output;
  }
  require_live(s, seq + 1, name);
  const double started = journal_started_at(s);
  span_guard waiting(s, span_kind::wait, seq + 1, name, kind);
  std::optional<std::string> got;
  const std::function<asio::awaitable<bool>()> look = [&s, seq, &name, &workflow_id, &key, started,
                                                       &got] {
    return look_for_event(s, seq + 1, name, workflow_id, key, started, got);
  };
  bool arrived = co_await look();
  if (!arrived && timeout.count() > 0) {
    const std::optional<double> deadline = co_await wait_deadline(s, seq, name, timeout);
    const std::string poke = "e:" + workflow_id;
    const wait_target what{"event", workflow_id, key};
    arrived = co_await wait_for_arrival(s, seq + 1, name, poke, what, deadline, look);
  }
  if (!arrived) {
    const std::string none = "null";
    co_await journal_value(s, seq + 1, name, kind, none, started);
    waiting.end(false, {});
    co_return none;
  }
  waiting.end(false, {});
  co_return *got;
}

DURABLE_DECL asio::awaitable<bool> look_for_child(run_state& s, int seq, const std::string& child,
                                                  double started, std::optional<std::string>& got) {
  std::optional<workflow_outcome> w;
  try {
    w = co_await io_of(s).workflow(child);
  } catch (const std::exception& e) {
    note_read_failure(s, e);
    throw;
  }
  const std::string kind = std::string(to_string(step_kind::child_result));
  if (!w) {
    const std::string message =
        "workflow '" + s.id + "': its child workflow '" + child + "' does not exist (deleted?)";
    throw error(message);
  }
  const std::optional<workflow_state> status = parse_workflow_state(w->status);
  if (status == workflow_state::succeeded) {
    got = w->output.value_or("null");
    co_await journal_value(s, seq, child, kind, *got, started);
    co_return true;
  }
  const bool cancelled = status == workflow_state::cancelled;
  if (status != workflow_state::failed && !cancelled) co_return false;
  // The child failed or was cancelled: journaled as this step's failure (step_failed here
  // and on every replay).
  auto j = nlohmann::json::parse(w->error.value_or("{}"), nullptr, false);
  if (!j.is_object()) j = nlohmann::json::object();
  const std::string type = j.value("type", cancelled ? "durable::cancelled" : "unknown");
  const std::string message = "child workflow '" + child + "' (" + w->name + ") " +
                              (cancelled ? "was cancelled" : "failed") + ": " +
                              j.value("message", w->reason.value_or(""));
  const std::optional<std::string> no_output;
  const std::optional<std::string> err = captured_error{type, message}.to_json();
  co_await append(s, seq, child, kind, no_output, err, 1, started);
  throw step_failed(s.id, seq, child, type, message);
}

DURABLE_DECL asio::awaitable<std::string> await_child(run_state& s, int seq,
                                                      const std::string& child) {
  const std::string kind = std::string(to_string(step_kind::child_result));
  if (const journal_entry* e = replay_entry(s, seq, child, kind)) {
    if (e->failed) replay_value<void>(s, seq, *e);  // throws step_failed
    if (s.counters) ++s.counters->steps_replayed;
    co_return e->output;
  }
  require_live(s, seq, child);
  const double started = journal_started_at(s);
  span_guard waiting(s, span_kind::wait, seq, child, kind);
  std::optional<std::string> got;
  const std::function<asio::awaitable<bool>()> look = [&s, seq, &child, started, &got] {
    return look_for_child(s, seq, child, started, got);
  };
  if (!co_await look()) {
    // The child ends on its own time: its end wakes this workflow (the trigger on workflows),
    // whether it waits here or unloaded.
    const std::string key = s.id;
    const wait_target what{"child", child, {}};
    const std::optional<double> no_deadline;
    co_await wait_for_arrival(s, seq, child, key, what, no_deadline, look);
  }
  waiting.end(false, {});
  if (s.counters) ++s.counters->steps_executed;
  co_return *got;
}

DURABLE_DECL asio::awaitable<std::string> start_child_workflow(run_state& s, int seq,
                                                               const std::string& name,
                                                               const std::string& inputs) {
  const std::string kind = std::string(to_string(step_kind::child));
  if (const journal_entry* e = replay_entry(s, seq, name, kind)) {
    if (s.counters) ++s.counters->steps_replayed;
    co_return decode_text<std::string>(s, seq, *e, e->output);
  }
  require_live(s, seq, name);
  check_value_size(s, inputs.size(),
                   "the inputs of step " + std::to_string(seq) + " (child workflow '" + name + "')",
                   "the step runs again");
  std::string child = s.child_id(seq);
  const std::string no_version;
  span_guard starting(s, span_kind::step, seq, name, kind);
  // The child's parent span: this step's (named here: no temporary inside the co_await).
  const std::string parent_span = step_span_id(s.id, s.generation, seq, s.epoch);
  reserve_row(s, seq, name);
  const bool started = co_await journaling(
      s, seq, name,
      io_of(s).start_child(s.id, s.epoch, seq, child, name, inputs, journal_started_at(s),
                           s.app_version ? *s.app_version : no_version, parent_span));
  if (!started) {
    throw misuse(s, "workflow '" + s.id + "' (" + s.name + "): step " + std::to_string(seq) +
                        " starts child workflow '" + name + "' under the id '" + child +
                        "', which another workflow already holds (another name or parent). The "
                        "workflow is parked: rename or delete that workflow, then resume this "
                        "one");
  }
  starting.end(false, {});
  if (s.counters) ++s.counters->steps_executed;
  co_return child;
}

}  // namespace durable::detail
