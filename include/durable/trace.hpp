// W3C trace context (https://www.w3.org/TR/trace-context/) as the engine stores it with a
// workflow: the `traceparent` of the span that started it, and the vendors' `tracestate`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace durable {

/// A trace context, checked (trace_context::parse). A workflow started or enqueued with one
/// keeps it for its whole life: its children inherit its trace, and `durable show` and the
/// console show its trace id (docs/tracing.md).
struct trace_context {
  /// "00-<trace id: 32 hex>-<parent span id: 16 hex>-<flags: 2 hex>", lowercase.
  std::string traceparent;
  /// Vendor entries ("key=value,key=value"), empty when none.
  std::string tracestate;

  [[nodiscard]] std::string_view trace_id() const noexcept {
    return std::string_view(traceparent).substr(3, 32);
  }
  [[nodiscard]] std::string_view parent_id() const noexcept {
    return std::string_view(traceparent).substr(36, 16);
  }
  /// The sampled flag (bit 0 of the flags).
  [[nodiscard]] bool sampled() const noexcept {
    const char c = traceparent.size() == 55 ? traceparent[54] : '0';
    return ((c >= 'a' ? c - 'a' + 10 : c - '0') & 1) != 0;
  }

  /// What is wrong with `traceparent` or `tracestate` as W3C trace context, or nothing. Version
  /// 00 must be exactly 55 characters; a later version (not ff) may carry more after a '-',
  /// which is dropped (parse() stores it as version 00, as the specification says to
  /// propagate it). `tracestate`: at most 32 comma-separated key=value entries and 512 bytes,
  /// printable ASCII.
  [[nodiscard]] static std::optional<std::string> problem(std::string_view traceparent,
                                                          std::string_view tracestate = {});

  /// The context, checked and normalised to version 00; nullopt with `why` set when it is not
  /// valid (see problem()).
  [[nodiscard]] static std::optional<trace_context> parse(std::string_view traceparent,
                                                          std::string_view tracestate = {},
                                                          std::string* why = nullptr);
};

/// Supplies the trace context of the caller's current span to start() and enqueue() when their
/// options name none (engine_options::current_trace). Called on the caller's thread, before
/// the call returns; nullopt: none. A context that is not valid is dropped with a warning event
/// (tracing never stops a start).
using trace_context_hook = std::function<std::optional<trace_context>()>;

namespace detail {

inline bool lower_hex(std::string_view s) noexcept {
  for (const char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

inline bool all_zero(std::string_view s) noexcept { return s.find_first_not_of('0') == s.npos; }

inline std::optional<std::string> tracestate_problem(std::string_view s) {
  if (s.size() > 512) return "tracestate is " + std::to_string(s.size()) + " bytes, more than 512";
  std::size_t members = 0;
  while (true) {
    const std::size_t comma = s.find(',');
    std::string_view m = s.substr(0, comma);
    while (!m.empty() && (m.front() == ' ' || m.front() == '\t')) m.remove_prefix(1);
    while (!m.empty() && (m.back() == ' ' || m.back() == '\t')) m.remove_suffix(1);
    if (!m.empty()) {
      if (++members > 32) return std::string("tracestate has more than 32 entries");
      const std::size_t eq = m.find('=');
      if (eq == 0 || eq == m.npos || eq > 256 || eq + 1 == m.size() || m.size() - eq - 1 > 256)
        return "tracestate entry '" + std::string(m) + "' is not key=value";
      const std::string_view key = m.substr(0, eq), value = m.substr(eq + 1);
      if (!((key[0] >= 'a' && key[0] <= 'z') || (key[0] >= '0' && key[0] <= '9')))
        return "tracestate key '" + std::string(key) + "' does not start with a-z or 0-9";
      for (const char c : key)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '*' || c == '/' || c == '@'))
          return "tracestate key '" + std::string(key) + "' holds a character other than " +
                 "a-z, 0-9, _ - * / @";
      for (const char c : value)
        if (c < 0x20 || c > 0x7e || c == ',' || c == '=')
          return "tracestate value of '" + std::string(key) +
                 "' holds a character that is not printable ASCII, or , or =";
    }
    if (comma == s.npos) return std::nullopt;
    s.remove_prefix(comma + 1);
  }
}

/// The span id (16 hex digits, never all zeros) of step `seq` of generation `generation` of
/// workflow `workflow_id`: a function of those alone, so that every process that runs the step
/// names it alike (a child started by the step has it as its parent id).
inline std::string step_span_id(std::string_view workflow_id, int generation, int seq) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the id, then the numbers
  const auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 0x100000001b3ULL;
  };
  for (const char c : workflow_id) mix(static_cast<unsigned char>(c));
  for (const std::uint32_t v : {std::uint32_t(generation), std::uint32_t(seq)})
    for (int b = 0; b < 4; ++b) mix(static_cast<unsigned char>(v >> (8 * b)));
  h ^= h >> 30;  // splitmix64's finaliser spreads the bits
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  if (h == 0) h = 1;
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[std::size_t(i)] = digits[h & 15];
  return out;
}

/// `s` with every character outside printable ASCII replaced by '?', at most 80 of them.
inline std::string shown_trace_text(std::string_view s) {
  std::string out;
  for (const char c : s.substr(0, 80)) out += (c >= 0x20 && c <= 0x7e) ? c : '?';
  if (s.size() > 80) out += "...";
  return out;
}

}  // namespace detail

inline std::optional<std::string> trace_context::problem(std::string_view tp, std::string_view ts) {
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
  return detail::tracestate_problem(ts);
}

inline std::optional<trace_context> trace_context::parse(std::string_view tp, std::string_view ts,
                                                         std::string* why) {
  if (auto p = problem(tp, ts)) {
    if (why) *why = std::move(*p);
    return std::nullopt;
  }
  trace_context c;
  c.traceparent = "00";
  c.traceparent += tp.substr(2, 53);
  c.tracestate = std::string(ts);
  return c;
}

}  // namespace durable
