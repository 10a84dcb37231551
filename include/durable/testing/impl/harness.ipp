// The harness of the test kit (durable/testing/harness.hpp): included at its end when
// header-only, by durable/src.hpp otherwise (durable::compiled).
#pragma once

#include <cmath>
#include <limits>

namespace durable::testing {

namespace harness_detail {

inline std::chrono::system_clock::time_point time_point_of(double unix_seconds) {
  using namespace std::chrono;
  return system_clock::time_point(
      duration_cast<system_clock::duration>(duration<double>(unix_seconds)));
}

inline double seconds_of(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  return duration<double>(t.time_since_epoch()).count();
}

/// The type and message of a journaled error ({"type", "message"}).
inline void split_error(const std::string& text, std::optional<std::string>& type,
                        std::optional<std::string>& message) {
  try {
    const auto e = nlohmann::json::parse(text);
    type = e.value("type", std::string());
    message = e.value("message", std::string());
  } catch (const nlohmann::json::exception&) {
    type = std::string();
    message = text;
  }
}

/// ctx.random() and ctx.uuid() in the harness: a function of the workflow, its generation
/// and the step (splitmix64 over an FNV-1a hash of the id), so every harness draws alike.
inline std::uint64_t random_bits(const detail::run_state& s, int seq, int draw) {
  std::uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : s.id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  std::uint64_t x =
      h ^ (std::uint64_t(s.generation) << 40) ^ (std::uint64_t(seq) << 1) ^ std::uint64_t(draw);
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A registered workflow called with its inputs: the body of a run. (A type of its own, not a
/// lambda: the runs' coroutine frames hold it, and in durable::compiled a lambda of a
/// non-inline function would give them no linkage.)
struct invocation {
  const harness::registered* workflow;
  nlohmann::json inputs;
  asio::awaitable<std::optional<std::string>> operator()(context& ctx) const {
    return workflow->invoke(ctx, inputs);
  }
};

inline bool may_run(const std::string& status) {
  return status == to_string(workflow_state::pending) ||
         status == to_string(workflow_state::running) ||
         status == to_string(workflow_state::sleeping);
}

}  // namespace harness_detail

/// A transactional step's transaction on the harness's database, on a connection of its own
/// (made on the run's io_context, so that a crash abandons it with the run).
class harness::transaction final : public detail::journal_transaction {
public:
  transaction(std::unique_ptr<pg::connection> c, detail::memory_journal& j, int& real_io)
      : conn_(std::move(c)), tx_(*conn_), j_(j), real_io_(real_io) {}
  transaction(const transaction&) = delete;
  transaction& operator=(const transaction&) = delete;
  ~transaction() override { --real_io_; }
  pg::transaction& sql() override { return tx_; }
  asio::awaitable<void> commit(const std::string& id, std::int64_t epoch,
                               detail::step_row row) override {
    pg::transaction* tx = &tx_;
    std::function<asio::awaitable<void>()> commit = [tx]() -> asio::awaitable<void> {
      (void)co_await tx->commit();
    };
    co_await j_.append_with(id, epoch, std::move(row), std::move(commit));
  }

private:
  std::unique_ptr<pg::connection> conn_;
  pg::transaction tx_;
  detail::memory_journal& j_;
  int& real_io_;
};

DURABLE_DECL asio::awaitable<std::unique_ptr<detail::journal_transaction>>
harness::begin_transaction() {
  ++real_io_;  // from now until the transaction ends the clock stands still
  std::unique_ptr<pg::connection> c;
  try {
    c = co_await pg::connection::connect(o_.database);
  } catch (...) {
    --real_io_;
    throw;
  }
  co_return std::make_unique<transaction>(std::move(c), j_, real_io_);
}

DURABLE_DECL harness::harness(harness_options o)
    : o_(std::move(o)),
      clock_(harness_detail::seconds_of(o_.start)),
      io_(std::make_unique<asio::io_context>()) {
  j_.use_clock([this] { return clock_.now(); });
  j_.notify([this](const std::string& key) { waiters_.poke(key); });
  if (!o_.database.empty())
    j_.use_transactions(
        [this](const std::string&, int, const std::string&) { return begin_transaction(); });
}

DURABLE_DECL harness::~harness() {
  // The runs' frames go first: they deregister from the clock and the waiters.
  io_.reset();
  runs_.clear();
}

DURABLE_DECL std::unique_ptr<harness> harness::fresh() const {
  auto h = std::make_unique<harness>(o_);
  h->registry_ = registry_;
  h->effects_ = effects_;
  return h;
}

DURABLE_DECL service_base::service_base(harness& h, std::string name)
    : tracker_(h.effects_), name_(std::move(name)) {
  if (name_.empty()) throw error("testing::service: the name must not be empty");
  for (const service_base* other : tracker_->services)
    if (other->name_ == name_)
      throw error("testing::service: a service named '" + name_ +
                  "' exists already in this harness; give each a name of its own");
  tracker_->services.push_back(this);
}

DURABLE_DECL void harness::start_encoded(const std::string& name, const std::string& id,
                                         nlohmann::json inputs, std::chrono::milliseconds timeout) {
  const auto it = registry_->find(name);
  if (it == registry_->end())
    throw error("start('" + name + "', '" + id + "'): no workflow named '" + name +
                "' is registered with this harness; call register_workflow first");
  if (id.empty()) throw error("start('" + name + "'): the workflow id must not be empty");
  if (timeout.count() < 0)
    throw error("start('" + name + "', '" + id + "'): the timeout must not be negative");
  try {
    it->second.check_inputs(inputs);
  } catch (const codec_error& e) {
    throw error("start('" + name + "', '" + id + "'): workflow '" + name + "' takes " +
                it->second.signature + " but was given arguments that do not convert: " + e.what());
  }
  if (j_.contains(id))
    throw workflow_conflict(id, "start('" + name + "', '" + id + "'): a workflow with id '" + id +
                                    "' exists already in this harness");
  auto& w = j_.create(id, name, inputs.dump());
  w.status = to_string(workflow_state::pending);
  if (timeout.count() > 0) w.deadline = clock_.now() + double(timeout.count()) / 1000.0;
}

DURABLE_DECL void harness::deliver(const std::string& id, const std::string& topic,
                                   std::string payload, std::optional<std::string> key) {
  if (!j_.contains(id))
    throw error("send('" + id + "', '" + topic + "'): no workflow '" + id + "' in this harness");
  j_.deliver(id, topic, std::move(payload), std::move(key));
}

DURABLE_DECL void harness::launch_due() {
  std::vector<std::string> ids;
  for (const auto& [id, w] : j_.workflows())
    if (harness_detail::may_run(w.status)) ids.push_back(id);
  for (const std::string& id : ids) {
    auto& w = j_.at(id);
    if (w.wake_at && *w.wake_at > clock_.now()) continue;
    auto& launched = runs_[id];
    if (launched && !launched->ended) continue;
    if (launched && launched->escaped) {
      auto e = launched->escaped;
      launched.reset();
      std::rethrow_exception(e);
    }
    const auto reg = registry_->find(w.name);
    if (reg == registry_->end()) {
      if (!launched) {
        reports_.push_back(id + ": no workflow named '" + w.name +
                           "' is registered with this harness; it stays " + w.status);
        launched = std::make_shared<detail::memory_launch>();
        launched->ended = true;
      }
      continue;
    }
    // I9: a workflow claimed again and again without a new row is parked, as the engine's
    // max_claims_without_progress does.
    auto& mark = claims_[id];
    if (launched && w.steps.size() == mark.rows && w.generation == mark.generation) {
      if (++mark.claims >= o_.max_claims_without_progress) {
        const int claims = mark.claims;
        const std::string why = "claimed " + std::to_string(claims) +
                                " times in a row without progress (I9); the harness parked it";
        j_.finish(id, w.epoch, std::string(to_string(workflow_state::parked)), std::nullopt,
                  detail::error_json("durable::no_progress", why), why);
        continue;
      }
    } else {
      mark.claims = 0;
    }
    mark.rows = w.steps.size();
    mark.generation = w.generation;
    detail::memory_run_options mo;
    mo.journal_limit = o_.journal_limit;
    mo.max_value_bytes = o_.max_value_bytes;
    mo.poll_interval = detail::virtual_clock::horizon;  // pokes wake the waits
    mo.clock = &clock_;
    mo.waiters = &waiters_;
    mo.on_attempt = on_attempt_;
    mo.observer = effects_;  // the services learn which step a call runs in
    mo.fail_attempt = fail_attempt_;
    mo.same_code = true;  // a mismatch is the workflow's nondeterminism, not a change of code
    mo.check_inputs = &reg->second.check_inputs;
    mo.signature = &reg->second.signature;
    mo.random_bits = harness_detail::random_bits;
    harness_detail::invocation body{&reg->second, nlohmann::json::parse(w.inputs)};
    w.wake_at.reset();
    launched = detail::launch_in_memory(*io_, j_, id, std::move(body), mo);
  }
}

DURABLE_DECL void harness::collect_reports() {
  for (auto& [id, l] : runs_) {
    if (!l) continue;
    for (auto& r : l->result.retries) reports_.push_back(id + ": " + r);
    for (auto& r : l->result.warnings) reports_.push_back(id + ": " + r);
    l->result.retries.clear();
    l->result.warnings.clear();
  }
}

DURABLE_DECL bool harness::settle(double until) {
  // Every run's work stays in this io_context: a large value is encoded in place, not on a
  // thread of its own, so that "nothing is ready" means every run waits.
  struct in_place {
    bool before = detail::encode_in_place;
    in_place() { detail::encode_in_place = true; }
    ~in_place() { detail::encode_in_place = before; }
  } encoding;
  std::size_t moves = 0;
  effects_->process = process_number_;  // for the services' records
  for (;;) {
    if (j_.crashed()) return false;
    launch_due();
    if (io_->stopped()) io_->restart();
    if (io_->poll_one() > 0) continue;
    if (real_io_ > 0) {  // a transaction on the database: wait for it in real time
      io_->run_one();
      continue;
    }
    if (clock_.armed() > 0 && clock_.next_due() <= until) {
      if (++moves > o_.max_clock_moves)
        throw error("harness: the virtual clock moved " + std::to_string(o_.max_clock_moves) +
                    " times without the workflows settling; a workflow that sleeps in an "
                    "endless loop is driven with advance(duration) instead of run()");
      clock_.fire_next();
      continue;
    }
    // Nothing is ready and nothing is due: a step function's real asynchronous work (a
    // socket, a real timer) may still be under way. Give it a moment, then call the
    // workflows settled.
    if (o_.real_io_wait.count() > 0 && io_->run_one_for(o_.real_io_wait) > 0) continue;
    launch_due();
    if (io_->stopped()) io_->restart();
    if (io_->poll_one() > 0) continue;
    collect_reports();
    return true;
  }
}

DURABLE_DECL void harness::run() {
  if (!settle(std::numeric_limits<double>::infinity())) end_process();
}

DURABLE_DECL void harness::advance(std::chrono::milliseconds d) {
  if (d.count() < 0) throw error("harness::advance: the clock does not go back");
  const double until = clock_.now() + double(d.count()) / 1000.0;
  if (!settle(until)) {
    end_process();
    return;
  }
  clock_.advance_to(until);
  if (!settle(until)) end_process();
}

DURABLE_DECL void harness::crash() { end_process(); }

DURABLE_DECL void harness::end_process() {
  collect_reports();
  io_.reset();  // abandons every run where it stands (their frames are destroyed)
  runs_.clear();
  effects_->in_flight.clear();  // (their attempt scopes ended with the frames, or not at all)
  real_io_ = 0;  // a transaction abandoned while it connected counted itself and no more
  j_.revive();
  io_ = std::make_unique<asio::io_context>();
  ++process_number_;
}

DURABLE_DECL std::chrono::system_clock::time_point harness::now() const {
  return harness_detail::time_point_of(clock_.now());
}

DURABLE_DECL std::vector<std::string> harness::workflows() const {
  std::vector<std::string> out;
  for (const auto& [id, w] : j_.workflows()) out.push_back(id);
  return out;
}

DURABLE_DECL workflow_record harness::workflow(const std::string& id) const {
  const auto& w = j_.at(id);
  workflow_record r;
  r.id = id;
  r.name = w.name;
  r.status = w.status;
  r.reason = w.reason;
  r.parent = w.parent;
  r.generation = w.generation;
  if (w.output) r.output = nlohmann::json::parse(*w.output);
  if (w.error) harness_detail::split_error(*w.error, r.error_type, r.error_message);
  return r;
}

DURABLE_DECL nlohmann::json harness::result_json(const std::string& id) const {
  const workflow_record w = workflow(id);
  if (w.status == to_string(workflow_state::succeeded)) return w.output.value_or(nullptr);
  std::string what = "workflow '" + id + "' (" + w.name + ") has no result: it is " + w.status;
  if (w.error_type) what += ", with " + *w.error_type + ": " + w.error_message.value_or("");
  if (w.reason && (!w.error_message || *w.reason != *w.error_message))
    what += " (" + *w.reason + ")";
  if (harness_detail::may_run(w.status))
    what += "; run() or advance() the harness, or give it what the workflow waits for";
  throw error(what);
}

DURABLE_DECL std::vector<step_record> harness::journal(const std::string& id) const {
  std::vector<step_record> out;
  for (const auto& [seq, row] : j_.at(id).steps) {
    step_record r;
    r.seq = seq;
    r.name = row.name;
    r.kind = row.kind;
    r.attempts = row.attempts;
    r.started = harness_detail::time_point_of(row.started_at);
    if (row.output) r.output = nlohmann::json::parse(*row.output);
    if (row.error) harness_detail::split_error(*row.error, r.error_type, r.error_message);
    out.push_back(std::move(r));
  }
  return out;
}

DURABLE_DECL nlohmann::json harness::export_journal(const std::string& id, bool children) const {
  using nlohmann::json;
  auto parse_or_null = [](const std::optional<std::string>& t) {
    return t ? json::parse(*t) : json(nullptr);
  };
  std::vector<std::string> order{id};
  (void)j_.at(id);
  for (std::size_t i = 0; children && i < order.size(); ++i)
    for (const auto& [other, w] : j_.workflows())
      if (w.parent == order[i]) order.push_back(other);
  json all = json::array();
  for (const std::string& wid : order) {
    const auto& w = j_.at(wid);
    json steps = json::array(), tries = json::array(), messages = json::array(),
         events = json::array(), streams = json::array();
    for (const auto& [seq, row] : w.steps)
      steps.push_back({{"seq", seq},
                       {"name", row.name},
                       {"kind", row.kind},
                       {"status", row.error ? "failed" : "succeeded"},
                       {"output", parse_or_null(row.output)},
                       {"error", parse_or_null(row.error)},
                       {"attempts", row.attempts}});
    for (const auto& a : w.attempts)
      tries.push_back({{"seq", a.row.seq},
                       {"attempt", a.row.attempt},
                       {"name", a.row.name},
                       {"kind", a.row.kind},
                       {"outcome", a.row.outcome},
                       {"error", a.row.error.empty() ? json(nullptr) : json::parse(a.row.error)}});
    for (const auto& m : w.inbox)
      messages.push_back(
          {{"topic", m.topic},
           {"payload", json::parse(m.payload)},
           {"idempotency_key", m.key ? json(*m.key) : json(nullptr)},
           {"consumed_seq", m.consumed_seq ? json(*m.consumed_seq) : json(nullptr)}});
    for (const auto& [key, value] : w.events)
      events.push_back({{"key", key}, {"value", json::parse(value)}});
    for (const auto& [key, rows] : w.streams)
      for (const auto& row : rows)
        streams.push_back({{"key", key},
                           {"position", row.position},
                           {"value", parse_or_null(row.value)},
                           {"closes", !row.value},
                           {"generation", row.generation},
                           {"seq", row.seq}});
    all.push_back({{"id", wid},
                   {"name", w.name},
                   {"status", w.status},
                   {"status_reason", w.reason ? json(*w.reason) : json(nullptr)},
                   {"inputs", json::parse(w.inputs)},
                   {"output", parse_or_null(w.output)},
                   {"error", parse_or_null(w.error)},
                   {"generation", w.generation},
                   {"parent_id", w.parent ? json(*w.parent) : json(nullptr)},
                   {"steps", std::move(steps)},
                   {"attempts", std::move(tries)},
                   {"messages", std::move(messages)},
                   {"events", std::move(events)},
                   {"streams", std::move(streams)}});
  }
  return {{"format", "durable.journal"}, {"version", 1}, {"root", id}, {"workflows", all}};
}

DURABLE_DECL std::vector<attempt_record> harness::attempts(const std::string& id) const {
  std::vector<attempt_record> out;
  for (const auto& a : j_.at(id).attempts) {
    attempt_record r;
    r.seq = a.row.seq;
    r.attempt = a.row.attempt;
    r.name = a.row.name;
    r.kind = a.row.kind;
    r.outcome = a.row.outcome;
    std::optional<std::string> type, message;
    harness_detail::split_error(a.row.error, type, message);
    r.error_type = type.value_or("");
    r.error_message = message.value_or("");
    if (a.next_attempt_at) r.next_attempt = harness_detail::time_point_of(*a.next_attempt_at);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace durable::testing
