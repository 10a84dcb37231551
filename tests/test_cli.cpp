// The `durable` command-line program (issue 11), run as a real process against the real server:
// every verb's table output, --json, exit status, bad arguments and unknown ids, and the on-call
// story of docs/operations.md (find a failed workflow, see why, fix, retry) with the program alone.
// Hostile text, secrets, large values, schedules and the console's statements:
// test_cli_text.cpp. Running the program: support/cli.hpp.
//
// Note: Catch's assertion macros never contain co_await here (GCC 12 miscompiles that).
#include <catch2/catch.hpp>

#include <sstream>

#include "support/cli.hpp"

using namespace cli_cases;

TEST_CASE("cli: a dead-lettered workflow is found, explained, fixed and retried with the CLI alone",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_story");
  ck = {};
  const std::string id = "order 17 \"rush\"";
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("order", id, std::string("o17"));
    co_await wait_status(eng, id, "dead_letter");

    // Find it.
    auto found = cli_in(schema, {"list", "--status", "dead_letter,failed"});
    CHECK(found.status == 0);
    CHECK(contains(found.out, "ID"));
    CHECK(contains(found.out, id));
    CHECK(contains(found.out, "dead_letter"));
    auto found_json = cli_in(schema, {"list", "--status", "dead_letter", "--json"}).parsed();
    REQUIRE(found_json["workflows"].size() == 1);
    CHECK(found_json["workflows"][0]["id"] == id);
    CHECK(found_json["workflows"][0]["name"] == "order");
    CHECK(found_json["next_offset"].is_null());

    // See why.
    auto shown = cli_in(schema, {"show", id});
    CHECK(shown.status == 0);
    CHECK(contains(shown.out, "dead_letter"));
    CHECK(contains(shown.out, "card declined"));
    CHECK(contains(shown.out, "charge"));
    CHECK(contains(shown.out, "history"));
    auto detail = cli_in(schema, {"show", id, "--json"}).parsed();
    CHECK(detail["workflow"]["status"] == "dead_letter");
    CHECK(detail["workflow"]["inputs"] == json::array({"o17"}));
    const json steps = detail["steps"];
    REQUIRE(steps.size() == 2);
    CHECK(steps[0]["name"] == "reserve");
    CHECK(steps[0]["status"] == "succeeded");
    CHECK(steps[0]["duration_ms"].is_number());
    CHECK(steps[1]["name"] == "charge");
    CHECK(steps[1]["status"] == "failed");
    CHECK(steps[1]["attempts"] == 2);
    CHECK(contains(steps[1]["last_error"].get<std::string>(), "card declined"));
    const json history = detail["history"];
    REQUIRE(history.size() >= 2);
    CHECK(history.back()["status"] == "dead_letter");

    // Retry before the fix: it fails again, for good, with a fresh count of attempts.
    // Then fix and retry: it succeeds.
    ck.charge_fixed = true;
    auto retried = cli_in(schema, {"retry", id});
    CHECK(retried.status == 0);
    CHECK(contains(retried.out, "retrying"));
    const std::string out = co_await h.result<std::string>();
    CHECK(out == "o17:paid");
    auto after = cli_in(schema, {"show", id, "--json"}).parsed();
    CHECK(after["workflow"]["status"] == "succeeded");
    CHECK(after["workflow"]["output"] == "o17:paid");
    CHECK(after["steps"].size() == 2);
    CHECK(after["steps"][1]["status"] == "succeeded");
    bool was_dead_letter = false;
    for (const auto& row : after["history"]) was_dead_letter |= row["status"] == "dead_letter";
    CHECK(was_dead_letter);
    CHECK(after["history"].back()["status"] == "succeeded");
    // Every attempt of the charge, oldest first: the two before the dead letter with their
    // error and times, the retry's reset, the attempt that succeeded.
    std::vector<std::string> outcomes;
    for (const auto& a : after["attempts"]) {
      CHECK(a["seq"] == 1);
      outcomes.push_back(a["outcome"]);
      if (a["outcome"] == "retrying" || a["outcome"] == "failed") {
        CHECK(contains(a["error"].get<std::string>(), "card declined"));
        CHECK(a["duration_ms"].get<double>() >= 0);
        CHECK(a["ended_at"].is_string());
      }
    }
    INFO(after["attempts"].dump());
    CHECK(outcomes == std::vector<std::string>{"retrying", "failed", "reset", "succeeded"});
    auto after_table = cli_in(schema, {"show", id});
    CHECK(contains(after_table.out, "attempts (4)"));
    CHECK(contains(after_table.out, "DURATION_MS"));

    // A second retry is refused: exit status 1, one line saying why.
    auto again = cli_in(schema, {"retry", id});
    CHECK(again.status == 1);
    CHECK(contains(again.err, "is succeeded"));
    CHECK(again.out.empty());
    // Unknown ids, for every verb that takes one.
    for (const char* verb : {"show", "cancel", "resume", "retry"}) {
      auto unknown = cli_in(schema, {verb, "no-such-workflow"});
      CHECK(unknown.status == 1);
      CHECK(contains(unknown.err, "no workflow has the id 'no-such-workflow'"));
    }
  });
}

TEST_CASE("cli: cancel, resume, send and fork steer a waiting workflow", "[cli]") {
  const std::string schema = test::fresh_schema("cli_steer");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // Started in a trace: show says which, and the fork below stays in it.
    const start_options traced{
        .timeout = {},
        .traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        .tracestate = "rojo=00f067aa0ba902b7"};
    auto h = co_await eng.start(traced, "inbox", "w1");
    co_await test::wait_rows(eng, "w1", 1);
    auto shown = cli_in(schema, {"show", "w1"});
    const auto field_of = [&shown](const std::string& key) {
      std::istringstream in(shown.out);
      for (std::string line; std::getline(in, line);)
        if (line.rfind(key + " ", 0) == 0)
          return line.substr(line.find_first_not_of(' ', key.size()));
      return std::string();
    };
    CHECK(field_of("trace") == "4bf92f3577b34da6a3ce929d0e0e4736");
    CHECK(field_of("traceparent") == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    CHECK(field_of("tracestate") == "rojo=00f067aa0ba902b7");

    auto cancelled = cli_in(schema, {"cancel", "w1", "--json"}).parsed();
    CHECK(cancelled["action"] == "cancel");
    CHECK(cancelled["done"] == true);
    co_await wait_status(eng, "w1", "cancelled");
    auto twice = cli_in(schema, {"cancel", "w1"});
    CHECK(twice.status == 1);
    CHECK(contains(twice.err, "is cancelled"));
    auto no_retry = cli_in(schema, {"retry", "w1"});
    CHECK(no_retry.status == 1);
    CHECK(contains(no_retry.err, "durable resume w1"));

    auto resumed = cli_in(schema, {"resume", "w1"});
    CHECK(resumed.status == 0);
    CHECK(contains(resumed.out, "1 executor is alive now; one that registers 'inbox' claims it"));
    auto not_json = cli_in(schema, {"send", "w1", "go", "{oops"});
    CHECK(not_json.status == 2);
    CHECK(contains(not_json.err, "--text"));
    auto huge = cli_in(schema, {"send", "w1", "go", "1e999"});
    CHECK(huge.status == 2);
    auto nowhere = cli_in(schema, {"send", "nobody", "go", "1"});
    CHECK(nowhere.status == 1);
    CHECK(contains(nowhere.err, "no workflow has the id 'nobody'"));
    auto sent = cli_in(schema, {"send", "w1", "go", R"({"approved":true})", "--key", "k1"});
    CHECK(sent.status == 0);
    CHECK(contains(sent.out, "sent to 'w1'"));
    auto dup = cli_in(schema, {"send", "w1", "go", "2", "--key", "k1", "--json"}).parsed();
    CHECK(dup["sent"] == false);
    const std::string out = co_await h.result<std::string>();
    CHECK(out == R"({"approved":true})");
    auto too_late = cli_in(schema, {"send", "w1", "go", "3"});
    CHECK(too_late.status == 1);
    CHECK(contains(too_late.err, "is succeeded"));

    // Fork the finished workflow from its recv (step 1): the new one waits for a message of its
    // own; --text sends a string as is.
    auto forked =
        cli_in(schema, {"fork", "w1", "--from-step", "1", "--id", "w1-again", "--json"}).parsed();
    CHECK(forked["new_id"] == "w1-again");
    CHECK(forked["from_step"] == 1);
    auto show_fork = cli_in(schema, {"show", "w1-again", "--json"}).parsed();
    CHECK(show_fork["workflow"]["forked_from"] == "w1");
    CHECK(show_fork["workflow"]["traceparent"] ==
          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    auto text = cli_in(schema, {"send", "w1-again", "go", "plain words", "--text"});
    CHECK(text.status == 0);
    auto fork_handle = eng.handle("w1-again");
    const std::string fork_out = co_await fork_handle.result<std::string>();
    CHECK(fork_out == R"("plain words")");
    auto taken = cli_in(schema, {"fork", "w1", "--from-step", "1", "--id", "w1-again"});
    CHECK(taken.status == 1);
    CHECK(contains(taken.err, "already taken"));
    auto fork_unknown = cli_in(schema, {"fork", "nope", "--from-step", "0"});
    CHECK(fork_unknown.status == 1);
    CHECK(contains(fork_unknown.err, "no workflow has this id"));
    auto fork_usage = cli_in(schema, {"fork", "w1"});
    CHECK(fork_usage.status == 2);
    CHECK(contains(fork_usage.err, "--from-step"));

    // Each action above left its audit row, through the program as through the console: done
    // or refused (exit status 1), with who ran it; bad usage (exit status 2) none.
    auto audit = cli_in(schema, {"audit", "--json", "--limit", "100"}).parsed();
    std::map<std::string, int> by;
    for (const auto& row : audit) {
      CHECK(row["via"] == "cli");
      CHECK_FALSE(row["actor"].get<std::string>().empty());
      ++by[row["action"].get<std::string>() + " " + row["result"].get<std::string>()];
    }
    CHECK(by == std::map<std::string, int>{{"cancel done", 1},
                                           {"cancel refused", 1},
                                           {"retry refused", 1},
                                           {"resume done", 1},
                                           {"send done", 3},
                                           {"send refused", 2},
                                           {"fork done", 1},
                                           {"fork refused", 2}});
    auto first = cli_in(schema, {"audit", "--json", "--action", "cancel"}).parsed();
    REQUIRE(first.size() == 2);
    CHECK(first[1]["target"]["id"] == "w1");  // newest first: the done one is the older
    CHECK(first[1]["count"] == 1);
    CHECK(first[0]["result"] == "refused");
    CHECK(contains(first[0]["detail"].get<std::string>(), "is cancelled"));
  });
}

TEST_CASE("cli: an action the audit cannot record is not done", "[cli]") {
  const std::string schema = test::fresh_schema("cli_audit_closed");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("inbox", "w1");
    co_await test::wait_rows(eng, "w1", 1);
    const std::string s = test::q(schema);
    {
      auto c = co_await eng.pool().acquire();
      co_await c->exec("CREATE FUNCTION " + s +
                       ".refuse_audit() RETURNS trigger LANGUAGE plpgsql AS "
                       "$$BEGIN RAISE EXCEPTION 'the audit is closed for this test'; END$$");
      co_await c->exec("CREATE TRIGGER refuse_audit BEFORE INSERT ON " + s +
                       ".audit FOR EACH ROW EXECUTE FUNCTION " + s + ".refuse_audit()");
    }
    // The row comes first: it cannot be written, so the cancel is not done (exit status 3).
    auto refused = cli_in(schema, {"cancel", "w1"});
    CHECK(refused.status == 3);
    CHECK(contains(refused.err, "nothing was done: the audit row of cancel could not be written"));
    CHECK(contains(refused.err, "the audit is closed for this test"));
    const auto now = co_await eng.handle("w1").status();
    CHECK(now.status != "cancelled");
    CHECK_FALSE(now.status.empty());
    {
      auto c = co_await eng.pool().acquire();
      co_await c->exec("DROP TRIGGER refuse_audit ON " + s + ".audit");
    }
    auto cancelled = cli_in(schema, {"cancel", "w1"});
    CHECK(cancelled.status == 0);
    co_await wait_status(eng, "w1", "cancelled");
    // One row: the cancel that was done, started and then ended.
    auto audit = cli_in(schema, {"audit", "--json"}).parsed();
    REQUIRE(audit.size() == 1);
    CHECK(audit[0]["action"] == "cancel");
    CHECK(audit[0]["result"] == "done");
    CHECK(audit[0]["count"] == 1);
  });
}

TEST_CASE("cli: wait and show --wait return once a workflow ends, told of it, or time out",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_wait");
  ck = {};
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("inbox", "w1");
    co_await test::wait_rows(eng, "w1", 1);
    // Both programs wait while this engine runs w1 (in this process's event loop).
    const auto waiting = start_cli_in(schema, {"wait", "w1", "--json"});
    const auto showing = start_cli_in(schema, {"show", "w1", "--wait", "--timeout", "10m"});
    // They are told of its end: they mark it awaited (migration 15) before it ends.
    bool awaited = false;
    for (int i = 0; i < 6000 && !awaited; ++i) {
      {
        auto c = co_await eng.pool().acquire();
        auto r = co_await c->exec("SELECT awaited FROM " + test::q(schema) +
                                  ".workflows WHERE id = 'w1'");
        awaited = r[0].get<bool>(0);
      }
      if (!awaited) co_await test::sleep_ms(10);
    }
    CHECK(awaited);
    const json message{{"ok", true}};  // not built inside the co_await (GCC 12)
    (void)co_await eng.send("w1", "go", message);
    const cli_result waited = co_await finished(waiting);
    const cli_result shown = co_await finished(showing);
    CHECK(waited.status == 0);
    const json out = waited.parsed();
    CHECK(out["id"] == "w1");
    CHECK(out["status"] == "succeeded");
    CHECK(out["output"] == R"({"ok":true})");  // inbox returns the message's JSON text
    CHECK(out["error"].is_null());
    CHECK(shown.status == 0);
    CHECK(contains(shown.out, "succeeded"));
    CHECK(contains(shown.out, "last"));  // the step after the message
    // Text: the output alone, as JSON.
    auto plain = cli_in(schema, {"wait", "w1"});
    CHECK(plain.status == 0);
    CHECK(plain.out == "\"{\\\"ok\\\":true}\"\n");

    // A timeout gives up with status 1 and changes nothing.
    (void)co_await eng.start("inbox", "w2");
    co_await test::wait_rows(eng, "w2", 1);
    const auto impatient = start_cli_in(schema, {"wait", "w2", "--timeout", "300ms"});
    const cli_result gave_up = co_await finished(impatient);
    CHECK(gave_up.status == 1);
    CHECK(contains(gave_up.err, "'w2' is still "));
    CHECK(contains(gave_up.err, "after 300ms; nothing was changed"));
    CHECK(gave_up.out.empty());
    const auto not_yet = start_cli_in(schema, {"show", "w2", "--wait", "--timeout", "300ms"});
    const cli_result not_shown = co_await finished(not_yet);
    CHECK(not_shown.status == 1);
    CHECK(contains(not_shown.err, "'w2' is still "));
    (void)co_await eng.cancel("w2");
    co_await wait_status(eng, "w2", "cancelled");

    // An end other than success: status 1 and how it ended, at once for one that has ended.
    (void)co_await eng.start("order", "o1", std::string("o1"));
    co_await wait_status(eng, "o1", "dead_letter");
    auto dead = cli_in(schema, {"wait", "o1"});
    CHECK(dead.status == 1);
    CHECK(contains(dead.err, "'o1' ended dead_letter"));
    CHECK(contains(dead.err, "card declined"));
    CHECK(dead.out.empty());
    auto dead_json = cli_in(schema, {"wait", "o1", "--json"});
    CHECK(dead_json.status == 1);
    CHECK(dead_json.parsed()["status"] == "dead_letter");
    CHECK(dead_json.parsed()["output"].is_null());
    auto cancelled = cli_in(schema, {"wait", "w2"});
    CHECK(cancelled.status == 1);
    CHECK(contains(cancelled.err, "'w2' ended cancelled"));

    // Unknown ids and bad arguments.
    auto unknown = cli_in(schema, {"wait", "nobody"});
    CHECK(unknown.status == 1);
    CHECK(contains(unknown.err, "no workflow has the id 'nobody'"));
    auto unknown_show = cli_in(schema, {"show", "nobody", "--wait"});
    CHECK(unknown_show.status == 1);
    auto soon = cli_in(schema, {"wait", "w1", "--timeout", "soon"});
    CHECK(soon.status == 2);
    auto no_wait = cli_in(schema, {"show", "w1", "--timeout", "5s"});
    CHECK(no_wait.status == 2);
    (void)h;
  });
}

TEST_CASE("cli: stream prints a workflow's stream, and follows it until the close",
          "[cli][streams]") {
  const std::string schema = test::fresh_schema("cli_stream");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    auto h = co_await eng.start("streamer", "s1");
    co_await test::wait_rows(eng, "s1", 1);  // "a" is written; the workflow waits for "go"
    // What is there now, and that it is open.
    auto now = cli_in(schema, {"stream", "s1", "out"});
    CHECK(now.status == 0);
    CHECK(now.out == "\"a\"\n");
    CHECK(contains(now.err, "stream 'out' of 's1' is open: the next offset is 1"));
    // Following: the program waits for the values this engine's run writes after "go".
    const auto following = start_cli_in(schema, {"stream", "s1", "out", "--follow", "--offsets"});
    const auto impatient =
        start_cli_in(schema, {"stream", "s1", "out", "--from", "1", "-f", "--timeout", "300ms"});
    const cli_result gave_up = co_await finished(impatient);
    CHECK(gave_up.status == 1);
    CHECK(contains(gave_up.err, "is still open after 300ms; the next offset is 1"));
    CHECK(gave_up.out.empty());
    (void)co_await eng.send("s1", "go", 1);
    const cli_result followed = co_await finished(following);
    CHECK(followed.status == 0);
    CHECK(followed.out == "0\t\"a\"\n1\t\"line\\n2\"\n2\t{\"n\":3}\n");
    CHECK(contains(followed.err, "stream 'out' of 's1' is closed: 3 values"));
    const int closed_at = co_await h.result<int>();
    CHECK(closed_at == 3);
    // show lists the stream: its key, 3 values, closed.
    auto shown = cli_in(schema, {"show", "s1"});
    CHECK(shown.status == 0);
    CHECK(contains(shown.out, "streams (1)"));
    auto shown_json = cli_in(schema, {"show", "s1", "--json"});
    REQUIRE(shown_json.status == 0);
    const json streams = shown_json.parsed()["streams"];
    REQUIRE(streams.size() == 1);
    CHECK(streams[0]["key"] == "out");
    CHECK(streams[0]["values"] == 3);
    CHECK(streams[0]["closed"] == true);
    // JSON lines from an offset.
    auto from_one = cli_in(schema, {"stream", "s1", "out", "--from", "1", "--json"});
    CHECK(from_one.status == 0);
    CHECK(from_one.out ==
          "{\"offset\":1,\"value\":\"line\\n2\"}\n{\"offset\":2,\"value\":{\"n\":3}}\n");
    // A stream the workflow never wrote ends with it.
    auto other = cli_in(schema, {"stream", "s1", "other"});
    CHECK(other.status == 0);
    CHECK(other.out.empty());
    CHECK(contains(other.err,
                   "ended with its workflow (succeeded) without a close; the next offset is 0"));
    // Past the close: closed, with the number of values it holds.
    auto past = cli_in(schema, {"stream", "s1", "out", "--from", "10"});
    CHECK(past.status == 0);
    CHECK(past.out.empty());
    CHECK(contains(past.err, "stream 'out' of 's1' is closed: 3 values"));
    // Unknown ids and bad arguments.
    auto unknown = cli_in(schema, {"stream", "nobody", "out"});
    CHECK(unknown.status == 1);
    CHECK(contains(unknown.err, "no workflow has the id 'nobody'"));
    auto negative = cli_in(schema, {"stream", "s1", "out", "--from", "-1"});
    CHECK(negative.status == 2);
    CHECK(contains(negative.err, "--from -1 is negative"));
    auto no_follow = cli_in(schema, {"stream", "s1", "out", "--timeout", "5s"});
    CHECK(no_follow.status == 2);
  });
}

TEST_CASE("cli: list filters by status, name, queue, executor and time, and pages", "[cli]") {
  const std::string schema = test::fresh_schema("cli_list");
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // Seven queued workflows nobody serves (queue "cold"), two in "warm", one run here.
    for (int i = 0; i < 7; ++i) {
      const std::string wid = "cold-" + std::to_string(i);
      (void)co_await eng.enqueue({.queue = "cold"}, "order", wid, std::string("x"));
    }
    for (int i = 0; i < 2; ++i) {
      const std::string wid = "warm-" + std::to_string(i);
      (void)co_await eng.enqueue({.queue = "warm"}, "inbox", wid);
    }
    auto h = co_await eng.start("inbox", "here");
    co_await test::wait_rows(eng, "here", 1);

    auto cold = cli_in(schema, {"list", "--queue", "cold", "--json"}).parsed();
    CHECK(cold["workflows"].size() == 7);
    for (const auto& w : cold["workflows"]) CHECK(w["status"] == "pending");
    auto inbox = cli_in(schema, {"list", "--name", "inbox", "--json"}).parsed();
    CHECK(inbox["workflows"].size() == 3);
    auto mine = cli_in(schema, {"list", "--executor", "exec-cli", "--json"}).parsed();
    REQUIRE(mine["workflows"].size() == 1);
    CHECK(mine["workflows"][0]["id"] == "here");
    auto none = cli_in(schema, {"list", "--status", "succeeded"});
    CHECK(none.status == 0);
    CHECK(contains(none.out, "no workflows match"));

    // Pages of 4: disjoint, complete, newest first; the last one has no next page.
    std::vector<std::string> seen;
    std::int64_t offset = 0;
    for (int page = 0; page < 5; ++page) {
      auto p =
          cli_in(schema, {"list", "--limit", "4", "--offset", std::to_string(offset), "--json"})
              .parsed();
      for (const auto& w : p["workflows"]) seen.push_back(w["id"]);
      if (p["next_offset"].is_null()) break;
      offset = p["next_offset"];
    }
    CHECK(seen.size() == 10);
    std::sort(seen.begin(), seen.end());
    CHECK(std::unique(seen.begin(), seen.end()) == seen.end());
    auto table = cli_in(schema, {"list", "--limit", "4"});
    CHECK(contains(table.err, "--after '"));

    // Cursor pages stay disjoint and complete while new workflows arrive between pages (an
    // offset would repeat rows then).
    std::vector<std::string> by_cursor;
    std::string cursor;
    for (int page = 0; page < 5; ++page) {
      std::vector<std::string> args{"--schema", schema, "list", "--limit", "4", "--json"};
      if (!cursor.empty()) args.insert(args.end(), {"--after", cursor});
      auto p = cli(args).parsed();
      for (const auto& w : p["workflows"]) by_cursor.push_back(w["id"]);
      const std::string newcomer = "new-" + std::to_string(page);
      (void)co_await eng.enqueue({.queue = "cold"}, "order", newcomer, std::string("x"));
      if (p["next_cursor"].is_null()) break;
      cursor = p["next_cursor"];
    }
    CHECK(by_cursor.size() == 10);
    std::sort(by_cursor.begin(), by_cursor.end());
    CHECK(std::unique(by_cursor.begin(), by_cursor.end()) == by_cursor.end());
    CHECK(by_cursor == seen);
    auto bad_cursor = cli_in(schema, {"list", "--after", "yesterday"});
    CHECK(bad_cursor.status == 2);

    // Time range: durations and timestamps (13: the 3 newcomers too).
    CHECK(cli_in(schema, {"list", "--since", "1h", "--json"}).parsed()["workflows"].size() == 13);
    CHECK(cli_in(schema, {"list", "--until", "1h", "--json"}).parsed()["workflows"].empty());
    CHECK(cli_in(schema, {"list", "--since", "2000-01-01", "--until", "2999-01-01", "--json"})
              .parsed()["workflows"]
              .size() == 13);
    auto bad_time = cli_in(schema, {"list", "--since", "last tuesday-ish"});
    CHECK(bad_time.status == 2);
    CHECK(contains(bad_time.err, "--since"));
    auto bad_status = cli_in(schema, {"list", "--status", "finished"});
    CHECK(bad_status.status == 2);
    CHECK(contains(bad_status.err,
                   "unknown status 'finished'; one of: pending, running, sleeping, "
                   "succeeded, failed, parked, cancelled, dead_letter"));
    auto bad_limit = cli_in(schema, {"list", "--limit", "0"});
    CHECK(bad_limit.status == 2);

    // Search: the text in the ids or the inputs ("x" of the cold ones), in any case.
    auto found = cli_in(schema, {"list", "--text", "COLD-3", "--json"}).parsed();
    REQUIRE(found["workflows"].size() == 1);
    CHECK(found["workflows"][0]["id"] == "cold-3");
    CHECK(cli_in(schema, {"list", "--text", "\"x\"", "--json"}).parsed()["workflows"].size() ==
          10);  // cold-0..6 and the 3 newcomers
    CHECK(
        cli_in(schema, {"list", "--changed-since", "1h", "--json"}).parsed()["workflows"].size() ==
        13);
    CHECK(cli_in(schema, {"list", "--retrying", "--json"}).parsed()["workflows"].empty());
    auto bad_changed = cli_in(schema, {"list", "--changed-since", "2026-01-01"});
    CHECK(bad_changed.status == 2);
    CHECK(contains(bad_changed.err, "not an age"));
    // Bounded: 2 rows read of each status, the 2 newest pending are not "cold-1": the page says
    // how far back it searched and where to go on; following it finds cold-1.
    auto bounded =
        cli_in(schema, {"list", "--text", "cold-1", "--max-scan", "2", "--json"}).parsed();
    CHECK(bounded["workflows"].empty());
    REQUIRE(!bounded["searched"].is_null());
    CHECK(bounded["searched"]["rows"] == 2);
    std::string next = bounded["next_cursor"];
    bool reached = false;
    for (int page = 0; page < 10 && !next.empty() && !reached; ++page) {
      auto p =
          cli_in(schema, {"list", "--text", "cold-1", "--max-scan", "2", "--after", next, "--json"})
              .parsed();
      reached = !p["workflows"].empty() && p["workflows"][0]["id"] == "cold-1";
      next = p["next_cursor"].is_null() ? std::string() : p["next_cursor"].get<std::string>();
    }
    CHECK(reached);
    auto footer = cli_in(schema, {"list", "--text", "cold-1", "--max-scan", "2"});
    CHECK(contains(footer.err, "searched the workflows created down to"));
    CHECK(contains(footer.err, "--after '"));

    const json m = json::parse(R"({"done":1})");
    (void)co_await eng.send("here", "go", m);
    (void)co_await h.result<std::string>();
  });
}

TEST_CASE("cli: queues, executors, stats, gc and migrate report and maintain the schema", "[cli]") {
  const std::string schema = test::fresh_schema("cli_ops");
  // migrate: a fresh schema gets every migration, a second run none.
  auto first = cli_in(schema, {"migrate", "--json"}).parsed();
  CHECK(first["version"] == store::latest_version());
  CHECK(first["applied"] == durable::detail::migrations().size());
  auto second = cli_in(schema, {"migrate"});
  CHECK(second.status == 0);
  CHECK(contains(second.out, "0 migrations applied"));

  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    co_await eng.configure_queue({.name = "slow", .concurrency = 3, .rate_limit = 10});
    for (int i = 0; i < 4; ++i) {
      const std::string wid = "q-" + std::to_string(i);
      (void)co_await eng.enqueue({.queue = "slow"}, "order", wid, std::string("x"));
    }
    ck.charge_fixed = true;
    for (int i = 0; i < 3; ++i) {
      const std::string wid = "done-" + std::to_string(i);
      auto h = co_await eng.start("order", wid, std::string("d"));
      (void)co_await h.result<std::string>();
    }
    auto w = co_await eng.start("inbox", "waiting");
    co_await test::wait_rows(eng, "waiting", 1);

    auto queues = cli_in(schema, {"queues", "--json"}).parsed();
    json slow;
    for (const auto& q : queues)
      if (q["queue"] == "slow") slow = q;
    REQUIRE(!slow.is_null());
    CHECK(slow["queued"] == 4);
    CHECK(slow["running"] == 0);
    CHECK(slow["concurrency"] == 3);
    CHECK(slow["rate_limit"] == 10);
    auto queue_table = cli_in(schema, {"queues"});
    CHECK(contains(queue_table.out, "QUEUED"));
    CHECK(contains(queue_table.out, "slow"));
    // A mistyped queue is not made (and paused) by a pause; a known one, or --create, is.
    auto typo = cli_in(schema, {"queue", "pause", "slwo"});
    CHECK(typo.status == 1);
    CHECK(contains(typo.err, "no queue is named 'slwo'"));
    CHECK(contains(typo.err, "--create"));
    CHECK(cli_in(schema, {"queues", "--json"}).parsed().size() == queues.size());
    CHECK(cli_in(schema, {"queue", "pause", "slow"}).status == 0);
    CHECK(cli_in(schema, {"queue", "resume", "slow"}).status == 0);
    CHECK(cli_in(schema, {"queue", "pause", "later", "--create"}).status == 0);
    bool later_paused = false;
    for (const auto& q : cli_in(schema, {"queues", "--json"}).parsed())
      if (q["queue"] == "later") later_paused = q["paused"] == true;
    CHECK(later_paused);
    auto results = cli_in(schema, {"audit", "--action", "pause_queue", "--json"}).parsed();
    REQUIRE(results.size() == 3);
    CHECK(results[2]["result"] == "refused");  // newest first: later, slow, slwo
    CHECK(results[1]["result"] == "done");

    auto executors = cli_in(schema, {"executors", "--json"}).parsed();
    REQUIRE(executors.size() == 1);
    CHECK(executors[0]["id"] == "exec-cli");
    CHECK(executors[0]["state"] == "alive");
    CHECK(executors[0]["owned"] == 1);  // "waiting"
    auto dead = cli_in(schema, {"executors", "--lease", "0s", "--json"}).parsed();
    CHECK(dead[0]["state"] == "dead");
    auto bad_lease = cli_in(schema, {"executors", "--lease", "soon"});
    CHECK(bad_lease.status == 2);

    auto stats = cli_in(schema, {"stats", "--json"}).parsed();
    CHECK(stats["workflows"]["succeeded"] == 3);
    CHECK(stats["workflows"]["pending"] == 4);
    CHECK(stats["queued"] == 4);
    CHECK(stats.contains("journal_rows_estimate"));
    CHECK(stats["executors_alive"] == 1);
    auto stats_table = cli_in(schema, {"stats"});
    CHECK(contains(stats_table.out, "succeeded"));

    // gc: finished ones only, by age and status; a dry run deletes nothing.
    auto young = cli_in(schema, {"gc", "--older-than", "1h", "--json"}).parsed();
    CHECK(young["deleted"] == 0);
    auto dry = cli_in(schema, {"gc", "--older-than", "0s", "--dry-run", "--json"}).parsed();
    CHECK(dry["would_delete"] == 3);
    auto only_failed =
        cli_in(schema, {"gc", "--older-than", "0s", "--status", "failed", "--json"}).parsed();
    CHECK(only_failed["deleted"] == 0);
    auto gone = cli_in(schema, {"gc", "--older-than", "0s", "--batch", "2"});
    CHECK(gone.status == 0);
    CHECK(contains(gone.out, "deleted 3 workflows"));
    auto after = cli_in(schema, {"stats", "--json"}).parsed();
    CHECK(!after["workflows"].contains("succeeded"));
    CHECK(after["workflows"]["pending"] == 4);
    CHECK(cli_in(schema, {"show", "done-0"}).status == 1);
    auto refused = cli_in(schema, {"gc", "--older-than", "0s", "--status", "dead_letter"});
    CHECK(refused.status == 2);
    CHECK(contains(refused.err, "finished workflows only"));
    auto no_age = cli_in(schema, {"gc"});
    CHECK(no_age.status == 2);

    (void)co_await eng.send("waiting", "go", 1);
    (void)co_await w.result<std::string>();
  });
}

TEST_CASE("cli: help, bad arguments and database trouble give an exit status and one line",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_usage");
  test::run(migrated(schema));

  auto help = cli({"--help"});
  CHECK(help.status == 0);
  for (const char* verb : {"list", "show", "cancel", "resume", "retry", "fork", "queues",
                           "executors", "gc", "migrate", "stats", "send", "metrics"}) {
    CHECK(contains(help.out, verb));
    auto verb_help = cli({verb, "--help"});
    CHECK(verb_help.status == 0);
    CHECK(contains(verb_help.out, "Usage"));
  }
  auto nothing = cli({});
  CHECK(nothing.status == 2);
  auto unknown_verb = cli({"frobnicate"});
  CHECK(unknown_verb.status == 2);
  CHECK(contains(unknown_verb.err, "durable --help"));
  auto missing_id = cli_in(schema, {"show"});
  CHECK(missing_id.status == 2);
  auto extra = cli_in(schema, {"cancel", "a", "b"});
  CHECK(extra.status == 2);
  auto bad_schema = cli({"--schema", std::string(70, 'x'), "list"});
  CHECK(bad_schema.status == 2);
  CHECK(contains(bad_schema.err, "63 bytes"));

  // A schema that was never migrated, a server that is not there.
  auto missing = cli_in(schema + "_never", {"list"});
  CHECK(missing.status == 3);
  CHECK(contains(missing.err, "durable migrate"));
  auto unreachable = cli({"--database", "postgresql://nobody@127.0.0.1:1/none", "stats"});
  CHECK(unreachable.status == 3);
  CHECK(contains(unreachable.err, "cannot use the database"));
  // One line each: no stack trace, no multi-line libpq message.
  for (const auto* r : {&missing, &unreachable, &bad_schema, &unknown_verb})
    CHECK(std::count(r->err.begin(), r->err.end(), '\n') <= 2);
}

TEST_CASE("cli: metrics prints and serves the database's gauges, and promtool accepts them",
          "[cli]") {
  const std::string schema = test::fresh_schema("cli_metrics");
  const std::string odd_queue = "mail \"EU\"\\\nnight";  // a quote, a backslash, a newline
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    ck.charge_fixed = true;
    for (int i = 0; i < 2; ++i) {
      const std::string wid = "ok-" + std::to_string(i);
      auto h = co_await eng.start("order", wid, std::string("m"));
      (void)co_await h.result<std::string>();
    }
    for (int i = 0; i < 3; ++i) {
      const std::string wid = "queued-" + std::to_string(i);
      (void)co_await eng.enqueue({.queue = odd_queue}, "order", wid, std::string("m"));
    }
  });

  // Printed once.
  auto printed = cli_in(schema, {"metrics"});
  REQUIRE(printed.status == 0);
  test::check_with_promtool(printed.out);
  const std::string s = "schema=\"" + schema + "\"";
  CHECK(test::sample(printed.out, "durable_store_workflows{" + s + ",status=\"succeeded\"}") == 2);
  CHECK(test::sample(printed.out, "durable_store_workflows{" + s + ",status=\"pending\"}") == 3);
  CHECK(test::sample(printed.out, "durable_store_queue_queued{" + s +
                                      ",queue=\"mail \\\"EU\\\"\\\\\\nnight\"}") == 3);
  // The test's engine stopped without a shutdown: alive until its lease runs out, then dead.
  CHECK(
      test::sample(printed.out, "durable_store_executors{" + s + ",state=\"alive\"}").value_or(0) +
          test::sample(printed.out, "durable_store_executors{" + s + ",state=\"dead\"}")
              .value_or(0) ==
      1);

  // Served: start the program in the background on a free port, scrape it, stop it.
  char err_path[] = "/tmp/durable-cli-listen-XXXXXX";
  const int err_fd = ::mkstemp(err_path);
  REQUIRE(err_fd >= 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(err_fd, 2);
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::execl(DURABLE_CLI_PATH, DURABLE_CLI_PATH, "--schema", schema.c_str(), "metrics", "--listen",
            "127.0.0.1:0", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  unsigned short port = 0;
  for (int i = 0; i < 1000 && port == 0; ++i) {
    const std::string said = slurp(err_path);
    const auto at = said.find("http://127.0.0.1:");
    if (at != std::string::npos && said.find("/metrics", at) != std::string::npos)
      port = static_cast<unsigned short>(std::stoi(said.substr(at + 17)));
    else
      ::usleep(10000);
  }
  INFO("stderr: " << slurp(err_path));
  REQUIRE(port != 0);
  const auto ok = test::parse_reply(
      test::run(test::http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")));
  CHECK(ok.status_line == "HTTP/1.1 200 OK");
  CHECK(ok.content_type == "text/plain; version=0.0.4; charset=utf-8");
  test::check_with_promtool(ok.body);
  CHECK(test::sample(ok.body, "durable_store_workflows{" + s + ",status=\"succeeded\"}") == 2);
  const auto missing = test::parse_reply(
      test::run(test::http_exchange(port, "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")));
  CHECK(missing.status_line == "HTTP/1.1 404 Not Found");
  // Idle and slow clients, more than it holds open, do not starve it (issue 18).
  {
    int answered = 0;
    std::string last;
    test::run([&]() -> asio::awaitable<void> {
      test::hostile_clients hostile(co_await asio::this_coro::executor, port);
      hostile.slow(2);
      co_await hostile.idle(40);
      for (int i = 0; i < 6; ++i) {
        const auto r = test::parse_reply(
            co_await test::http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
        if (r.status_line == "HTTP/1.1 200 OK") ++answered;
        last = r.body;
      }
      hostile.close();
      for (int i = 0; i < 500 && hostile.slow_running() > 0; ++i) co_await test::sleep_ms(10);
    }());
    CHECK(answered == 6);
    CHECK(test::sample(last, "durable_metrics_server_connections").value_or(99) <= 16);
    CHECK(test::sample(last, "durable_metrics_server_refused_total{reason=\"evicted\"}")
              .value_or(0) >= 40 - 16);
    test::check_with_promtool(last);
  }
  // The same port again: in use, refused with status 1.
  auto busy = cli_in(schema, {"metrics", "--listen", "127.0.0.1:" + std::to_string(port)});
  CHECK(busy.status == 1);
  CHECK(contains(busy.err, "--listen"));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  ::close(err_fd);
  ::unlink(err_path);

  for (const char* bad : {"9464", "localhost:9464", "127.0.0.1:http", "127.0.0.1:70000"}) {
    auto r = cli_in(schema, {"metrics", "--listen", bad});
    CHECK(r.status == 2);
    CHECK(contains(r.err, "--listen"));
  }
}

namespace {

asio::awaitable<int> kid_wf(context& ctx) {
  co_await ctx.step("work", [] { return 7; });
  co_return 7;
}

asio::awaitable<int> elder_wf(context& ctx) {
  auto kid = co_await ctx.start_child("kid");
  const int got = co_await kid.result<int>();
  const auto go = co_await ctx.recv<int>("go", 60s);
  co_return got + go.value_or(-100);
}

asio::awaitable<void> exec_sql(engine& eng, std::string_view sql_view, std::string_view id_view) {
  const std::string sql(sql_view), id(id_view);
  auto c = co_await eng.pool().acquire();
  (void)co_await c->exec(sql, id);
}

}  // namespace

TEST_CASE("cli: gc keeps a child its unfinished parent needs, deletes the rest", "[cli]") {
  const std::string schema = test::fresh_schema("cli_gc_tree");
  ck = {};
  auto o = test::options(schema, "exec-gc");
  o.poll_interval = 100ms;
  test::with_open_engine(
      o,
      [](engine& eng) {
        register_cli(eng);
        eng.register_workflow("kid", &kid_wf);
        eng.register_workflow("elder", &elder_wf);
      },
      [&](engine& eng) -> asio::awaitable<void> {
        // A dead letter retried to success: journal, attempts and history rows to delete.
        auto h = co_await eng.start("order", "o1", std::string("g"));
        co_await wait_status(eng, "o1", "dead_letter");
        ck.charge_fixed = true;
        const bool retried = co_await eng.retry("o1");
        CHECK(retried);
        (void)co_await h.result<std::string>();
        const long history_rows = co_await test::journal_rows(eng, "o1", "workflow_history");
        CHECK(history_rows >= 2);
        const long attempt_rows = co_await test::journal_rows(eng, "o1", "step_attempts");
        CHECK(attempt_rows >= 2);
        // A parent whose child finished, itself still waiting.
        auto elder = co_await eng.start("elder", "e1");
        co_await test::wait_rows(eng, "e1", 2);  // the child started, and its result
        co_await wait_status(eng, "e1/0", "succeeded");

        auto dry = cli_in(schema, {"gc", "--older-than", "0s", "--dry-run", "--json"}).parsed();
        CHECK(dry["would_delete"] == 1);  // o1 only: the child is needed
        auto gone = cli_in(schema, {"gc", "--older-than", "0s", "--json"}).parsed();
        CHECK(gone["deleted"] == 1);
        CHECK(cli_in(schema, {"show", "e1/0"}).status == 0);
        CHECK(cli_in(schema, {"show", "o1"}).status == 1);
        for (const char* table :
             {"steps", "step_attempts", "workflow_history", "messages", "events"}) {
          const long left = co_await test::journal_rows(eng, "o1", table);
          CHECK(left == 0);
        }

        // Once the parent finished, both go.
        (void)co_await eng.send("e1", "go", 1);
        const int sum = co_await elder.result<int>();
        CHECK(sum == 8);
        auto later = cli_in(schema, {"gc", "--older-than", "0s", "--json"}).parsed();
        CHECK(later["deleted"] == 2);
      });
}

TEST_CASE("cli: the history records what is off the routine, in UTC, ids kept whole", "[cli]") {
  const std::string schema = test::fresh_schema("cli_history");
  ck = {};
  const std::string odd = "2026-11-30T17:00:00-nightly";  // an id that looks like a timestamp
  fx.with_engine(schema, [&](engine& eng) -> asio::awaitable<void> {
    // The routine path writes no history row: started, succeeded.
    ck.charge_fixed = true;
    auto plain = co_await eng.start("order", odd, std::string("p"));
    (void)co_await plain.result<std::string>();
    const long routine_rows = co_await test::journal_rows(eng, odd, "workflow_history");
    CHECK(routine_rows == 0);
    auto waiting = co_await eng.start("inbox", "h1");
    co_await test::wait_rows(eng, "h1", 1);
    // An owner change (a takeover moves executor_id from one executor to another), a cancel
    // and a resume are recorded.
    const std::string takeover =
        "UPDATE " + test::q(schema) + ".workflows SET executor_id = 'exec-other' WHERE id = $1";
    co_await exec_sql(eng, takeover, "h1");
    const bool cancelled = co_await eng.cancel("h1");
    CHECK(cancelled);
    const bool resumed = co_await eng.resume("h1");
    CHECK(resumed);
    (void)co_await eng.send("h1", "go", 5);
    (void)co_await waiting.result<std::string>();

    // PGTZ set to another zone does not change what the program shows: UTC.
    ::setenv("PGTZ", "America/New_York", 1);
    auto shown = cli_in(schema, {"show", "h1", "--json"}).parsed();
    auto table = cli_in(schema, {"list"});
    ::unsetenv("PGTZ");
    const std::string created = shown["workflow"]["created_at"];
    CHECK(created.ends_with("+00:00"));
    CHECK(contains(table.out, created.substr(0, 10) + " " + created.substr(11, 8)));
    CHECK(contains(table.out, odd));  // not shortened like a timestamp

    std::vector<std::string> path;
    for (const auto& row : shown["history"]) path.push_back(row["status"]);
    const std::vector<std::string> expected{"created",   "started",  "running",
                                            "cancelled", "sleeping", "succeeded"};
    CHECK(path == expected);
    const auto& moved = shown["history"][2];
    CHECK(moved["previous_executor"] == "exec-cli");
    CHECK(moved["executor_id"] == "exec-other");
    CHECK(shown["history"][3]["previous"] == "running");
    CHECK(shown["history"][4]["previous"] == "cancelled");
    auto shown_table = cli_in(schema, {"show", "h1"});
    CHECK(contains(shown_table.out, "PREVIOUS_EXECUTOR"));
    CHECK(contains(shown_table.out, "exec-other"));
  });
}
