// Durable streams (issue 40): ctx.write_stream appends once per step (a replay appends
// nothing), ctx.close_stream ends the readers, engine::read_stream yields every value once and
// in order from an offset, woken by the notification of each append, and ends at the close or
// when the workflow finishes. A fork keeps the values of the steps it copies; the test kit's
// crash at every step leaves each value once.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include <asio/detached.hpp>

#include <string>
#include <utility>
#include <vector>

#include "durable/testing.hpp"
#include "support/workflows.hpp"

// In a namespace of its own: the files of one executable compile as one translation unit in
// scripts/test (docs/development.md, "Unity builds").
namespace stream_cases {

using namespace durable;
using test::q;

namespace {

/// Waits for "go", writes "t0".."t<n-1>" to "tokens", closes it; returns the close's offset.
asio::awaitable<int> writer_wf(context& ctx, int n) {
  (void)co_await ctx.recv<int>("go");
  for (int i = 0; i < n; ++i) {
    const std::string token = "t" + std::to_string(i);
    const std::int64_t at = co_await ctx.write_stream("tokens", token);
    if (at != i)
      throw std::runtime_error("value " + token + " went to offset " + std::to_string(at));
  }
  const std::int64_t closed = co_await ctx.close_stream("tokens");
  co_return static_cast<int>(closed);
}

/// Writes 0..n-1 to "numbers" and returns without closing it.
asio::awaitable<int> unclosed_wf(context& ctx, int n) {
  for (int i = 0; i < n; ++i) (void)co_await ctx.write_stream("numbers", i);
  co_return n;
}

/// A value after the close: the write fails for good; closing again changes nothing.
asio::awaitable<std::string> late_wf(context& ctx, int) {
  const std::string a = "a", b = "b";
  (void)co_await ctx.write_stream("s", a);
  const std::int64_t first = co_await ctx.close_stream("s");
  const std::int64_t again = co_await ctx.close_stream("s");
  std::string failure;
  try {
    (void)co_await ctx.write_stream("s", b);
  } catch (const step_failed& e) {
    failure = e.what();
  }
  co_return std::to_string(first) + "," + std::to_string(again) + ":" + failure;
}

/// Two values larger than a notification's payload (8000 bytes), each after a "go".
asio::awaitable<int> large_wf(context& ctx, int size) {
  for (const char c : {'x', 'y'}) {
    (void)co_await ctx.recv<int>("go");
    const std::string value(static_cast<std::size_t>(size), c);
    (void)co_await ctx.write_stream("big", value);
  }
  co_return size;
}

void add_workflows(engine& eng) {
  eng.register_workflow("writer", &writer_wf);
  eng.register_workflow("unclosed", &unclosed_wf);
  eng.register_workflow("late", &late_wf);
  eng.register_workflow("large", &large_wf);
}

const test::engine_fixture fx{&test::preset::live, &add_workflows, "exec-a", nullptr};

/// Every value of `r` until it ends (or `timeout` passes with nothing new).
template <class T>
asio::awaitable<std::vector<stream_value<T>>> read_all(stream_reader<T>& r,
                                                       std::chrono::milliseconds timeout) {
  std::vector<stream_value<T>> out;
  for (;;) {
    std::optional<stream_value<T>> v = co_await r.next(timeout);
    if (!v) co_return out;
    out.push_back(std::move(*v));
  }
}

asio::awaitable<long> stream_rows(engine& eng, const std::string& schema, const std::string& id) {
  return test::scalar<long>(
      eng, "SELECT count(*) FROM " + q(schema) + ".streams WHERE workflow_id = $1", id);
}

}  // namespace

TEST_CASE("streams: a reader sees every value once, in order, until the close", "[streams]") {
  const auto schema = test::fresh_schema("streams");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const workflow_handle h = co_await eng.start("writer", "w-1", 5);
    // The reader reads (and waits) before the first value is written.
    auto reader = eng.read_stream<std::string>("w-1", "tokens");
    auto ex = co_await asio::this_coro::executor;
    std::vector<stream_value<std::string>> seen;
    bool done = false;
    asio::co_spawn(
        ex,
        [&]() -> asio::awaitable<void> {
          seen = co_await read_all(reader, std::chrono::seconds(60));
          done = true;
        },
        asio::detached);
    (void)co_await eng.send("w-1", "go", 1);
    const int closed_at = co_await h.result<int>();
    CHECK(closed_at == 5);
    while (!done) co_await test::sleep_ms(5);
    REQUIRE(seen.size() == 5);
    for (int i = 0; i < 5; ++i) {
      CHECK(seen[i].offset == i);
      CHECK(seen[i].value == "t" + std::to_string(i));
    }
    CHECK(reader.ended() == stream_end::closed);
    CHECK(reader.offset() == 5);
    // Ended: next() says so again at once.
    const auto after = co_await reader.next();
    CHECK_FALSE(after);
    // Five values and the close, written once each.
    const long rows = co_await stream_rows(eng, schema, "w-1");
    CHECK(rows == 6);

    // A reader from offset 3 sees the rest.
    auto late = eng.read_stream<std::string>("w-1", "tokens", 3);
    const auto rest = co_await read_all(late, std::chrono::seconds(60));
    REQUIRE(rest.size() == 2);
    CHECK(rest[0].offset == 3);
    CHECK(rest[1].value == "t4");

    // A fork that replays every step appends nothing, it holds the copies.
    const workflow_handle whole = co_await eng.fork("w-1", 1000, "w-1-whole");
    const int whole_closed = co_await whole.result<int>();
    CHECK(whole_closed == 5);
    const long whole_rows = co_await stream_rows(eng, schema, "w-1-whole");
    CHECK(whole_rows == 6);
    // A fork from step 4 (steps 0, 1: the recv; 2, 3: t0, t1) copies two values and writes
    // the rest again after them.
    const workflow_handle part = co_await eng.fork("w-1", 4, "w-1-part");
    const int part_closed = co_await part.result<int>();
    CHECK(part_closed == 5);
    auto forked = eng.read_stream<std::string>("w-1-part", "tokens");
    const auto again = co_await read_all(forked, std::chrono::seconds(60));
    REQUIRE(again.size() == 5);
    for (int i = 0; i < 5; ++i) {
      CHECK(again[i].offset == i);
      CHECK(again[i].value == "t" + std::to_string(i));
    }
    CHECK(forked.ended() == stream_end::closed);
  });
}

TEST_CASE("streams: a stream never closed ends when its workflow finishes, a reader times out",
          "[streams]") {
  const auto schema = test::fresh_schema("streams_end");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // A workflow that is waiting: a reader with a timeout gets nothing, and is still open.
    (void)co_await eng.start("writer", "w-wait", 1);
    auto waiting = eng.read_stream<std::string>("w-wait", "tokens");
    const auto nothing = co_await waiting.next(std::chrono::milliseconds(50));
    CHECK_FALSE(nothing);
    CHECK(waiting.ended() == stream_end::open);
    CHECK(waiting.offset() == 0);

    const workflow_handle h = co_await eng.start("unclosed", "w-2", 3);
    const int n = co_await h.result<int>();
    CHECK(n == 3);
    auto r = eng.read_stream<int>("w-2", "numbers", 1);
    const auto values = co_await read_all(r, std::chrono::seconds(60));
    REQUIRE(values.size() == 2);
    CHECK(values[0].offset == 1);
    CHECK(values[0].value == 1);
    CHECK(values[1].value == 2);
    CHECK(r.ended() == stream_end::finished);
    CHECK(r.finished_status() == "succeeded");
    // Past the end, and a key it never wrote: ended at once.
    auto past = eng.read_stream<int>("w-2", "numbers", 10);
    const auto none = co_await past.next();
    CHECK_FALSE(none);
    CHECK(past.ended() == stream_end::finished);
    auto other = eng.read_stream<int>("w-2", "other");
    const auto empty = co_await other.next();
    CHECK_FALSE(empty);
    CHECK(other.ended() == stream_end::finished);
    // A value that does not decode as the reader's type: codec_error naming the offset.
    auto wrong = eng.read_stream<std::string>("w-2", "numbers");
    const auto refused = co_await test::error_of<codec_error>(wrong.next());
    REQUIRE(refused);
    CHECK_THAT(*refused,
               Catch::Contains("read_stream('w-2', 'numbers')") && Catch::Contains("offset 0"));
  });
}

TEST_CASE("streams: a value after the close fails for good, and replays fail alike", "[streams]") {
  const auto schema = test::fresh_schema("streams_late");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const workflow_handle h = co_await eng.start("late", "w-3", 0);
    const std::string out = co_await h.result<std::string>();
    CHECK_THAT(out, Catch::StartsWith("1,1:") &&
                        Catch::Contains("that step 1 closed (at offset 1)") &&
                        Catch::Contains("nothing was written"));
    const long rows = co_await stream_rows(eng, schema, "w-3");
    CHECK(rows == 2);  // "a" and the close
    const std::string kinds =
        co_await test::scalar(eng,
                              "SELECT string_agg(kind || '/' || status, ' ' ORDER BY seq) FROM " +
                                  q(schema) + ".steps WHERE workflow_id = $1",
                              std::string("w-3"));
    CHECK(kinds == "stream/succeeded stream_close/succeeded stream_close/succeeded stream/failed");
    // A fork that replays it all fails the write alike, from its journal.
    const workflow_handle whole = co_await eng.fork("w-3", 1000, "w-3-whole");
    const std::string replayed = co_await whole.result<std::string>();
    const auto journaled = [](const std::string& text) {
      return text.substr(text.find("durable::error:"));
    };
    CHECK_THAT(replayed, Catch::Contains("workflow 'w-3-whole': step 3 's' failed"));
    CHECK(journaled(replayed) == journaled(out));
  });
}

TEST_CASE("streams: values larger than a notification's payload reach a waiting reader",
          "[streams]") {
  const auto schema = test::fresh_schema("streams_large");
  // Polling once an hour: only the notification of an append can wake the reader in time.
  const auto slow_polls = [](engine_options& o) { o.poll_interval = std::chrono::hours(1); };
  fx.with_engine(
      schema,
      [&](engine& eng) -> asio::awaitable<void> {
        const int size = 20000;
        const workflow_handle h = co_await eng.start("large", "w-4", size);
        auto reader = eng.read_stream<std::string>("w-4", "big");
        for (const char c : {'x', 'y'}) {
          auto ex = co_await asio::this_coro::executor;
          std::optional<stream_value<std::string>> got;
          bool done = false;
          asio::co_spawn(
              ex,
              [&]() -> asio::awaitable<void> {
                got = co_await reader.next(std::chrono::seconds(60));
                done = true;
              },
              asio::detached);
          co_await test::sleep_ms(100);  // most likely waiting by now (if not, it reads it)
          (void)co_await eng.send("w-4", "go", 1);
          while (!done) co_await test::sleep_ms(5);
          REQUIRE(got);
          CHECK(got->value == std::string(size, c));
          CHECK(got->offset == (c == 'x' ? 0 : 1));
        }
        const int n = co_await h.result<int>();
        CHECK(n == size);
      },
      slow_polls);
}

TEST_CASE("streams: export and import carry a stream and its close, retention deletes it",
          "[streams]") {
  const auto schema = test::fresh_schema("streams_carry");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const workflow_handle h = co_await eng.start("writer", "w-5", 2);
    (void)co_await eng.send("w-5", "go", 1);
    const int closed_at = co_await h.result<int>();
    CHECK(closed_at == 2);
    const store st(schema);
    auto c = co_await eng.pool().acquire();
    const auto doc = co_await store::fetch_one(*c, st.admin_export("w-5", false));
    REQUIRE(doc);
    const auto json = nlohmann::json::parse(doc->json);
    const auto& streamed = json.at("workflows").at(0).at("streams");
    REQUIRE(streamed.size() == 3);
    CHECK(streamed[2].at("closes") == true);
    const std::optional<std::string> copy_id = "w-5-copy";
    const auto imported =
        co_await store::fetch_one(*c, st.admin_import(doc->json, copy_id, "imported"));
    REQUIRE(imported);
    CHECK(imported->workflows == 1);
    auto r = eng.read_stream<std::string>("w-5-copy", "tokens");
    const auto values = co_await read_all(r, std::chrono::seconds(60));
    REQUIRE(values.size() == 2);
    CHECK(values[1].value == "t1");
    CHECK(r.ended() == stream_end::closed);
    // Retention deletes the rows with the workflow.
    const auto deleted = co_await store::fetch(*c, st.workflows_delete_finished(0, 100));
    CHECK(deleted.size() == 2);
    const long left =
        co_await test::scalar<long>(eng, "SELECT count(*) FROM " + q(schema) + ".streams");
    CHECK(left == 0);
  });
}

TEST_CASE("streams: bad input to read_stream gets a clear error and reads nothing", "[streams]") {
  const auto schema = test::fresh_schema("streams_bad");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    CHECK_THROWS_WITH(eng.read_stream<int>("w", "k", -1),
                      Catch::Contains("the offset -1 is negative"));
    CHECK_THROWS_AS(eng.read_stream<int>("w", std::string("k\0x", 3)), invalid_text);
    CHECK_THROWS_AS(eng.read_stream<int>(std::string("w\0x", 3), "k"), invalid_text);
    auto nobody = eng.read_stream<int>("nobody", "k");
    const auto refused = co_await test::error_of<durable::error>(nobody.next());
    REQUIRE(refused);
    CHECK_THAT(*refused, Catch::Contains("workflow 'nobody' does not exist"));
    co_return;
  });
}

TEST_CASE("streams: the test kit's crash at every step leaves each value once",
          "[streams][testing]") {
  durable::testing::harness h;
  h.register_workflow("unclosed", &unclosed_wf);
  durable::testing::crash_options o;
  o.after_case = [](const durable::testing::harness& run, const durable::testing::crash_case&) {
    const auto [values, closed] = run.read_stream<int>("unclosed-under-test", "numbers");
    if (values != std::vector<int>{0, 1, 2, 3})
      throw std::runtime_error("the stream holds " + std::to_string(values.size()) + " values");
    if (closed) throw std::runtime_error("the stream is closed");
  };
  const auto r = durable::testing::check_crashes(h, o, "unclosed", 4);
  INFO(r.summary());
  CHECK(r.ok());
  CHECK(r.status == "succeeded");
  CHECK(r.cases.size() >= 8);  // a crash after and before each of the 4 rows, and the end
}

}  // namespace stream_cases
