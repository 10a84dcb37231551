// 64-bit FNV-1a, the one hash the library computes itself (advisory lock keys, channel names,
// span ids). Standard headers only.
#pragma once

#include <cstdint>
#include <string_view>

namespace durable::detail {

inline constexpr std::uint64_t fnv_basis = 14695981039346656037ull;

/// FNV-1a over `s`, continuing from `h` (the basis for a new hash).
constexpr std::uint64_t fnv1a64(std::string_view s, std::uint64_t h = fnv_basis) noexcept {
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

}  // namespace durable::detail
