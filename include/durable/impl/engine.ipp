// The non-template part of durable/engine.hpp: included at its end when header-only, by
// durable/src.hpp otherwise.
#pragma once

#include "durable/detail/runtime/parts.ipp"

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

inline query<void> queue_upsert(const store& st, const queue_options& q) {
  const std::string name(q.name);
  if (name.empty()) throw error("configure_queue: the queue name must not be empty");
  auto positive = [&](const std::optional<int>& v, const char* what) {
    if (v && *v <= 0)
      throw error("configure_queue('" + name + "'): " + what +
                  " must be positive (or unset for no limit)");
  };
  positive(q.concurrency, "concurrency");
  positive(q.worker_concurrency, "worker_concurrency");
  positive(q.rate_limit, "rate_limit");
  if (q.rate_period.count() <= 0)
    throw error("configure_queue('" + name + "'): rate_period must be positive");
  return st.queue_upsert(name, q.concurrency, q.worker_concurrency, q.rate_limit,
                         int(q.rate_period.count()));
}

}  // namespace detail

DURABLE_DECL engine::engine(asio::any_io_executor ex, engine_options options) {
  if (options.executor_id.empty()) options.executor_id = detail::default_executor_id();
  if (options.max_running == 0)
    throw error(
        "engine_options::max_running must be at least 1 (it caps the workflows that run "
        "in this process at once)");
  if (options.max_claims_without_progress < 1)
    throw error("engine_options::max_claims_without_progress must be at least 1");
  if (!(options.journal_warning > 0.0 && options.journal_warning <= 1.0))
    throw error("engine_options::journal_warning is " + std::to_string(options.journal_warning) +
                "; it must be a fraction of journal_limit in (0, 1] (0.8: warn at 80 %)");
  s_ = std::make_shared<detail::engine_state>(asio::make_strand(ex), std::move(options),
                                              detail::random_hex(16));
  s_->versions = detail::text_array(s_->options.run_versions);
  s_->committer.set_owner(s_);
  std::weak_ptr<detail::engine_state> weak = s_;
  s_->committer.on_failure([weak](const std::string& what) {
    if (auto s = weak.lock()) {
      s->counters.background_failures.add(s->counters.background_failures.index("committer"));
      s->report(severity::error, "committer", "", what);
    }
  });
}

DURABLE_DECL asio::awaitable<int> engine::migrate_impl() {
  auto c = co_await s_->pool.acquire();
  co_return co_await s_->st.migrate(*c);
}

DURABLE_DECL asio::awaitable<std::size_t> engine::open_impl() {
  auto s = s_;
  if (s->stopping) throw error("open(): the engine was shut down; create a new one");
  if (s->options.migrate) (void)co_await migrate_impl();
  co_await detail::register_executor(s);
  s->opened = true;
  const std::size_t resumed = co_await recover_pending_impl();
  if (!s->maintenance) {
    s->maintenance = std::make_shared<asio::steady_timer>(s->ex);
    s->dispatch_timer = std::make_shared<asio::steady_timer>(s->ex);
    detail::supervise(s, "lease", &detail::lease_keeper);
    detail::supervise(s, "maintenance", &detail::maintenance);
    detail::supervise(s, "dispatcher", &detail::dispatcher);
    if (s->options.listen) detail::supervise(s, "listener", &detail::listener);
  }
  co_return resumed;
}

DURABLE_DECL void engine::check_enqueue(const enqueue_options& opts, const std::string& name,
                                        const std::string& id, const nlohmann::json& inputs) const {
  if (id.empty()) throw error("enqueue('" + name + "'): the workflow id must not be empty");
  if (opts.queue.empty())
    throw error("enqueue('" + name + "', '" + id + "'): the queue name must not be empty");
  if (opts.delay.count() < 0)
    throw error("enqueue('" + name + "', '" + id + "'): the delay must not be negative");
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

DURABLE_DECL asio::awaitable<void> engine::configure_queue_impl(const queue_options& q) {
  // Not a coroutine: an invalid queue_options throws here, before anything runs.
  return [](std::shared_ptr<detail::engine_state> s, pg::statement st) -> asio::awaitable<void> {
    auto c = co_await s->pool.acquire();
    co_await c->run(std::move(st));
  }(s_, detail::queue_upsert(s_->st, q).st);
}

DURABLE_DECL asio::awaitable<void> engine::configure_queue_hop(const queue_options& q) {
  return detail::on_strand(s_, configure_queue_impl(q));
}

DURABLE_DECL detail::enqueue_request engine::make_enqueue(const enqueue_options& opts,
                                                          const std::string& name,
                                                          const std::string& workflow_id,
                                                          const nlohmann::json& inputs) const {
  check_enqueue(opts, name, workflow_id, inputs);
  detail::enqueue_request req;
  req.inputs = inputs.dump();
  req.queue = std::string(opts.queue);
  if (opts.dedup_key) req.dedup_key = std::string(*opts.dedup_key);
  req.q = s_->st.workflow_enqueue(workflow_id, name, req.inputs, opts.queue, opts.priority,
                                  opts.dedup_key, std::int64_t(opts.delay.count()),
                                  s_->options.app_version, s_->st.channel(),
                                  std::int64_t(opts.timeout.count()));
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
  std::optional<std::string> key;
  if (!idempotency_key.empty()) key = idempotency_key;
  return s_->st.unprepared(s_->st.message_send(workflow_id, topic, payload, key).st);
}

DURABLE_DECL void engine::check_start(const std::string& name, const std::string& id,
                                      std::int64_t timeout_ms) const {
  if (timeout_ms < 0)
    throw error("start('" + name + "', '" + id + "'): the timeout must not be negative");
}

DURABLE_DECL asio::awaitable<void> engine::shutdown_impl(std::chrono::milliseconds grace) {
  auto s = s_;
  using clock = std::chrono::steady_clock;
  s->stopping = true;
  if (s->maintenance) s->maintenance->cancel();
  for (const auto& t : s->sleepers) t->cancel();
  s->wake_dispatcher();
  // Runs stop at their next step boundary; a step still running gets until `grace`.
  const auto deadline = clock::now() + grace;
  while (!s->running.empty() && clock::now() < deadline)
    co_await detail::sleep_for(std::chrono::milliseconds(5));
  if (!s->running.empty()) {
    s->report(severity::warning, "shutdown", "",
              std::to_string(s->running.size()) +
                  " runs were still inside a step when the grace period ended; their steps "
                  "receive cancellation and their outcome is not journaled");
    s->release_runs("the engine shut down while the run was inside a step or a wait");
  }
  // Ending the lease (others take over at once) and a notification that ends this engine's
  // LISTEN loop: bounded, so that a database that is down cannot hold shutdown up.
  const auto hard = clock::now() + s->options.shutdown_timeout;
  auto release = [](std::shared_ptr<detail::engine_state> s) -> asio::awaitable<bool> {
    std::vector<pg::statement> batch;
    batch.push_back(s->st.executor_release(s->options.executor_id, s->instance).st);
    batch.push_back(s->st.notify(s->st.channel(), std::string("shutdown")).st);
    auto c = co_await s->pool.acquire();
    co_await c->run_batch(std::move(batch));
    co_return true;
  };
  std::string not_released;
  try {  // past shutdown_timeout the release is cancelled
    if (!co_await detail::within(release(s), s->options.shutdown_timeout))
      not_released = " within shutdown_timeout (is the database reachable?)";
  } catch (const std::exception& e) {
    not_released = ": " + detail::describe_io_failure(e);
  }
  if (!not_released.empty())
    s->report(severity::warning, "shutdown", "",
              "the lease could not be released" + not_released +
                  "; other executors take this one's workflows over once the lease runs out");
  while (!s->running.empty() && clock::now() < hard)
    co_await detail::sleep_for(std::chrono::milliseconds(5));
  // Whatever still runs is cut short now: background parts, runs that ignored cancellation,
  // journal batches in flight.
  for (const auto& t : s->tasks) t->emit(asio::cancellation_type::terminal);
  for (const auto& t : s->sleepers) t->cancel();
  s->release_runs("the engine shut down");
  s->committer.cancel_all();
  if (s->dispatch_timer) s->dispatch_timer->cancel();
  s->report(severity::info, "shutdown", "", "shut down");
}

DURABLE_DECL asio::awaitable<workflow_handle> engine::start_encoded_impl(std::string name,
                                                                         std::string id,
                                                                         nlohmann::json inputs,
                                                                         std::int64_t timeout_ms) {
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
  std::string existing_name, existing_inputs;
  {
    auto insert = s->st.workflow_insert(id, name, inputs_text, s->options.executor_id,
                                        s->options.app_version, timeout_ms);
    const pg::result res = co_await s->committer.run(std::move(insert.st));
    const auto r = store::first<store::start_outcome>(res);
    if (r && r->created) {
      auto run = std::make_shared<detail::run_state>();
      run->id = id;
      run->name = name;
      run->epoch = 1;
      if (timeout_ms > 0)
        run->deadline = detail::unix_seconds() + double(timeout_ms) / 1000.0;  // ~ the stored one
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

DURABLE_DECL asio::awaitable<bool> engine::cancel_on_strand(std::string id) {
  auto s = s_;
  const std::string reason = "cancelled by an operator (engine::cancel)";
  const std::string type = "durable::cancelled";
  // One statement: the status, a new epoch (the run in progress can write nothing more), and
  // the notice to the process that runs it (its heartbeat tick is the fallback).
  // Its unfinished descendants (child workflows) are cancelled with it.
  auto cancel = s->st.workflow_cancel(id, reason, type);
  std::vector<store::cancelled_tree_member> rows;
  {
    auto c = co_await s->pool.acquire();
    rows = co_await store::fetch(*c, std::move(cancel));
  }
  bool found = false;
  for (const auto& r : rows) {
    found = found || r.root;
    const std::string why =
        r.root ? reason : "its parent workflow '" + id + "' was cancelled: " + reason;
    s->cancel_local(r.id, why, true, r.epoch);
  }
  co_return found;
}

DURABLE_DECL asio::awaitable<bool> engine::resume_on_strand(std::string id, bool dead_letter_only) {
  auto s = s_;
  const std::vector<std::string> statuses =
      dead_letter_only ? std::vector<std::string>{"dead_letter"}
                       : std::vector<std::string>{"cancelled", "dead_letter", "parked"};
  const std::string allowed = detail::text_array(statuses);
  std::vector<pg::statement> batch;
  batch.push_back(s->st.workflow_resume(id, allowed).st);
  batch.push_back(s->st.notify(s->st.channel(), std::string()).st);  // wakes the executors
  std::vector<pg::result> r;
  bool dedup_taken = false;
  try {
    auto c = co_await s->pool.acquire();
    auto tx = c->begin();
    r = co_await tx.commit(std::move(batch));
  } catch (const pg::unique_violation&) {
    dedup_taken = true;  // workflows_queue_dedup: its key is held by another live workflow
  }
  if (dedup_taken)
    throw workflow_conflict(id, std::string(dead_letter_only ? "retry" : "resume") + "('" + id +
                                    "'): another unfinished workflow of its queue now holds "
                                    "its deduplication key; finish or cancel that one first");
  const auto previous = store::first<store::previous_status>(r[0]);
  if (previous) {
    s->report(severity::info, dead_letter_only ? "retry" : "resume", id,
              "was " + previous->status + "; due now, to be claimed by any executor");
    s->wake_due();
  }
  co_return previous.has_value();
}

DURABLE_DECL asio::awaitable<workflow_handle> engine::fork_on_strand(std::string id, int from_step,
                                                                     std::string new_id) {
  auto s = s_;
  if (from_step < 0)
    throw error("fork('" + id + "', " + std::to_string(from_step) +
                "): the first step to run again must be 0 or more");
  if (new_id.empty()) new_id = id + ":fork:" + detail::random_hex(8);
  if (new_id == id) throw error("fork('" + id + "'): the new id must differ from the original");
  auto q = s->st.workflow_fork(id, new_id, from_step, s->options.app_version);
  std::optional<store::fork_outcome> r;
  {
    std::vector<pg::statement> batch;
    batch.push_back(std::move(q.st));
    batch.push_back(s->st.notify(s->st.channel(), std::string()).st);
    auto c = co_await s->pool.acquire();
    auto tx = c->begin();
    auto res = co_await tx.commit(std::move(batch));
    r = store::first<store::fork_outcome>(res[0]);
  }
  if (!r || !r->source_found) throw error("fork('" + id + "'): no workflow has this id");
  if (!r->created)
    throw workflow_conflict(
        new_id, "fork('" + id + "'): the new id '" + new_id + "' is already taken; choose another");
  s->report(severity::info, "fork", new_id,
            "forked from '" + id + "' with its " + std::to_string(r->copied) +
                " journal rows before step " + std::to_string(from_step));
  s->wake_due();
  co_return workflow_handle(s, std::move(new_id));
}

DURABLE_DECL asio::awaitable<bool> engine::recover_impl_on_strand(std::string workflow_id) {
  auto s = s_;
  // Running here, or waiting to claim again after a transient failure (its own retry resumes it).
  if (s->busy(workflow_id)) co_return true;
  std::vector<std::string> ids{workflow_id};
  if (co_await detail::claim_runs(s, std::move(ids), "recover") > 0) co_return true;
  // Not claimed: finished, parked, unknown, or not a workflow this engine runs. Say which
  // only for the last case (the others are answers, not errors).
  auto get = s->st.workflow_get(workflow_id);
  auto c = co_await s->pool.acquire();
  const auto r = co_await store::fetch_one(*c, std::move(get));
  if (r && !s->registry.contains(r->name))
    throw error("recover('" + workflow_id + "'): workflow '" + r->name +
                "' is not registered with this engine; register it before recovering");
  co_return false;
}

DURABLE_DECL asio::awaitable<std::size_t> engine::recover_pending_impl() {
  auto s = s_;
  std::vector<std::string> ids;
  {
    auto owned = s->st.workflows_owned(s->options.executor_id, s->versions);
    auto c = co_await s->pool.acquire();
    auto r = co_await store::fetch(*c, std::move(owned));
    for (auto& w : r)
      if (s->claimable_here(w.id, w.name)) ids.push_back(std::move(w.id));
  }
  // Up to this engine's room; maintenance picks up the rest as runs end.
  if (ids.size() > s->room()) ids.resize(s->room());
  co_return co_await detail::claim_runs(s, std::move(ids), "open");
}

DURABLE_DECL engine_stats engine::stats() const {
  const auto p = s_->pool.stats();
  return {p.round_trips,
          p.statements,
          s_->counters.journal_loads,
          s_->counters.steps_replayed,
          s_->counters.steps_executed,
          s_->counters.ownership_lost,
          s_->committer.stats().batches,
          s_->committer.stats().largest_batch};
}

DURABLE_DECL engine_metrics engine::metrics() const {
  const auto& c = s_->counters;
  engine_metrics m;
  m.steps_executed = c.steps_executed.get();
  m.steps_replayed = c.steps_replayed.get();
  m.journal_loads = c.journal_loads.get();
  m.workflows_started = c.workflows_started.snapshot();
  m.workflows_recovered = c.workflows_recovered.get();
  m.workflows_taken_over = c.workflows_taken_over.get();
  m.workflows_finished = c.workflows_finished.snapshot();
  m.workflows_dead_lettered = c.workflows_dead_lettered.get();
  m.workflows_parked = c.workflows_parked.snapshot();
  m.ownership_lost = c.ownership_lost.get();
  m.io_retries = c.io_retries.get();
  m.background_failures = c.background_failures.snapshot();
  m.journal_write_seconds = c.journal_write_seconds.snapshot();
  m.group_commit_batch_size = c.group_commit_batch_size.snapshot();
  m.group_commit_seconds = c.group_commit_seconds.snapshot();
  m.workflows_running = c.running.load(std::memory_order_relaxed);
  m.max_running = s_->options.max_running;
  m.lease_expired = c.lease_expired.load(std::memory_order_relaxed);
  return m;
}

DURABLE_DECL asio::awaitable<std::vector<queue_depth>> engine::queue_depths_impl() {
  auto s = s_;
  auto q = s->st.queue_depths(detail::text_array(s->queues));
  std::vector<store::queue_count> rows;
  {
    auto c = co_await s->pool.acquire();
    rows = co_await store::fetch(*c, std::move(q));
  }
  std::vector<queue_depth> out;
  out.reserve(rows.size());
  for (auto& r : rows) out.push_back({std::move(r.queue), r.queued, r.running});
  co_return out;
}

DURABLE_DECL asio::awaitable<std::vector<queue_depth>> engine::queue_depths_hop() {
  return detail::on_strand(s_, queue_depths_impl());
}

DURABLE_DECL asio::awaitable<workflow_status> workflow_handle::status_impl() const {
  auto get = s_->st.workflow_get(id_);
  auto c = co_await s_->pool.acquire();
  auto r = co_await store::fetch_one(*c, std::move(get));
  if (!r) throw error("workflow '" + id_ + "' does not exist");
  co_return workflow_status{std::move(r->status), std::move(r->reason), r->epoch, r->attempts,
                            std::move(r->executor_id)};
}

DURABLE_DECL asio::awaitable<std::string> workflow_handle::wait_output_impl() const {
  auto s = s_;
  for (int round = 0;; ++round) {
    std::string status;
    std::optional<std::string> reason, output, err;
    {
      auto get = s->st.workflow_get(id_);
      auto c = co_await s->pool.acquire();
      auto r = co_await store::fetch_one(*c, std::move(get));
      if (!r) throw error("workflow '" + id_ + "' does not exist");
      status = std::move(r->status);
      reason = std::move(r->reason);
      output = std::move(r->output);
      err = std::move(r->error);
    }
    if (status == "succeeded") co_return output.value_or("null");
    if (status == "failed" || status == "parked" || status == "cancelled" ||
        status == "dead_letter") {
      auto j = nlohmann::json::parse(err.value_or("{}"), nullptr, false);
      if (!j.is_object()) j = nlohmann::json::object();
      const std::string type = j.value("type", "unknown");
      const std::string message = j.value("message", reason.value_or(""));
      if (status == "parked" && type == "durable::nondeterminism_error")
        throw nondeterminism_error(id_, j.value("seq", -1), j.value("journaled", ""),
                                   j.value("requested", ""), message);
      if (status == "parked") throw workflow_parked(id_, reason.value_or(message));
      if (status == "cancelled")
        throw workflow_cancelled(
            id_, "workflow '" + id_ + "' was cancelled: " + reason.value_or(message));
      if (status == "dead_letter")
        throw workflow_dead_letter(
            id_, j.value("seq", -1), j.value("step", ""), type, message, j.value("attempts", 0),
            "workflow '" + id_ + "' is dead-lettered: " + reason.value_or(message));
      throw workflow_failed(id_, type, message);
    }
    if (auto it = s->running.find(id_); it != s->running.end()) {
      auto done = it->second.done;
      asio::error_code ec;
      co_await done->async_wait(asio::redirect_error(asio::use_awaitable, ec));
      // A run that ended and was followed at once by another one here (the next generation
      // of ctx.continue_as_new, a recover()) has nothing to read yet: wait for that one.
      for (auto next = s->running.find(id_); next != s->running.end() && next->second.done != done;
           next = s->running.find(id_)) {
        done = next->second.done;
        co_await done->async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
    } else {
      co_await detail::sleep_for(std::chrono::milliseconds(std::min(1 << std::min(round, 9), 500)));
    }
  }
}

// ---- public entry points: each runs its coroutine on the engine's strand ----------------------
// (An io_context run by several threads is safe: the engine's state is only touched there.)

DURABLE_DECL asio::awaitable<int> engine::migrate_hop() {
  return detail::on_strand(s_, migrate_impl());
}

DURABLE_DECL asio::awaitable<std::size_t> engine::open_hop() {
  return detail::on_strand(s_, open_impl());
}

DURABLE_DECL asio::awaitable<void> engine::shutdown_hop(std::chrono::milliseconds grace) {
  return detail::on_strand(s_, shutdown_impl(grace));
}

DURABLE_DECL asio::awaitable<workflow_handle> engine::start_encoded(std::string name,
                                                                    std::string id,
                                                                    nlohmann::json inputs,
                                                                    std::int64_t timeout_ms) {
  return detail::on_strand(
      s_, start_encoded_impl(std::move(name), std::move(id), std::move(inputs), timeout_ms));
}

DURABLE_DECL asio::awaitable<bool> engine::cancel_impl(std::string id) {
  return detail::on_strand(s_, cancel_on_strand(std::move(id)));
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
  const auto start = std::chrono::steady_clock::now();
  const std::string poke_key = "e:" + workflow_id;
  detail::waiter_registry::entry poke(&s->waiters, poke_key, s->ex);
  for (;;) {
    {
      auto q = s->st.event_get(workflow_id, key);
      auto c = co_await s->pool.acquire();
      auto v = co_await store::fetch_one(*c, std::move(q));
      if (v) co_return std::move(v->json);
    }
    auto wait = s->options.poll_interval;
    if (timeout != forever) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          start + timeout - std::chrono::steady_clock::now());
      if (left.count() <= 0) co_return std::nullopt;
      wait = std::min(wait, left);
    }
    // A notification pokes the wait; polling covers for lost ones (and for engines that
    // did not open() a listener).
    co_await poke.wait(wait);
  }
}

DURABLE_DECL asio::awaitable<std::optional<std::string>> engine::get_event_impl(
    std::string workflow_id, std::string key, std::chrono::milliseconds timeout) {
  return detail::on_strand(s_,
                           get_event_on_strand(std::move(workflow_id), std::move(key), timeout));
}

DURABLE_DECL asio::awaitable<bool> engine::resume_impl(std::string id, bool dead_letter_only) {
  return detail::on_strand(s_, resume_on_strand(std::move(id), dead_letter_only));
}

DURABLE_DECL asio::awaitable<workflow_handle> engine::fork_impl(std::string id, int from_step,
                                                                std::string new_id) {
  return detail::on_strand(s_, fork_on_strand(std::move(id), from_step, std::move(new_id)));
}

DURABLE_DECL asio::awaitable<bool> engine::recover_impl(std::string workflow_id) {
  return detail::on_strand(s_, recover_impl_on_strand(std::move(workflow_id)));
}

DURABLE_DECL asio::awaitable<std::size_t> engine::recover_pending_hop() {
  return detail::on_strand(s_, recover_pending_impl());
}

DURABLE_DECL asio::awaitable<workflow_status> workflow_handle::status_hop() const {
  return detail::on_strand(s_, status_impl());
}

DURABLE_DECL asio::awaitable<std::string> workflow_handle::wait_output() const {
  return detail::on_strand(s_, wait_output_impl());
}

}  // namespace durable
