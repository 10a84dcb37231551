// The Prometheus text exposition format (version 0.0.4), written by hand: counters, gauges and
// histograms with their HELP and TYPE lines, labels escaped. Needs no engine and no Asio; the
// engine's endpoint (durable/metrics_server.hpp) and the `durable` CLI use it, and so may an
// application that serves metrics of its own. See docs/metrics.md.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "durable/detail/config.hpp"
#include "durable/metrics.hpp"

namespace durable {

/// Builds one exposition. Each metric family (a name with its HELP and TYPE) is written once,
/// its samples together: consecutive calls with the same name add samples to the current
/// family; a name used for an earlier family, an invalid metric or label name, or a label
/// named `le` on a histogram throws std::invalid_argument (a programming error). Label values
/// and help texts may hold anything: they are escaped, and bytes that are not UTF-8 become
/// U+FFFD.
///
///   durable::prometheus_writer w;
///   w.gauge("durable_queue_depth", "Workflows waiting to be dispatched.", 12, {{"queue",
///   "mail"}}); w.counter("myapp_orders_total", "Orders taken.", 1234); std::string body =
///   w.take();  // served as prometheus_writer::content_type
class prometheus_writer {
public:
  /// The Content-Type of the exposition.
  static constexpr std::string_view content_type = "text/plain; version=0.0.4; charset=utf-8";

  using labels = std::span<const metric_label>;

  DURABLE_DECL void counter(std::string_view name, std::string_view help, double value,
                            labels l = {});
  DURABLE_DECL void gauge(std::string_view name, std::string_view help, double value,
                          labels l = {});
  /// `name` is the family: writes name_bucket{le=...} (cumulative, ending with +Inf),
  /// name_sum and name_count.
  DURABLE_DECL void histogram(std::string_view name, std::string_view help,
                              const histogram_snapshot& h, labels l = {});

  void counter(std::string_view name, std::string_view help, double value,
               std::initializer_list<metric_label> l) {
    counter(name, help, value, labels(l.begin(), l.size()));
  }
  void gauge(std::string_view name, std::string_view help, double value,
             std::initializer_list<metric_label> l) {
    gauge(name, help, value, labels(l.begin(), l.size()));
  }
  void histogram(std::string_view name, std::string_view help, const histogram_snapshot& h,
                 std::initializer_list<metric_label> l) {
    histogram(name, help, h, labels(l.begin(), l.size()));
  }

  /// The exposition so far.
  [[nodiscard]] const std::string& text() const noexcept { return out_; }
  /// The exposition; the writer starts afresh.
  [[nodiscard]] DURABLE_DECL std::string take();

  /// A label value or help text as the format writes it (without the quotes): UTF-8, with
  /// backslash, newline and (for label values) double quote escaped.
  [[nodiscard]] DURABLE_DECL static std::string escape_label_value(std::string_view v);
  [[nodiscard]] DURABLE_DECL static std::string escape_help(std::string_view v);
  /// A sample value: integers without exponent, others in the shortest form that reads back
  /// exactly, +Inf, -Inf, NaN.
  [[nodiscard]] DURABLE_DECL static std::string format_value(double v);

private:
  DURABLE_DECL void begin_family(std::string_view name, metric_kind kind, std::string_view help);
  DURABLE_DECL void sample(std::string_view name, std::string_view suffix, labels l,
                           std::string_view le, double value);

  std::string out_;
  std::string current_;
  metric_kind current_kind_ = metric_kind::gauge;
  std::vector<std::string> done_;  // families written before the current one
};

}  // namespace durable

#if defined(DURABLE_HEADER_ONLY)
#include "durable/impl/prometheus.ipp"
#endif
