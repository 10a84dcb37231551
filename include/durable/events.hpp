// What the engine reports about its own work: background failures, parks, retries, takeovers.
#pragma once

#include <functional>
#include <string_view>

namespace durable {

enum class severity { debug, info, warning, error };

[[nodiscard]] constexpr std::string_view to_string(severity s) noexcept {
  switch (s) {
    case severity::debug:
      return "debug";
    case severity::info:
      return "info";
    case severity::warning:
      return "warning";
    case severity::error:
      return "error";
  }
  return "unknown";
}

/// One report of the engine. The views are valid only during the hook's call.
struct event {
  severity level;
  /// Which part of the engine speaks: "runner", "dispatcher", "lease", "listener",
  /// "maintenance", "committer", "shutdown", "supervisor".
  std::string_view component;
  /// The workflow concerned, or empty.
  std::string_view workflow_id;
  std::string_view message;
};

/// Receives events (see engine_options::on_event). Called on the engine's executor; it must
/// not block and should not throw (an exception it throws is swallowed after one line on
/// stderr, so that reporting never breaks the engine).
using event_hook = std::function<void(const event&)>;

}  // namespace durable
