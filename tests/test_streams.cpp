// Durable streams (issue 40): ctx.write_stream appends once per step (a replay appends
// nothing), ctx.close_stream ends the readers, engine::read_stream yields every value once and
// in order from an offset, woken by the notification of each append, and ends at the close or
// when the workflow finishes. A fork keeps the values of the steps it copies; the test kit's
// crash at every step leaves each value once.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include <asio/detached.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "durable/testing.hpp"
#include "support/processes.hpp"
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

/// `n` values "v0".."v<n-1>" to "s", each made by a step that takes a few milliseconds, then the
/// close. Before value 10 it waits for the message "go-on": a process killed then is certainly
/// in the middle of the stream.
asio::awaitable<int> slow_writer_wf(context& ctx, int n) {
  for (int i = 0; i < n; ++i) {
    if (i == 10) (void)co_await ctx.recv<int>("go-on");
    const std::string value = co_await ctx.step("make", [i]() -> asio::awaitable<std::string> {
      co_await test::sleep_ms(20);
      co_return "v" + std::to_string(i);
    });
    (void)co_await ctx.write_stream("s", value);
  }
  co_return static_cast<int>(co_await ctx.close_stream("s"));
}

/// `n` values 0..n-1 to "many", then the close.
asio::awaitable<int> many_wf(context& ctx, int n) {
  for (int i = 0; i < n; ++i) (void)co_await ctx.write_stream("many", i);
  co_return static_cast<int>(co_await ctx.close_stream("many"));
}

/// Two values and the close, then it waits for "go" (it runs on after its stream is closed).
asio::awaitable<int> closes_early_wf(context& ctx, int) {
  (void)co_await ctx.write_stream("s", 10);
  (void)co_await ctx.write_stream("s", 11);
  (void)co_await ctx.close_stream("s");
  const auto go = co_await ctx.recv<int>("go");
  co_return go.value_or(0);
}

/// Three writes of one stream at once (ctx.all), then the close; returns their offsets.
asio::awaitable<std::vector<std::int64_t>> fan_wf(context& ctx, int) {
  auto a = ctx.write_stream("fan", 1);
  auto b = ctx.write_stream("fan", 2);
  auto c = ctx.write_stream("fan", 3);
  auto [x, y, z] = co_await ctx.all(std::move(a), std::move(b), std::move(c));
  (void)co_await ctx.close_stream("fan");
  co_return std::vector<std::int64_t>{x, y, z};
}

/// A write as a branch of ctx.any: refused, the workflow parked.
asio::awaitable<int> any_wf(context& ctx, int) {
  auto write = ctx.write_stream("s", 1);
  auto nap = ctx.sleep_for(std::chrono::milliseconds(1));
  (void)co_await ctx.any(std::move(write), std::move(nap));
  co_return 0;
}

void add_workflows(engine& eng) {
  eng.register_workflow("writer", &writer_wf);
  eng.register_workflow("unclosed", &unclosed_wf);
  eng.register_workflow("late", &late_wf);
  eng.register_workflow("large", &large_wf);
  eng.register_workflow("slow_writer", &slow_writer_wf);
  eng.register_workflow("many", &many_wf);
  eng.register_workflow("closes_early", &closes_early_wf);
  eng.register_workflow("fan", &fan_wf);
  eng.register_workflow("any", &any_wf);
}

/// A process of its own: an executor of slow_writer (lease 1 s, heartbeat 100 ms). The first
/// one starts w-kill with `n` values and runs it until it is killed; the second takes it over
/// and waits for its result (exit 0 when it closed the stream at `n`).
pid_t spawn_writer(const std::string& schema, const std::string& executor, bool first, int n) {
  return test::spawn_process("writer " + executor, [&] {
    int code = 1;
    test::run([&]() -> asio::awaitable<void> {
      auto o = test::preset::live(schema, executor);
      o.lease_timeout = std::chrono::milliseconds(1000);
      engine eng(co_await asio::this_coro::executor, o);
      add_workflows(eng);
      (void)co_await eng.open();
      if (first) {
        (void)co_await eng.start("slow_writer", "w-kill", n);
        co_await test::sleep_ms(600000);
      } else {
        (void)co_await eng.send("w-kill", "go-on", 1);
        const workflow_handle handle = eng.handle("w-kill");
        const int closed_at = co_await handle.result<int>();
        code = closed_at == n ? 0 : 2;
      }
    }());
    return code;
  });
}

/// A process of its own that reads stream "s" of w-kill from `from` and writes each value to
/// `path` as "<offset> <value>", a line each, flushed at once; exit 0 once the stream is closed.
pid_t spawn_reader(const std::string& schema, const std::string& path, std::int64_t from) {
  return test::spawn_process("reader", [&] {
    int code = 1;
    std::FILE* out = std::fopen(path.c_str(), "w");
    if (!out) throw std::runtime_error("cannot write " + path);
    test::run([&]() -> asio::awaitable<void> {
      engine eng(co_await asio::this_coro::executor, test::preset::live(schema, "reader"));
      (void)co_await eng.open();
      auto r = eng.read_stream<std::string>("w-kill", "s", from);
      for (;;) {
        std::optional<stream_value<std::string>> v = co_await r.next();
        if (!v) break;
        std::fprintf(out, "%lld %s\n", static_cast<long long>(v->offset), v->value.c_str());
        std::fflush(out);
      }
      code = r.ended() == stream_end::closed ? 0 : 3;
    }());
    return code;
  });
}

std::vector<std::pair<long long, std::string>> read_lines(const std::string& path) {
  std::vector<std::pair<long long, std::string>> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    const auto space = text.find(' ');
    if (space == std::string::npos) break;  // a line cut by the kill
    lines.emplace_back(std::stoll(text.substr(0, space)), text.substr(space + 1));
  }
  return lines;
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

TEST_CASE("streams: more values than one read, a reader past the close, writes from ctx.all",
          "[streams]") {
  const auto schema = test::fresh_schema("streams_more");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // 150 values: two reads, the second with the close. ended() stays open until the last
    // value was yielded.
    const workflow_handle h = co_await eng.start("many", "w-6", 150);
    const int closed_at = co_await h.result<int>();
    CHECK(closed_at == 150);
    auto r = eng.read_stream<int>("w-6", "many");
    int got = 0;
    bool open_throughout = true;
    for (;;) {
      std::optional<stream_value<int>> v = co_await r.next(std::chrono::seconds(60));
      if (!v) break;
      if (v->value != got || v->offset != got) break;
      if (r.ended() != stream_end::open) open_throughout = false;
      ++got;
    }
    CHECK(got == 150);
    CHECK(open_throughout);
    CHECK(r.ended() == stream_end::closed);

    // A reader that starts at or past the close of a workflow still running ends at once.
    (void)co_await eng.start("closes_early", "w-7", 0);
    co_await test::wait_rows(eng, "w-7", 3);  // two values and the close
    for (const std::int64_t from : {std::int64_t(2), std::int64_t(5)}) {
      auto past = eng.read_stream<int>("w-7", "s", from);
      const auto none = co_await past.next(std::chrono::seconds(60));
      CHECK_FALSE(none);
      CHECK(past.ended() == stream_end::closed);
      CHECK(past.offset() == from);
    }
    (void)co_await eng.send("w-7", "go", 1);

    // Three writes at once: one position each, no value lost or doubled.
    const workflow_handle fan = co_await eng.start("fan", "w-8", 0);
    const auto offsets = co_await fan.result<std::vector<std::int64_t>>();
    auto sorted = offsets;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::vector<std::int64_t>{0, 1, 2});
    auto fr = eng.read_stream<int>("w-8", "fan");
    const auto fanned = co_await read_all(fr, std::chrono::seconds(60));
    REQUIRE(fanned.size() == 3);
    for (int i = 0; i < 3; ++i) CHECK(fanned[offsets[i]].value == i + 1);
    CHECK(fr.ended() == stream_end::closed);
    // One write of the stream at a time: each committed in a transaction of its own (three
    // sent at once would share the group committer's, and its now()).
    const long distinct =
        co_await test::scalar<long>(eng,
                                    "SELECT count(DISTINCT completed_at) FROM " + q(schema) +
                                        ".steps WHERE workflow_id = $1 AND kind = 'stream'",
                                    std::string("w-8"));
    CHECK(distinct == 3);

    // A write as a branch of ctx.any parks the workflow, with the reason.
    (void)co_await eng.start("any", "w-9", 0);
    const auto parked = co_await test::wait_status(eng, "w-9", "parked");
    CHECK_THAT(parked.reason, Catch::Contains("write_stream 's') is a branch of ctx.any"));

    // next() with a callback as its completion token.
    auto cb = eng.read_stream<int>("w-6", "many", 149);
    std::optional<stream_value<int>> called;
    bool done = false;
    cb.next([&](std::exception_ptr e, std::optional<stream_value<int>> v) {
      if (!e) called = std::move(v);
      done = true;
    });
    while (!done) co_await test::sleep_ms(5);
    REQUIRE(called);
    CHECK(called->offset == 149);
    CHECK(called->value == 149);
  });
}

TEST_CASE("streams: the test kit's write after the close fails as the engine's does", "[streams]") {
  const auto schema = test::fresh_schema("streams_kit_late");
  std::string engine_says;
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    const workflow_handle h = co_await eng.start("late", "w-3", 0);
    engine_says = co_await h.result<std::string>();
  });
  durable::testing::harness kit;
  kit.register_workflow("late", &late_wf);
  kit.start("late", "w-3", 0);
  kit.run();
  CHECK(kit.result<std::string>("w-3") == engine_says);
  const auto [values, closed] = kit.read_stream<std::string>("w-3", "s");
  CHECK(values == std::vector<std::string>{"a"});
  CHECK(closed);
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

TEST_CASE("streams: another process reads each value once, in order, across SIGKILLs",
          "[streams][process]") {
  const auto schema = test::fresh_schema("streams_kill");
  const int n = 40;
  const std::string first_path = "/tmp/" + schema + "-r1", second_path = "/tmp/" + schema + "-r2";
  // The schema exists before the processes race to create it.
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema));
    (void)co_await eng.migrate();
  }());
  const auto count = [&](const std::string& table) {
    return test::run([&]() -> asio::awaitable<long> {
      auto c = co_await durable::pg::connection::connect(test::conninfo());
      const auto r =
          co_await c->exec("SELECT count(*) FROM " + q(schema) + "." + table + " WHERE " +
                           (table == "streams" ? "workflow_id" : "id") + " = 'w-kill'");
      co_return r[0].get<long>(0);
    }());
  };
  const pid_t writer = spawn_writer(schema, "exec-a", true, n);
  // A reader of a workflow that does not exist yet is refused: it starts once w-kill does.
  for (int i = 0; i < 6000 && count("workflows") == 0; ++i) ::usleep(10000);
  const pid_t reader = spawn_reader(schema, first_path, 0);
  // The reader is killed once it has written 5 values, the writer once 10 are in the stream
  // (it then waits for "go-on", which only its taker sends): both before the stream is closed.
  bool reader_killed = false, writer_killed = false;
  for (int i = 0; i < 6000 && !(reader_killed && writer_killed); ++i) {
    if (!reader_killed && read_lines(first_path).size() >= 5) {
      ::kill(reader, SIGKILL);
      reader_killed = true;
    }
    if (!writer_killed) {
      const long written = count("streams");
      if (written >= 10) {
        ::kill(writer, SIGKILL);
        writer_killed = true;
      }
    }
    if (!(reader_killed && writer_killed)) ::usleep(10000);
  }
  REQUIRE(reader_killed);
  REQUIRE(writer_killed);
  CHECK(test::wait_exit(reader, 10) == 128 + SIGKILL);
  CHECK(test::wait_exit(writer, 10) == 128 + SIGKILL);
  // A new reader goes on from the offset after the last value the first one handled.
  const auto before = read_lines(first_path);
  REQUIRE_FALSE(before.empty());
  const pid_t again = spawn_reader(schema, second_path, before.back().first + 1);
  const pid_t taker = spawn_writer(schema, "exec-b", false, n);
  CHECK(test::wait_exit(taker, 120) == 0);
  CHECK(test::wait_exit(again, 120) == 0);
  auto seen = before;
  for (auto& l : read_lines(second_path)) seen.push_back(std::move(l));
  REQUIRE(seen.size() == static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    CHECK(seen[i].first == i);
    CHECK(seen[i].second == "v" + std::to_string(i));
  }
  // Written once each, whatever the kill interrupted: n values and the close.
  const long rows = count("streams");
  CHECK(rows == n + 1);
  std::remove(first_path.c_str());
  std::remove(second_path.c_str());
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
