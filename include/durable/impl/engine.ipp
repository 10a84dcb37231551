// The non-template part of durable/engine.hpp: included at its end when header-only, by
// durable/src.hpp otherwise.
// This file holds the engine's life: construction, migrate(), open(), shutdown(), recovery,
// stats() and metrics(); the rest is in impl/engine_start.ipp (start, enqueue, send, get_event),
// impl/engine_admin.ipp (cancel, resume, fork, queues) and impl/workflow_handle.ipp.
#pragma once

#include "durable/detail/runtime/parts.ipp"
#include "durable/detail/text_check.hpp"
#include "durable/impl/engine_admin.ipp"
#include "durable/impl/engine_schedules.ipp"
#include "durable/impl/engine_start.ipp"
#include "durable/impl/stream_reader.ipp"
#include "durable/impl/workflow_handle.ipp"

namespace durable {

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
    detail::start_listener(s);
  }
  co_return resumed;
}

DURABLE_DECL asio::awaitable<void> engine::shutdown_impl(std::chrono::milliseconds grace) {
  auto s = s_;
  using clock = std::chrono::steady_clock;
  s->stopping = true;
  // The listener stops: result() waits for other processes' workflows poll from now on, from
  // 1 ms with backoff, rather than wait up to poll_interval for a notification that will not
  // come; get_event waits from outside a workflow look once more, then every poll_interval.
  s->listening = false;
  s->waiters.set_hears_all(false);
  s->waiters.poke_all("r:");
  s->waiters.poke_all("e:");
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

DURABLE_DECL asio::awaitable<void> engine::until_shutdown_impl() {
  auto s = s_;
  if (s->stopping) co_return;
  // Shutdown cancels the engine's sleepers first thing; so does the caller's cancellation.
  auto watch = std::make_shared<asio::steady_timer>(s->ex, asio::steady_timer::time_point::max());
  s->sleepers.insert(watch);
  struct unwatch {
    std::shared_ptr<detail::engine_state> s;
    std::shared_ptr<asio::steady_timer> t;
    ~unwatch() { s->sleepers.erase(t); }
  } unwatch_at_end{s, watch};
  asio::error_code ec;
  co_await watch->async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

DURABLE_DECL void engine::report_background_failure(std::string_view component,
                                                    const std::string& message) {
  s_->counters.background_failures.add(s_->counters.background_failures.index(component));
  s_->report(severity::warning, component, "", message);
}

DURABLE_DECL asio::awaitable<bool> engine::recover_impl_on_strand(std::string workflow_id) {
  auto s = s_;
  detail::refuse_nul("recover()", "workflow id", workflow_id);
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
          s_->committer.stats().largest_batch,
          s_->committer.stats().sent_alone};
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
  m.schedule_slots_fired = c.schedule_slots_fired.get();
  m.schedule_slots_missed = c.schedule_slots_missed.get();
  m.schedule_slots_late = c.schedule_slots_late.get();
  m.background_failures = c.background_failures.snapshot();
  m.journal_write_seconds = c.journal_write_seconds.snapshot();
  m.group_commit_batch_size = c.group_commit_batch_size.snapshot();
  m.group_commit_seconds = c.group_commit_seconds.snapshot();
  m.workflows_running = c.running.load(std::memory_order_relaxed);
  m.max_running = s_->options.max_running;
  m.lease_expired = c.lease_expired.load(std::memory_order_relaxed);
  return m;
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

DURABLE_DECL asio::awaitable<void> engine::until_shutdown_hop() {
  return detail::on_strand(s_, until_shutdown_impl());
}

DURABLE_DECL asio::awaitable<bool> engine::recover_impl(std::string workflow_id) {
  return detail::on_strand(s_, recover_impl_on_strand(std::move(workflow_id)));
}

DURABLE_DECL asio::awaitable<std::size_t> engine::recover_pending_hop() {
  return detail::on_strand(s_, recover_pending_impl());
}

}  // namespace durable
