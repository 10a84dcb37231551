// The test kit's harness: runs registered workflows on the in-memory journal, as engines
// would, on a virtual clock, inside one simulated process that a test can kill and replace.
// No database, no engine, no test framework. See docs/testing.md.
#pragma once

#include <asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "durable/codec.hpp"
#include "durable/detail/encode_text.hpp"
#include "durable/detail/invoke_workflow.hpp"
#include "durable/detail/memory_run.hpp"
#include "durable/detail/replay/memory_journal.hpp"
#include "durable/detail/virtual_clock.hpp"
#include "durable/detail/workflow_signature.hpp"
#include "durable/error.hpp"
#include "durable/options.hpp"
#include "durable/pg/connection.hpp"
#include "durable/testing/service.hpp"

namespace durable::testing {

/// A check of the kit failed (check_crashes, replay): what() is the readable report.
class check_failed : public error {
public:
  using error::error;
};

struct harness_options {
  /// Where the virtual clock starts (the kit never reads this host's clock for a run).
  std::chrono::system_clock::time_point start = std::chrono::system_clock::time_point(
      std::chrono::seconds(1'798'761'600));  // 2027-01-01T00:00:00Z
  std::size_t journal_limit = 0;             ///< engine_options::journal_limit
  std::size_t max_value_bytes = 0;           ///< engine_options::max_value_bytes
  /// run() gives up (throws) after moving the clock this often without the workflows settling:
  /// a workflow that sleeps in an endless loop is driven with advance() instead.
  std::size_t max_clock_moves = 1'000'000;
  /// A database (a libpq conninfo or URL) for transactional steps (ctx.transaction): their
  /// SQL runs and commits there, their rows are journaled in memory, and a crash the kit stages
  /// before a row rolls its transaction back. Empty: transactional steps are refused (the
  /// workflow is parked with a message that says so); nothing pretends to commit.
  std::string database;
  /// How long run() and advance() wait, once nothing is ready and nothing is due on the
  /// virtual clock, for a step function's real asynchronous work (a socket, a real timer)
  /// before they call the workflows settled. Raise it for steps that talk to real services.
  std::chrono::milliseconds real_io_wait{2};
  /// Claims of one workflow in a row that end without progress before the harness stops
  /// running it (I9: as the engine parks it).
  int max_claims_without_progress = 100;
};

/// One journaled step of a workflow, as the steps table holds it.
struct step_record {
  int seq = 0;
  std::string name, kind;
  std::optional<nlohmann::json> output;  ///< set unless the step failed (or has no output)
  std::optional<std::string> error_type, error_message;
  int attempts = 1;
  std::chrono::system_clock::time_point started;
};

/// One failed attempt of a step, as step_attempts holds it.
struct attempt_record {
  int seq = 0, attempt = 0;
  std::string name, kind, outcome;  ///< outcome: "retrying" or "failed"
  std::string error_type, error_message;
  std::optional<std::chrono::system_clock::time_point> next_attempt;
};

/// A workflow's row: status, reason, output or error.
struct workflow_record {
  std::string id, name, status;
  std::optional<std::string> reason;
  std::optional<nlohmann::json> output;
  std::optional<std::string> error_type, error_message;
  std::optional<std::string> parent;
  std::int64_t generation = 0;
};

class harness {
public:
  explicit harness(harness_options o = {});
  harness(const harness&) = delete;
  harness& operator=(const harness&) = delete;
  ~harness();

  // ---- workflows, as engine::register_workflow takes them -----------------------------------

  template <class F>
  void register_workflow(std::string name, F fn);
  template <class R, class C, class... Args>
  void register_workflow(std::string name, asio::awaitable<R> (C::*fn)(context&, Args...),
                         C* object);

  /// A harness with the same workflows and options and an empty journal (check_crashes runs
  /// each case in one).
  [[nodiscard]] std::unique_ptr<harness> fresh() const;

  // ---- what a test does -----------------------------------------------------------------------

  /// Starts workflow `name` as `id` with `args`, checked against its parameters as
  /// engine::start checks them. It runs at the next run() or advance().
  template <class... Args>
  void start(const std::string& name, const std::string& id, const Args&... args) {
    start_encoded(name, id, detail::encode_inputs(args...), std::chrono::milliseconds(0));
  }
  /// The same with start options (a deadline: options.timeout after now()).
  template <class... Args>
  void start_with(const start_options& options, const std::string& name, const std::string& id,
                  const Args&... args) {
    start_encoded(name, id, detail::encode_inputs(args...), options.timeout);
  }

  /// Runs every workflow that can run until each has ended or waits for what only the test can
  /// give (a message, an event); the virtual clock moves as far as their sleeps, backoffs,
  /// timeouts and deadlines need.
  void run();
  /// Moves the virtual clock `d` forward, running whatever falls due on the way, and stops
  /// there: a test inspects the state at that moment.
  void advance(std::chrono::milliseconds d);
  /// Kills the simulated process: every run is abandoned where it stands, as by SIGKILL, and
  /// the next run() or advance() resumes them in a new process (by replay, new epochs).
  void crash();

  /// A message from outside (engine::send), once per `key` when one is given.
  template <class T>
  void send(const std::string& id, const std::string& topic, const T& value,
            std::optional<std::string> key = std::nullopt) {
    deliver(id, topic, durable::encode<T>(value).dump(), std::move(key));
  }
  /// Event `key` of workflow `id`, if it was published.
  template <class T>
  [[nodiscard]] std::optional<T> get_event(const std::string& id, const std::string& key) const {
    const auto& events = j_.at(id).events;
    const auto it = events.find(key);
    if (it == events.end()) return std::nullopt;
    return durable::decode<T>(nlohmann::json::parse(it->second));
  }

  /// The values workflow `id` wrote to stream `key` (ctx.write_stream), in offset order, and
  /// whether it closed it.
  template <class T>
  [[nodiscard]] std::pair<std::vector<T>, bool> read_stream(const std::string& id,
                                                            const std::string& key) const {
    std::pair<std::vector<T>, bool> out{{}, false};
    const auto& streams = j_.at(id).streams;
    const auto it = streams.find(key);
    if (it == streams.end()) return out;
    for (const auto& row : it->second) {
      if (!row.value)
        out.second = true;
      else
        out.first.push_back(durable::decode<T>(nlohmann::json::parse(*row.value)));
    }
    return out;
  }

  // ---- what a test inspects ----------------------------------------------------------------

  [[nodiscard]] std::chrono::system_clock::time_point now() const;
  [[nodiscard]] bool contains(const std::string& id) const { return j_.contains(id); }
  /// Every workflow id the journal holds (children included).
  [[nodiscard]] std::vector<std::string> workflows() const;
  [[nodiscard]] workflow_record workflow(const std::string& id) const;
  /// pending, running, sleeping, succeeded, failed, parked, cancelled, dead_letter.
  [[nodiscard]] std::string status(const std::string& id) const { return j_.at(id).status; }
  /// The result of a succeeded workflow; throws a readable error for any other status.
  template <class T>
  [[nodiscard]] T result(const std::string& id) const {
    return durable::decode<T>(result_json(id));
  }
  [[nodiscard]] nlohmann::json result_json(const std::string& id) const;
  [[nodiscard]] std::vector<step_record> journal(const std::string& id) const;
  [[nodiscard]] std::vector<attempt_record> attempts(const std::string& id) const;
  /// Workflow `id` (with its descendants when `children`) in the format `durable export`
  /// writes: a fixture made in a test, for replay() or `durable import`.
  [[nodiscard]] nlohmann::json export_journal(const std::string& id, bool children = true) const;
  /// Retries and warnings the engine's event hook would have reported, in order.
  [[nodiscard]] const std::vector<std::string>& reports() const noexcept { return reports_; }

  // ---- the kit's own machinery -----------------------------------------------------------------

  detail::memory_journal& store() noexcept { return j_; }
  /// Told of every attempt of a step function, before it runs (check_crashes counts them).
  void on_attempt(std::function<void(const step_info&)> f) { on_attempt_ = std::move(f); }
  /// Asked after an attempt's function returned whether to fail it anyway (the step's policy
  /// permitting a retry).
  void fail_attempt(std::function<bool(const step_info&)> f) { fail_attempt_ = std::move(f); }
  /// Processes so far (1, then one more after each crash).
  [[nodiscard]] int process() const noexcept { return process_number_; }
  /// The services (testing::service) constructed with this harness or one it was made fresh
  /// from, in the order they were made.
  [[nodiscard]] const std::vector<service_base*>& services() const noexcept {
    return effects_->services;
  }
  /// Names the check_crashes() case now running in every service call's record (empty: none),
  /// and forgets the attempts of the one before.
  void name_case(std::string label) {
    effects_->in_case = std::move(label);
    effects_->seen.clear();
  }

  /// A registered workflow, as replay() and the harness call it.
  struct registered {
    std::string signature;
    std::function<void(const nlohmann::json&)> check_inputs;
    std::function<asio::awaitable<std::optional<std::string>>(context&, const nlohmann::json&)>
        invoke;
  };
  /// The workflow registered as `name`; null if none.
  [[nodiscard]] const registered* find_workflow(std::string_view name) const {
    const auto it = registry_->find(name);
    return it == registry_->end() ? nullptr : &it->second;
  }

private:
  friend class service_base;
  using registry = std::map<std::string, registered, std::less<>>;

  template <class R, class... Args, class Fn>
  void add_workflow(std::string name, std::shared_ptr<Fn> fn);
  void start_encoded(const std::string& name, const std::string& id, nlohmann::json inputs,
                     std::chrono::milliseconds timeout);
  void deliver(const std::string& id, const std::string& topic, std::string payload,
               std::optional<std::string> key);
  /// Runs until every run waits (or a crash), firing timers due by `until`. False: crashed.
  bool settle(double until);
  /// Launches a run for every workflow that should have one and has none.
  void launch_due();
  void end_process();
  /// Moves what the runs reported (retries, warnings) to reports().
  void collect_reports();

  class transaction;
  asio::awaitable<std::unique_ptr<detail::journal_transaction>> begin_transaction();

  harness_options o_;
  int real_io_ = 0;  // transactions open on the database: the clock waits for them
  std::shared_ptr<registry> registry_ = std::make_shared<registry>();
  // Shared with the harnesses fresh() makes, as the services are.
  std::shared_ptr<effect_detail::tracker> effects_ = std::make_shared<effect_detail::tracker>();
  detail::virtual_clock clock_;
  detail::memory_journal j_;
  detail::waiter_registry waiters_;
  std::unique_ptr<asio::io_context> io_;
  std::map<std::string, std::shared_ptr<detail::memory_launch>> runs_;
  struct progress {  // at a workflow's last claim, and the claims since without a new row
    std::int64_t generation = -1;
    std::size_t rows = 0;
    int claims = 0;
  };
  std::map<std::string, progress> claims_;
  std::function<void(const step_info&)> on_attempt_;
  std::function<bool(const step_info&)> fail_attempt_;
  std::vector<std::string> reports_;
  int process_number_ = 1;
};

// ---- templates ----------------------------------------------------------------------------------

template <class F>
void harness::register_workflow(std::string name, F fn) {
  using sig = detail::workflow_signature_of<F>;
  static_assert(sig::valid,
                "register_workflow: the workflow must be callable as "
                "asio::awaitable<R>(durable::context&, Args...) with exactly one signature: a "
                "function, a lambda or a function object (not a generic lambda)");
  if constexpr (std::is_pointer_v<F> || std::is_member_pointer_v<F>) {
    if (!fn) throw error("register_workflow('" + name + "'): the function pointer is null");
  }
  [&]<class... Args>(std::tuple<Args...>*) {
    add_workflow<typename sig::result, Args...>(std::move(name),
                                                std::make_shared<std::decay_t<F>>(std::move(fn)));
  }(static_cast<typename sig::args*>(nullptr));
}

template <class R, class C, class... Args>
void harness::register_workflow(std::string name, asio::awaitable<R> (C::*fn)(context&, Args...),
                                C* object) {
  if (!fn) throw error("register_workflow('" + name + "'): the member function pointer is null");
  if (!object) throw error("register_workflow('" + name + "'): the object is null");
  auto call = [fn, object](context& ctx, auto&... a) { return (object->*fn)(ctx, a...); };
  add_workflow<R, Args...>(std::move(name), std::make_shared<decltype(call)>(call));
}

template <class R, class... Args, class Fn>
void harness::add_workflow(std::string name, std::shared_ptr<Fn> fn) {
  using inputs_t = std::tuple<std::decay_t<Args>...>;
  if (name.empty()) throw error("register_workflow: the workflow name must not be empty");
  registered w;
  w.signature = detail::signature_of<Args...>();
  w.check_inputs = [](const nlohmann::json& j) { (void)durable::decode<inputs_t>(j); };
  w.invoke = [fn](context& ctx, const nlohmann::json& j) {
    return detail::invoke_workflow<R, Args...>(fn, ctx, j);
  };
  if (!registry_->emplace(name, std::move(w)).second)
    throw error("register_workflow: a workflow named '" + name + "' is already registered");
}

}  // namespace durable::testing

#if defined(DURABLE_HEADER_ONLY)
#include "durable/testing/impl/harness.ipp"
#endif
