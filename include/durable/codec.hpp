// Values <-> journal JSON. Step results are stored as readable JSON in jsonb columns, so the
// encoding is part of the on-disk format: a value journaled today must decode after a redeploy.
// Built-in codecs compose through codec<Element>, so a user specialization also applies inside
// containers; any other type falls back to nlohmann to_json/from_json. See docs/codec.md.
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include <durable/detail/type_name.hpp>
#include <durable/error.hpp>
#include <durable/fwd.hpp>

namespace durable {

/// How T is journaled. Specialize for a custom encoding:
///   template <> struct durable::codec<money> {
///     static nlohmann::json encode(const money&);
///     static money decode(const nlohmann::json&);  // throw durable::codec_error on bad input
///   };
template <class T, class Enable>  // Enable = void: see durable/fwd.hpp
struct codec;

namespace detail {

template <class T>
using codec_for = codec<std::remove_cv_t<T>>;

template <class>
inline constexpr bool always_false = false;

/// A decode failure that remembers where it happened, so that an error in a nested element still
/// names the outermost type (type()) and also says which element failed and as what type.
class decode_error : public codec_error {
public:
  decode_error(std::string type, std::string path, std::string leaf, std::string reason)
      : codec_error(type, message(type, path, leaf, reason)),
        path_(std::move(path)),
        leaf_(std::move(leaf)),
        reason_(std::move(reason)) {}

  /// The same failure, seen from an enclosing value of type `outer` at `segment` (e.g. "[3]").
  [[nodiscard]] decode_error nested_in(std::string_view outer, std::string_view segment) const {
    return {std::string(outer), std::string(segment) + path_, leaf_, reason_};
  }

private:
  // "cannot decode std::vector<int> from JSON: int at [3]: expected an integer, found string "abc""
  static std::string message(const std::string& type, const std::string& path,
                             const std::string& leaf, const std::string& reason) {
    std::string m = "cannot decode " + type + " from JSON: ";
    if (leaf != type || !path.empty()) m += leaf + (path.empty() ? "" : " at " + path) + ": ";
    return m + reason;
  }

  std::string path_, leaf_, reason_;
};

/// `string "abc"`, `number 1.5`, `null`, ...; long values are cut to keep messages readable.
inline std::string describe(const nlohmann::json& j) {
  if (j.is_null()) return "null";
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (constexpr std::size_t max = 80; text.size() > max) {
    std::size_t cut = max;
    // Don't cut inside a UTF-8 sequence: back up over continuation bytes.
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
    text += "...";
  }
  return std::string(j.type_name()) + " " + text;
}

inline std::string elements(std::size_t n) {
  return "an array of " + std::to_string(n) + (n == 1 ? " element" : " elements");
}

template <class T>
[[noreturn]] void fail_decode(std::string_view expected, const nlohmann::json& found) {
  const std::string type(type_name<T>());
  throw decode_error(type, "", type,
                     "expected " + std::string(expected) + ", found " + describe(found));
}

template <class T>
[[noreturn]] void fail_encode(std::string_view reason) {
  const std::string type(type_name<T>());
  throw codec_error(type, "cannot encode " + type + " to JSON: " + std::string(reason));
}

/// jsonb rejects "\u0000" and nlohmann::json::dump rejects invalid UTF-8. Checking at encode time
/// gives an error naming the type instead of a failure when the journal row is written.
template <class T>
void check_journal_string(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) {
      fail_encode<T>("string contains a NUL character at byte " + std::to_string(i) +
                     ", which PostgreSQL jsonb cannot store");
    }
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Well-formed sequences per RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF.
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      lo = c == 0xE0 ? 0xA0 : 0x80;
      hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      lo = c == 0xF0 ? 0x90 : 0x80;
      hi = c == 0xF4 ? 0x8F : 0xBF;
    }
    bool ok = len != 0 && s.size() - i >= len;
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    }
    if (!ok) {
      fail_encode<T>("string is not valid UTF-8 at byte " + std::to_string(i) +
                     " (journal binary data as std::vector<std::uint8_t>)");
    }
    i += len;
  }
}

/// `e` as a decode_error naming T, for errors that did not come from T's built-in codec.
template <class T>
decode_error rename_error(const codec_error& e) {
  const std::string type(type_name<T>());
  std::string_view reason = e.what();
  // Don't repeat the usual prefix (ours, or a user codec's imitation of it).
  if (const std::string prefix = "cannot decode " + e.type() + " from JSON: ";
      reason.starts_with(prefix)) {
    reason.remove_prefix(prefix.size());
  }
  // E.g. a user codec<money> calling decode<long>(j.at("cents")): keep saying it was a long.
  const bool other = !e.type().empty() && e.type() != type;
  return decode_error(type, "", type,
                      (other ? e.type() + ": " : std::string()) + std::string(reason));
}

/// codec<T>::decode with every failure normalized to a decode_error naming T: errors from
/// user codecs (codec_error, nlohmann exceptions) and from nested decodes of other types.
template <class T>
T decode_as(const nlohmann::json& j) {
  try {
    return codec_for<T>::decode(j);
  } catch (const decode_error& e) {
    if (e.type() == type_name<T>()) throw;  // built-in codecs already report T and the path
    throw rename_error<T>(e);
  } catch (const codec_error& e) {
    throw rename_error<T>(e);
  } catch (const nlohmann::json::exception& e) {
    const std::string type(type_name<T>());
    throw decode_error(type, "", type, e.what());
  }
}

/// Decodes element `index` of an array that is being decoded as Outer.
template <class Outer, class T>
T decode_index(const nlohmann::json& j, std::size_t index) {
  try {
    return decode_as<T>(j);
  } catch (const decode_error& e) {
    throw e.nested_in(type_name<Outer>(), "[" + std::to_string(index) + "]");
  }
}

/// Decodes member `key` of an object that is being decoded as Outer.
template <class Outer, class T>
T decode_key(const nlohmann::json& j, const std::string& key) {
  try {
    return decode_as<T>(j);
  } catch (const decode_error& e) {
    const auto quoted =
        nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    throw e.nested_in(type_name<Outer>(), "[" + quoted + "]");
  }
}

/// Range-checked integer decoding; errors name `Named` (the enum, for enums).
template <class I, class Named>
I decode_integer(const nlohmann::json& j) {
  using limits = std::numeric_limits<I>;
  // std::in_range rejects character types, so check against the same-sized standard integer type.
  using standard =
      std::conditional_t<std::is_signed_v<I>, std::make_signed_t<I>, std::make_unsigned_t<I>>;
  switch (j.type()) {
    case nlohmann::json::value_t::number_integer:
      if (const auto v = j.get<std::int64_t>(); std::in_range<standard>(v))
        return static_cast<I>(v);
      break;
    case nlohmann::json::value_t::number_unsigned:
      if (const auto v = j.get<std::uint64_t>(); std::in_range<standard>(v))
        return static_cast<I>(v);
      break;
    case nlohmann::json::value_t::number_float: {
      // 2.0 is accepted (e.g. a field that used to be a double); 1.5 and NaN are not.
      const double d = j.get<double>();
      if (std::trunc(d) != d) fail_decode<Named>("an integer", j);
      if (d >= -0x1p63 && d < 0x1p63) {
        if (const auto v = static_cast<std::int64_t>(d); std::in_range<standard>(v))
          return static_cast<I>(v);
      } else if (d >= 0 && d < 0x1p64) {
        if (const auto v = static_cast<std::uint64_t>(d); std::in_range<standard>(v))
          return static_cast<I>(v);
      }
      break;
    }
    default:
      fail_decode<Named>("an integer", j);
  }
  fail_decode<Named>("an integer in [" + std::to_string(+limits::min()) + ", " +
                         std::to_string(+limits::max()) + "]",
                     j);
}

/// The shortest decimal that round-trips f, as a double: 0.1f is journaled as 0.1 rather than
/// 0.10000000149011612. Falls back to the exact widening if the shortcut would not round-trip.
inline double float_to_double(float f) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, f).ptr;
  double d = 0;
  std::from_chars(buf, end, d);
  return static_cast<float>(d) == f ? d : static_cast<double>(f);
}

/// JSON arrays <-> containers filled by insert(end, value): vector, deque, list, set,
/// unordered_set.
template <class C>
struct array_codec {
  using value_type = typename C::value_type;

  static nlohmann::json encode(const C& c) {
    auto out = nlohmann::json::array();
    for (const auto& e : c) out.push_back(codec_for<value_type>::encode(e));
    return out;
  }

  static C decode(const nlohmann::json& j) {
    if (!j.is_array()) fail_decode<C>("an array", j);
    C out;
    if constexpr (requires { out.reserve(j.size()); }) out.reserve(j.size());
    for (std::size_t i = 0; i < j.size(); ++i)
      out.insert(out.end(), decode_index<C, value_type>(j[i], i));
    return out;
  }
};

/// std::pair and std::tuple as fixed-length arrays; the length is checked on decode.
template <class Tuple, class... Ts>
struct tuple_codec {
  static nlohmann::json encode(const Tuple& t) {
    return encode_elements(t, std::index_sequence_for<Ts...>{});
  }

  static Tuple decode(const nlohmann::json& j) {
    if (!j.is_array() || j.size() != sizeof...(Ts)) fail_decode<Tuple>(elements(sizeof...(Ts)), j);
    return decode_elements(j, std::index_sequence_for<Ts...>{});
  }

private:
  template <std::size_t... I>
  static nlohmann::json encode_elements([[maybe_unused]] const Tuple& t,
                                        std::index_sequence<I...>) {
    auto out = nlohmann::json::array();
    (out.push_back(codec_for<Ts>::encode(std::get<I>(t))), ...);
    return out;
  }

  template <std::size_t... I>
  static Tuple decode_elements([[maybe_unused]] const nlohmann::json& j,
                               std::index_sequence<I...>) {
    // Braced initialization evaluates left to right, so errors report the first bad element.
    return Tuple{decode_index<Tuple, Ts>(j[I], I)...};
  }
};

/// std::string keys -> JSON object; any other key -> array of [key, value] pairs.
template <class M>
struct map_codec {
  using key_type = typename M::key_type;
  using mapped_type = typename M::mapped_type;
  static constexpr bool as_object = std::is_same_v<key_type, std::string>;

  static nlohmann::json encode(const M& m) {
    if constexpr (as_object) {
      auto out = nlohmann::json::object();
      for (const auto& [k, v] : m) {
        check_journal_string<M>(k);
        out[k] = codec_for<mapped_type>::encode(v);
      }
      return out;
    } else {
      auto out = nlohmann::json::array();
      for (const auto& [k, v] : m) {
        auto pair = nlohmann::json::array();
        pair.push_back(codec_for<key_type>::encode(k));
        pair.push_back(codec_for<mapped_type>::encode(v));
        out.push_back(std::move(pair));
      }
      return out;
    }
  }

  static M decode(const nlohmann::json& j) {
    M out;
    if constexpr (as_object) {
      if (!j.is_object()) fail_decode<M>("an object", j);
      for (const auto& item : j.items()) {
        out.insert_or_assign(item.key(), decode_key<M, mapped_type>(item.value(), item.key()));
      }
    } else {
      if (!j.is_array()) fail_decode<M>("an array of [key, value] pairs", j);
      for (std::size_t i = 0; i < j.size(); ++i) {
        auto [k, v] = decode_index<M, std::pair<key_type, mapped_type>>(j[i], i);
        out.insert_or_assign(std::move(k), std::move(v));
      }
    }
    return out;
  }
};

// Found by argument-dependent lookup only, e.g. from NLOHMANN_JSON_SERIALIZE_ENUM: such enums keep
// their nlohmann encoding instead of becoming integers.
template <class T>
concept has_adl_to_json = requires(nlohmann::json& j, const T& v) {
  to_json(j, v);
};

template <class T>
concept nlohmann_encodable = requires(nlohmann::json& j, const T& v) {
  nlohmann::adl_serializer<T>::to_json(j, v);
};

template <class T>
concept nlohmann_decodable = requires(const nlohmann::json& j) {
  j.template get<T>();
};

}  // namespace detail

/// Fallback: types with nlohmann to_json/from_json (ADL or nlohmann::adl_serializer).
template <class T, class Enable>
struct codec {
  static_assert(
      !std::is_same_v<T, long double>,
      "durable::codec: long double does not round-trip through JSON (numbers are doubles); "
      "use double or specialize durable::codec<long double>");

  static nlohmann::json encode(const T& value) {
    if constexpr (detail::nlohmann_encodable<T>) {
      return nlohmann::json(value);
    } else {
      static_assert(detail::always_false<T>,
                    "durable::codec: no encoding for type T (named in the compiler notes); "
                    "specialize durable::codec<T> or provide nlohmann to_json/from_json");
      return {};  // not reached; spares the static_assert a missing-return warning
    }
  }

  static T decode(const nlohmann::json& j) {
    if constexpr (detail::nlohmann_decodable<T>) {
      return j.template get<T>();  // nlohmann exceptions are wrapped by detail::decode_as
    } else {
      static_assert(detail::always_false<T>,
                    "durable::codec: no decoding for type T (named in the compiler notes); "
                    "specialize durable::codec<T> or provide nlohmann to_json/from_json");
      throw codec_error({}, {});  // not reached; spares the static_assert a missing-return warning
    }
  }
};

template <>
struct codec<bool> {
  static nlohmann::json encode(bool v) { return v; }
  static bool decode(const nlohmann::json& j) {
    if (!j.is_boolean()) detail::fail_decode<bool>("a boolean", j);
    return j.get<bool>();
  }
};

/// Integers (including char types) are JSON numbers; decoding rejects values T cannot hold.
template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
struct codec<T> {
  static nlohmann::json encode(T v) {
    if constexpr (std::is_signed_v<T>)
      return static_cast<std::int64_t>(v);
    else
      return static_cast<std::uint64_t>(v);
  }
  static T decode(const nlohmann::json& j) { return detail::decode_integer<T, T>(j); }
};

/// JSON has no NaN or infinities, so they are the strings "NaN", "Infinity" and "-Infinity".
template <class T>
  requires(std::is_same_v<T, float> || std::is_same_v<T, double>)
struct codec<T> {
  static nlohmann::json encode(T v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    if constexpr (std::is_same_v<T, float>)
      return detail::float_to_double(v);
    else
      return v;
  }

  static T decode(const nlohmann::json& j) {
    if (j.is_number()) {
      const double d = j.get<double>();
      if constexpr (std::is_same_v<T, float>) {
        // Converting an out-of-range double to float is undefined behaviour. Values up to half
        // an ulp above FLT_MAX round to it; the shortest text of FLT_MAX (3.4028235e+38) is one.
        constexpr float max = std::numeric_limits<float>::max();
        if (std::abs(d) >= 0x1.ffffffp127) detail::fail_decode<T>("a number in float range", j);
        if (std::abs(d) > max) return d > 0 ? max : -max;
      }
      return static_cast<T>(d);
    }
    if (j.is_string()) {
      const auto& s = j.get_ref<const std::string&>();
      if (s == "NaN") return std::numeric_limits<T>::quiet_NaN();
      if (s == "Infinity") return std::numeric_limits<T>::infinity();
      if (s == "-Infinity") return -std::numeric_limits<T>::infinity();
    }
    detail::fail_decode<T>(R"(a number, "NaN", "Infinity" or "-Infinity")", j);
  }
};

template <>
struct codec<std::string> {
  static nlohmann::json encode(const std::string& s) {
    detail::check_journal_string<std::string>(s);
    return s;
  }
  static std::string decode(const nlohmann::json& j) {
    if (!j.is_string()) detail::fail_decode<std::string>("a string", j);
    return j.get<std::string>();
  }
};

template <>
struct codec<std::monostate> {
  static nlohmann::json encode(std::monostate) { return nullptr; }
  static std::monostate decode(const nlohmann::json& j) {
    if (!j.is_null()) detail::fail_decode<std::monostate>("null", j);
    return {};
  }
};

/// Raw JSON passes through unchanged.
template <>
struct codec<nlohmann::json> {
  static nlohmann::json encode(const nlohmann::json& j) { return j; }
  static nlohmann::json decode(const nlohmann::json& j) { return j; }
};

/// nullopt is null, otherwise the value's own encoding. So optional<optional<T>> cannot tell an
/// engaged-but-empty inner optional from an empty outer one: both decode as the outer nullopt.
template <class T>
struct codec<std::optional<T>> {
  static nlohmann::json encode(const std::optional<T>& v) {
    return v ? detail::codec_for<T>::encode(*v) : nlohmann::json(nullptr);
  }
  static std::optional<T> decode(const nlohmann::json& j) {
    if (j.is_null()) return std::nullopt;
    try {
      return detail::decode_as<T>(j);
    } catch (const detail::decode_error& e) {
      // No path segment: "cannot decode std::optional<int> from JSON: int: expected ..."
      throw e.nested_in(detail::type_name<std::optional<T>>(), "");
    }
  }
};

/// Enums are their underlying integer (range-checked), unless they have an ADL to_json.
template <class T>
  requires(std::is_enum_v<T> && !detail::has_adl_to_json<T>)
struct codec<T> {
  using underlying = std::underlying_type_t<T>;
  static nlohmann::json encode(T v) {
    return codec<underlying>::encode(static_cast<underlying>(v));
  }
  static T decode(const nlohmann::json& j) {
    if constexpr (std::is_same_v<underlying, bool>)
      return static_cast<T>(codec<bool>::decode(j));
    else
      return static_cast<T>(detail::decode_integer<underlying, T>(j));
  }
};

template <class T, class A>
struct codec<std::vector<T, A>> : detail::array_codec<std::vector<T, A>> {};
template <class T, class A>
struct codec<std::deque<T, A>> : detail::array_codec<std::deque<T, A>> {};
template <class T, class A>
struct codec<std::list<T, A>> : detail::array_codec<std::list<T, A>> {};
template <class T, class C, class A>
struct codec<std::set<T, C, A>> : detail::array_codec<std::set<T, C, A>> {};
template <class T, class H, class E, class A>
struct codec<std::unordered_set<T, H, E, A>> : detail::array_codec<std::unordered_set<T, H, E, A>> {
};

template <class T, std::size_t N>
struct codec<std::array<T, N>> {
  using array = std::array<T, N>;

  static nlohmann::json encode(const array& a) { return detail::array_codec<array>::encode(a); }

  static array decode(const nlohmann::json& j) {
    if (!j.is_array() || j.size() != N) detail::fail_decode<array>(detail::elements(N), j);
    if constexpr (std::is_default_constructible_v<T>) {
      array out{};  // a loop rather than a pack keeps large arrays cheap to compile
      for (std::size_t i = 0; i < N; ++i) out[i] = detail::decode_index<array, T>(j[i], i);
      return out;
    } else {
      return decode_elements(j, std::make_index_sequence<N>{});
    }
  }

private:
  template <std::size_t... I>
  static array decode_elements(const nlohmann::json& j, std::index_sequence<I...>) {
    return array{detail::decode_index<array, T>(j[I], I)...};
  }
};

template <class A, class B>
struct codec<std::pair<A, B>> : detail::tuple_codec<std::pair<A, B>, A, B> {};
template <class... Ts>
struct codec<std::tuple<Ts...>> : detail::tuple_codec<std::tuple<Ts...>, Ts...> {};

template <class K, class V, class C, class A>
struct codec<std::map<K, V, C, A>> : detail::map_codec<std::map<K, V, C, A>> {};
template <class K, class V, class H, class E, class A>
struct codec<std::unordered_map<K, V, H, E, A>>
    : detail::map_codec<std::unordered_map<K, V, H, E, A>> {};

/// The journal encoding of `value`. Throws codec_error naming T if it cannot be encoded.
template <class T>
nlohmann::json encode(const T& value) {
  const auto wrap = [](const char* reason) -> codec_error {
    const std::string type(detail::type_name<T>());
    return codec_error(type, "cannot encode " + type + " to JSON: " + reason);
  };
  try {
    return detail::codec_for<T>::encode(value);
  } catch (const codec_error& e) {
    if (e.type() == detail::type_name<T>()) throw;
    throw wrap(e.what());
  } catch (const nlohmann::json::exception& e) {
    throw wrap(e.what());
  }
}

/// Decodes a journaled value. Throws codec_error whose type() names T and whose message says what
/// was expected and what was found, and where, for nested values.
template <class T>
T decode(const nlohmann::json& json) {
  return detail::decode_as<T>(json);
}

}  // namespace durable
