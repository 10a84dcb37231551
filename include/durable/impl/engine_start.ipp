// Part of the implementation of durable/engine.hpp (included by impl/engine.ipp): starting
// workflows and talking to them: start(), enqueue() (and their statements for a transaction the
// application runs), send() and get_event().
#pragma once

#include "durable/detail/runtime/parts.ipp"
#include "durable/impl/workflow_handle.ipp"

namespace durable {
namespace detail {

inline std::string truncate(std::string s, std::size_t n = 200) {
  if (s.size() > n) s = s.substr(0, n) + "...";
  return s;
}

/// A start or enqueue found its id taken: fine if it is the same workflow (same name and
/// inputs), a workflow_conflict otherwise. `op` is "start" or "enqueue".
inline void check_same_workflow(const std::string& op, const std::string& id,
                                const std::string& name, const std::string& inputs_text,
                                const std::string& existing_name,
                                const std::string& existing_inputs) {
  if (existing_name != name)
    throw workflow_conflict(id, "workflow id '" + id + "' is already used by a workflow named '" +
                                    existing_name + "', so it cannot " + op + " '" + name +
                                    "'; choose another id");
  if (nlohmann::json::parse(existing_inputs) != nlohmann::json::parse(inputs_text))
    throw workflow_conflict(
        id, "workflow id '" + id + "' (" + name + ") already exists with other inputs " +
                truncate(existing_inputs) + " than " + truncate(inputs_text) +
                "; the id is the idempotency key, so use a new id for new inputs");
}

/// An enqueue's statement, with what its outcome is checked against.
struct enqueue_request {
  query<store::enqueue_outcome> q;
  std::string inputs;  ///< the encoded inputs, as bound
  std::string queue;
  std::string dedup_key;  ///< empty when none
};

}  // namespace detail

DURABLE_DECL void engine::check_enqueue(const enqueue_options& opts, const std::string& name,
                                        const std::string& id, const nlohmann::json& inputs) const {
  if (id.empty()) throw error("enqueue('" + name + "'): the workflow id must not be empty");
  detail::refuse_nul("enqueue()", "workflow id", id);
  detail::refuse_nul("enqueue()", "workflow name", name);
  detail::refuse_nul("enqueue()", "queue name", opts.queue);
  if (opts.dedup_key) detail::refuse_nul("enqueue()", "deduplication key", *opts.dedup_key);
  if (opts.debounce) detail::refuse_nul("enqueue()", "debounce key", opts.debounce->key);
  if (opts.queue.empty())
    throw error("enqueue('" + name + "', '" + id + "'): the queue name must not be empty");
  if (opts.delay.count() < 0)
    throw error("enqueue('" + name + "', '" + id + "'): the delay must not be negative");
  if (opts.debounce) {
    const std::string head = "enqueue('" + name + "', '" + id + "'): debounce: ";
    if (opts.debounce->key.empty()) throw error(head + "the key must not be empty");
    if (opts.debounce->window.count() <= 0) throw error(head + "the window must be positive");
    if (opts.dedup_key || opts.duplicate == on_duplicate::fail)
      throw error(head +
                  "a debounced enqueue takes no deduplication key and no "
                  "on_duplicate::fail (the burst's enqueues all name one workflow)");
  }
  // A workflow this process does not run may still be run by other executors; check the
  // arguments when the signature is known here.
  if (auto it = s_->registry.find(name); it != s_->registry.end())
    it->second.check_arguments("enqueue", id, inputs);
}

DURABLE_DECL asio::awaitable<workflow_handle> engine::enqueue_run_impl(
    pg::transaction* tx, bool fail_on_duplicate, std::string name, std::string id,
    detail::enqueue_request req) {
  auto s = s_;
  std::optional<store::enqueue_outcome> r;
  for (int attempt = 0; attempt < 3 && !r; ++attempt) {
    pg::statement copy = req.q.st;
    pg::result res;
    if (tx)
      res = co_await tx->run(std::move(copy));
    else
      res = co_await s->committer.run(std::move(copy));
    r = store::first<store::enqueue_outcome>(res);
    // No row: the conflicting workflow committed after this statement's snapshot. Outside
    // a transaction, asking again sees it; inside one, the caller's snapshot may not.
    if (tx) break;
  }
  if (!r)
    throw error(
        "enqueue('" + name + "', '" + id +
        "'): a concurrent enqueue with the same id or deduplication key is not visible yet; retry");
  const std::string& existing = r->id;
  if (r->created) {
    if (!tx) s->wake_dispatcher();
    co_return workflow_handle(s, std::move(id));
  }
  if (existing == id) {
    detail::check_same_workflow("enqueue", id, name, req.inputs, r->name, r->inputs);
    co_return workflow_handle(s, std::move(id));
  }
  if (fail_on_duplicate)
    throw duplicate_workflow(id, existing,
                             "enqueue('" + name + "', '" + id + "'): queue '" + req.queue +
                                 "' already holds unfinished workflow '" + existing +
                                 "' with deduplication key '" + req.dedup_key + "'");
  co_return workflow_handle(s, existing);
}

DURABLE_DECL detail::enqueue_request engine::make_enqueue(const enqueue_options& opts,
                                                          const std::string& name,
                                                          const std::string& workflow_id,
                                                          const nlohmann::json& inputs) const {
  check_enqueue(opts, name, workflow_id, inputs);
  const std::optional<trace_context> trace =
      resolve_trace(opts.traceparent, opts.tracestate,
                    "enqueue('" + name + "', '" + workflow_id + "')", workflow_id);
  detail::enqueue_request req;
  req.inputs = inputs.dump();
  refuse_large("enqueue('" + name + "', '" + workflow_id + "'): its inputs", req.inputs.size());
  req.queue = std::string(opts.queue);
  if (opts.dedup_key) req.dedup_key = std::string(*opts.dedup_key);
  req.q = s_->st.workflow_enqueue(
      workflow_id, name, req.inputs, opts.queue, opts.priority, opts.dedup_key,
      std::int64_t(opts.delay.count()), s_->options.app_version, s_->st.channel(),
      std::int64_t(opts.timeout.count()),
      opts.debounce ? std::optional(opts.debounce->key) : std::nullopt,
      opts.debounce ? std::int64_t(opts.debounce->window.count()) : 0, trace ? &*trace : nullptr);
  return req;
}

DURABLE_DECL pg::statement engine::enqueue_statement_encoded(const enqueue_options& opts,
                                                             const std::string& name,
                                                             const std::string& workflow_id,
                                                             const nlohmann::json& inputs) const {
  return s_->st.unprepared(make_enqueue(opts, name, workflow_id, inputs).q.st);
}

DURABLE_DECL asio::awaitable<workflow_handle> engine::enqueue_body(pg::transaction* tx,
                                                                   const enqueue_options& opts,
                                                                   std::string name, std::string id,
                                                                   nlohmann::json inputs) {
  auto req = make_enqueue(opts, name, id, inputs);  // throws before anything runs
  return enqueue_run_impl(tx, opts.duplicate == on_duplicate::fail, std::move(name), std::move(id),
                          std::move(req));
}

DURABLE_DECL asio::awaitable<workflow_handle> engine::enqueue_hop(pg::transaction* tx,
                                                                  const enqueue_options& opts,
                                                                  std::string name, std::string id,
                                                                  nlohmann::json inputs) {
  return detail::on_strand(
      s_, enqueue_body(tx, opts, std::move(name), std::move(id), std::move(inputs)));
}

DURABLE_DECL pg::statement engine::send_statement_encoded(
    const std::string& workflow_id, const std::string& topic, const std::string& payload,
    const std::string& idempotency_key) const {
  detail::refuse_nul("send_statement()", "workflow id", workflow_id);
  detail::refuse_nul("send_statement()", "topic", topic);
  detail::refuse_nul("send_statement()", "idempotency key", idempotency_key);
  refuse_large("send_statement('" + workflow_id + "', '" + topic + "'): the message",
               payload.size());
  std::optional<std::string> key;
  if (!idempotency_key.empty()) key = idempotency_key;
  return s_->st.unprepared(s_->st.message_send(workflow_id, topic, payload, key).st);
}

DURABLE_DECL void engine::refuse_large(const std::string& what, std::size_t bytes) const {
  const std::size_t limit = s_->options.max_value_bytes;
  if (limit == 0 || bytes <= limit) return;
  throw error(what + ": " + std::to_string(bytes) +
              " bytes of JSON, more than engine_options::max_value_bytes (" +
              std::to_string(limit) +
              "); nothing was written. Keep large data outside the workflow (an object store, a "
              "table of your own) and pass a reference to it, or raise max_value_bytes");
}

DURABLE_DECL std::optional<trace_context> engine::check_start(const std::string& name,
                                                              const std::string& id,
                                                              const start_options& opts) const {
  detail::refuse_nul("start()", "workflow id", id);
  detail::refuse_nul("start()", "workflow name", name);
  if (opts.timeout.count() < 0)
    throw error("start('" + name + "', '" + id + "'): the timeout must not be negative");
  return resolve_trace(opts.traceparent, opts.tracestate, "start('" + name + "', '" + id + "')",
                       id);
}

DURABLE_DECL std::optional<trace_context> engine::resolve_trace(std::string_view traceparent,
                                                                std::string_view tracestate,
                                                                const std::string& call,
                                                                const std::string& id) const {
  std::string why, field;
  if (!traceparent.empty()) {
    auto given = trace_context::parse(traceparent, tracestate, &why, &field);
    if (!given)
      throw invalid_text(field, call + ": " + why +
                                    "; nothing was done. Pass a valid W3C trace context, or none "
                                    "(trace_context::from_headers() checks a request's headers "
                                    "the lenient way the specification asks of a receiver)");
    return given;
  }
  if (!tracestate.empty())
    throw invalid_text("tracestate", call +
                                         ": a tracestate without a traceparent; nothing was "
                                         "done. Pass both, or neither");
  if (!s_->options.current_trace) return std::nullopt;
  // The hook's context is the caller's span, not an argument: a bad one costs the trace (or its
  // tracestate), never the start (reported on the engine's executor, where the event hook is
  // called).
  auto warn = [this, &call, &id](const std::string& what) {
    asio::post(s_->ex, [s = s_, id, message = call + ": " + what] {
      s->report(severity::warning, "runner", id, message);
    });
  };
  std::optional<trace_context> current;
  try {
    current = s_->options.current_trace();
  } catch (const std::exception& e) {
    warn(std::string("engine_options::current_trace threw (") + e.what() +
         "); the workflow has no trace context");
    return std::nullopt;
  } catch (...) {
    warn("engine_options::current_trace threw; the workflow has no trace context");
    return std::nullopt;
  }
  if (!current) return std::nullopt;
  auto checked = trace_context::parse(current->traceparent, current->tracestate, &why, &field);
  if (!checked && field == "tracestate") {
    warn("engine_options::current_trace gave a tracestate that is not valid (" + why +
         "); the workflow keeps the traceparent without it");
    return trace_context::parse(current->traceparent);
  }
  if (!checked)
    warn("engine_options::current_trace gave a context that is not valid (" + why +
         "); the workflow has no trace context");
  return checked;
}

DURABLE_DECL asio::awaitable<workflow_handle> engine::start_encoded_impl(
    std::string name, std::string id, nlohmann::json inputs, std::int64_t timeout_ms,
    std::optional<trace_context> trace) {
  auto s = s_;
  auto it = s->registry.find(name);
  if (it == s->registry.end())
    throw error("start('" + name + "', '" + id + "'): no workflow named '" + name +
                "' is registered with this engine; call register_workflow first");
  if (id.empty()) throw error("start('" + name + "'): the workflow id must not be empty");
  if (s->stopping)
    throw error("start('" + name + "', '" + id +
                "'): the engine is shutting down and accepts no new work");
  if (!s->opened)
    throw error("start('" + name + "', '" + id +
                "'): call open() first; a workflow runs only on an engine registered as an "
                "executor, whose lease lets another executor take it over if this process dies "
                "(enqueue() works without open() and leaves the run to the queue's executors)");
  it->second.check_arguments("start", id, inputs);
  const std::string inputs_text = inputs.dump();
  refuse_large("start('" + name + "', '" + id + "'): its inputs", inputs_text.size());
  std::string existing_name, existing_inputs;
  {
    auto insert =
        s->st.workflow_insert(id, name, inputs_text, s->options.executor_id, s->options.app_version,
                              timeout_ms, trace ? &*trace : nullptr);
    const pg::result res = co_await s->committer.run(std::move(insert.st));
    const auto r = store::first<store::start_outcome>(res);
    if (r && r->created) {
      auto run = std::make_shared<detail::run_state>();
      run->id = id;
      run->name = name;
      run->epoch = 1;
      run->holds_queue_slot = false;
      if (trace) run->traceparent = trace->traceparent;
      if (timeout_ms > 0)
        run->deadline = s->clock.now() + double(timeout_ms) / 1000.0;  // ~ the stored one
      detail::launch(s, std::move(run), std::move(inputs));
      s->counters.workflows_started.add(0);
      co_return workflow_handle(s, std::move(id));
    }
    if (r) {
      existing_name = r->name;
      existing_inputs = r->inputs;
    } else {  // a concurrent start committed after this statement's snapshot
      auto get = s->st.workflow_get(id);
      auto c = co_await s->pool.acquire();
      auto g = co_await store::fetch_one(*c, std::move(get));
      if (!g)
        throw error("start('" + name + "', '" + id + "'): the workflow vanished while starting");
      existing_name = std::move(g->name);
      existing_inputs = std::move(g->inputs);
    }
  }
  detail::check_same_workflow("start", id, name, inputs_text, existing_name, existing_inputs);
  co_return workflow_handle(s, std::move(id));
}

DURABLE_DECL asio::awaitable<workflow_handle> engine::start_encoded(
    std::string name, std::string id, nlohmann::json inputs, std::int64_t timeout_ms,
    std::optional<trace_context> trace) {
  return detail::on_strand(s_, start_encoded_impl(std::move(name), std::move(id), std::move(inputs),
                                                  timeout_ms, std::move(trace)));
}

DURABLE_DECL asio::awaitable<bool> engine::send_impl(std::string workflow_id, std::string topic,
                                                     std::string payload,
                                                     std::string idempotency_key) {
  return detail::on_strand(s_, send_on_strand(std::move(workflow_id), std::move(topic),
                                              std::move(payload), std::move(idempotency_key)));
}

DURABLE_DECL asio::awaitable<bool> engine::send_on_strand(std::string workflow_id,
                                                          std::string topic, std::string payload,
                                                          std::string idempotency_key) {
  detail::refuse_nul("send()", "workflow id", workflow_id);
  detail::refuse_nul("send()", "topic", topic);
  detail::refuse_nul("send()", "idempotency key", idempotency_key);
  refuse_large("send('" + workflow_id + "', '" + topic + "'): the message", payload.size());
  std::optional<std::string> key;
  if (!idempotency_key.empty()) key = idempotency_key;
  auto q = s_->st.message_send(workflow_id, topic, payload, key);
  std::optional<store::send_outcome> r;
  {
    auto c = co_await s_->pool.acquire();
    r = co_await store::fetch_one(*c, std::move(q));
  }
  if (!r || !r->recipient_exists)
    throw error("send('" + workflow_id + "', '" + topic + "'): no workflow has the id '" +
                workflow_id + "'; nothing was sent");
  co_return r->queued;
}

DURABLE_DECL asio::awaitable<std::optional<std::string>> engine::get_event_on_strand(
    std::string workflow_id, std::string key, std::chrono::milliseconds timeout) {
  auto s = s_;
  detail::refuse_nul("get_event()", "workflow id", workflow_id);
  detail::refuse_nul("get_event()", "key", key);
  const auto start = std::chrono::steady_clock::now();
  const std::string poke_key = "e:" + workflow_id;
  detail::waiter_registry::entry poke(&s->waiters, poke_key, s->ex);
  const detail::remote_wait listening(s);
  const std::string what = "get_event('" + key + "')";
  detail::result_wait reads(s->ex);
  const detail::wait_reads_scope counted(*s, reads);
  int unanswered_reads = 0;
  for (;;) {
    // A read the database did not answer (a restart, a failover): the wait goes on, and only a
    // deadline that passes while it does not answer throws (this error).
    std::exception_ptr unanswered;
    try {
      auto q = s->st.event_get(workflow_id, key);
      auto c = co_await s->pool.acquire();
      auto v = co_await store::fetch_one(*c, std::move(q));
      detail::wait_read_worked(*s, what, workflow_id, reads);
      unanswered_reads = 0;
      if (v) co_return std::move(v->json);
    } catch (const pg::error& e) {
      if (detail::classify(e) == detail::io_verdict::permanent || s->stopping) throw;
      detail::wait_read_failed(*s, what, workflow_id, reads, e);
      unanswered = std::current_exception();
    }
    const bool again = co_await detail::pause_before_reading_again(*s, poke, start, timeout,
                                                                   unanswered, unanswered_reads);
    if (!again) co_return std::nullopt;
  }
}

DURABLE_DECL asio::awaitable<std::optional<std::string>> engine::get_event_impl(
    std::string workflow_id, std::string key, std::chrono::milliseconds timeout) {
  return detail::on_strand(s_,
                           get_event_on_strand(std::move(workflow_id), std::move(key), timeout));
}

}  // namespace durable
