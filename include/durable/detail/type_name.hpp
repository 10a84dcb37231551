// Readable C++ type names for error messages, e.g. "std::map<std::string, int>".
// Derived from the compiler's pretty function signature, so no RTTI or demangler is needed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace durable::detail {

// The signature embeds T's spelling: "... [with T = X]" (GCC), "... [T = X]" (Clang) or
// "...raw_type_name_signature<X>(void)" (MSVC). The return type is const char*, not string_view,
// because GCC would append a "; std::string_view = ..." clause for the latter.
template <class T>
constexpr const char* raw_type_name_signature() noexcept {
#if defined(_MSC_VER) && !defined(__clang__)
  return __FUNCSIG__;
#else
  return __PRETTY_FUNCTION__;
#endif
}

/// T as spelled by the compiler, e.g. "std::vector<std::__cxx11::basic_string<char> >".
template <class T>
constexpr std::string_view raw_type_name() noexcept {
  const std::string_view sig = raw_type_name_signature<T>();
#if defined(_MSC_VER) && !defined(__clang__)
  constexpr std::string_view open = "raw_type_name_signature<", close = ">(void)";
#else
  constexpr std::string_view open = "T = ", close = "]";
#endif
  const auto begin = sig.find(open) + open.size();
  const auto end = sig.rfind(close);
  return sig.substr(begin, end - begin);
}

namespace type_name_impl {

inline bool is_ident_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Replaces whole-token occurrences of `from` (not inside a longer identifier).
inline void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos)) {
    const bool starts_token =
        pos == 0 || !is_ident_char(s[pos - 1]) || !is_ident_char(from.front());
    const auto after = pos + from.size();
    const bool ends_token =
        after == s.size() || !is_ident_char(s[after]) || !is_ident_char(from.back());
    if (starts_token && ends_token) {
      s.replace(pos, from.size(), to);
      pos += to.size();
    } else {
      pos += 1;
    }
  }
}

// Erases ", prefix<...>" template arguments (bracket-balanced); used for defaulted allocators etc.
inline void erase_args(std::string& s, std::string_view prefix) {
  for (auto pos = s.find(prefix); pos != std::string::npos; pos = s.find(prefix, pos)) {
    std::size_t i = pos + prefix.size();
    for (int depth = 1; i < s.size() && depth > 0; ++i) {
      depth += s[i] == '<' ? 1 : s[i] == '>' ? -1 : 0;
    }
    s.erase(pos, i - pos);
  }
}

inline std::string prettify(std::string_view raw) {
  std::string s(raw);
#if defined(_MSC_VER) && !defined(__clang__)
  for (std::string_view kw : {"class ", "struct ", "enum ", "union "}) replace_all(s, kw, "");
  replace_all(s, ",", ", ");
#endif
  // Inline ABI namespaces are noise to a reader.
  replace_all(s, "std::__cxx11::", "std::");
  replace_all(s, "std::__1::", "std::");
  constexpr std::string_view nlohmann_ns = "nlohmann::";  // then e.g. "json_abi_v3_11_2::"
  for (auto pos = s.find("nlohmann::json_abi"); pos != std::string::npos;
       pos = s.find("nlohmann::json_abi")) {
    const auto abi = pos + nlohmann_ns.size();
    s.erase(abi, s.find("::", abi) + 2 - abi);
  }
  // Arguments that are (almost always) the defaults.
  for (std::string_view arg : {", std::allocator<", ", std::char_traits<", ", std::less<",
                               ", std::hash<", ", std::equal_to<", ", std::default_delete<"}) {
    erase_args(s, arg);
  }
  replace_all(s, " >", ">");  // GCC's pre-C++11 "> >", and what erase_args left behind
  replace_all(s, "std::basic_string<char>", "std::string");
  replace_all(s, "std::basic_string_view<char>", "std::string_view");
  replace_all(s, "nlohmann::basic_json<>", "nlohmann::json");
  // GCC spells e.g. unsigned long as "long unsigned int"; longest patterns first.
  replace_all(s, "long long unsigned int", "unsigned long long");
  replace_all(s, "long long int", "long long");
  replace_all(s, "long unsigned int", "unsigned long");
  replace_all(s, "long int", "long");
  replace_all(s, "short unsigned int", "unsigned short");
  replace_all(s, "short int", "short");
  return s;
}

}  // namespace type_name_impl

/// A readable name for T, e.g. "std::vector<int>" or "std::map<std::string, my::order>".
/// Computed once per type; the view stays valid for the program's lifetime.
template <class T>
std::string_view type_name() {
  static const std::string name = type_name_impl::prettify(raw_type_name<T>());
  return name;
}

}  // namespace durable::detail
