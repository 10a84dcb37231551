// Part of the implementation of durable/engine.hpp (included by impl/engine.ipp): what an
// operator does to workflows and queues that exist: cancel(), resume(), fork(),
// configure_queue(), queue_depths().
#pragma once

#include "durable/detail/runtime/parts.ipp"

namespace durable {
namespace detail {

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

DURABLE_DECL asio::awaitable<void> engine::configure_queue_impl(const queue_options& q) {
  // Not a coroutine: an invalid queue_options throws here, before anything runs.
  return [](std::shared_ptr<detail::engine_state> s, pg::statement st) -> asio::awaitable<void> {
    auto c = co_await s->pool.acquire();
    co_await c->run(std::move(st));
  }(s_, detail::queue_upsert(s_->st, q).st);
}

DURABLE_DECL asio::awaitable<void> engine::set_queue_paused_impl(std::string name, bool paused) {
  auto s = s_;
  if (name.empty()) throw error("pause_queue/resume_queue: the queue name must not be empty");
  detail::refuse_nul(paused ? "pause_queue()" : "resume_queue()", "queue name", name);
  {
    auto q = s->st.queue_set_paused(name, paused);  // named: GCC 12 (docs/concepts.md)
    auto c = co_await s->pool.acquire();
    co_await c->run(std::move(q.st));
  }
  if (!paused) s->wake_dispatcher();
}

DURABLE_DECL asio::awaitable<void> engine::configure_queue_hop(const queue_options& q) {
  return detail::on_strand(s_, configure_queue_impl(q));
}

DURABLE_DECL asio::awaitable<bool> engine::cancel_on_strand(std::string id) {
  auto s = s_;
  detail::refuse_nul("cancel()", "workflow id", id);
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
  detail::refuse_nul(dead_letter_only ? "retry()" : "resume()", "workflow id", id);
  std::vector<std::string> statuses;
  if (dead_letter_only)
    statuses.emplace_back(to_string(workflow_state::dead_letter));
  else
    for (const workflow_state st : resumable_workflow_states) statuses.emplace_back(to_string(st));
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
  detail::refuse_nul("fork()", "workflow id", id);
  detail::refuse_nul("fork()", "new workflow id", new_id);
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

DURABLE_DECL asio::awaitable<bool> engine::cancel_impl(std::string id) {
  return detail::on_strand(s_, cancel_on_strand(std::move(id)));
}

DURABLE_DECL asio::awaitable<bool> engine::resume_impl(std::string id, bool dead_letter_only) {
  return detail::on_strand(s_, resume_on_strand(std::move(id), dead_letter_only));
}

DURABLE_DECL asio::awaitable<workflow_handle> engine::fork_impl(std::string id, int from_step,
                                                                std::string new_id) {
  return detail::on_strand(s_, fork_on_strand(std::move(id), from_step, std::move(new_id)));
}

}  // namespace durable
