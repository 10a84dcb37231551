// External effects the test kit can see (durable/testing.hpp): a service<Request, Reply> is a
// fake of an outside system (a payment API, a mailer) that records every call with the
// idempotency key it carried, the step it ran in and the simulated process, and answers a
// repeated key from its first reply, as an idempotent API does. check_crashes() gives every
// case fresh services and reads their calls: a call outside any step, or a step that called
// twice without a key, is reported in words. See docs/testing.md, "External effects".
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "durable/detail/attempt_observer.hpp"
#include "durable/error.hpp"
#include "durable/retry.hpp"

namespace durable::testing {

class harness;

/// One call of a service, as the kit saw it.
struct service_call {
  std::string service;             ///< the service's name
  std::optional<std::string> key;  ///< the idempotency key the call carried, if any
  std::string workflow_id;         ///< of the step it ran in (empty: outside any step)
  int seq = -1;                    ///< that step's number (-1: outside any step)
  std::string step;                ///< that step's name
  int attempt = 0;                 ///< that step's attempt
  int process = 0;                 ///< the simulated process (1, then one more per crash)
  std::string in_case;             ///< the check_crashes case ("uninterrupted"), or empty
  int number = 0;                  ///< 1, 2, ...: the calls of this service since its reset
  /// Answered from an earlier call with the same key: the fake's function did not run, and a
  /// real idempotent service would not act again.
  bool repeated = false;
  /// Answered so, although its request differs from the first call's with the key (Request
  /// compared with ==, when it can be): the request it carried never happened.
  bool conflicting = false;
  bool failed = false;  ///< the fake's function threw (the service refused: no effect)
  /// Made while several steps that await were under way, without a key: its step cannot be
  /// told, and the kit's checks leave it out. Pass the key.
  bool unplaced = false;

  [[nodiscard]] bool outside_step() const noexcept { return seq < 0 && !unplaced; }
};

class service_base;

namespace effect_detail {

/// What the services of one harness (and the harnesses fresh() makes of it) share: the
/// attempts of step functions under way, the process, the case, and the services.
struct tracker final : detail::attempt_observer {
  struct attempt {
    std::string workflow_id, step, key;
    int seq = 0, number = 0;
    bool may_suspend = false;
  };
  std::vector<attempt> in_flight;       // oldest first
  std::map<std::string, attempt> seen;  // by key: every attempt of the case, ended or not
  int process = 0;
  std::string in_case;
  std::vector<service_base*> services;

  void begins(const step_info& i, bool may_suspend) override {
    const std::string id = i.idempotency_key.substr(0, i.idempotency_key.rfind(':'));
    in_flight.push_back({id, i.name, i.idempotency_key, i.seq, i.attempt, may_suspend});
    seen[i.idempotency_key] = in_flight.back();
  }
  void ends(const step_info& i) override {
    for (auto it = in_flight.rbegin(); it != in_flight.rend(); ++it)
      if (it->key == i.idempotency_key && it->number == i.attempt) {
        in_flight.erase(std::next(it).base());
        return;
      }
  }
  /// Where a call ran. `placed` false: it cannot be told (see step_of).
  struct place {
    const attempt* step = nullptr;  // null: outside any step
    bool placed = true;
  };
  /// The step a call ran in: the attempt its key names (under way, else one that ended: an
  /// attempt left behind at its timeout goes on); with no key, the latest attempt under way
  /// when it runs to its end without yielding (it is the code running now), or the only one
  /// under way; with several under way that may suspend, nobody can tell.
  [[nodiscard]] place step_of(const std::optional<std::string>& key) const {
    if (key) {
      for (auto it = in_flight.rbegin(); it != in_flight.rend(); ++it)
        if (it->key == *key) return {&*it};
      if (const auto s = seen.find(*key); s != seen.end()) return {&s->second};
    }
    if (in_flight.empty()) return {};
    if (!in_flight.back().may_suspend || in_flight.size() == 1) return {&in_flight.back()};
    return {nullptr, false};
  }
};

}  // namespace effect_detail

/// The untyped part of a service: its name, its calls, and its place in the harness.
class service_base {
public:
  service_base(const service_base&) = delete;
  service_base& operator=(const service_base&) = delete;
  virtual ~service_base() {
    auto& v = tracker_->services;
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Every call since the last reset, in order.
  [[nodiscard]] const std::vector<service_call>& calls() const noexcept { return calls_; }
  /// Calls that acted (the fake's function ran and returned): what a real service did.
  [[nodiscard]] std::size_t effects() const {
    return std::size_t(std::count_if(calls_.begin(), calls_.end(), [](const service_call& c) {
      return !c.repeated && !c.failed;
    }));
  }
  /// Calls that carried `key`.
  [[nodiscard]] std::size_t calls_with_key(std::string_view key) const {
    return std::size_t(std::count_if(calls_.begin(), calls_.end(), [&](const service_call& c) {
      return c.key && *c.key == key;
    }));
  }
  /// Forgets every call and every stored reply. check_crashes() does this before each of its
  /// runs unless keep_across_cases(true).
  void reset() {
    calls_.clear();
    forget_replies();
  }
  /// Keep calls and stored replies from one check_crashes() case to the next (a service whose
  /// state outlives a process, as a real one's does across a crash within one test).
  void keep_across_cases(bool keep) noexcept { keep_ = keep; }
  [[nodiscard]] bool keeps_across_cases() const noexcept { return keep_; }
  /// The service is idempotent by nature (a read, a PUT of a whole value, an upsert): a call
  /// repeated without a key does no harm, and check_crashes does not report it. A call outside
  /// any step is still reported: it runs again on every replay.
  void idempotent(bool yes) noexcept { idempotent_ = yes; }
  [[nodiscard]] bool is_idempotent() const noexcept { return idempotent_; }

protected:
  service_base(harness& h, std::string name);

  /// Records a call about to be answered; `repeated`: a stored reply answers it.
  service_call& record(std::optional<std::string> key, bool repeated) {
    service_call c;
    c.service = name_;
    c.key = std::move(key);
    const effect_detail::tracker::place at = tracker_->step_of(c.key);
    if (const auto* a = at.step) {
      c.workflow_id = a->workflow_id;
      c.seq = a->seq;
      c.step = a->step;
      c.attempt = a->number;
    }
    c.unplaced = !at.placed;
    c.process = tracker_->process;
    c.in_case = tracker_->in_case;
    c.number = int(calls_.size()) + 1;
    c.repeated = repeated;
    calls_.push_back(std::move(c));
    return calls_.back();
  }
  void mark_failed(std::size_t index) { calls_.at(index).failed = true; }
  virtual void forget_replies() = 0;

private:
  std::shared_ptr<effect_detail::tracker> tracker_;
  std::string name_;
  std::vector<service_call> calls_;
  bool keep_ = false;
  bool idempotent_ = false;
};

/// A fake of an outside system that takes a `Request` and answers a `Reply` (void: nothing,
/// as a mailer). Construct it with the harness the workflow runs in (check_crashes' cases use
/// it too), a name for the reports, and the fake's function:
///
///     dt::service<charge_request, std::string> charge(h, "charge",
///         [](const charge_request& r, const dt::service_call& c) {
///           return "ch_" + std::to_string(c.number);  // a new id per call, as a real API
///         });
///     ... inside a step:  charge(request, ctx.idempotency_key());
///
/// A call with a key that an earlier call carried is answered from that call's reply without
/// running the function (a real idempotent API does the same). The function may also take only
/// the request. Not thread-safe: call it from the harness's thread, as steps run there.
template <class Request, class Reply = void>
class service : public service_base {
public:
  using function = std::function<Reply(const Request&, const service_call&)>;

  /// `fn` may be omitted for a void Reply (the call is only recorded).
  template <class F = std::nullptr_t>
  service(harness& h, std::string name, F fn = nullptr) : service_base(h, std::move(name)) {
    if constexpr (std::is_same_v<F, std::nullptr_t>) {
      static_assert(std::is_void_v<Reply>,
                    "testing::service: a service with a reply needs a function that makes it");
    } else if constexpr (std::is_invocable_r_v<Reply, F&, const Request&, const service_call&>) {
      fn_ = std::move(fn);
    } else {
      static_assert(std::is_invocable_r_v<Reply, F&, const Request&>,
                    "testing::service: the function must be callable as Reply(const Request&) "
                    "or Reply(const Request&, const service_call&)");
      fn_ = [f = std::move(fn)](const Request& r, const service_call&) mutable -> Reply {
        return f(r);
      };
    }
  }

  /// A call without an idempotency key: the function runs every time.
  Reply operator()(const Request& request) { return call(request, std::nullopt); }
  /// A call with an idempotency key (ctx.idempotency_key(), step_info::idempotency_key): the
  /// first call with it runs the function, a later one gets its reply.
  Reply operator()(const Request& request, std::string_view idempotency_key) {
    return call(request, std::string(idempotency_key));
  }

  /// The requests of calls(), in the same order.
  [[nodiscard]] const std::vector<Request>& requests() const noexcept { return requests_; }

private:
  Reply call(const Request& request, std::optional<std::string> key) {
    const bool repeated = key && answered_.contains(*key);
    requests_.push_back(request);
    service_call& c = record(key, repeated);
    const std::size_t index = calls().size() - 1;
    if constexpr (std::equality_comparable<Request>) {
      if (repeated && !(first_request_.at(*key) == request)) c.conflicting = true;
    }
    if constexpr (std::is_void_v<Reply>) {
      if (repeated) return;
      run(c, index, request);
      if (key) store(*key, true, request);
    } else {
      if (repeated) return answered_.at(*key);
      Reply reply = run(c, index, request);
      if (key) store(*key, reply, request);
      return reply;
    }
  }
  Reply run(const service_call& c, std::size_t index, const Request& request) {
    if constexpr (std::is_void_v<Reply>) {
      if (!fn_) return;
    }
    const service_call copy = c;  // the function may call this service again
    try {
      return fn_(request, copy);
    } catch (...) {
      mark_failed(index);
      throw;
    }
  }
  template <class V>
  void store(const std::string& key, V&& reply, const Request& request) {
    answered_.emplace(key, std::forward<V>(reply));
    if constexpr (std::equality_comparable<Request>) first_request_.emplace(key, request);
  }
  void forget_replies() override {
    answered_.clear();
    requests_.clear();
    first_request_.clear();
  }

  using stored = std::conditional_t<std::is_void_v<Reply>, bool, Reply>;
  function fn_;
  std::map<std::string, stored, std::less<>> answered_;
  std::map<std::string, Request, std::less<>> first_request_;  // when Request has ==
  std::vector<Request> requests_;
};

}  // namespace durable::testing
