// Text checked where it enters the engine: a NUL character is refused before anything is done.
#pragma once

#include <string>
#include <string_view>

#include "durable/detail/store/identifiers.hpp"
#include "durable/error.hpp"

namespace durable::detail {

/// Throws invalid_text when `value` (the `field` given to `call`) holds a NUL character:
/// PostgreSQL text cannot hold one, and libpq would send only the text before it, which may
/// name another workflow, queue or schedule.
inline void refuse_nul(std::string_view call, std::string_view field, std::string_view value) {
  const auto at = value.find('\0');
  if (at == std::string_view::npos) return;
  throw invalid_text(std::string(field),
                     std::string(call) + ": the " + std::string(field) + " '" +
                         printable_name(value) + "' holds a NUL character (at byte " +
                         std::to_string(at) +
                         "), which PostgreSQL text cannot hold, and the text before it may name "
                         "something else; nothing was done");
}

}  // namespace durable::detail
