// The web console's request parameters (src/console/request.hpp), without a server: what a page
// may ask for is checked before anything reaches the database. The console itself is tested
// in a real browser over a real database (console/test_browser.py, ctest label browser).
#include <catch2/catch.hpp>

#include "console/auth.hpp"
#include "console/request.hpp"

using durable::console_detail::bad_request;
using durable::console_detail::host_allowed;
using durable::console_detail::list_filter_of;
using durable::console_detail::list_page;
using durable::console_detail::params;
using durable::console_detail::relative_age;

TEST_CASE("console: only the loopback names, the listen address and allowed hosts are served") {
  const std::vector<std::string> none;
  CHECK(host_allowed("127.0.0.1:8080", "127.0.0.1", none));
  CHECK(host_allowed("localhost:8080", "127.0.0.1", none));
  CHECK(host_allowed("LocalHost", "127.0.0.1", none));
  CHECK(host_allowed("[::1]:8080", "::1", none));
  CHECK(host_allowed("10.0.0.5:8080", "10.0.0.5", none));
  // DNS rebinding: a page of evil.example resolved to 127.0.0.1 sends its own name.
  CHECK_FALSE(host_allowed("evil.example:8080", "127.0.0.1", none));
  CHECK_FALSE(host_allowed("", "127.0.0.1", none));
  CHECK_FALSE(host_allowed("[::1", "127.0.0.1", none));
  CHECK_FALSE(host_allowed("localhost.evil.example", "127.0.0.1", none));
  CHECK_FALSE(host_allowed("[::1]evil", "::1", none));  // after "]" only a port
  CHECK_FALSE(host_allowed("localhost:80x", "127.0.0.1", none));
  CHECK_FALSE(host_allowed("::1", "127.0.0.1", none));   // a Host header brackets IPv6
  CHECK(host_allowed("localhost:", "127.0.0.1", none));  // an empty port is allowed (RFC 3986)
  const std::vector<std::string> proxy{"durable.example.com"};
  CHECK(host_allowed("durable.example.com", "127.0.0.1", proxy));
  CHECK(host_allowed("durable.example.com:443", "127.0.0.1", proxy));
  CHECK_FALSE(host_allowed("other.example.com", "127.0.0.1", proxy));
  // Allowed entries are read as Host headers are: any case, with a port, IPv6 with or without
  // brackets.
  const std::vector<std::string> written{"Durable.Example.com:443", "[fd00::1]", "fd00::2"};
  CHECK(host_allowed("durable.example.COM", "127.0.0.1", written));
  CHECK(host_allowed("[fd00::1]:8080", "127.0.0.1", written));
  CHECK(host_allowed("[FD00::2]", "127.0.0.1", written));
  CHECK_FALSE(host_allowed("[fd00::3]", "127.0.0.1", written));
  const std::vector<std::string> any{"*"};
  CHECK(host_allowed("anything", "127.0.0.1", any));
}

TEST_CASE("console: relative ages are seconds, minutes, hours or days") {
  CHECK(relative_age("90s") == 90.0);
  CHECK(relative_age("15m") == 900.0);
  CHECK(relative_age("2h") == 7200.0);
  CHECK(relative_age("7d") == 604800.0);
  CHECK_FALSE(relative_age("2026-12-01T00:00:00Z").has_value());
  CHECK_FALSE(relative_age("h").has_value());
  CHECK_FALSE(relative_age("-5m").has_value());
  CHECK(relative_age("1.5h") == 5400.0);
  CHECK(relative_age("500ms") == 0.5);
  CHECK(relative_age("1w") == 604800.0);
  CHECK_FALSE(relative_age("30").has_value());  // a plain number could be a time: a unit is needed
  CHECK_FALSE(relative_age("5x").has_value());
  CHECK_FALSE(relative_age("inf").has_value());
  CHECK(durable::parse_duration("30", true) == 30.0);  // the program's options: seconds
}

TEST_CASE("console: the workflow list's filter comes from the page's parameters") {
  const params p{{"status", "failed,dead_letter"},
                 {"name", "charge"},
                 {"queue", ""},
                 {"id_prefix", "nightly@"},
                 {"since", "2h"},
                 {"until", "2026-12-01T00:00:00Z"},
                 {"limit", "25"},
                 {"cursor", "2026-12-01T10:00:00.5+00:00|order|7"}};
  const auto f = list_filter_of(p, 500);
  CHECK(f.statuses == std::vector<std::string>{"failed", "dead_letter"});
  CHECK(f.name == std::optional<std::string>("charge"));
  CHECK_FALSE(f.queue.has_value());  // empty: any
  CHECK(f.id_prefix == std::optional<std::string>("nightly@"));
  CHECK(f.since_s == std::optional<double>(7200.0));
  CHECK_FALSE(f.since_at.has_value());
  CHECK(f.until_at == std::optional<std::string>("2026-12-01T00:00:00Z"));
  CHECK(f.limit == 25);
  // The id may hold '|': the cursor splits at the first one (timestamps have none).
  CHECK(f.after_created_at == std::optional<std::string>("2026-12-01T10:00:00.5+00:00"));
  CHECK(f.after_id == std::optional<std::string>("order|7"));
  CHECK(list_filter_of(params{}, 500).limit == 50);
}

TEST_CASE("console: a page goes on after its last row, or from where a stopped search ended") {
  using ojson = nlohmann::ordered_json;
  auto row = [](const char* at, const char* id) { return ojson{{"id", id}, {"created_at", at}}; };
  auto edge = [](const char* at, const char* id) {
    return ojson{{"scanned_to", {{"created_at", at}, {"id", id}}}};
  };
  // limit + 1 rows: a full page; the next starts after its last row, an edge or not.
  auto full = list_page({row("t5", "e"), row("t4", "d"), row("t3", "c"), edge("t2", "x")}, 2, 100);
  CHECK(full["rows"].size() == 2);
  CHECK(full["rows"][1]["id"] == "d");
  CHECK(full["next"] == "t4|d");
  CHECK(full["searched"].is_null());
  // Fewer rows and an edge: every match down to the edge is here; the next page starts there.
  auto stopped = list_page({row("t5", "e"), edge("t2", "x")}, 2, 100);
  CHECK(stopped["rows"].size() == 1);
  CHECK(stopped["next"] == "t2|x");
  CHECK(stopped["searched"] == ojson{{"to", "t2"}, {"rows", 100}});
  auto none = list_page({edge("t2", "x|y")}, 2, 100);
  CHECK(none["rows"].empty());
  CHECK(none["next"] == "t2|x|y");  // list_filter_of splits at the first '|'
  // Fewer rows, no edge: the last page.
  auto last = list_page({row("t5", "e")}, 2, 100);
  CHECK(last["next"].is_null());
  CHECK(last["searched"].is_null());
  CHECK(list_page({}, 2, 100)["rows"].empty());
}

TEST_CASE("console: a filter that cannot be is refused with what to send instead") {
  auto refused = [](const params& p) -> std::string {
    try {
      (void)list_filter_of(p, 500);
    } catch (const bad_request& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(refused({{"status", "done"}}),
             Catch::Contains("unknown status 'done'") && Catch::Contains("dead_letter"));
  CHECK_THAT(refused({{"limit", "0"}}), Catch::Contains("from 1 to 500"));
  CHECK_THAT(refused({{"limit", "501"}}), Catch::Contains("from 1 to 500"));
  CHECK_THAT(refused({{"limit", "ten"}}), Catch::Contains("'ten'"));
  CHECK_THAT(refused({{"cursor", "no-bar"}}), Catch::Contains("not a cursor"));
  CHECK_THAT(refused({{"cursor", "|id"}}), Catch::Contains("not a cursor"));
}

TEST_CASE("console: query strings are read as browsers and curl send them, the docs' forms too") {
  using durable::console_detail::parse_query;
  // The forms docs/console.md shows, literally: a list of statuses, a timestamp, a child's id
  // with '/', a schedule run's id with '@' and ':'.
  auto p = parse_query("status=failed,dead_letter&since=2026-12-04T20:00:00Z&limit=20");
  CHECK(p == params{{"status", "failed,dead_letter"},
                    {"since", "2026-12-04T20:00:00Z"},
                    {"limit", "20"}});
  CHECK(list_filter_of(p, 500).statuses == std::vector<std::string>{"failed", "dead_letter"});
  CHECK(parse_query("id=order-7/child-1")["id"] == "order-7/child-1");
  CHECK(parse_query("id=nightly@2026-12-04T03:00:00Z")["id"] == "nightly@2026-12-04T03:00:00Z");
  // A schedule run's id as curl and a browser's address bar send it: its '+' is itself.
  CHECK(parse_query("id=nightly@trigger:2026-12-06T00:21:35.238+01:00")["id"] ==
        "nightly@trigger:2026-12-06T00:21:35.238+01:00");
  // What browsers leave unencoded, and what they encode (encodeURIComponent: a space as %20).
  CHECK(parse_query("id=a[1]{x}|y^z!$'()*;~")["id"] == "a[1]{x}|y^z!$'()*;~");
  CHECK(parse_query("id=a+b%2Bc%20d")["id"] == "a+b+c d");
  CHECK(parse_query("id=%E2%9C%93")["id"] == "\xE2\x9C\x93");
  CHECK(parse_query("id=x=y")["id"] == "x=y");
  CHECK(parse_query("a&&b=&c=1") == params{{"a", ""}, {"b", ""}, {"c", "1"}});
  CHECK(parse_query("id=first&id=second")["id"] == "first");
  CHECK(parse_query("").empty());
  // A '%' without two hex digits, a NUL, bytes that are not UTF-8: refused, with why.
  auto refused = [](std::string_view q) -> std::string {
    try {
      (void)parse_query(q);
    } catch (const bad_request& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(refused("id=50%"), Catch::Contains("not followed by two hex digits"));
  CHECK_THAT(refused("id=%zz"), Catch::Contains("not followed by two hex digits"));
  CHECK_THAT(refused("id=ship-1100%00x"),
             Catch::Contains("the parameter 'id' holds a NUL character (at byte 9)") &&
                 Catch::Contains("nothing was done"));
  CHECK_THAT(refused("id%00=1"), Catch::Contains("the parameter 'id\\x00' holds a NUL"));
  CHECK_THAT(refused("id=%ff"), Catch::Contains("is not UTF-8 text"));
}

TEST_CASE("console: every string of a POST's body is checked for a NUL, by its path") {
  using durable::console_detail::check_body_text;
  using ojson = nlohmann::ordered_json;
  auto refused = [](const ojson& body) -> std::string {
    try {
      check_body_text(body);
    } catch (const bad_request& e) {
      return e.what();
    }
    return "";
  };
  CHECK(refused(ojson::parse(R"({"action":"cancel","id":"ship-1"})")).empty());
  CHECK_THAT(refused(ojson::parse(R"({"action":"cancel","id":"ship-1100\u0000x"})")),
             Catch::Contains("the field 'id' holds a NUL character (at byte 9)"));
  CHECK_THAT(refused(ojson::parse(R"({"action":"bulk","filter":{"id_prefix":"a\u0000"}})")),
             Catch::Contains("the field 'filter.id_prefix' holds a NUL"));
  CHECK_THAT(refused(ojson::parse(R"({"value":{"list":[1,"x\u0000"]}})")),
             Catch::Contains("the field 'value.list[1]' holds a NUL"));
  CHECK_THAT(refused(ojson::parse(R"({"k\u0000":1})")),
             Catch::Contains("the name of the field 'k"));
  // A body nested deeper than any action needs is refused before it costs anything.
  std::string deep = R"({"value":)";
  for (int i = 0; i < 100000; ++i) deep += "[";
  for (int i = 0; i < 100000; ++i) deep += "]";
  deep += "}";
  CHECK_THAT(refused(ojson::parse(deep)), Catch::Contains("nests more than 32 levels"));
  std::string fine = R"({"value":)" + std::string(30, '[') + std::string(30, ']') + "}";
  CHECK(refused(ojson::parse(fine)).empty());
}

TEST_CASE("console: a database that does not answer is said in words, never where it is") {
  using durable::console_detail::not_answering;
  namespace pg = durable::pg;
  const auto limit = std::chrono::milliseconds(2000);
  const std::string where = "connection to server at \"db.internal\" (10.1.2.3), port 6543 failed";
  const auto said = [&](const std::exception& e) {
    const auto s = not_answering(e, limit);
    for (const char* secret : {"db.internal", "10.1.2.3", "6543", "app_user", "orders_db"})
      CHECK_THAT(s, !Catch::Contains(secret));
    CHECK_THAT(s, Catch::StartsWith("the database is not answering: "));
    return s;
  };
  CHECK_THAT(said(pg::statement_timeout("durable_admin_stats", limit, false)),
             Catch::Contains("no answer within 2000 ms"));
  CHECK_THAT(said(pg::sql_error("57014", "canceling statement due to statement timeout", "x")),
             Catch::Contains("no answer within 2000 ms"));
  CHECK_THAT(said(pg::connection_error(where + ": Connection refused")),
             Catch::Contains("refused the connection"));
  CHECK_THAT(said(pg::connection_error(where + ": timeout expired")), Catch::Contains("timed out"));
  CHECK_THAT(said(pg::connection_error(
                 where + ": FATAL:  password authentication failed for user \"app_user\"")),
             Catch::Contains("credentials"));
  CHECK_THAT(said(pg::connection_error(where + ": FATAL:  database \"orders_db\" does not exist")),
             Catch::Contains("does not exist"));
  CHECK_THAT(said(pg::connection_lost("server closed the connection unexpectedly")),
             Catch::Contains("was lost"));
}

TEST_CASE("console: a token file's token is trimmed and must resist guessing") {
  using durable::console_detail::checked_token;
  CHECK(checked_token("  0123456789abcdef-xyz\n") == "0123456789abcdef-xyz");
  CHECK_THROWS_WITH(checked_token("short\n"), Catch::Contains("use at least 16"));
  CHECK_THROWS_WITH(checked_token(""), Catch::Contains("has 0 characters"));
  CHECK_THROWS_WITH(checked_token("0123456789 abcdef"), Catch::Contains("space"));
  CHECK_THROWS_WITH(checked_token(std::string("0123456789abcdef\x01")),
                    Catch::Contains("control character"));
}

TEST_CASE("console: secrets compare equal only when equal, whatever their lengths") {
  using durable::console_detail::same_secret;
  CHECK(same_secret("0123456789abcdef", "0123456789abcdef"));
  CHECK_FALSE(same_secret("0123456789abcdef", "0123456789abcdeg"));
  CHECK_FALSE(same_secret("0123456789abcdef", "0123456789abcde"));
  CHECK_FALSE(same_secret("0123456789abcde", "0123456789abcdef"));
  CHECK_FALSE(same_secret("", "x"));
  CHECK(same_secret("", ""));
}

TEST_CASE("console: the session cookie is found among others by its exact name") {
  using durable::console_detail::cookie_value;
  CHECK(cookie_value("a=1; durable_session_8080=abc; b=2", "durable_session_8080") == "abc");
  CHECK(cookie_value("durable_session_8080=abc", "durable_session_8080") == "abc");
  CHECK_FALSE(cookie_value("durable_session_80800=abc", "durable_session_8080"));
  CHECK_FALSE(cookie_value("xdurable_session_8080=abc", "durable_session_8080"));
  CHECK_FALSE(cookie_value("", "durable_session_8080"));
  CHECK_FALSE(cookie_value("durable_session_8080", "durable_session_8080"));
  CHECK(cookie_value("durable_session_8080=", "durable_session_8080") == "");
}

TEST_CASE("console: a POST's Origin must be the console's own") {
  using durable::console_detail::origin_matches;
  CHECK(origin_matches("http://127.0.0.1:8080", "127.0.0.1:8080"));
  CHECK(origin_matches("http://LOCALHOST:8080", "localhost:8080"));
  CHECK(origin_matches("https://durable.example.com", "durable.example.com"));
  CHECK_FALSE(origin_matches("http://evil.example", "127.0.0.1:8080"));
  CHECK_FALSE(origin_matches("http://127.0.0.1:8081", "127.0.0.1:8080"));  // another port
  CHECK_FALSE(origin_matches("null", "127.0.0.1:8080"));  // a sandboxed frame, a file
  CHECK_FALSE(origin_matches("http://127.0.0.1:8080/x", "127.0.0.1:8080"));
  CHECK_FALSE(origin_matches("ftp://127.0.0.1:8080", "127.0.0.1:8080"));
  CHECK_FALSE(origin_matches("http://127.0.0.1:8080", ""));
}

TEST_CASE("console: sessions are random, end when idle, and are bounded in number") {
  using durable::console_detail::sessions;
  using namespace std::chrono_literals;
  const auto t0 = sessions::clock::now();
  sessions s(60s, 2);
  const auto a = s.open("alice", t0);
  const auto b = s.open("bob", t0 + 1s);
  CHECK(a.size() == 64);
  CHECK(a != b);
  const auto* sa = s.find(a, t0 + 2s);
  REQUIRE(sa);
  CHECK(sa->who == "alice");
  CHECK(sa->csrf.size() == 64);
  CHECK(sa->csrf != a);
  CHECK_FALSE(s.find("not-a-session", t0 + 2s));
  // A third session ends the least recently used one (bob; alice was used at t0 + 2s).
  const auto c = s.open("carol", t0 + 3s);
  CHECK(s.size() == 2);
  CHECK_FALSE(s.find(b, t0 + 3s));
  CHECK(s.find(a, t0 + 3s));
  // Idle for more than a minute: gone.
  CHECK_FALSE(s.find(c, t0 + 70s));
  s.close(a);
  CHECK(s.size() == 0);
}
