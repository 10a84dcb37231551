// The `durable` command-line program against the real server, issue 18 and after: database text
// reaches the terminal escaped, no message shows a password, a mebibyte value from standard
// input, show and list agree on steps, schedules, and the console's sparse filter statements.
// Running the program: support/cli.hpp.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include "support/cli.hpp"

using namespace cli_cases;

// ---- issue 18: hostile text, secrets, big messages, what show and list say

namespace {

/// Whether a terminal shown `text` would only show it: no C0 control but the newline, no DEL,
/// no C1 control (U+0080..U+009F), no bidirectional control, no character that shows nothing
/// (U+200B..U+200D, U+2060..U+2065, U+FEFF), only valid UTF-8.
bool terminal_safe(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
    if (c < 0x80) continue;
    const std::size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    if (n == 0 || i + n > text.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) return false;
    const auto b1 = static_cast<unsigned char>(text[i + 1]);
    if (c == 0xc2 && b1 < 0xa0) return false;   // C1
    if (c == 0xd8 && b1 == 0x9c) return false;  // U+061C
    if (n == 3 && c == 0xe2) {
      const auto b2 = static_cast<unsigned char>(text[i + 2]);
      // U+200B..U+200F (zero-width, direction marks), U+2028..U+202E
      if (b1 == 0x80 && ((b2 >= 0x8b && b2 <= 0x8f) || (b2 >= 0xa8 && b2 <= 0xae))) return false;
      if (b1 == 0x81 && b2 >= 0xa0 && b2 <= 0xa9) return false;  // U+2060..U+2069
    }
    if (n == 3 && c == 0xef && b1 == 0xbb && static_cast<unsigned char>(text[i + 2]) == 0xbf)
      return false;  // U+FEFF
    i += n - 1;
  }
  return true;
}

asio::awaitable<void> sql_in(std::string_view schema_view, std::string_view sql_view) {
  const std::string schema(schema_view), sql(sql_view);
  engine eng(co_await asio::this_coro::executor, test::options(schema));
  auto c = co_await eng.pool().acquire();
  (void)co_await c->exec(sql);
}

}  // namespace

TEST_CASE("cli: database text reaches the terminal escaped, the list footer cursor pastes back",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_hostile");
  // A title change (OSC ... BEL), a colour (CSI), a C1 CSI, bidi overrides, DEL.
  const std::string title = "t \x1b]0;pwned\x07 \x1b[31mred";
  const std::string bidi =
      "b \xe2\x80\xae"
      "fdp.exe \xc2\x9b"
      "2J \xe2\x81\xa6x\xe2\x80\x8b\xef\xbb\xbf";
  const std::string queue = "q\x7f\xe2\x80\x8f";
  const std::string topic = "go\x1b[2J";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.enqueue({.queue = queue}, "order", title, std::string("x"));
    (void)co_await eng.enqueue({.queue = queue}, "order", bidi, std::string("x"));
    (void)co_await eng.send(title, topic, 1);
  });

  auto table = cli_in(schema, {"list"});
  CHECK(table.status == 0);
  CHECK(terminal_safe(table.out));
  CHECK(contains(table.out, "\\x1b]0;pwned\\x07"));
  CHECK(contains(table.out, "\\u202e"));
  auto as_json = cli_in(schema, {"list", "--json"});
  CHECK(terminal_safe(as_json.out));
  const json listed = as_json.parsed();
  std::vector<std::string> ids;
  for (const auto& w : listed["workflows"]) ids.push_back(w["id"]);
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::string>{bidi, title});  // the JSON values are exact

  // The footer: nothing raw, and the cursor it prints, pasted into a shell, is the next page.
  auto page = cli_in(schema, {"list", "--limit", "1", "--json"}).parsed();
  REQUIRE(page["workflows"].size() == 1);
  const std::string first = page["workflows"][0]["id"];
  auto footer = cli_in(schema, {"list", "--limit", "1"});
  CHECK(footer.status == 0);
  CHECK(terminal_safe(footer.out));
  CHECK(terminal_safe(footer.err));
  const auto at = footer.err.find("--after ");
  REQUIRE(at != std::string::npos);
  std::string word = footer.err.substr(at + 8);
  word = word.substr(0, std::min(word.find("; the id holds"), word.rfind(')')));
  CHECK(word.starts_with("$'"));
  const std::string line =
      "exec \"$0\" --schema " + schema + " list --limit 1 --json --after " + word;
  auto next = run_program({"/bin/bash", "-c", line, DURABLE_CLI_PATH}, nullptr);
  CHECK(next.status == 0);
  const json next_page = next.parsed();
  REQUIRE(next_page["workflows"].size() == 1);
  CHECK(next_page["workflows"][0]["id"] == (first == title ? bidi : title));

  // show: fields, tables (the inbox's topic), --json.
  auto shown = cli_in(schema, {"show", title});
  CHECK(shown.status == 0);
  CHECK(terminal_safe(shown.out));
  CHECK(contains(shown.out, "go\\x1b[2J"));
  auto shown_json = cli_in(schema, {"show", bidi, "--json"});
  CHECK(terminal_safe(shown_json.out));
  CHECK(shown_json.parsed()["workflow"]["id"] == bidi);

  // Messages: an unknown id, a value the server refuses (not UTF-8), CLI11's own errors.
  for (const std::string& bad : {std::string("x\x1b[31m\xc2\x9b"), std::string("\xff\xfe")}) {
    auto r = cli_in(schema, {"show", bad});
    CHECK(r.status != 0);
    CHECK(terminal_safe(r.err));
  }
  auto bad_status = cli_in(schema, {"list", "--status", "\x1b]0;x\x07"});
  CHECK(bad_status.status == 2);
  CHECK(terminal_safe(bad_status.err));
  auto bad_cursor = cli_in(schema, {"list", "--after", bidi});
  CHECK(bad_cursor.status == 2);
  CHECK(terminal_safe(bad_cursor.err));
}

TEST_CASE("cli: no message shows a password, wherever the URL or conninfo is put", "[cli]") {
  struct secret_case {
    std::vector<std::string> args;
    std::string secret;
  };
  const std::vector<secret_case> cases = {
      {{"list", "postgresql://u:hunter2@h/db"}, "hunter2"},
      {{"list", "--limit", "postgresql://u:hunter3@h/db"}, "hunter3"},
      {{"list", "postgres://u:p%40ss@h/db"}, "p%40ss"},
      {{"list", "postgresql://u:se/cret@h/db"}, "se/cret"},
      {{"list", "host=h password=hunter4 dbname=x"}, "hunter4"},
      {{"show", "a", "postgresql://u:hunter5@h/db"}, "hunter5"},
      {{"list", "--after", "postgresql://u:hunter6@h/db"}, "hunter6"},
      {{"--database", "postgresql://u:hunter7@127.0.0.1:1/x", "stats"}, "hunter7"},
      {{"--database", "host=127.0.0.1 port=1 password=hunter8", "stats"}, "hunter8"},
  };
  for (const auto& c : cases) {
    auto r = cli(c.args);
    INFO(c.args.back() << ": " << r.err);
    CHECK(r.status >= 2);
    CHECK(!r.err.empty());
    CHECK(!contains(r.err, c.secret));
    CHECK(!contains(r.out, c.secret));
  }
  // A URL in the place of an argument: the message says where it goes.
  auto misplaced = cli({"list", "postgresql://u:hunter2@h/db"});
  CHECK(contains(misplaced.err, "postgresql://u:***@h/db"));
  CHECK(contains(misplaced.err, "--database"));
  CHECK(!contains(cli({"list", "postgres://u:p%40ss@h/db"}).err, "p@ss"));
}

TEST_CASE("cli: send reads a mebibyte value from standard input or a file", "[cli]") {
  const std::string schema = test::fresh_schema("cli_send_big");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    std::vector<workflow_handle> waiting;
    const std::vector<std::string> wids{"big-stdin", "big-file", "big-dash"};
    for (const std::string& wid : wids) {
      auto h = co_await eng.start("inbox", wid);
      waiting.push_back(h);
      co_await test::wait_rows(eng, wid, 1);
    }
    // Over the system's argument limit (about 128 KiB for one argument): 1 MiB.
    const std::string big = "\"" + std::string(1 << 20, 'x') + "\"";
    auto piped = cli_in_with(schema, {"send", "big-stdin", "go", "-"}, big);
    CHECK(piped.status == 0);
    CHECK(contains(piped.out, "sent to 'big-stdin'"));

    char path[] = "/tmp/durable-cli-value-XXXXXX";
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::close(fd);
    const std::string object = R"({"blob":")" + std::string(1 << 20, 'y') + "\"}\n";
    std::ofstream(path, std::ios::binary) << object;
    auto from_file = cli_in(schema, {"send", "big-file", "go", "--file", path});
    CHECK(from_file.status == 0);
    const std::string text = "two\nlines";
    auto dash = cli_in_with(schema, {"send", "big-dash", "go", "--file", "-", "--text"}, text);
    CHECK(dash.status == 0);

    // What is not JSON, a file that is not there, both or neither: refused, nothing sent.
    auto not_json = cli_in_with(schema, {"send", "big-dash", "go", "-"}, std::string("{oops"));
    CHECK(not_json.status == 2);
    CHECK(contains(not_json.err, "standard input is not JSON"));
    std::ofstream(path, std::ios::binary) << "[1, 2";
    auto bad_file = cli_in(schema, {"send", "big-dash", "go", "--file", path});
    CHECK(bad_file.status == 2);
    CHECK(contains(bad_file.err, "not JSON"));
    auto missing = cli_in(schema, {"send", "big-dash", "go", "--file", "/nonexistent/value"});
    CHECK(missing.status == 2);
    CHECK(contains(missing.err, "cannot read"));
    auto both = cli_in(schema, {"send", "big-dash", "go", "1", "--file", path});
    CHECK(both.status == 2);
    auto neither = cli_in(schema, {"send", "big-dash", "go"});
    CHECK(neither.status == 2);
    CHECK(contains(neither.err, "--file"));
    ::unlink(path);

    const std::string got_stdin = co_await waiting[0].result<std::string>();
    CHECK(got_stdin == big);
    const std::string got_file = co_await waiting[1].result<std::string>();
    CHECK(json::parse(got_file) == json::parse(object));
    const std::string got_dash = co_await waiting[2].result<std::string>();
    CHECK(json::parse(got_dash) == text);
  });
}

TEST_CASE("cli: show and list count steps alike, name a reset step, keep a past error aside",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_retry_view");
  ck = {};
  const std::string id = "o-retried";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    (void)co_await eng.start("order", id, std::string("r"));
    co_await wait_status(eng, id, "dead_letter");
  });
  // One journal row (reserve) and one step failed for good (charge): two steps, both ways.
  auto listed = cli_in(schema, {"list", "--json"}).parsed();
  REQUIRE(listed["workflows"].size() == 1);
  CHECK(listed["workflows"][0]["steps"] == 2);
  auto shown = cli_in(schema, {"show", id});
  CHECK(contains(shown.out, "steps (2: 1 journaled, 1 with attempts but no journal row yet)"));
  auto detail = cli_in(schema, {"show", id, "--json"}).parsed();
  REQUIRE(detail["steps"].size() == 2);
  CHECK(detail["steps"][0]["journaled"] == true);
  CHECK(detail["steps"][1]["journaled"] == false);

  // No executor alive (the one above is gone: its heartbeat made old): retry says nothing runs.
  test::run(sql_in(schema, "UPDATE " + test::q(schema) +
                               ".executors SET heartbeat_at = now() - interval '1 hour'"));
  auto retried = cli_in(schema, {"retry", id});
  CHECK(retried.status == 0);
  CHECK(contains(retried.out,
                 "no executor is alive now, so nothing runs until one that "
                 "registers 'order' starts"));
  auto resume_unknown = cli_in(schema, {"resume", "nobody"});
  CHECK(resume_unknown.status == 1);
  auto after_retry = cli_in(schema, {"show", id, "--json"}).parsed();
  REQUIRE(after_retry["steps"].size() == 2);
  CHECK(after_retry["steps"][1]["status"] == "reset");
  auto after_table = cli_in(schema, {"show", id});
  CHECK(contains(after_table.out, "reset"));
  CHECK(!contains(after_table.out, " due "));

  // An executor registering 'order' runs it; it succeeds. The old error is no longer "last".
  ck.charge_fixed = true;
  auto o = test::options(schema, "exec-cli-2");
  o.poll_interval = 100ms;
  test::with_open_engine(o, &register_cli, [&](engine& eng) -> asio::awaitable<void> {
    co_await wait_status(eng, id, "succeeded");
  });
  auto done_table = cli_in(schema, {"show", id});
  CHECK(done_table.status == 0);
  CHECK(!contains(done_table.out, "\nlast error"));
  CHECK(contains(done_table.out, "\nearlier error"));
  CHECK(contains(done_table.out, "not current: the workflow is succeeded"));
  auto done_list = cli_in(schema, {"list", "--json"}).parsed();
  CHECK(done_list["workflows"][0]["reason"].is_null());
  CHECK(done_list["workflows"][0]["steps"] == 2);
  CHECK(contains(cli_in(schema, {"show", id}).out, "steps (2)"));
}

TEST_CASE("cli: schedules are listed, shown, paused, resumed, triggered, backfilled and deleted",
          "[cli][schedule]") {
  const std::string schema = test::fresh_schema("cli_sched");
  auto o = test::options(schema, "exec-cli");
  o.fire_schedules = false;  // the slots below are the CLI's doing only
  test::with_open_engine(o, &register_cli, [&](engine& eng) -> asio::awaitable<void> {
    schedule_options s;
    s.id = "nightly";
    s.cron = "0 3 * * *";
    s.time_zone = "Europe/Berlin";
    s.workflow = "order";
    const std::string argument = "night";  // named: GCC 12
    co_await eng.schedule(s, argument);
  });
  CHECK(contains(cli_in(schema, {"schedules"}).out, "nightly"));
  auto listed = cli_in(schema, {"schedules", "--json"}).parsed();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["cron"] == "0 3 * * *");
  CHECK(listed[0]["time_zone"] == "Europe/Berlin");
  CHECK(listed[0]["paused"] == false);
  // 03:00 in Berlin is 01:00 or 02:00 UTC.
  const std::string next = listed[0]["next_fire_at"].get<std::string>();
  CHECK((contains(next, " 02:00:00") || contains(next, " 01:00:00")));

  auto show = cli_in(schema, {"schedule", "show", "nightly"});
  CHECK(show.status == 0);
  CHECK(contains(show.out, "workflow_name"));
  CHECK(contains(show.out, "[\"night\"]"));

  CHECK(cli_in(schema, {"schedule", "pause", "nightly"}).status == 0);
  CHECK(cli_in(schema, {"schedule", "show", "nightly", "--json"}).parsed()["paused"] == true);
  auto resumed = cli_in(schema, {"schedule", "resume", "nightly", "--json"}).parsed();
  CHECK(resumed["done"] == true);
  CHECK(cli_in(schema, {"schedule", "show", "nightly", "--json"}).parsed()["paused"] == false);

  auto triggered = cli_in(schema, {"schedule", "trigger", "nightly", "--json"}).parsed();
  CHECK(triggered["workflow_id"].get<std::string>().starts_with("nightly@trigger:"));

  // Three nights of November, twice: three workflows.
  auto filled = cli_in(schema, {"schedule", "backfill", "nightly", "--from", "2026-11-01", "--to",
                                "2026-11-03T23:00:00+01:00", "--json"})
                    .parsed();
  CHECK(filled["started"] == 3);
  CHECK(cli_in(schema, {"schedule", "backfill", "nightly", "--from", "2026-11-01", "--to",
                        "2026-11-03T23:00:00+01:00", "--json"})
            .parsed()["started"] == 0);
  auto shown = cli_in(schema, {"show", "nightly@2026-11-02T03:00:00+01:00", "--json"});
  CHECK(shown.status == 0);
  // A schedule's runs, by id prefix (a plain prefix: '_' and '%' are no wildcards).
  CHECK(
      cli_in(schema, {"list", "--id-prefix", "nightly@", "--json"}).parsed()["workflows"].size() ==
      4);
  auto one_night = cli_in(schema, {"list", "--id-prefix", "nightly@2026-11-02", "--json"}).parsed();
  REQUIRE(one_night["workflows"].size() == 1);
  CHECK(one_night["workflows"][0]["id"] == "nightly@2026-11-02T03:00:00+01:00");
  CHECK(cli_in(schema, {"list", "--id-prefix", "night_", "--json"}).parsed()["workflows"].empty());
  auto refused = cli_in(schema, {"schedule", "backfill", "nightly", "--from", "2026-01-01", "--to",
                                 "2026-12-31", "--limit", "10"});
  CHECK(refused.status != 0);
  CHECK(contains(refused.err, "more than 10 slots"));
  auto bad_time = cli_in(
      schema, {"schedule", "backfill", "nightly", "--from", "yesterday", "--to", "2026-12-31"});
  CHECK(bad_time.status == 2);
  CHECK(contains(bad_time.err, "--from"));

  auto unknown = cli_in(schema, {"schedule", "pause", "nope"});
  CHECK(unknown.status == 1);
  CHECK(contains(unknown.err, "no schedule has the id 'nope'"));
  CHECK(cli_in(schema, {"schedule", "frobnicate", "nightly"}).status == 2);

  CHECK(cli_in(schema, {"schedule", "delete", "nightly"}).status == 0);
  CHECK(contains(cli_in(schema, {"schedules"}).out, "no schedules"));
  CHECK(cli_in(schema, {"list", "--json"}).parsed()["workflows"].size() == 4);  // they stay
}

namespace {

using list_filter = durable::store::list_filter;

// admin_list's rows for `f` (JSON objects, the last maybe {"scanned_to"}), as the console reads
// them.
asio::awaitable<std::vector<json>> listed(engine& eng, list_filter f) {
  auto c = co_await eng.pool().acquire();
  auto q = detail::store_of(eng).admin_list(f);
  auto rows = co_await durable::store::fetch(*c, std::move(q));
  std::vector<json> out;
  for (auto& r : rows) out.push_back(json::parse(r.json));
  co_return out;
}

asio::awaitable<std::vector<std::string>> ids_of(engine& eng, std::string_view sql_view) {
  const std::string sql(sql_view);
  auto c = co_await eng.pool().acquire();
  auto r = co_await c->exec(sql);
  std::vector<std::string> out;
  for (int i = 0; i < r.rows(); ++i) out.push_back(r[i].get<std::string>(0));
  co_return out;
}

}  // namespace

TEST_CASE("console statements: a sparse filter read a few rows at a time finds every match once",
          "[cli]") {
  const std::string schema = test::fresh_schema("list_scan");
  test::run(migrated(schema));
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema));
    const auto t = test::q(schema) + ".workflows";
    // 60 workflows, one a second; every 7th is a 'refund' (the sparse name), in three statuses;
    // two refunds share a created_at, so that the id breaks the tie.
    auto setup = "INSERT INTO " + t +
                 " (id, name, status, inputs, created_at) SELECT 'w-' || lpad(g::text, 3, '0'), "
                 "CASE WHEN g % 7 = 0 THEN 'refund' ELSE 'charge' END, "
                 "(ARRAY['succeeded', 'failed', 'pending'])[1 + g % 3], '[]', "
                 "timestamptz '2026-12-01 00:00:00+00' + make_interval(secs => "
                 "CASE WHEN g = 14 THEN 21 ELSE g END) FROM generate_series(1, 60) g";
    co_await sql_in(schema, setup);
    const auto truth =
        "SELECT id FROM " + t + " WHERE name = 'refund' ORDER BY created_at DESC, id DESC";
    const auto want = co_await ids_of(eng, truth);
    CHECK(want.size() == 8);

    // Pages of 2 rows with at most 3 rows read of each status, followed as the console does
    // (console_detail::list_page): after the last row of a full page, or from the edge.
    list_filter f;
    f.name = "refund";
    f.scan = 3;
    std::vector<std::string> seen;
    int edges = 0, requests = 0;
    for (; requests < 100; ++requests) {
      f.limit = 3;  // 2 shown, one more to know there is a next page
      const auto got = co_await listed(eng, f);
      std::vector<json> shown(got.begin(), got.end());
      json edge;
      if (!shown.empty() && shown.back().contains("scanned_to")) {
        edge = shown.back()["scanned_to"];
        shown.pop_back();
        ++edges;
      }
      // Rows arriving meanwhile, newer than every page: they never show up in later pages.
      auto arrive = "INSERT INTO " + t + " (id, name, status, inputs, created_at) VALUES ('new-" +
                    std::to_string(requests) +
                    "', 'refund', 'failed', '[]', '2026-12-03 00:00:00+00')";
      co_await sql_in(schema, arrive);
      const json* next = nullptr;
      if (shown.size() > 2) {
        shown.resize(2);
        next = &shown.back();
      } else if (!edge.is_null()) {
        next = &edge;
      }
      for (const auto& r : shown) seen.push_back(r["id"].get<std::string>());
      if (!next) break;
      f.after_created_at = (*next)["created_at"].get<std::string>();
      f.after_id = (*next)["id"].get<std::string>();
    }
    CHECK(seen == want);
    CHECK(edges > 0);

    // Unbounded (the CLI): the same rows in one request, no edge.
    list_filter all;
    all.name = "refund";
    all.until_at = "2026-12-02T00:00:00Z";
    all.limit = 100;
    const auto whole = co_await listed(eng, all);
    std::vector<std::string> whole_ids;
    for (const auto& r : whole) {
      CHECK_FALSE(r.contains("scanned_to"));
      whole_ids.push_back(r.value("id", ""));
    }
    CHECK(whole_ids == want);

    // A status filter is read from the index of its status alone: of the 20 failed workflows
    // (58, 55, 52, 49, ...) 4 are read, and 49 is a refund.
    list_filter failed;
    failed.statuses = {"failed", "failed"};  // named twice, read once
    failed.name = "refund";
    failed.until_at = "2026-12-02T00:00:00Z";
    failed.scan = 4;
    const auto some = co_await listed(eng, failed);
    const auto failed_want = co_await ids_of(
        eng, "SELECT id FROM " + t +
                 " WHERE name = 'refund' AND status = 'failed' AND created_at < '2026-12-02' "
                 "ORDER BY created_at DESC, id DESC");
    const bool stopped = !some.empty() && some.back().contains("scanned_to");
    CHECK(stopped);  // 20 failed workflows, 3 read
    std::vector<std::string> some_ids;
    for (const auto& r : some)
      if (r.contains("id")) some_ids.push_back(r["id"].get<std::string>());
    // What it returns is the newest part of the answer, and nothing older than the edge.
    CHECK(some_ids == std::vector<std::string>{"w-049"});
    CHECK(failed_want.size() == 3);  // 49, 28, 7: the other two are past the edge

    // A status of exactly `scan` rows is read whole: no edge (one more row is read to tell).
    list_filter exact;
    exact.statuses = {"failed"};
    exact.until_at = "2026-12-02T00:00:00Z";
    exact.scan = 20;
    const auto whole_status = co_await listed(eng, exact);
    const bool no_edge = whole_status.empty() || !whole_status.back().contains("scanned_to");
    CHECK(no_edge);

    // The bulk set: whole with a large enough bound (by id), refused (an edge first) without.
    list_filter bulk;
    bulk.name = "refund";
    bulk.until_at = "2026-12-02T00:00:00Z";
    bulk.limit = 10001;
    bulk.scan = 1000;
    auto c = co_await eng.pool().acquire();
    auto whole_q = detail::store_of(eng).admin_ids(bulk);
    const auto set = co_await durable::store::fetch(*c, std::move(whole_q));
    std::vector<std::string> set_ids;
    bool any_edge = false;
    for (const auto& r : set) {
      set_ids.push_back(r.id);
      any_edge = any_edge || r.edge;
    }
    auto sorted = want;
    std::sort(sorted.begin(), sorted.end());
    CHECK(set_ids == sorted);
    CHECK_FALSE(any_edge);
    bulk.scan.reset();  // unbounded: the same set, no edge
    auto all_q = detail::store_of(eng).admin_ids(bulk);
    const auto unbounded = co_await durable::store::fetch(*c, std::move(all_q));
    CHECK(unbounded.size() == set.size());
    bulk.scan = 3;
    auto cut_q = detail::store_of(eng).admin_ids(bulk);
    const auto cut = co_await durable::store::fetch(*c, std::move(cut_q));
    const bool cut_first = !cut.empty() && cut.front().edge;
    CHECK(cut_first);
  }());
}

TEST_CASE("console statements: a list finds workflows by change time, a retrying step and text",
          "[cli]") {
  const std::string schema = test::fresh_schema("list_find");
  test::run(migrated(schema));
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema));
    const auto s = test::q(schema);
    co_await sql_in(
        schema,
        "INSERT INTO " + s +
            ".workflows (id, name, status, inputs, last_error, status_reason, updated_at) VALUES "
            "('a-1', 'order', 'failed', '[\"order ORD-4711\", 3]', 'card declined', NULL, "
            " now() - interval '30 minutes'), "
            "('a-2', 'order', 'failed', '[]', 'Gateway TIMEOUT', NULL, now() - interval '2 "
            "hours'), "
            "('a-3', 'order', 'running', '[]', NULL, NULL, now()), "
            "('a-4', 'order', 'running', '[]', NULL, NULL, now()), "
            "('a-5', 'order', 'running', '[]', NULL, NULL, now()), "
            "('a-6', 'order', 'cancelled', '[]', NULL, 'cancelled by Ops', now()), "
            "('a-7', 'order', 'pending', '[\"100%\"]', NULL, NULL, now())");
    // a-3 retries step 0; a-4's step 0 retried, then succeeded (its row); a-5's last attempt of
    // step 0 failed for good; a-6 was cancelled while step 0 retried.
    co_await sql_in(schema,
                    "INSERT INTO " + s +
                        ".step_attempts (workflow_id, seq, attempt, name, kind, outcome, epoch) "
                        "VALUES ('a-3', 0, 1, 'charge', 'step', 'retrying', 0), "
                        "('a-4', 0, 1, 'charge', 'step', 'retrying', 0), "
                        "('a-5', 0, 1, 'charge', 'step', 'retrying', 0), "
                        "('a-5', 0, 2, 'charge', 'step', 'failed', 0), "
                        "('a-6', 0, 1, 'charge', 'step', 'retrying', 0)");
    co_await sql_in(schema,
                    "INSERT INTO " + s +
                        ".steps (workflow_id, seq, name, kind, status, attempts, epoch) VALUES "
                        "('a-4', 0, 'charge', 'step', 'succeeded', 2, 0)");
    const auto found = [&](list_filter f) -> asio::awaitable<std::vector<std::string>> {
      f.limit = 100;
      f.scan = 1000;
      std::vector<std::string> ids;
      const auto rows = co_await listed(eng, f);
      for (const auto& r : rows) ids.push_back(r.value("id", "edge"));
      std::sort(ids.begin(), ids.end());
      // The bulk's set is the same one.
      auto c = co_await eng.pool().acquire();
      auto q = detail::store_of(eng).admin_ids(f);
      std::vector<std::string> bulk;
      const auto set = co_await durable::store::fetch(*c, std::move(q));
      for (const auto& r : set) bulk.push_back(r.id);
      if (bulk != ids) throw std::runtime_error("admin_ids and admin_list disagree");
      co_return ids;
    };
    using ids = std::vector<std::string>;
    ids got;
    list_filter by_text;
    by_text.text = "ord-4711";  // in the inputs, in another case
    got = co_await found(by_text);
    CHECK(got == ids{"a-1"});
    by_text.text = "timeout";  // in the last error
    got = co_await found(by_text);
    CHECK(got == ids{"a-2"});
    by_text.text = "BY OPS";  // in the status reason
    got = co_await found(by_text);
    CHECK(got == ids{"a-6"});
    by_text.text = "a-7";  // in the id
    got = co_await found(by_text);
    CHECK(got == ids{"a-7"});
    by_text.text = "0%";  // '%' and '_' are no wildcards
    got = co_await found(by_text);
    CHECK(got == ids{"a-7"});
    by_text.text = "_";
    got = co_await found(by_text);
    CHECK(got.empty());

    list_filter changed;  // the overview's "failed, last hour"
    changed.statuses = {"failed", "dead_letter"};
    changed.changed_since_s = 3600;
    got = co_await found(changed);
    CHECK(got == ids{"a-1"});
    changed.changed_since_s = 86400;
    got = co_await found(changed);
    CHECK(got == ids{"a-1", "a-2"});

    list_filter retrying;
    retrying.retrying = true;
    got = co_await found(retrying);
    CHECK(got == ids{"a-3", "a-6"});
    retrying.statuses = {"pending", "running", "sleeping"};  // the overview's card
    got = co_await found(retrying);
    CHECK(got == ids{"a-3"});

    // The overview's count of retrying steps counts the unfinished workflows' only.
    auto c = co_await eng.pool().acquire();
    auto stats_q = detail::store_of(eng).admin_stats(5.0);
    const auto stats = co_await durable::store::fetch_one(*c, std::move(stats_q));
    REQUIRE(stats);
    CHECK(json::parse(stats->json)["steps_retrying"] == 1);
  }());
}

TEST_CASE("console statements: why a workflow waits, in words, the same in every view", "[cli]") {
  const std::string schema = test::fresh_schema("why_wait");
  test::run(migrated(schema));
  test::run([&]() -> asio::awaitable<void> {
    engine eng(co_await asio::this_coro::executor, test::options(schema));
    const auto s = test::q(schema);
    // A live executor that runs 'order' from queues 'default' and 'slow'; a dead one (its last
    // heartbeat 47 minutes ago, its lease 10 s).
    co_await sql_in(schema, "INSERT INTO " + s +
                                ".executors (id, host, pid, heartbeat_at, lease_ms, workflows, "
                                "queues) VALUES ('live-1', 'h', 1, now(), 10000, '{order}', "
                                "'{default,slow}'), ('dead-1', 'h', 2, now() - interval '47 "
                                "minutes', 10000, '{order}', '{default}')");
    co_await sql_in(schema, "INSERT INTO " + s + ".queues (name, paused) VALUES ('emails', true)");
    // One that shut down gracefully (executor_release: its heartbeat '-infinity') and left a
    // workflow running; a wait for an event of a workflow with a non-ASCII id (its length in
    // wait_for is in bytes); a wait for an event of a workflow that does not exist, no timeout.
    co_await sql_in(schema, "INSERT INTO " + s +
                                ".executors (id, host, pid, heartbeat_at, lease_ms) VALUES "
                                "('gone-1', 'h', 3, '-infinity', 10000)");
    co_await sql_in(schema, "INSERT INTO " + s +
                                ".workflows (id, name, status, inputs, executor_id, wait_for) "
                                "VALUES ('run-released', 'order', 'running', '[]', 'gone-1', "
                                "NULL), ('n\xc3\xa5p', 'order', 'sleeping', '[]', NULL, NULL), "
                                "('ev-utf', 'order', 'sleeping', '[]', NULL, "
                                "'event:4:n\xc3\xa5p:st\xc3\xa5ge'), "
                                "('ev-none', 'order', 'sleeping', '[]', NULL, "
                                "'event:8:ghost-wf:stage')");
    co_await sql_in(
        schema,
        "INSERT INTO " + s +
            ".workflows (id, name, status, inputs, executor_id, queue, wait_for, wake_at, "
            "status_reason) VALUES "
            "('run-live', 'order', 'running', '[]', 'live-1', NULL, NULL, NULL, NULL), "
            "('run-dead', 'order', 'running', '[]', 'dead-1', NULL, NULL, NULL, NULL), "
            "('run-orphan', 'invoice', 'running', '[]', 'dead-1', NULL, NULL, NULL, NULL), "
            "('q-paused', 'order', 'pending', '[]', NULL, 'emails', NULL, NULL, NULL), "
            "('q-unserved', 'order', 'pending', '[]', NULL, 'bulk', NULL, NULL, NULL), "
            "('q-room', 'order', 'pending', '[]', NULL, 'slow', NULL, NULL, NULL), "
            "('q-later', 'order', 'pending', '[]', NULL, 'slow', NULL, now() + interval '1 h', "
            "NULL), "
            "('msg', 'order', 'sleeping', '[]', NULL, NULL, 'msg:approval', NULL, NULL), "
            "('nap', 'order', 'sleeping', '[]', NULL, NULL, NULL, now() + interval '1 day', NULL), "
            "('overslept', 'invoice', 'sleeping', '[]', NULL, NULL, NULL, "
            "now() - interval '5 minutes', NULL), "
            "('parent', 'order', 'sleeping', '[]', NULL, NULL, 'child:kid', NULL, NULL), "
            "('kid', 'order', 'dead_letter', '[]', NULL, NULL, NULL, NULL, 'step 0 failed'), "
            "('ev', 'order', 'sleeping', '[]', NULL, NULL, 'event:3:nap:stage', "
            "now() + interval '1 hour', NULL), "
            "('retry', 'order', 'sleeping', '[]', NULL, NULL, NULL, now() + interval '10 min', "
            "NULL), "
            "('stopped', 'order', 'parked', '[]', NULL, NULL, NULL, NULL, 'the code changed'), "
            "('done', 'order', 'succeeded', '[]', NULL, NULL, NULL, NULL, NULL)");
    co_await sql_in(schema, "INSERT INTO " + s +
                                ".messages (workflow_id, topic, payload) VALUES "
                                "('msg', 'aproval', '1')");
    // ev's wait has a timeout: its deadline row, the latest of its journal. (Its wake_at is only
    // when the engine looks again.)
    co_await sql_in(schema, "INSERT INTO " + s +
                                ".steps (workflow_id, seq, name, kind, status, output, attempts, "
                                "epoch) VALUES ('ev', 0, 'stage', 'deadline', 'succeeded', "
                                "to_jsonb(extract(epoch FROM now() + interval '2 hours')), 1, 0)");
    // Step 3 of 'retry' failed three times (its policy allows 5), the next attempt in 10 min.
    co_await sql_in(schema, "INSERT INTO " + s +
                                ".step_attempts (workflow_id, seq, attempt, name, kind, outcome, "
                                "epoch, error, next_attempt_at, max_attempts) VALUES "
                                "('retry', 3, 1, 'charge', 'step', 'retrying', 0, "
                                "'{\"message\": \"503\"}', now(), 5), "
                                "('retry', 3, 2, 'charge', 'step', 'retrying', 0, "
                                "'{\"message\": \"503\"}', now(), 5), "
                                "('retry', 3, 3, 'charge', 'step', 'retrying', 0, "
                                "'{\"message\": \"gateway 503\"}', now() + interval '10 min', 5)");
    auto c = co_await eng.pool().acquire();
    auto got = co_await c->exec("SELECT id, kind, blocked::text, reason FROM " + s +
                                ".waiting ORDER BY id");
    std::map<std::string, std::tuple<std::string, bool, std::string>> why;
    for (int i = 0; i < got.rows(); ++i)
      why[got[i].get<std::string>(0)] = {got[i].get<std::string>(1),
                                         got[i].get<std::string>(2) == "true",
                                         got[i].get<std::string>(3)};
    const auto kind = [&](const std::string& id) { return std::get<0>(why[id]); };
    const auto blocked = [&](const std::string& id) { return std::get<1>(why[id]); };
    const auto reason = [&](const std::string& id) { return std::get<2>(why[id]); };
    CHECK(why.size() == 19);  // every one that has not ended, and no other
    CHECK(why.count("done") == 0);

    CHECK(kind("run-live") == "running");
    CHECK(contains(reason("run-live"), "running on executor 'live-1' (last heartbeat "));
    CHECK(kind("run-dead") == "takeover");
    // (47 min, or more on a machine that took over a minute to get here)
    CHECK(contains(reason("run-dead"), "running on executor 'dead-1', last heartbeat 4"));
    CHECK(contains(reason("run-dead"), " min ago — its lease ended at "));
    CHECK(contains(reason("run-dead"), "its lease ended at "));
    CHECK(contains(reason("run-dead"), "the next live executor takes it over"));
    CHECK_FALSE(blocked("run-dead"));
    CHECK(contains(reason("run-orphan"), "no live executor runs the workflow 'invoice'"));
    CHECK(reason("run-released") ==
          "running on executor 'gone-1', which shut down and released "
          "it: the next live executor takes it over");
    CHECK(reason("ev-utf") ==
          "waiting for event 'st\xc3\xa5ge' of workflow 'n\xc3\xa5p', which is "
          "sleeping");
    CHECK(reason("ev-none") ==
          "waiting for event 'stage' of workflow 'ghost-wf', which does not exist (yet)");
    CHECK_FALSE(blocked("ev-none"));
    CHECK(blocked("run-orphan"));

    CHECK(reason("q-paused") == "pending: queue 'emails' is paused (durable queue resume emails)");
    CHECK(blocked("q-paused"));
    CHECK(contains(reason("q-unserved"), "no live executor serves queue 'bulk'"));
    CHECK(blocked("q-unserved"));
    CHECK(contains(reason("q-room"), "waiting for room in queue 'slow'"));
    CHECK_FALSE(blocked("q-room"));
    CHECK(contains(reason("q-later"), "pending: delayed until "));

    CHECK(contains(reason("msg"), "waiting for a message on topic 'approval' since "));
    CHECK(contains(reason("msg"), "(1 unconsumed message on topic 'aproval')"));
    CHECK_FALSE(contains(reason("msg"), "until"));  // no timeout
    CHECK(contains(reason("nap"), "sleeping until "));
    CHECK_FALSE(blocked("nap"));
    CHECK(contains(reason("overslept"),
                   "but not woken: no live executor runs the workflow "
                   "'invoice'"));
    CHECK(blocked("overslept"));
    CHECK(reason("parent") ==
          "waiting for child 'kid', which is dead_letter: it waits until the "
          "child is resumed, retried or cancelled");
    CHECK(blocked("parent"));
    CHECK(contains(reason("ev"), "waiting for event 'stage' of workflow 'nap' until "));
    CHECK(contains(reason("ev"), "(its timeout), which is sleeping"));
    CHECK(kind("retry") == "retrying");
    CHECK(contains(reason("retry"), "retrying step 3 'charge': attempt 4 of 5 at "));
    CHECK(contains(reason("retry"), "(attempt 3 failed: gateway 503)"));
    CHECK(contains(reason("stopped"), "parked: the code changed"));
    CHECK(contains(reason("kid"), "dead-lettered: step 0 failed"));

    // The same words in the stuck and queued views, durable show's and the list's.
    auto stuck = co_await c->exec("SELECT id, reason FROM " + s + ".stuck ORDER BY id");
    std::vector<std::string> stuck_ids;
    for (int i = 0; i < stuck.rows(); ++i) {
      stuck_ids.push_back(stuck[i].get<std::string>(0));
      CHECK(stuck[i].get<std::string>(1) == reason(stuck_ids.back()));
    }
    CHECK(stuck_ids == std::vector<std::string>{"overslept", "parent", "q-paused", "q-unserved",
                                                "run-dead", "run-orphan", "run-released"});
    auto queued = co_await c->exec("SELECT reason FROM " + s + ".queued WHERE id = 'q-paused'");
    CHECK(queued[0].get<std::string>(0) == reason("q-paused"));
    auto show_q = detail::store_of(eng).admin_show("parent");
    const auto shown = co_await durable::store::fetch_one(*c, std::move(show_q));
    REQUIRE(shown);
    const json w = json::parse(shown->json)["waiting"];
    CHECK(w["reason"] == reason("parent"));
    CHECK(w["blocked"] == true);
    CHECK(w["kind"] == "child");
    list_filter f;
    f.statuses = {"pending"};
    const auto rows = co_await listed(eng, f);
    for (const auto& r : rows) {
      CHECK(r["reason"] == reason(r["id"].get<std::string>()));
      CHECK(r["blocked"] == blocked(r["id"].get<std::string>()));
    }
    CHECK(rows.size() == 4);
  }());
  // durable stuck lists the stuck view, longest first, with the same words; durable show says it.
  auto stuck = cli_in(schema, {"stuck", "--json"}).parsed();
  REQUIRE(stuck.size() == 7);
  for (const auto& r : stuck) CHECK(r["reason"].is_string());
  auto table = cli_in(schema, {"stuck"});
  CHECK(table.status == 0);
  CHECK(contains(table.out, "no live executor serves queue 'bulk'"));
  auto shown = cli_in(schema, {"show", "parent"});
  CHECK(contains(shown.out, "stuck"));
  CHECK(contains(shown.out, "waiting for child 'kid', which is dead_letter"));
  auto later = cli_in(schema, {"show", "q-later"});
  CHECK(contains(later.out, "pending: delayed until"));
  CHECK(contains(later.out, "moves at"));
}
