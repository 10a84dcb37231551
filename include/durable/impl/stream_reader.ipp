// The non-template part of durable/stream_reader.hpp (engine::read_stream): included by
// impl/engine.ipp after impl/workflow_handle.ipp, whose helpers for waits it shares.
#pragma once

#include "durable/stream_reader.hpp"

namespace durable::detail {

/// Values one read fetches at most: a reader that is behind catches up in reads of this many.
inline constexpr int stream_batch = 100;

/// Takes the rows of one read into `c`: buffers the values, notes the close or the end of the
/// workflow (ended() says so once the values before it are yielded). Throws if the workflow
/// does not exist.
inline void take_stream_rows(stream_cursor& c, std::vector<store::stream_row>& rows) {
  if (rows.empty() || !rows.front().status)
    throw error("read_stream('" + c.id + "', '" + c.key + "'): workflow '" + c.id +
                "' does not exist (it was never started, or retention or `durable gc` deleted "
                "it); nothing was read");
  bool any = false;
  for (auto& r : rows) {
    if (!r.position) break;  // no row at or after the offset (yet)
    any = true;
    if (!r.value) {  // the close: every value before it was read
      c.ends = stream_end::closed;
      c.next = *r.position;
      break;
    }
    c.buffered.emplace_back(*r.position, std::move(*r.value));
    c.next = *r.position + 1;
  }
  // A close before the offset (a reader that starts past it): nothing more will come.
  if (rows.front().closed_at) c.closed_at = rows.front().closed_at;
  if (c.ends == stream_end::open && rows.front().closed_at && *rows.front().closed_at < c.next)
    c.ends = stream_end::closed;
  if (rows.front().awaited) c.marked = true;  // a reader marked it already: no mark needed
  // One snapshot: a finished workflow with nothing after the offset wrote its last value.
  const auto status = parse_workflow_state(*rows.front().status);
  if (c.ends == stream_end::open && !any && status && is_finished(*status)) {
    c.ends = stream_end::finished;
    c.finished_status = *rows.front().status;
  }
}

inline stream_text pop_stream_value(stream_cursor& c) {
  stream_text v = std::move(c.buffered.front());
  c.buffered.pop_front();
  return v;
}

/// The next value buffered, or the end once nothing is (nullopt: nothing yet, or the end).
inline stream_text next_buffered(stream_cursor& c) {
  if (!c.buffered.empty()) return pop_stream_value(c);
  c.end = c.ends;
  return std::nullopt;
}

DURABLE_DECL asio::awaitable<stream_text> stream_next(std::shared_ptr<stream_cursor> c,
                                                      std::chrono::milliseconds timeout) {
  if (stream_text v = next_buffered(*c); v || c->end != stream_end::open) co_return v;
  if (c->reading)
    throw error("stream_reader of '" + c->id + "', '" + c->key +
                "': next() was called while another next() of it is under way; await one at a "
                "time (copies of a reader share its position)");
  c->reading = true;
  struct reading_scope {
    stream_cursor& c;
    ~reading_scope() { c.reading = false; }
  } scope{*c};
  auto s = c->s;
  const auto start = std::chrono::steady_clock::now();
  // Woken by each append once the workflow is marked awaited (below), and, where this engine
  // hears the ends of awaited workflows (push_results), by the workflow's end.
  waiter_registry::entry poke(&s->waiters, "s:" + c->id, s->ex);
  if (s->options.push_results) poke.also("r:" + c->id);
  const remote_wait listening(s);
  // An id too long for a notification (migration 15) is never marked: it is polled for.
  const bool pushable = c->id.size() < 7900;
  const std::string what = "read_stream('" + c->key + "')";
  result_wait reads(s->ex);
  const wait_reads_scope counted(*s, reads);
  int unanswered_reads = 0;
  for (;;) {
    // A read the database did not answer (a restart, a failover): the wait goes on, and only a
    // timeout that passes while it does not answer throws (this error).
    std::exception_ptr unanswered;
    try {
      auto q = s->st.stream_read(c->id, c->key, c->next, stream_batch);
      auto conn = co_await s->pool.acquire();
      poke.forget_pokes();  // the read below is newer than any poke so far
      auto rows = co_await store::fetch(*conn, std::move(q));
      wait_read_worked(*s, what, c->id, reads);
      unanswered_reads = 0;
      take_stream_rows(*c, rows);
      if (stream_text v = next_buffered(*c); v || c->end != stream_end::open) co_return v;
      // About to wait (and there is time to): mark the workflow once the listener listens,
      // so that each append is told (a mark while nobody listens would only cost NOTIFYs, and
      // `awaited` stays set). The mark and an append both lock the workflow's row: an append
      // either sees the mark or is seen by the read after it, which comes at once. A parked
      // or dead-lettered workflow is not marked (workflow_await leaves it): tried again at
      // the next wait.
      const bool time_left =
          timeout == forever || std::chrono::steady_clock::now() - start < timeout;
      if (!c->marked && pushable && s->listening && time_left) {
        auto mark = s->st.workflow_await(c->id);
        const auto marked = co_await store::fetch(*conn, std::move(mark));
        if (!marked.empty()) {
          c->marked = true;
          continue;
        }
      }
    } catch (const pg::error& e) {
      if (classify(e) == io_verdict::permanent || s->stopping) throw;
      wait_read_failed(*s, what, c->id, reads, e);
      unanswered = std::current_exception();
    }
    const bool again =
        co_await pause_before_reading_again(*s, poke, start, timeout, unanswered, unanswered_reads);
    if (!again) co_return std::nullopt;
  }
}

DURABLE_DECL asio::awaitable<stream_text> stream_next_hop(std::shared_ptr<stream_cursor> c,
                                                          std::chrono::milliseconds timeout) {
  auto s = c->s;
  return on_strand(s, stream_next(std::move(c), timeout));
}

}  // namespace durable::detail
