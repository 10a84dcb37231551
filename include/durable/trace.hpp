// W3C trace context (https://www.w3.org/TR/trace-context/) as the engine stores it with a
// workflow: the `traceparent` of the span that started it, and the vendors' `tracestate`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "durable/detail/fnv.hpp"

namespace durable {

namespace detail {

inline constexpr char hex_digits[] = "0123456789abcdef";

/// The value of hexadecimal digit `c` (either case).
constexpr int hex_value(char c) noexcept {
  return c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0';
}

/// Whether the flags of a 55-character traceparent say sampled (bit 0).
constexpr bool sampled_flag(std::string_view traceparent) noexcept {
  return traceparent.size() == 55 && (hex_value(traceparent[54]) & 1) != 0;
}

}  // namespace detail

/// A trace context, checked (trace_context::parse). A workflow started or enqueued with one
/// keeps it for its whole life: its children inherit its trace, and `durable show` and the
/// console show its trace id (docs/tracing.md).
struct trace_context {
  /// "00-<trace id: 32 hex>-<parent span id: 16 hex>-<flags: 2 hex>", lowercase.
  std::string traceparent;
  /// Vendor entries ("key=value,key=value"), empty when none.
  std::string tracestate;

  /// The trace id (32 digits); empty unless the traceparent has the length of version 00.
  [[nodiscard]] std::string_view trace_id() const noexcept {
    return traceparent.size() == 55 ? std::string_view(traceparent).substr(3, 32)
                                    : std::string_view();
  }
  /// The parent span id (16 digits); empty likewise.
  [[nodiscard]] std::string_view parent_id() const noexcept {
    return traceparent.size() == 55 ? std::string_view(traceparent).substr(36, 16)
                                    : std::string_view();
  }
  /// The sampled flag (bit 0 of the flags).
  [[nodiscard]] bool sampled() const noexcept { return detail::sampled_flag(traceparent); }

  /// What is wrong with `traceparent` or `tracestate` as W3C trace context, or nothing; with
  /// `field`, which of the two ("traceparent" or "tracestate"). Version 00 is exactly 55
  /// characters; a later version (not ff) may carry more after a '-'. `tracestate`: at most 32
  /// comma-separated key=value entries and 512 bytes, printable ASCII, blanks around entries
  /// allowed.
  [[nodiscard]] static std::optional<std::string> problem(std::string_view traceparent,
                                                          std::string_view tracestate = {},
                                                          std::string* field = nullptr);

  /// The context, checked; nullopt with `why` (and `field`) set when it is not valid (see
  /// problem()). Stored as version 00: a later version keeps its first four fields, with only
  /// the flags version 00 knows (sampled, random). The tracestate is tidied: no blanks around
  /// entries, no empty entries.
  [[nodiscard]] static std::optional<trace_context> parse(std::string_view traceparent,
                                                          std::string_view tracestate = {},
                                                          std::string* why = nullptr,
                                                          std::string* field = nullptr);

  /// The context of a request's `traceparent` and `tracestate` headers as the specification
  /// says a receiver treats them: nullopt when the traceparent is missing or not valid (start a
  /// trace of your own), and a tracestate that is not valid dropped (the traceparent kept).
  [[nodiscard]] static std::optional<trace_context> from_headers(std::string_view traceparent,
                                                                 std::string_view tracestate);
};

/// Supplies the trace context of the caller's current span to start() and enqueue() when their
/// options name none (engine_options::current_trace). Called on the caller's thread, before
/// the call returns; nullopt: none. A traceparent that is not valid is dropped with a warning
/// event, and so is a tracestate that is not (the traceparent kept): tracing never stops a
/// start.
using trace_context_hook = std::function<std::optional<trace_context>()>;

/// What a span covers (docs/tracing.md#spans).
enum class span_kind {
  run,      ///< a run of a workflow in one process, from its claim (or start) to its end
  step,     ///< a journaled step that executes: ctx.step, ctx.transaction, a child's start, a send,
            ///< an event published
  attempt,  ///< one attempt of a ctx.step (not of a ctx.transaction) or ctx.transaction
  wait,     ///< ctx.sleep_for/until, ctx.recv, ctx.get_event, a child's result
};

[[nodiscard]] constexpr std::string_view to_string(span_kind k) noexcept {
  switch (k) {
    case span_kind::run:
      return "run";
    case span_kind::step:
      return "step";
    case span_kind::attempt:
      return "attempt";
    case span_kind::wait:
      return "wait";
  }
  return "unknown";
}

/// A span of a workflow's trace, told when it starts and when it ends (engine_options::on_span).
/// The views are valid only during the hook's call. Ids are lowercase hex; a span's id is the
/// same in its start and its end. Steps replayed from the journal are not spans: they did not
/// run again.
struct span {
  span_kind kind = span_kind::run;
  bool ended = false;          ///< false: it starts (`end` unset); true: it ended
  std::string_view trace_id;   ///< 32 digits
  std::string_view span_id;    ///< 16 digits
  std::string_view parent_id;  ///< 16 digits; empty: the root of its trace
  std::string_view workflow_id, workflow_name;
  /// run: the workflow's name; step and attempt: the step's; wait: what it waits for (a topic,
  /// "<workflow id>:<key>", a child's id, or "sleep").
  std::string_view name;
  /// The journal's kind of the step ("step", "transaction", "child", "send", "event",
  /// "sleep", "recv", "get_event", "child-result"); empty for a run.
  std::string_view step_kind;
  int step = -1;           ///< the step number; -1 for a run
  int attempt = 0;         ///< an attempt's number (1, 2, ...); 0 otherwise
  std::int64_t epoch = 0;  ///< the run's epoch: each claim of a workflow is a new run
  int generation = 0;      ///< see ctx.continue_as_new
  std::chrono::system_clock::time_point start{}, end{};
  /// The sampled flag of the workflow's trace context (true without one): an exporter that
  /// honours the caller's sampling decision drops the spans of an unsampled trace.
  bool sampled = true;
  /// Ended: the work failed (an attempt that threw, a step that failed for good, a run that
  /// did not succeed and was not released).
  bool failed = false;
  /// Ended: what happened when it failed, or why it ended unfinished without failing (a run
  /// released: "released: ...", unloaded to wait, continued as new); empty otherwise.
  std::string_view error;
};

/// Receives spans (engine_options::on_span). Called on the engine's executor; it must not block
/// and should not throw (an exception is swallowed after one line on stderr).
using span_hook = std::function<void(const span&)>;

namespace detail {

inline bool lower_hex(std::string_view s) noexcept {
  for (const char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

inline bool all_zero(std::string_view s) noexcept { return s.find_first_not_of('0') == s.npos; }

/// `s` with every character outside printable ASCII replaced by '?', at most 80 of them.
inline std::string shown_trace_text(std::string_view s) {
  std::string out;
  for (const char c : s.substr(0, 80)) out += (c >= 0x20 && c <= 0x7e) ? c : '?';
  if (s.size() > 80) out += "...";
  return out;
}

/// Calls `f` with each entry of tracestate `s`, blanks around it removed, empty ones left out,
/// until `f` returns a problem, which it returns.
template <class F>
std::optional<std::string> each_tracestate_entry(std::string_view s, F f) {
  while (true) {
    const std::size_t comma = s.find(',');
    std::string_view m = s.substr(0, comma);
    while (!m.empty() && (m.front() == ' ' || m.front() == '\t')) m.remove_prefix(1);
    while (!m.empty() && (m.back() == ' ' || m.back() == '\t')) m.remove_suffix(1);
    if (!m.empty())
      if (auto p = f(m)) return p;
    if (comma == s.npos) return std::nullopt;
    s.remove_prefix(comma + 1);
  }
}

inline std::optional<std::string> tracestate_problem(std::string_view s) {
  if (s.size() > 512) return "tracestate is " + std::to_string(s.size()) + " bytes, more than 512";
  std::size_t members = 0;
  return each_tracestate_entry(s, [&members](std::string_view m) -> std::optional<std::string> {
    if (++members > 32) return std::string("tracestate has more than 32 entries");
    const std::size_t eq = m.find('=');
    if (eq == 0 || eq == m.npos || eq + 1 == m.size())
      return "tracestate entry '" + shown_trace_text(m) + "' is not key=value";
    const std::string_view key = m.substr(0, eq), value = m.substr(eq + 1);
    if (key.size() > 256 || value.size() > 256)
      return "tracestate entry '" + shown_trace_text(m) +
             "' has a key or value longer than 256 characters";
    if (!((key[0] >= 'a' && key[0] <= 'z') || (key[0] >= '0' && key[0] <= '9')))
      return "tracestate key '" + shown_trace_text(key) + "' does not start with a-z or 0-9";
    for (const char c : key)
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' ||
            c == '/' || c == '@'))
        return "tracestate key '" + shown_trace_text(key) + "' holds a character other than " +
               "a-z, 0-9, _ - * / @";
    for (const char c : value)
      if (c < 0x20 || c > 0x7e || c == ',' || c == '=')
        return "tracestate value of '" + shown_trace_text(key) +
               "' holds a character that is not printable ASCII, or , or =";
    return std::nullopt;
  });
}

/// A span id: 16 hex digits, never all zeros, a function of workflow `workflow_id`, a tag and
/// `numbers` alone, so that every process names a span alike (64 bits of FNV-1a over them,
/// finished with SplitMix64's mixer), written to out[0..15].
inline void span_id_into(char* out, std::string_view workflow_id, char tag,
                         std::initializer_list<std::int64_t> numbers) noexcept {
  char tail[2 + 8 * 5] = {0, tag};  // a NUL after the id, the tag, the numbers' bytes
  std::size_t n = 2;
  for (const std::int64_t v : numbers)
    for (int b = 0; b < 8 && n < sizeof tail; ++b)
      tail[n++] = static_cast<char>(std::uint64_t(v) >> (8 * b));
  std::uint64_t h = fnv1a64(std::string_view(tail, n), fnv1a64(workflow_id));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  if (h == 0) h = 1;
  for (int i = 15; i >= 0; --i, h >>= 4) out[i] = hex_digits[h & 15];
}

/// The span of step `seq` of generation `generation`, run under `epoch`, written to
/// out[0..15]: a child workflow that the step starts has it as its parent span.
inline void step_span_into(char* out, std::string_view workflow_id, int generation, int seq,
                           std::int64_t epoch) noexcept {
  span_id_into(out, workflow_id, 's', {generation, seq, epoch});
}

/// The same as a string.
inline std::string step_span_id(std::string_view workflow_id, int generation, int seq,
                                std::int64_t epoch) {
  std::string out(16, '0');
  step_span_into(out.data(), workflow_id, generation, seq, epoch);
  return out;
}

}  // namespace detail

inline std::optional<std::string> trace_context::problem(std::string_view tp, std::string_view ts,
                                                         std::string* field) {
  if (field) *field = "traceparent";
  const auto bad = [&tp](const std::string& why) {
    return "traceparent '" + detail::shown_trace_text(tp) + "' is not W3C trace context: " + why;
  };
  if (tp.size() < 55) return bad("it is shorter than 55 characters");
  if (tp[2] != '-' || tp[35] != '-' || tp[52] != '-')
    return bad("expected version-traceid-parentid-flags separated by '-'");
  const std::string_view version = tp.substr(0, 2), trace = tp.substr(3, 32),
                         parent = tp.substr(36, 16), flags = tp.substr(53, 2);
  if (!detail::lower_hex(version) || !detail::lower_hex(trace) || !detail::lower_hex(parent) ||
      !detail::lower_hex(flags))
    return bad("its fields must be lowercase hexadecimal");
  if (version == "ff") return bad("version ff is invalid");
  if (version == "00" && tp.size() != 55) return bad("version 00 is exactly 55 characters");
  if (tp.size() > 55 && tp[55] != '-') return bad("the flags must be followed by '-' or the end");
  for (const char c : tp)
    if (c < 0x20 || c > 0x7e) return bad("it holds a character that is not printable ASCII");
  if (detail::all_zero(trace)) return bad("the trace id is all zeros");
  if (detail::all_zero(parent)) return bad("the parent id is all zeros");
  if (field) *field = "tracestate";
  return detail::tracestate_problem(ts);
}

inline std::optional<trace_context> trace_context::parse(std::string_view tp, std::string_view ts,
                                                         std::string* why, std::string* field) {
  if (auto p = problem(tp, ts, field)) {
    if (why) *why = std::move(*p);
    return std::nullopt;
  }
  trace_context c;
  c.traceparent = "00";
  c.traceparent += tp.substr(2, 51);
  if (tp.substr(0, 2) == "00") {
    c.traceparent += tp.substr(53, 2);
  } else {  // a later version: only the flags version 00 defines (sampled, random)
    c.traceparent += '0';
    c.traceparent += detail::hex_digits[detail::hex_value(tp[54]) & 3];
  }
  (void)detail::each_tracestate_entry(ts, [&c](std::string_view m) -> std::optional<std::string> {
    if (!c.tracestate.empty()) c.tracestate += ',';
    c.tracestate += m;
    return std::nullopt;
  });
  return c;
}

inline std::optional<trace_context> trace_context::from_headers(std::string_view tp,
                                                                std::string_view ts) {
  if (auto c = parse(tp, ts)) return c;
  return parse(tp);
}

}  // namespace durable
