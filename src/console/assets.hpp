// The console's pages, embedded at build time (cmake/embed_assets.cmake writes
// console_assets.cpp from src/console/assets/): nothing is read from disk at run time.
#pragma once

#include <string_view>

namespace durable::console_detail {

struct asset {
  std::string_view path;          ///< "/", "/assets/app.js", ...
  std::string_view content_type;  ///< with its charset
  std::string_view body;
};

/// The asset served at `path`, or nullptr.
const asset* find_asset(std::string_view path) noexcept;

}  // namespace durable::console_detail
