// Implementation of durable/engine.hpp; included at its end.
#pragma once

namespace durable {
namespace detail {

inline std::string default_executor_id() {
  if (const char* e = std::getenv("DURABLE_EXECUTOR_ID"); e && *e) return e;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !*host) return "executor";
  return host;
}

template <class... Args>
std::string signature_of() {
  std::string s = "(";
  ((s += (s.size() > 1 ? ", " : "") + std::string(type_name<std::decay_t<Args>>())), ...);
  return s + ")";
}

template <class R, class... Args>
asio::awaitable<std::optional<std::string>> invoke_workflow(asio::awaitable<R> (*fn)(context&,
                                                                                     Args...),
                                                            context& ctx, nlohmann::json inputs) {
  std::tuple<std::decay_t<Args>...> args;
  try {
    args = durable::decode<std::tuple<std::decay_t<Args>...>>(inputs);
  } catch (const codec_error& e) {
    throw workflow_parked(ctx.workflow_id(),
                          "workflow '" + ctx.workflow_id() + "' (" + ctx.workflow_name() +
                              "): its journaled inputs no longer decode as " +
                              signature_of<Args...>() + ": " + e.what() +
                              "; the workflow's parameters changed while it was in flight");
  }
  auto call = [&](auto&... a) { return fn(ctx, a...); };
  if constexpr (std::is_void_v<R>) {
    co_await std::apply(call, args);
    co_return std::nullopt;
  } else {
    R r = co_await std::apply(call, args);
    co_return durable::encode<R>(r).dump();
  }
}

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

}  // namespace detail

inline engine::engine(asio::any_io_executor ex, engine_options options) {
  if (options.executor_id.empty()) options.executor_id = detail::default_executor_id();
  s_ = std::make_shared<detail::engine_state>(ex, std::move(options));
  s_->committer.set_owner(s_);
}

template <class R, class... Args>
void engine::register_workflow(std::string name, asio::awaitable<R> (*fn)(context&, Args...)) {
  using inputs_t = std::tuple<std::decay_t<Args>...>;
  if (name.empty()) throw error("register_workflow: the workflow name must not be empty");
  if (!fn) throw error("register_workflow('" + name + "'): the function pointer is null");
  detail::registered_workflow w;
  w.name = name;
  w.signature = detail::signature_of<Args...>();
  w.check_inputs = [](const nlohmann::json& j) { (void)durable::decode<inputs_t>(j); };
  w.invoke = [fn](context& ctx, const nlohmann::json& j) {
    return detail::invoke_workflow(fn, ctx, j);
  };
  if (!s_->registry.emplace(name, std::move(w)).second)
    throw error("register_workflow: a workflow named '" + name + "' is already registered");
  std::vector<std::string> names;
  for (const auto& entry : s_->registry) names.push_back(entry.first);
  s_->names = detail::text_array(names);
}

inline asio::awaitable<int> engine::migrate() {
  auto c = co_await s_->pool.acquire();
  co_return co_await s_->st.migrate(*c);
}

inline asio::awaitable<std::size_t> engine::open() {
  if (s_->options.migrate) (void)co_await migrate();
  {
    auto c = co_await s_->pool.acquire();
    co_await c->run(s_->st.executor_upsert(s_->options.executor_id, detail::default_executor_id(),
                                           int(::getpid()), s_->options.app_version,
                                           detail::text_array(s_->options.run_versions)));
  }
  const std::size_t resumed = co_await recover_pending();
  if (!s_->maintenance) {
    s_->maintenance = std::make_shared<asio::steady_timer>(s_->ex);
    asio::co_spawn(s_->ex, maintain(s_), asio::detached);
    s_->dispatch_timer = std::make_shared<asio::steady_timer>(s_->ex);
    asio::co_spawn(s_->ex, dispatch(s_), asio::detached);
    if (s_->options.listen) asio::co_spawn(s_->ex, listen_loop(s_), asio::detached);
  }
  co_return resumed;
}

inline void engine::check_enqueue(const enqueue_options& opts, const std::string& name,
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

inline asio::awaitable<workflow_handle> engine::enqueue_run(pg::transaction* tx,
                                                            bool fail_on_duplicate,
                                                            std::string name, std::string id,
                                                            pg::statement st) {
  auto s = s_;
  const std::string inputs_text = *st.params[2];
  pg::result r;
  for (int attempt = 0; attempt < 3 && r.empty(); ++attempt) {
    pg::statement copy = st;
    if (tx)
      r = co_await tx->run(std::move(copy));
    else
      r = co_await s->committer.run(std::move(copy));
    // No row: the conflicting workflow committed after this statement's snapshot. Outside
    // a transaction, asking again sees it; inside one, the caller's snapshot may not.
    if (tx) break;
  }
  if (r.empty())
    throw error(
        "enqueue('" + name + "', '" + id +
        "'): a concurrent enqueue with the same id or deduplication key is not visible yet; retry");
  const std::string existing = r[0].get<std::string>(1);
  if (r[0].get<bool>(0)) {
    if (!tx) s->wake_dispatcher();
    co_return workflow_handle(s, std::move(id));
  }
  if (existing == id) {
    detail::check_same_workflow("enqueue", id, name, inputs_text, r[0].get<std::string>(2),
                                r[0].get<std::string>(3));
    co_return workflow_handle(s, std::move(id));
  }
  if (fail_on_duplicate)
    throw duplicate_workflow(id, existing,
                             "enqueue('" + name + "', '" + id + "'): queue '" +
                                 st.params[3].value_or("") +
                                 "' already holds unfinished workflow '" + existing +
                                 "' with deduplication key '" + st.params[5].value_or("") + "'");
  co_return workflow_handle(s, existing);
}

inline pg::statement engine::make_queue_upsert(const queue_options& q) const {
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
  return s_->st.queue_upsert(name, q.concurrency, q.worker_concurrency, q.rate_limit,
                             int(q.rate_period.count()));
}

inline asio::awaitable<void> engine::run_statement(pg::statement st) {
  auto c = co_await s_->pool.acquire();
  co_await c->run(std::move(st));
}

inline asio::awaitable<void> engine::dispatch(std::shared_ptr<detail::engine_state> s) {
  auto timer = s->dispatch_timer;
  const std::string& name_array = s->names;
  const std::string versions = detail::text_array(s->options.run_versions);
  const int batch_size = int(std::max<std::size_t>(1, s->options.dispatch_batch));
  for (;;) {
    if (s->stopping) co_return;
    s->wake_pending = false;
    bool more = false;
    for (std::size_t i = 0; i < s->queues.size() && !s->stopping; ++i) {
      const std::string queue = s->queues[i];
      try {
        // Lock, claim and commit in one round trip: the claim runs in its own snapshot, taken
        // after the queue's lock is held, so its counts include every earlier claim.
        std::vector<pg::statement> batch;
        batch.push_back(s->st.queue_lock(queue));
        batch.push_back(
            s->st.queue_dispatch(s->options.executor_id, queue, name_array, batch_size, versions));
        std::vector<pg::result> r;
        {
          auto c = co_await s->pool.acquire();
          auto tx = c->begin();
          r = co_await tx.commit(std::move(batch));
        }
        for (const pg::row row : r[1]) {
          auto run = std::make_shared<detail::run_state>();
          run->id = row.get<std::string>(0);
          run->name = row.get<std::string>(1);
          run->epoch = row.get<std::int64_t>(3);
          auto inputs = nlohmann::json::parse(row.get<std::string>(2));
          launch(s, std::move(run), std::move(inputs));
        }
        more = more || r[1].rows() == batch_size;
      } catch (const std::exception&) {
        // Unreachable or busy database: the next tick tries again.
      }
    }
    if (more || s->wake_pending) continue;
    timer->expires_after(s->options.poll_interval);
    asio::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

inline asio::awaitable<void> engine::listen_loop(std::shared_ptr<detail::engine_state> s) {
  while (!s->stopping) {
    try {
      auto c = co_await pg::connection::connect(s->options.conninfo);
      co_await c->listen(s->st.channel());
      s->wake_dispatcher();  // catch up with whatever was queued while nobody listened
      while (!s->stopping) {
        (void)co_await c->wait_notification();
        s->wake_dispatcher();
      }
      co_return;
    } catch (const std::exception&) {
      // Polling keeps the dispatcher correct meanwhile; reconnect after a pause.
    }
    if (!s->stopping) co_await detail::sleep_for(std::chrono::seconds(1));
  }
}

inline asio::awaitable<void> engine::maintain(std::shared_ptr<detail::engine_state> s) {
  auto timer = s->maintenance;
  const std::string& name_array = s->names;
  const std::string versions = detail::text_array(s->options.run_versions);
  // Our own unfinished workflows that ran nowhere here at the previous tick.
  std::set<std::string, std::less<>> suspected;
  for (;;) {
    timer->expires_after(s->options.heartbeat_interval);
    asio::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (s->stopping) co_return;
    try {
      // One round trip: heartbeat, take over from dead executors, and list our own
      // unfinished workflows (to catch any that run nowhere here, e.g. a claim that failed).
      std::vector<pg::statement> batch;
      batch.push_back(s->st.executor_heartbeat(s->options.executor_id));
      batch.push_back(s->st.workflows_take_over(s->options.executor_id,
                                                std::int64_t(s->options.lease_timeout.count()),
                                                name_array, 100, versions));
      batch.push_back(s->st.workflows_owned(s->options.executor_id));
      std::vector<std::string> ids;
      std::set<std::string, std::less<>> orphans;
      {
        auto c = co_await s->pool.acquire();
        auto r = co_await c->run_batch(std::move(batch));
        for (const pg::row row : r[1]) ids.push_back(row.get<std::string>(0));
        for (const pg::row row : r[2])
          if (s->registry.contains(row.text(1)) && !s->running.contains(row.text(0)) &&
              !s->retrying.contains(row.text(0)))
            orphans.insert(row.get<std::string>(0));
      }
      // An orphan is claimed only if the previous tick saw it too: one whose start or
      // dispatch has committed but whose launch here is a moment away (the reply not read
      // yet) is not an orphan, and claiming it would run it twice.
      for (const auto& id : orphans)
        if (suspected.contains(id)) ids.push_back(id);
      suspected = std::move(orphans);
      for (auto& id : ids)
        if (!s->stopping && !s->running.contains(id) && !s->retrying.contains(id))
          (void)co_await claim_and_run(s, std::move(id));
    } catch (const std::exception&) {
      // The database is unreachable or busy: try again on the next tick.
    }
  }
}

inline asio::awaitable<void> engine::shutdown(std::chrono::milliseconds grace) {
  auto s = s_;
  s->stopping = true;
  if (s->maintenance) s->maintenance->cancel();
  s->wake_dispatcher();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!s->running.empty() && std::chrono::steady_clock::now() < deadline)
    co_await detail::sleep_for(std::chrono::milliseconds(5));
  // Runs still inside a step past the deadline are fenced out once another executor claims
  // their workflows (I3).
  // Ending the lease, and a notification that ends this engine's LISTEN loop (others just
  // look at their queues once more): after this, the engine's background loops end.
  std::vector<pg::statement> batch;
  batch.push_back(s->st.executor_release(s->options.executor_id));
  batch.push_back(s->st.notify(s->st.channel(), std::string("shutdown")));
  auto c = co_await s->pool.acquire();
  co_await c->run_batch(std::move(batch));
}

inline asio::awaitable<workflow_handle> engine::start_encoded(std::string name, std::string id,
                                                              nlohmann::json inputs) {
  auto s = s_;
  auto it = s->registry.find(name);
  if (it == s->registry.end())
    throw error("start('" + name + "', '" + id + "'): no workflow named '" + name +
                "' is registered with this engine; call register_workflow first");
  if (id.empty()) throw error("start('" + name + "'): the workflow id must not be empty");
  if (s->stopping)
    throw error("start('" + name + "', '" + id +
                "'): the engine is shutting down and accepts no new work");
  it->second.check_arguments("start", id, inputs);
  const std::string inputs_text = inputs.dump();
  std::string existing_name, existing_inputs;
  {
    pg::statement insert = s->st.workflow_insert(id, name, inputs_text, s->options.executor_id,
                                                 s->options.app_version);
    auto r = co_await s->committer.run(std::move(insert));
    if (!r.empty() && r[0].get<bool>(0)) {
      auto run = std::make_shared<detail::run_state>();
      run->id = id;
      run->name = name;
      run->epoch = 1;
      launch(s, std::move(run), std::move(inputs));
      co_return workflow_handle(s, std::move(id));
    }
    if (!r.empty()) {
      existing_name = r[0].get<std::string>(1);
      existing_inputs = r[0].get<std::string>(2);
    } else {  // a concurrent start committed after this statement's snapshot
      pg::statement get = s->st.workflow_get(id);
      auto c = co_await s->pool.acquire();
      auto g = co_await c->run(std::move(get));
      if (g.empty())
        throw error("start('" + name + "', '" + id + "'): the workflow vanished while starting");
      existing_name = g[0].get<std::string>(0);
      existing_inputs = g[0].get<std::string>(3);
    }
  }
  detail::check_same_workflow("start", id, name, inputs_text, existing_name, existing_inputs);
  co_return workflow_handle(s, std::move(id));
}

inline void engine::launch(std::shared_ptr<detail::engine_state> s,
                           std::shared_ptr<detail::run_state> run, nlohmann::json inputs) {
  run->pool = &s->pool;
  run->committer = &s->committer;
  run->st = &s->st;
  run->counters = &s->counters;
  run->stopping = &s->stopping;
  auto done = std::make_shared<asio::steady_timer>(s->ex, asio::steady_timer::time_point::max());
  if (auto old = s->running.find(run->id); old != s->running.end()) old->second.done->cancel();
  s->running[run->id] = {done};
  run->launch_token = done.get();
  asio::co_spawn(s->ex, execute(s, std::move(run), std::move(inputs)), asio::detached);
}

inline asio::awaitable<void> engine::execute(std::shared_ptr<detail::engine_state> s,
                                             std::shared_ptr<detail::run_state> run,
                                             nlohmann::json inputs) {
  enum class outcome { succeeded, failed, parked, lost, retry };  // lost: someone else continues
  outcome kind = outcome::failed;
  std::optional<std::string> output, error_json, reason;
  auto park_nondeterminism = [&](const nondeterminism_error& e) {
    kind = outcome::parked;
    reason = e.what();
    error_json = nlohmann::json{{"type", "durable::nondeterminism_error"},
                                {"message", e.what()},
                                {"seq", e.seq()},
                                {"journaled", e.journaled()},
                                {"requested", e.requested()}}
                     .dump();
  };
  try {
    context ctx(*run);
    output = co_await s->registry.at(run->name).invoke(ctx, inputs);
    detail::check_fully_replayed(*run);
    kind = outcome::succeeded;
  } catch (const ownership_lost&) {
    kind = outcome::lost;
    ++s->counters.ownership_lost;
  } catch (const detail::run_released&) {
    kind = outcome::lost;
  } catch (const nondeterminism_error& e) {
    park_nondeterminism(e);
  } catch (const workflow_parked& e) {
    kind = outcome::parked;
    reason = e.what();
    error_json = nlohmann::json{{"type", "durable::workflow_parked"}, {"message", e.what()}}.dump();
  } catch (...) {
    kind = outcome::failed;
    error_json = detail::capture(std::current_exception()).to_json();
  }
  // What the run learned overrides what the workflow's code did with the exception.
  if (kind != outcome::lost) {
    if (run->io_failed) {
      kind = outcome::retry;
    } else if (run->nondeterminism) {
      park_nondeterminism(*run->nondeterminism);
    } else if (run->park_reason) {
      kind = outcome::parked;
      reason = run->park_reason;
      error_json =
          nlohmann::json{{"type", "durable::codec_error"}, {"message", *run->park_reason}}.dump();
    }
  }
  if (kind != outcome::lost && kind != outcome::retry) {
    static constexpr const char* names[] = {"succeeded", "failed", "parked"};
    try {
      // GCC 12 mishandles temporaries of a conditional inside a co_await expression, so
      // statements are built into locals first (here and elsewhere).
      std::optional<std::string> final_output;
      if (kind == outcome::succeeded) final_output = output.value_or("null");
      pg::statement finish = s->st.workflow_finish(
          run->id, run->epoch, std::string(names[int(kind)]), final_output, error_json, reason);
      auto r = co_await s->committer.run(std::move(finish));
      if (r.affected() == 0) {  // I3: a newer epoch owns it now
        kind = outcome::lost;
        ++s->counters.ownership_lost;
      }
    } catch (const std::exception&) {
      kind = outcome::retry;
    }
  }
  // Only this run's own entry: a newer run of the same workflow may have replaced it.
  if (auto it = s->running.find(run->id);
      it != s->running.end() && it->second.done.get() == run->launch_token) {
    it->second.done->cancel();
    s->running.erase(it);
  }
  s->wake_dispatcher();  // a slot in some queue may have come free
  if (kind == outcome::retry) {
    // The outcome of our last write is unknown: claim again (new epoch) and replay.
    const std::string id = run->id;
    s->retrying.insert(id);
    struct unmark {
      std::shared_ptr<detail::engine_state> s;
      std::string id;
      ~unmark() { s->retrying.erase(id); }
    } guard{s, id};
    auto delay = s->options.io_retry_delay;
    for (;;) {
      co_await detail::sleep_for(delay);
      if (s->stopping) co_return;
      try {
        (void)co_await claim_and_run(s, id);
        co_return;
      } catch (const std::exception&) {
        delay = std::min(delay * 2, std::chrono::milliseconds(30000));
      }
    }
  }
}

inline asio::awaitable<bool> engine::claim_and_run(std::shared_ptr<detail::engine_state> s,
                                                   std::string id) {
  std::vector<pg::result> r;
  {
    auto c = co_await s->pool.acquire();
    // Claim and load travel in one round trip and one implicit transaction (I1). Loading
    // after the claim means a previous owner's in-flight row is either visible here or
    // rejected by the fence.
    std::vector<pg::statement> batch;
    batch.push_back(s->st.workflow_claim(id, s->options.executor_id, s->names));
    batch.push_back(s->st.journal_load(id));
    r = co_await c->run_batch(std::move(batch));
  }
  ++s->counters.journal_loads;
  if (r[0].empty()) co_return false;
  auto run = std::make_shared<detail::run_state>();
  run->id = id;
  run->name = r[0][0].get<std::string>(0);
  auto inputs = nlohmann::json::parse(r[0][0].get<std::string>(1));
  run->epoch = r[0][0].get<std::int64_t>(2);
  if (!s->registry.contains(run->name))
    throw error("recover('" + id + "'): workflow '" + run->name +
                "' is not registered with this engine");
  run->journal.reserve(std::size_t(r[1].rows()));
  for (const pg::row row : r[1]) {
    detail::journal_entry e;
    e.name = row.get<std::string>(1);
    e.kind = row.get<std::string>(2);
    e.failed = row.text(3) == "failed";
    if (!row.is_null(4)) e.output = row.text(4);
    if (!row.is_null(5)) e.error = row.text(5);
    run->add_entry(row.get<int>(0), std::move(e));
  }
  launch(s, std::move(run), std::move(inputs));
  co_return true;
}

inline asio::awaitable<bool> engine::recover_impl(std::string workflow_id) {
  auto s = s_;
  if (s->running.contains(workflow_id)) co_return true;
  if (co_await claim_and_run(s, workflow_id)) co_return true;
  // Not claimed: finished, parked, unknown, or not a workflow this engine runs. Say which
  // only for the last case (the others are answers, not errors).
  pg::statement get = s->st.workflow_get(workflow_id);
  auto c = co_await s->pool.acquire();
  auto r = co_await c->run(std::move(get));
  if (!r.empty() && !s->registry.contains(r[0].text(0)))
    throw error("recover('" + workflow_id + "'): workflow '" + r[0].get<std::string>(0) +
                "' is not registered with this engine; register it before recovering");
  co_return false;
}

inline asio::awaitable<std::size_t> engine::recover_pending() {
  auto s = s_;
  std::vector<std::string> ids;
  {
    auto c = co_await s->pool.acquire();
    auto r = co_await c->run(s->st.workflows_owned(s->options.executor_id));
    for (const pg::row row : r)
      if (s->registry.contains(row.text(1)) && !s->running.contains(row.text(0)))
        ids.push_back(row.get<std::string>(0));
  }
  std::size_t n = 0;
  for (auto& id : ids)
    if (co_await claim_and_run(s, std::move(id))) ++n;
  co_return n;
}

inline engine_stats engine::stats() const {
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

inline asio::awaitable<workflow_status> workflow_handle::status() const {
  auto c = co_await s_->pool.acquire();
  auto r = co_await c->run(s_->st.workflow_get(id_));
  if (r.empty()) throw error("workflow '" + id_ + "' does not exist");
  co_return workflow_status{r[0].get<std::string>(1), r[0].get<std::optional<std::string>>(2),
                            r[0].get<std::int64_t>(7), r[0].get<int>(8),
                            r[0].get<std::optional<std::string>>(6)};
}

inline asio::awaitable<std::string> workflow_handle::wait_output() const {
  auto s = s_;
  for (int round = 0;; ++round) {
    std::string status;
    std::optional<std::string> reason, output, err;
    {
      auto c = co_await s->pool.acquire();
      auto r = co_await c->run(s->st.workflow_get(id_));
      if (r.empty()) throw error("workflow '" + id_ + "' does not exist");
      status = r[0].get<std::string>(1);
      reason = r[0].get<std::optional<std::string>>(2);
      output = r[0].get<std::optional<std::string>>(4);
      err = r[0].get<std::optional<std::string>>(5);
    }
    if (status == "succeeded") co_return output.value_or("null");
    if (status == "failed" || status == "parked" || status == "cancelled") {
      auto j = nlohmann::json::parse(err.value_or("{}"), nullptr, false);
      if (!j.is_object()) j = nlohmann::json::object();
      const std::string type = j.value("type", "unknown");
      const std::string message = j.value("message", reason.value_or(""));
      if (status == "parked" && type == "durable::nondeterminism_error")
        throw nondeterminism_error(id_, j.value("seq", -1), j.value("journaled", ""),
                                   j.value("requested", ""), message);
      if (status == "parked") throw workflow_parked(id_, reason.value_or(message));
      if (status == "cancelled")
        throw workflow_failed(id_, "durable::cancelled", reason.value_or("cancelled"));
      throw workflow_failed(id_, type, message);
    }
    if (auto it = s->running.find(id_); it != s->running.end()) {
      auto done = it->second.done;
      asio::error_code ec;
      co_await done->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    } else {
      co_await detail::sleep_for(std::chrono::milliseconds(std::min(1 << std::min(round, 9), 500)));
    }
  }
}

}  // namespace durable
