// The members of durable::prometheus_writer: included at the end of durable/prometheus.hpp when
// header-only, by durable/src.hpp otherwise.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <system_error>

#include "durable/detail/utf8.hpp"

namespace durable {
namespace detail {

inline bool prometheus_name(std::string_view n, bool colons) {
  if (n.empty()) return false;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (colons && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

}  // namespace detail

DURABLE_DECL std::string prometheus_writer::escape_label_value(std::string_view v) {
  const std::string text = detail::valid_utf8(v);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

DURABLE_DECL std::string prometheus_writer::escape_help(std::string_view v) {
  const std::string text = detail::valid_utf8(v);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

DURABLE_DECL std::string prometheus_writer::format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::to_chars_result r;
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0)  // exactly an integer
    r = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(v));
  else
    r = std::to_chars(buf, buf + sizeof buf, v);
  if (r.ec != std::errc()) return "NaN";
  return std::string(buf, r.ptr);
}

DURABLE_DECL void prometheus_writer::begin_family(std::string_view name, metric_kind kind,
                                                  std::string_view help) {
  if (name == current_) {
    if (kind != current_kind_)
      throw std::invalid_argument("prometheus_writer: metric '" + std::string(name) +
                                  "' is written as a " + std::string(to_string(kind)) +
                                  " after being a " + std::string(to_string(current_kind_)));
    return;
  }
  if (!detail::prometheus_name(name, true))
    throw std::invalid_argument("prometheus_writer: '" + detail::valid_utf8(name) +
                                "' is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  if (std::find(done_.begin(), done_.end(), name) != done_.end())
    throw std::invalid_argument("prometheus_writer: metric family '" + std::string(name) +
                                "' was written already; write each family's samples together");
  if (!current_.empty()) done_.push_back(std::move(current_));
  current_ = std::string(name);
  current_kind_ = kind;
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += escape_help(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += to_string(kind);
  out_ += '\n';
}

DURABLE_DECL void prometheus_writer::sample(std::string_view name, std::string_view suffix,
                                            labels l, std::string_view le, double value) {
  out_ += name;
  out_ += suffix;
  if (!l.empty() || !le.empty()) {
    out_ += '{';
    bool first = true;
    for (const metric_label& label : l) {
      if (!detail::prometheus_name(label.name, false) || label.name.starts_with("__"))
        throw std::invalid_argument("prometheus_writer: '" + detail::valid_utf8(label.name) +
                                    "' is not a valid label name of metric '" + std::string(name) +
                                    "'");
      if (!first) out_ += ',';
      first = false;
      out_ += label.name;
      out_ += "=\"";
      out_ += escape_label_value(label.value);
      out_ += '"';
    }
    if (!le.empty()) {
      if (!first) out_ += ',';
      out_ += "le=\"";
      out_ += le;
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += format_value(value);
  out_ += '\n';
}

DURABLE_DECL void prometheus_writer::counter(std::string_view name, std::string_view help,
                                             double value, labels l) {
  begin_family(name, metric_kind::counter, help);
  sample(name, {}, l, {}, value);
}

DURABLE_DECL void prometheus_writer::gauge(std::string_view name, std::string_view help,
                                           double value, labels l) {
  begin_family(name, metric_kind::gauge, help);
  sample(name, {}, l, {}, value);
}

DURABLE_DECL void prometheus_writer::histogram(std::string_view name, std::string_view help,
                                               const histogram_snapshot& h, labels l) {
  for (const metric_label& label : l)
    if (label.name == "le")
      throw std::invalid_argument("prometheus_writer: histogram '" + std::string(name) +
                                  "' may not have a label named 'le'");
  begin_family(name, metric_kind::histogram, help);
  for (std::size_t i = 0; i < h.upper_bounds.size(); ++i) {
    const std::string le = format_value(h.upper_bounds[i]);
    sample(name, "_bucket", l, le, double(i < h.cumulative.size() ? h.cumulative[i] : h.count));
  }
  sample(name, "_bucket", l, "+Inf", double(h.count));
  sample(name, "_sum", l, {}, h.sum);
  sample(name, "_count", l, {}, double(h.count));
}

DURABLE_DECL std::string prometheus_writer::take() {
  std::string out = std::move(out_);
  out_.clear();
  current_.clear();
  done_.clear();
  return out;
}

}  // namespace durable
