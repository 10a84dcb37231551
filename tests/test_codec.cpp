#include <durable/codec.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

using nlohmann::json;

namespace codec_test {

// A user type serialized through nlohmann's ADL hooks.
struct point {
  int x = 0;
  int y = 0;
  bool operator==(const point&) const = default;
};
void to_json(json& j, const point& p) { j = {{"x", p.x}, {"y", p.y}}; }
void from_json(const json& j, point& p) {
  j.at("x").get_to(p.x);
  j.at("y").get_to(p.y);
}

// A user type with a durable::codec specialization (below) and no nlohmann support at all.
struct user_id {
  int value = 0;
  bool operator==(const user_id&) const = default;
};

// A user codec built from durable::decode of its members.
struct temperature {
  double celsius = 0;
  bool operator==(const temperature&) const = default;
};

// Decoding must not need a default constructor.
struct no_default {
  explicit no_default(int v) : value(v) {}
  int value;
  bool operator==(const no_default&) const = default;
};

// nlohmann support whose to_json throws a nlohmann exception.
struct unencodable {};
void to_json(json& j, const unencodable&) { j = json(5).at("x"); }

enum class color : std::uint8_t { red, green, blue };
enum plain_enum : int { minus_one = -1, one = 1 };

// Enums with an ADL to_json keep their nlohmann encoding.
enum class status { ok, failed };
NLOHMANN_JSON_SERIALIZE_ENUM(status, {{status::ok, "ok"}, {status::failed, "failed"}})

}  // namespace codec_test

namespace durable {
template <>
struct codec<codec_test::user_id> {
  static json encode(const codec_test::user_id& id) { return "u-" + std::to_string(id.value); }
  static codec_test::user_id decode(const json& j) {
    if (!j.is_string() || !j.get_ref<const std::string&>().starts_with("u-")) {
      throw codec_error("codec_test::user_id", "expected a string \"u-<number>\"");
    }
    return {std::stoi(j.get<std::string>().substr(2))};
  }
};
template <>
struct codec<codec_test::temperature> {
  static json encode(const codec_test::temperature& t) {
    return {{"celsius", durable::encode(t.celsius)}};
  }
  static codec_test::temperature decode(const json& j) {
    return {durable::decode<double>(j.at("celsius"))};
  }
};
template <>
struct codec<codec_test::no_default> {
  static json encode(const codec_test::no_default& v) { return v.value; }
  static codec_test::no_default decode(const json& j) {
    return codec_test::no_default{durable::decode<int>(j)};
  }
};
}  // namespace durable

namespace {

// Through text, as the journal stores it.
template <class T>
T round_trip(const T& value) {
  return durable::decode<T>(json::parse(durable::encode(value).dump()));
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// The codec_error thrown by decode<T>(j); fails the test if nothing is thrown.
template <class T>
durable::codec_error decode_error(const json& j) {
  try {
    (void)durable::decode<T>(j);
  } catch (const durable::codec_error& e) {
    return e;
  }
  FAIL("decode<" << durable::detail::type_name<T>() << ">(" << j.dump() << ") did not throw");
  throw;  // unreachable
}

}  // namespace

TEST_CASE("type_name is readable", "[codec]") {
  using durable::detail::type_name;
  CHECK(type_name<int>() == "int");
  CHECK(type_name<std::string>() == "std::string");
  CHECK(type_name<std::vector<int>>() == "std::vector<int>");
  CHECK(type_name<std::vector<std::string>>() == "std::vector<std::string>");
  CHECK(type_name<std::map<std::string, std::vector<int>>>() ==
        "std::map<std::string, std::vector<int>>");
  CHECK(type_name<std::optional<std::list<std::string>>>() ==
        "std::optional<std::list<std::string>>");
  CHECK(type_name<std::unordered_map<std::string, long>>() ==
        "std::unordered_map<std::string, long>");
  CHECK(type_name<std::pair<unsigned long long, short>>() ==
        "std::pair<unsigned long long, short>");
  CHECK(type_name<std::array<int, 3>>() == "std::array<int, 3>");
  CHECK(type_name<codec_test::point>() == "codec_test::point");
  CHECK(type_name<json>() == "nlohmann::json");
}

TEST_CASE("encoding is readable JSON", "[codec]") {
  using durable::encode;
  CHECK(encode(std::map<std::string, int>{{"a", 1}}).dump() == R"({"a":1})");
  CHECK(encode(std::vector<int>{1, 2, 3}).dump() == "[1,2,3]");
  CHECK(encode(std::map<int, std::string>{{1, "a"}, {2, "b"}}).dump() == R"([[1,"a"],[2,"b"]])");
  CHECK(encode(std::pair<int, std::string>{1, "x"}).dump() == R"([1,"x"])");
  CHECK(encode(std::tuple<bool, double, std::string>{true, 2.5, "s"}).dump() ==
        R"([true,2.5,"s"])");
  CHECK(encode(std::optional<int>{}).dump() == "null");
  CHECK(encode(std::optional<int>{7}).dump() == "7");
  CHECK(encode(0.1).dump() == "0.1");
  CHECK(encode(0.1f).dump() == "0.1");  // not 0.10000000149011612
  CHECK(encode(std::string("h\xC3\xA9")).dump() == "\"h\xC3\xA9\"");
  CHECK(encode(codec_test::color::blue).dump() == "2");
  CHECK(encode(std::monostate{}).dump() == "null");
}

TEST_CASE("bool round-trips and accepts only booleans", "[codec]") {
  CHECK(round_trip(true) == true);
  CHECK(round_trip(false) == false);
  const auto e = decode_error<bool>(json(1));
  CHECK(e.type() == "bool");
  CHECK(std::string(e.what()) ==
        "cannot decode bool from JSON: expected a boolean, found number 1");
}

TEMPLATE_TEST_CASE("integers round-trip at their limits", "[codec]", char, signed char,
                   unsigned char, short, unsigned short, int, unsigned, long, unsigned long,
                   long long, unsigned long long, std::int8_t, std::uint8_t, std::int64_t,
                   std::uint64_t, char16_t, char32_t) {
  using limits = std::numeric_limits<TestType>;
  for (const TestType v : {limits::min(), limits::max(), TestType{0}, TestType{1}}) {
    CHECK(round_trip(v) == v);
  }
}

TEST_CASE("64-bit limits are exact", "[codec]") {
  CHECK(durable::encode(std::numeric_limits<std::uint64_t>::max()).dump() ==
        "18446744073709551615");
  CHECK(durable::encode(std::numeric_limits<std::int64_t>::min()).dump() == "-9223372036854775808");
  CHECK(durable::decode<std::uint64_t>(json::parse("18446744073709551615")) ==
        18446744073709551615ULL);
  CHECK(durable::decode<std::int64_t>(json::parse("-9223372036854775808")) ==
        std::numeric_limits<std::int64_t>::min());
}

TEST_CASE("integer decoding is range-checked", "[codec]") {
  SECTION("too large for int8_t") {
    const auto e = decode_error<std::int8_t>(json(300));
    CHECK(e.type() == "signed char");
    CHECK(std::string(e.what()) ==
          "cannot decode signed char from JSON: expected an integer in [-128, 127], found number "
          "300");
  }
  SECTION("negative into unsigned") {
    const auto e = decode_error<unsigned>(json(-1));
    CHECK(e.type() == "unsigned int");
    CHECK_THAT(e.what(), Catch::Contains("[0, 4294967295]") && Catch::Contains("found number -1"));
  }
  SECTION("uint64 max into int64") {
    const auto e = decode_error<std::int64_t>(json(std::numeric_limits<std::uint64_t>::max()));
    CHECK_THAT(e.what(), Catch::Contains("found number 18446744073709551615"));
  }
  SECTION("fraction") {
    CHECK(std::string(decode_error<int>(json(1.5)).what()) ==
          "cannot decode int from JSON: expected an integer, found number 1.5");
  }
  SECTION("integral doubles are accepted, within range") {
    CHECK(durable::decode<int>(json(2.0)) == 2);
    CHECK(durable::decode<std::uint64_t>(json(1e19)) == 10000000000000000000ULL);
    CHECK_THAT(decode_error<std::int16_t>(json(1e10)).what(), Catch::Contains("[-32768, 32767]"));
    CHECK_THAT(decode_error<std::uint64_t>(json(1e20)).what(),
               Catch::Contains("found number 1e+20"));
  }
  SECTION("wrong kind") {
    CHECK(std::string(decode_error<int>(json("5")).what()) ==
          R"(cannot decode int from JSON: expected an integer, found string "5")");
    CHECK_THAT(decode_error<long>(json(nullptr)).what(),
               Catch::EndsWith("expected an integer, found null"));
    CHECK_THAT(decode_error<int>(json(true)).what(), Catch::EndsWith("found boolean true"));
  }
}

TEMPLATE_TEST_CASE("floating point round-trips exactly", "[codec]", float, double) {
  using limits = std::numeric_limits<TestType>;
  const TestType values[] = {TestType(0),     TestType(-2.5),       TestType(0.1),
                             TestType(1) / 3, limits::max(),        limits::lowest(),
                             limits::min(),   limits::denorm_min(), limits::epsilon(),
                             TestType(1e17),  TestType(-1e-7),      TestType(3.14159265358979)};
  for (const TestType v : values) {
    INFO(durable::encode(v).dump());
    CHECK(same_bits(round_trip(v), v));
  }
  SECTION("NaN and infinities are strings") {
    CHECK(durable::encode(limits::quiet_NaN()) == "NaN");
    CHECK(durable::encode(limits::infinity()) == "Infinity");
    CHECK(durable::encode(-limits::infinity()) == "-Infinity");
    CHECK(std::isnan(round_trip(limits::quiet_NaN())));
    CHECK(round_trip(limits::infinity()) == limits::infinity());
    CHECK(round_trip(-limits::infinity()) == -limits::infinity());
  }
  SECTION("integers decode as numbers (jsonb prints 1e17 as 100000000000000000)") {
    CHECK(durable::decode<TestType>(json::parse("100000000000000000")) == TestType(1e17));
    CHECK(durable::decode<TestType>(json(-3)) == TestType(-3));
  }
  SECTION("other strings are rejected") {
    const auto e = decode_error<TestType>(json("nan"));
    CHECK(e.type() == durable::detail::type_name<TestType>());
    CHECK_THAT(e.what(),
               Catch::EndsWith(
                   R"(expected a number, "NaN", "Infinity" or "-Infinity", found string "nan")"));
  }
}

TEST_CASE("float decoding is range-checked", "[codec]") {
  CHECK_THAT(decode_error<float>(json(1e300)).what(),
             Catch::Contains("expected a number in float range"));
}

TEST_CASE("negative zero keeps its sign through nlohmann (jsonb itself stores 0)", "[codec]") {
  CHECK(durable::encode(-0.0).dump() == "-0.0");
  CHECK(std::signbit(round_trip(-0.0)));
}

TEST_CASE("strings", "[codec]") {
  for (const std::string s :
       {"", "plain", "quote \" backslash \\ newline \n", "\xE2\x82\xAC \xF0\x9F\x98\x80"}) {
    CHECK(round_trip(s) == s);
  }
  CHECK(std::string(decode_error<std::string>(json(5)).what()) ==
        "cannot decode std::string from JSON: expected a string, found number 5");

  SECTION("values jsonb cannot store fail at encode time") {
    using Catch::Contains;
    CHECK_THROWS_WITH(durable::encode(std::string("a\0b", 3)),
                      Contains("std::string") && Contains("NUL"));
    CHECK_THROWS_WITH(durable::encode(std::string("ok\xFF")),
                      Contains("not valid UTF-8 at byte 2"));
    CHECK_THROWS_WITH(durable::encode(std::string("\xC0\xAF")), Contains("UTF-8"));  // overlong
    CHECK_THROWS_WITH(durable::encode(std::string("\xED\xA0\x80")),
                      Contains("UTF-8"));                                            // surrogate
    CHECK_THROWS_WITH(durable::encode(std::string("\xE2\x82")), Contains("UTF-8"));  // truncated
    try {
      (void)durable::encode(std::vector<std::string>{"fine", std::string(1, '\0')});
      FAIL("no exception");
    } catch (const durable::codec_error& e) {
      CHECK(e.type() == "std::vector<std::string>");
      CHECK_THAT(e.what(), Catch::StartsWith("cannot encode std::vector<std::string> to JSON: "));
    }
    CHECK_THROWS_AS(durable::encode(std::map<std::string, int>{{std::string("\xFF"), 1}}),
                    durable::codec_error);
  }
}

TEST_CASE("sequences and sets", "[codec]") {
  CHECK(round_trip(std::vector<int>{}) == std::vector<int>{});
  CHECK(round_trip(std::vector<int>{3, 1, 2}) == std::vector<int>{3, 1, 2});
  CHECK(round_trip(std::vector<bool>{true, false, true}) == std::vector<bool>{true, false, true});
  CHECK(round_trip(std::deque<std::string>{"a", "b"}) == std::deque<std::string>{"a", "b"});
  CHECK(round_trip(std::list<double>{1.5, -0.25}) == std::list<double>{1.5, -0.25});
  CHECK(round_trip(std::set<int>{5, 1, 3}) == std::set<int>{1, 3, 5});
  CHECK(round_trip(std::unordered_set<std::string>{"x", "y"}) ==
        std::unordered_set<std::string>{"x", "y"});
  CHECK(durable::encode(std::set<int>{3, 1}).dump() == "[1,3]");

  const auto e = decode_error<std::vector<int>>(json("abc"));
  CHECK(e.type() == "std::vector<int>");
  CHECK(std::string(e.what()) ==
        R"(cannot decode std::vector<int> from JSON: expected an array, found string "abc")");
}

TEST_CASE("std::array checks its length", "[codec]") {
  CHECK(round_trip(std::array<int, 3>{1, 2, 3}) == std::array<int, 3>{1, 2, 3});
  CHECK(round_trip(std::array<std::string, 0>{}) == std::array<std::string, 0>{});
  const auto e = decode_error<std::array<int, 3>>(json::parse("[1,2]"));
  CHECK(e.type() == "std::array<int, 3>");
  CHECK(std::string(e.what()) ==
        "cannot decode std::array<int, 3> from JSON: expected an array of 3 elements, found array "
        "[1,2]");
}

TEST_CASE("pairs and tuples check their length", "[codec]") {
  using tuple = std::tuple<int, std::string, std::optional<double>>;
  CHECK(round_trip(std::pair<std::string, int>{"k", 4}) == std::pair<std::string, int>{"k", 4});
  CHECK(round_trip(tuple{1, "s", std::nullopt}) == tuple{1, "s", std::nullopt});
  CHECK(round_trip(std::tuple<>{}) == std::tuple<>{});
  CHECK(durable::encode(std::tuple<>{}).dump() == "[]");

  const auto pair_error = decode_error<std::pair<int, int>>(json::parse("[1,2,3]"));
  CHECK(pair_error.type() == "std::pair<int, int>");
  CHECK_THAT(pair_error.what(),
             Catch::EndsWith("expected an array of 2 elements, found array [1,2,3]"));
  CHECK_THAT(decode_error<std::tuple<int>>(json::parse("[]")).what(),
             Catch::EndsWith("expected an array of 1 element, found array []"));
  CHECK(std::string(decode_error<tuple>(json::parse(R"([1, 2, null])")).what()) ==
        "cannot decode std::tuple<int, std::string, std::optional<double>> from JSON: "
        "std::string at [1]: expected a string, found number 2");
}

TEST_CASE("optional", "[codec]") {
  CHECK(round_trip(std::optional<int>{}) == std::nullopt);
  CHECK(round_trip(std::optional<int>{0}) == 0);
  CHECK(round_trip(std::optional<std::string>{""}) == "");
  // Documented limitation: an engaged optional holding nullopt is also null.
  CHECK(durable::encode(std::optional<std::optional<int>>{std::optional<int>{}}).dump() == "null");
  CHECK(round_trip(std::optional<std::optional<int>>{std::optional<int>{}}) == std::nullopt);
  CHECK(round_trip(std::optional<std::optional<int>>{5}) == std::optional<std::optional<int>>{5});

  const auto e = decode_error<std::optional<int>>(json("x"));
  CHECK(e.type() == "std::optional<int>");
  CHECK(
      std::string(e.what()) ==
      R"(cannot decode std::optional<int> from JSON: int: expected an integer, found string "x")");
}

TEST_CASE("maps", "[codec]") {
  using by_name = std::map<std::string, std::vector<int>>;
  CHECK(round_trip(by_name{{"a", {1}}, {"", {}}, {"b c", {2, 3}}}) ==
        by_name{{"a", {1}}, {"", {}}, {"b c", {2, 3}}});
  using hashed = std::unordered_map<std::string, double>;
  CHECK(round_trip(hashed{{"x", 1.5}, {"y", -2}}) == hashed{{"x", 1.5}, {"y", -2}});
  CHECK(durable::encode(hashed{{"b", 1}, {"a", 2}}).dump() == R"({"a":2.0,"b":1.0})");

  using by_id = std::map<int, std::string>;
  CHECK(round_trip(by_id{{-1, "neg"}, {7, "seven"}}) == by_id{{-1, "neg"}, {7, "seven"}});
  using by_pair = std::unordered_map<long, bool>;
  CHECK(round_trip(by_pair{{1, true}, {2, false}}) == by_pair{{1, true}, {2, false}});

  CHECK_THAT(decode_error<by_name>(json::array()).what(),
             Catch::EndsWith("expected an object, found array []"));
  CHECK_THAT(decode_error<by_id>(json::object()).what(),
             Catch::EndsWith("expected an array of [key, value] pairs, found object {}"));
  CHECK(std::string(decode_error<by_name>(json::parse(R"({"a": [1, "x"]})")).what()) ==
        R"(cannot decode std::map<std::string, std::vector<int>> from JSON: int at ["a"][1]: )"
        R"(expected an integer, found string "x")");
  CHECK(std::string(decode_error<by_id>(json::parse(R"([[1, "a"], [2]])")).what()) ==
        "cannot decode std::map<int, std::string> from JSON: std::pair<int, std::string> at [1]: "
        "expected an array of 2 elements, found array [2]");
}

TEST_CASE("enums are their underlying integer, range-checked", "[codec]") {
  using codec_test::color;
  CHECK(round_trip(color::green) == color::green);
  CHECK(round_trip(codec_test::minus_one) == codec_test::minus_one);
  CHECK(durable::encode(codec_test::minus_one).dump() == "-1");
  const auto e = decode_error<color>(json(256));
  CHECK(e.type() == "codec_test::color");
  CHECK(std::string(e.what()) ==
        "cannot decode codec_test::color from JSON: expected an integer in [0, 255], "
        "found number 256");
}

TEST_CASE("enums with an ADL to_json keep the nlohmann encoding", "[codec]") {
  CHECK(durable::encode(codec_test::status::failed).dump() == R"("failed")");
  CHECK(round_trip(codec_test::status::failed) == codec_test::status::failed);
}

TEST_CASE("monostate and raw JSON", "[codec]") {
  CHECK(round_trip(std::monostate{}) == std::monostate{});
  CHECK_THAT(decode_error<std::monostate>(json(0)).what(),
             Catch::EndsWith("expected null, found number 0"));
  const json raw = json::parse(R"({"any": [1, "thing", null]})");
  CHECK(round_trip(raw) == raw);
}

TEST_CASE("user type via nlohmann to_json/from_json", "[codec]") {
  CHECK(durable::encode(codec_test::point{1, 2}).dump() == R"({"x":1,"y":2})");
  CHECK(round_trip(std::vector<codec_test::point>{{1, 2}, {-3, 4}}) ==
        std::vector<codec_test::point>{{1, 2}, {-3, 4}});

  // nlohmann's own exceptions become codec_error naming the type.
  const auto e = decode_error<codec_test::point>(json::parse(R"({"x": 1})"));
  CHECK(e.type() == "codec_test::point");
  CHECK_THAT(e.what(), Catch::StartsWith("cannot decode codec_test::point from JSON: ") &&
                           Catch::Contains("'y'"));
  const auto nested = decode_error<std::vector<codec_test::point>>(
      json::parse(R"([{"x": 1, "y": 2}, {"x": "1"}])"));
  CHECK(nested.type() == "std::vector<codec_test::point>");
  CHECK_THAT(nested.what(), Catch::Contains("codec_test::point at [1]: "));
}

TEST_CASE("user codec specialization applies inside containers", "[codec]") {
  using codec_test::user_id;
  CHECK(durable::encode(std::vector<user_id>{{42}, {7}}).dump() == R"(["u-42","u-7"])");
  CHECK(round_trip(std::map<std::string, user_id>{{"owner", {1}}}) ==
        std::map<std::string, user_id>{{"owner", {1}}});
  CHECK(round_trip(std::optional<user_id>{user_id{3}}) == user_id{3});

  const auto e = decode_error<std::vector<user_id>>(json::parse(R"(["u-1", 2])"));
  CHECK(e.type() == "std::vector<codec_test::user_id>");
  CHECK(std::string(e.what()) == R"(cannot decode std::vector<codec_test::user_id> from JSON: )"
                                 R"(codec_test::user_id at [1]: expected a string "u-<number>")");
}

TEST_CASE("errors from decodes inside a user codec name both types", "[codec]") {
  using codec_test::temperature;
  CHECK(round_trip(std::vector<temperature>{{-40}, {std::numeric_limits<double>::infinity()}}) ==
        std::vector<temperature>{{-40}, {std::numeric_limits<double>::infinity()}});
  CHECK(std::string(
            decode_error<std::vector<temperature>>(json::parse(R"([{"celsius": true}])")).what()) ==
        "cannot decode std::vector<codec_test::temperature> from JSON: codec_test::temperature at "
        "[0]: double: "
        R"(expected a number, "NaN", "Infinity" or "-Infinity", found boolean true)");
  const auto missing = decode_error<temperature>(json::object());
  CHECK(missing.type() == "codec_test::temperature");
  CHECK_THAT(missing.what(), Catch::Contains("'celsius' not found"));
}

TEST_CASE("nlohmann exceptions while encoding become codec_error", "[codec]") {
  try {
    (void)durable::encode(std::vector<codec_test::unencodable>(1));
    FAIL("no exception");
  } catch (const durable::codec_error& e) {
    CHECK(e.type() == "std::vector<codec_test::unencodable>");
    CHECK_THAT(e.what(),
               Catch::StartsWith("cannot encode std::vector<codec_test::unencodable> to JSON: "));
  }
}

TEST_CASE("types without a default constructor", "[codec]") {
  using codec_test::no_default;
  using array = std::array<no_default, 2>;
  CHECK(round_trip(array{no_default{1}, no_default{2}}) == array{no_default{1}, no_default{2}});
  CHECK(round_trip(std::pair<no_default, int>{no_default{3}, 4}) ==
        std::pair<no_default, int>{no_default{3}, 4});
  CHECK(round_trip(std::vector<no_default>{no_default{5}}) ==
        std::vector<no_default>{no_default{5}});
  CHECK(round_trip(std::optional<no_default>{no_default{6}}) == no_default{6});
  CHECK_THAT(
      decode_error<array>(json::parse("[1, 2.5]")).what(),
      Catch::Contains("codec_test::no_default at [1]: int: expected an integer, found number 2.5"));
}

TEST_CASE("nested containers", "[codec]") {
  using nested = std::map<std::string, std::vector<std::optional<std::pair<int, std::string>>>>;
  const nested value{{"k", {std::pair<int, std::string>{1, "one"}, std::nullopt}}, {"empty", {}}};
  CHECK(round_trip(value) == value);
  CHECK(durable::encode(value).dump() == R"({"empty":[],"k":[[1,"one"],null]})");
  CHECK_THAT(decode_error<nested>(json::parse(R"({"k": [null, [1, 2]]})")).what(),
             Catch::Contains(R"(std::string at ["k"][1][1]: expected a string, found number 2)"));
}

TEST_CASE("long values are truncated in messages", "[codec]") {
  const auto e = decode_error<int>(json(std::string(500, 'x')));
  const std::string what = e.what();
  CHECK(what.size() < 200);
  CHECK_THAT(what, Catch::EndsWith("..."));
}

static_assert(!durable::detail::nlohmann_encodable<std::monostate*>,
              "pointers have no encoding; encode() on them hits the codec static_assert");
