// What the test kit learns of the attempts of step functions (durable/testing/service.hpp): when
// each begins and ends, and whether its function may suspend (an awaitable) or runs to its end
// without yielding. Null in an engine's run.
#pragma once

#include "durable/retry.hpp"

namespace durable::detail {

class attempt_observer {
public:
  virtual ~attempt_observer() = default;
  /// An attempt's function is about to run. `may_suspend`: it is an awaitable (other code can
  /// run while it waits); else it runs to its end without yielding.
  virtual void begins(const step_info& info, bool may_suspend) = 0;
  /// That attempt's function is over: it returned, threw, or its frame went away with a
  /// crashed process.
  virtual void ends(const step_info& info) = 0;
};

}  // namespace durable::detail
