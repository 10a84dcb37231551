// Journal text made off the event loop (durable/detail/encode_text.hpp), without a server: a
// large value is encoded on a thread of its own while the loop goes on running handlers; a
// small one is encoded in place; the text is the same either way, the value is given back,
// and an encoding error reaches the run.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "durable/detail/encode_text.hpp"

using namespace durable;

namespace {

/// A value whose type says nothing of its size; its codec notes the thread it runs on.
struct record {
  std::vector<int> values;
};
std::thread::id encoded_on;

/// Runs journal_text(value) on a loop that also runs a ticker, and returns the text and how
/// often the ticker ran before the text was made. In place, the coroutine never suspends and
/// the ticker (posted first) cannot run before it ends, except for its first turn.
template <class T>
std::pair<std::string, int> encode_beside_a_ticker(T& value) {
  asio::io_context io;
  int ticks = 0;
  bool done = false;
  int ticks_at_end = -1;
  std::string text;
  std::exception_ptr failed;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        while (!done) {
          ++ticks;
          co_await asio::post(io, asio::use_awaitable);
        }
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          text = co_await detail::journal_text(value);
        } catch (...) {
          failed = std::current_exception();
        }
        ticks_at_end = ticks;
        done = true;
      },
      asio::detached);
  io.run();
  if (failed) std::rethrow_exception(failed);
  return {text, ticks_at_end};
}

}  // namespace

namespace durable {
template <>
struct codec<record> {
  static nlohmann::json encode(const record& r) {
    encoded_on = std::this_thread::get_id();
    return r.values;
  }
  static record decode(const nlohmann::json& j) { return {j.get<std::vector<int>>()}; }
};
}  // namespace durable

TEST_CASE("encode: a large string is encoded while the loop runs on, and given back", "[encode]") {
  std::string big(detail::offload_bytes * 4, 'x');
  big[10] = '"';
  const std::string expected = durable::encode<std::string>(big).dump();
  auto [text, ticks] = encode_beside_a_ticker(big);
  CHECK(text == expected);
  CHECK(ticks > 1);  // the loop ran the ticker while the text was being made
  CHECK(big.size() == detail::offload_bytes * 4);  // moved to the encoder and back
  CHECK(big[10] == '"');
}

TEST_CASE("encode: a small value is encoded in place", "[encode]") {
  std::string small = "a few bytes";
  auto [text, ticks] = encode_beside_a_ticker(small);
  CHECK(text == "\"a few bytes\"");
  CHECK(ticks == 1);  // only the ticker's first turn, before the encoder started
  std::map<std::string, int> m{{"a", 1}, {"b", 2}};
  auto [mtext, mticks] = encode_beside_a_ticker(m);
  CHECK(mtext == R"({"a":1,"b":2})");
  CHECK(mticks == 1);
}

TEST_CASE("encode: a type of unknown size is judged by its encoded weight", "[encode]") {
  record small{{1, 2, 3}};
  auto [stext, sticks] = encode_beside_a_ticker(small);
  CHECK(stext == "[1,2,3]");
  CHECK(sticks == 1);
  CHECK(encoded_on == std::this_thread::get_id());
  // Its codec runs on the loop (nothing tells its size beforehand); the dump does not.
  record large{std::vector<int>(detail::offload_bytes, 7)};
  auto [ltext, lticks] = encode_beside_a_ticker(large);
  CHECK(ltext == nlohmann::json(large.values).dump());
  CHECK(lticks > 1);
  CHECK(large.values.size() == detail::offload_bytes);
}

TEST_CASE("encode: an error while encoding off the loop reaches the run", "[encode]") {
  std::string bad(detail::offload_bytes * 2, 'y');
  bad[detail::offload_bytes + 5] = '\xff';  // not UTF-8
  try {
    (void)encode_beside_a_ticker(bad);
    FAIL("no error");
  } catch (const codec_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("not valid UTF-8 at byte " +
                                         std::to_string(detail::offload_bytes + 5)));
  }
  CHECK(bad.size() == detail::offload_bytes * 2);  // given back even so
}

TEST_CASE("encode: the weight walk stops at its limit", "[encode]") {
  nlohmann::json j = nlohmann::json::array();
  for (int i = 0; i < 1000; ++i) j.push_back(std::string(100, 'z'));
  const std::size_t full = detail::json_weight(j, std::size_t(-1));
  CHECK(full >= 1000 * 102);
  CHECK(detail::json_weight(j, 1000) < 1000 + 200);
  CHECK(detail::json_weight(nlohmann::json{{"k", "v"}}, 1 << 20) >= 5);
}
