// The spans of a run (engine_options::on_span, docs/tracing.md#spans): made only when a hook
// is installed, with ids that every process computes alike from the workflow, its generation,
// the step and the run's epoch.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "durable/detail/run_state.hpp"
#include "durable/trace.hpp"

namespace durable::detail {

/// The trace id of a run's spans, written to out[0..31]: its stored traceparent's, else one
/// derived from the workflow id (the root of a trace of its own, the same in every run).
inline void trace_id_into(char* out, const run_state& s) noexcept {
  if (s.traceparent && s.traceparent->size() == 55) {
    s.traceparent->copy(out, 32, 3);
    return;
  }
  span_id_into(out, s.id, 't', {0});
  span_id_into(out + 16, s.id, 't', {1});
}

/// The span of the run `s` (one per claim: the epoch tells them apart), written to out[0..15].
inline void run_span_into(char* out, const run_state& s) noexcept {
  span_id_into(out, s.id, 'r', {s.generation, s.epoch});
}

/// One span, from its construction to end(). Left by an exception (the run stopped first), it
/// ends then: not failed when the run was released (unloaded to wait, fenced out, handed over
/// at shutdown: run_released, ownership_lost, or a released verdict), failed otherwise. A frame
/// destroyed without unwinding (an io_context torn down) ends nothing, like a killed process.
/// Without a hook it does nothing. Its ids, epoch and generation are taken once, at its start
/// (nothing is allocated); ending twice is harmless (GCC 12 may destroy a coroutine's local
/// twice).
class span_guard {
public:
  /// kind run: `seq` -1, parent the stored traceparent's; step and wait: parent the run;
  /// attempt: parent the step `seq` of this run. `name` and `step_kind` must outlive it.
  span_guard(const run_state& s, span_kind kind, int seq, std::string_view name,
             std::string_view step_kind, int attempt = 0, bool on = true) {
    if (!on || !s.on_span || !*s.on_span) return;
    s_ = &s;
    kind_ = kind;
    seq_ = seq;
    attempt_ = attempt;
    name_ = name;
    step_kind_ = step_kind;
    trace_id_into(trace_, s);
    epoch_ = s.epoch;
    generation_ = s.generation;
    sampled_ = !s.traceparent || s.traceparent->size() != 55 || sampled_flag(*s.traceparent);
    parent_len_ = 16;
    switch (kind_) {
      case span_kind::run:
        run_span_into(id_, s);
        if (s.traceparent && s.traceparent->size() == 55)
          s.traceparent->copy(parent_, 16, 36);
        else
          parent_len_ = 0;
        break;
      case span_kind::step:
        step_span_into(id_, s.id, s.generation, seq_, s.epoch);
        run_span_into(parent_, s);
        break;
      case span_kind::attempt:
        span_id_into(id_, s.id, 'a', {s.generation, seq_, s.epoch, attempt_});
        step_span_into(parent_, s.id, s.generation, seq_, s.epoch);
        break;
      case span_kind::wait:
        span_id_into(id_, s.id, 'w', {s.generation, seq_, s.epoch});
        run_span_into(parent_, s);
        break;
    }
    start_ = std::chrono::system_clock::now();
    emit(false, false, {});
  }
  span_guard(const span_guard&) = delete;
  span_guard& operator=(const span_guard&) = delete;
  ~span_guard() {
    if (!s_) return;
    if (std::uncaught_exceptions() == 0) {  // destroyed, not unwound: it never ends
      s_ = nullptr;
      return;
    }
    const verdict& v = s_->outcome.get();
    if (v.what == verdict::kind::released)
      end(false, v.reason);
    else
      end(true, "it did not finish: the run stopped (its run span says why)");
  }

  /// Whether it was started and has not ended (a hook is installed).
  [[nodiscard]] bool active() const noexcept { return s_ != nullptr; }

  void end(bool failed, std::string_view error) {
    if (!s_) return;
    emit(true, failed, error);
    s_ = nullptr;
  }
  /// Ends it with what stopped it: a failure, or (not failed) the run unloaded or released.
  void end(const std::exception_ptr& e) {
    if (!s_) return;
    try {
      std::rethrow_exception(e);
    } catch (const run_released& r) {
      end(false, r.what());
    } catch (const ownership_lost& r) {
      end(false, r.what());
    } catch (const std::exception& x) {
      end(true, x.what());
    } catch (...) {
      end(true, "the run stopped");
    }
  }

private:
  void emit(bool ended, bool failed, std::string_view error) const {
    const run_state& s = *s_;
    span sp;
    sp.kind = kind_;
    sp.ended = ended;
    sp.trace_id = std::string_view(trace_, 32);
    sp.span_id = std::string_view(id_, 16);
    sp.parent_id = std::string_view(parent_, parent_len_);
    sp.workflow_id = s.id;
    sp.workflow_name = s.name;
    sp.name = name_;
    sp.step_kind = step_kind_;
    sp.step = seq_;
    sp.attempt = attempt_;
    sp.epoch = epoch_;
    sp.generation = generation_;
    sp.sampled = sampled_;
    sp.start = start_;
    if (ended) sp.end = std::chrono::system_clock::now();
    sp.failed = failed;
    sp.error = error;
    try {
      (*s.on_span)(sp);
    } catch (const std::exception& e) {  // tracing never breaks a run
      std::fprintf(stderr, "[durable] engine_options::on_span threw: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "[durable] engine_options::on_span threw\n");
    }
  }

  const run_state* s_ = nullptr;  // null: no hook, or ended
  span_kind kind_ = span_kind::run;
  int seq_ = -1;
  int attempt_ = 0;
  std::string_view name_, step_kind_;
  char trace_[32] = {};
  char id_[16] = {};
  char parent_[16] = {};
  std::size_t parent_len_ = 0;
  std::int64_t epoch_ = 0;
  int generation_ = 0;
  bool sampled_ = true;
  std::chrono::system_clock::time_point start_{};
};

}  // namespace durable::detail
