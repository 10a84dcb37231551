// The replay core without a server: the journal cursor (loading, step numbering, keys, the
// determinism checks of I5, recorded attempts, held rows and the journal limit) and the run's
// verdict with its precedence. Nothing here opens a connection: the executable includes only
// durable/detail/replay/, and ctest runs it with no database reachable.
#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "durable/detail/replay/cursor.hpp"
#include "durable/detail/replay/verdict.hpp"

using namespace durable;
using namespace durable::detail;

namespace {

journal_entry row(std::string name, std::string kind = "step", std::string output = "1") {
  return journal_entry{std::move(name), std::move(kind), false, std::move(output), {}};
}

/// A cursor for workflow "w-1" (name "demo") holding steps "s0".."s<n-1>".
cursor loaded(int n) {
  cursor c;
  c.id = "w-1";
  c.name = "demo";
  for (int i = 0; i < n; ++i) REQUIRE_FALSE(c.add_entry(i, row("s" + std::to_string(i))));
  return c;
}

/// Runs `f`, which throws; the test looks at what the cursor noted, not at the exception.
template <class F>
void swallow(F f) {
  try {
    f();
  } catch (...) {
  }
}

}  // namespace

// ---- loading a journal ----------------------------------------------------------------------

TEST_CASE("replay: loaded rows are indexed by step number and counted", "[replay][cursor]") {
  cursor c = loaded(3);
  CHECK(c.journal_rows == 3);
  REQUIRE(c.at(1) != nullptr);
  CHECK(c.at(1)->name == "s1");
  CHECK(c.at(3) == nullptr);
  CHECK(c.at(-1) == nullptr);
}

TEST_CASE("replay: a row with a negative step number is refused", "[replay][cursor]") {
  cursor c = loaded(0);
  const auto why = c.add_entry(-1, row("x"));
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("w-1") && Catch::Contains("step number -1"));
  CHECK(c.journal_rows == 0);
}

TEST_CASE("replay: a repeated step number is refused and the first row kept", "[replay][cursor]") {
  cursor c = loaded(2);
  const auto why = c.add_entry(1, row("other"));
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("parked"));
  CHECK(c.at(1)->name == "s1");
  CHECK(c.journal_rows == 2);
}

TEST_CASE("replay: a step number far beyond the rows loaded is refused", "[replay][cursor]") {
  cursor c = loaded(1);
  CHECK(c.add_entry(1 + cursor::max_gap + 1, row("far")));
  CHECK(c.journal_rows == 1);
}

// journals_load returns rows in no order: a journal of more rows than max_gap, loaded last row
// first, is whole once its size is known, and the bound still holds against that size.
TEST_CASE("replay: rows loaded in any order are placed by step number", "[replay][cursor]") {
  const std::size_t n = std::size_t(cursor::max_gap) + 5000;
  cursor c;
  c.id = "w-1";
  c.name = "demo";
  for (std::size_t i = n; i-- > 0;)
    REQUIRE_FALSE(c.add_entry(std::int64_t(i), row("s" + std::to_string(i)), n));
  CHECK(c.journal_rows == n);
  REQUIRE(c.at(0) != nullptr);
  CHECK(c.at(0)->name == "s0");
  REQUIRE(c.at(int(n - 1)) != nullptr);
  CHECK(c.at(int(n - 1))->name == "s" + std::to_string(n - 1));
  CHECK(c.add_entry(std::int64_t(n) + cursor::max_gap + 1, row("far"), n));
  cursor fresh;  // without the size, the first of them is too far beyond the rows so far
  CHECK(fresh.add_entry(std::int64_t(n - 1), row("last"), 0));
}

TEST_CASE("replay: a small gap left by concurrent steps is accepted (I4)", "[replay][cursor]") {
  cursor c = loaded(1);
  CHECK_FALSE(c.add_entry(3, row("s3")));  // steps 1 and 2 were in flight when it crashed
  CHECK(c.at(1) == nullptr);
  CHECK(c.at(2) == nullptr);
  REQUIRE(c.at(3) != nullptr);
  CHECK(c.journal_rows == 2);
}

TEST_CASE("replay: replaying() is true while the next step has a row", "[replay][cursor]") {
  cursor c = loaded(2);
  CHECK(c.replaying());
  c.next_seq = 1;
  CHECK(c.replaying());
  c.next_seq = 2;
  CHECK_FALSE(c.replaying());
}

// ---- keys and ids ---------------------------------------------------------------------------

TEST_CASE("replay: generation 0 keys are <id>:<seq> and children <id>/<seq>", "[replay][keys]") {
  cursor c = loaded(0);
  CHECK(c.step_tag(7) == "7");
  CHECK(c.key(7) == "w-1:7");
  CHECK(c.child_id(7) == "w-1/7");
}

TEST_CASE("replay: later generations put the generation in keys and child ids", "[replay][keys]") {
  cursor c = loaded(0);
  c.generation = 3;
  CHECK(c.step_tag(0) == "3.0");
  CHECK(c.key(2) == "w-1:3.2");
  CHECK(c.child_id(2) == "w-1/3.2");
}

TEST_CASE("replay: keys of different generations never collide", "[replay][keys]") {
  cursor a = loaded(0), b = loaded(0);
  b.generation = 1;
  for (int seq = 0; seq < 50; ++seq) {
    CHECK(a.key(seq) != b.key(seq));
    CHECK(a.child_id(seq) != b.child_id(seq));
  }
}

TEST_CASE("replay: describe_step names plain steps bare and others with their kind",
          "[replay][keys]") {
  CHECK(describe_step("charge", "step") == "'charge'");
  CHECK(describe_step("sleep", "sleep") == "'sleep' (sleep)");
}

// ---- determinism (I5) -----------------------------------------------------------------------

TEST_CASE("replay: a step that matches its row is replayed from it", "[replay][I5]") {
  cursor c = loaded(2);
  const journal_entry* e = replay_entry(c, 1, "s1", "step");
  REQUIRE(e != nullptr);
  CHECK(e->output == "1");
  CHECK(c.outcome.is(verdict::kind::running));
}

TEST_CASE("replay: a step without a row must run", "[replay][I5]") {
  cursor c = loaded(2);
  CHECK(replay_entry(c, 2, "s2", "step") == nullptr);
  CHECK(replay_entry(c, 40, "later", "step") == nullptr);
}

TEST_CASE("replay: a renamed step raises nondeterminism_error naming both steps", "[replay][I5]") {
  cursor c = loaded(2);
  try {
    (void)replay_entry(c, 1, "renamed", "step");
    FAIL("no nondeterminism_error");
  } catch (const nondeterminism_error& e) {
    CHECK(e.workflow_id() == "w-1");
    CHECK(e.seq() == 1);
    CHECK(e.journaled() == "'s1'");
    CHECK(e.requested() == "'renamed'");
    CHECK_THAT(std::string(e.what()), Catch::Contains("step 1") && Catch::Contains("demo"));
  }
}

TEST_CASE("replay: a step of another kind under the same name is nondeterminism", "[replay][I5]") {
  cursor c = loaded(1);
  CHECK_THROWS_AS(replay_entry(c, 0, "s0", "sleep"), nondeterminism_error);
}

TEST_CASE("replay: once raised, nondeterminism is raised again at every later step",
          "[replay][I5]") {
  cursor c = loaded(3);
  swallow([&] { (void)replay_entry(c, 0, "changed", "step"); });
  // The workflow caught it and went on: even a matching step is refused now.
  CHECK_THROWS_AS(replay_entry(c, 1, "s1", "step"), nondeterminism_error);
  CHECK_THROWS_AS(check_fully_replayed(c), nondeterminism_error);
}

TEST_CASE("replay: nondeterminism parks the workflow with the step's details", "[replay][I5]") {
  cursor c = loaded(2);
  swallow([&] { (void)replay_entry(c, 1, "other", "step"); });
  const verdict& v = c.outcome.get();
  REQUIRE(v.what == verdict::kind::parked);
  CHECK(v.cause == park_cause::nondeterminism);
  const auto j = nlohmann::json::parse(v.error);
  CHECK(j["type"] == "durable::nondeterminism_error");
  CHECK(j["seq"] == 1);
  CHECK(j["journaled"] == "'s1'");
  CHECK(j["requested"] == "'other'");
}

TEST_CASE("replay: a run that consumed every row is fully replayed", "[replay][I5]") {
  cursor c = loaded(3);
  c.next_seq = 3;
  CHECK_NOTHROW(check_fully_replayed(c));
  c.next_seq = 5;  // the code went on beyond the journal: new steps, not a change
  CHECK_NOTHROW(check_fully_replayed(c));
}

TEST_CASE("replay: returning before a journaled step means a step was removed", "[replay][I5]") {
  cursor c = loaded(3);
  c.next_seq = 2;
  try {
    check_fully_replayed(c);
    FAIL("no nondeterminism_error");
  } catch (const nondeterminism_error& e) {
    CHECK(e.seq() == 2);
    CHECK(e.requested().empty());
    CHECK_THAT(std::string(e.what()), Catch::Contains("returned after 2 steps"));
  }
  CHECK(c.outcome.parked_for(park_cause::nondeterminism) != nullptr);
}

TEST_CASE("replay: a gap in the journal beyond the code's end is no removed step", "[replay][I5]") {
  cursor c = loaded(1);
  c.journal.resize(4);  // empty slots, as concurrent steps that never committed leave
  c.next_seq = 1;
  CHECK_NOTHROW(check_fully_replayed(c));
}

// ---- recorded attempts ----------------------------------------------------------------------

TEST_CASE("replay: failed attempts count and keep the next attempt's time", "[replay][attempts]") {
  attempt_history h;
  h.add(1, "retrying", std::string(R"({"type":"E","message":"one"})"), 100.0);
  h.add(2, "retrying", std::string(R"({"type":"E","message":"two"})"), 200.0);
  CHECK(h.failures == 2);
  CHECK(h.last_attempt == 2);
  CHECK_FALSE(h.failed);
  REQUIRE(h.next_attempt_at);
  CHECK(*h.next_attempt_at == 200.0);
  CHECK_THAT(h.error, Catch::Contains("two"));
}

TEST_CASE("replay: a final failure marks the step failed for good", "[replay][attempts]") {
  attempt_history h;
  h.add(1, "retrying", std::string("{}"), 10.0);
  h.add(2, "failed", std::string(R"({"type":"E","message":"last"})"), std::nullopt);
  CHECK(h.failed);
  CHECK(h.failures == 2);
  CHECK_FALSE(h.next_attempt_at);
}

TEST_CASE("replay: an operator retry resets the count but not the attempt numbers",
          "[replay][attempts]") {
  attempt_history h;
  h.add(1, "retrying", std::string("{}"), 10.0);
  h.add(2, "failed", std::string("{}"), std::nullopt);
  h.add(3, "reset", std::nullopt, std::nullopt);
  CHECK(h.failures == 0);
  CHECK_FALSE(h.failed);
  CHECK(h.last_attempt == 3);  // attempt numbers never restart
}

TEST_CASE("replay: a resume makes the next attempt due now and keeps the count",
          "[replay][attempts]") {
  attempt_history h;
  h.add(1, "retrying", std::string("{}"), 1e12);
  h.add(2, "due", std::nullopt, std::nullopt);
  CHECK(h.failures == 1);
  CHECK_FALSE(h.next_attempt_at);
}

TEST_CASE("replay: attempts loaded out of order keep the highest number", "[replay][attempts]") {
  attempt_history h;
  h.add(4, "retrying", std::string("{}"), 1.0);
  h.add(2, "retrying", std::string("{}"), 1.0);
  CHECK(h.last_attempt == 4);
}

TEST_CASE("replay: a missing error of a failed attempt is recorded as an empty object",
          "[replay][attempts]") {
  attempt_history h;
  h.add(1, "retrying", std::nullopt, 1.0);
  CHECK(h.error == "{}");
}

// ---- the journal limit ----------------------------------------------------------------------

TEST_CASE("replay: without a limit rows are counted and never refused", "[replay][limit]") {
  cursor c = loaded(0);
  for (int i = 0; i < 1000; ++i) reserve_row(c, i, "s");
  CHECK(c.journal_rows == 1000);
  CHECK(c.outcome.is(verdict::kind::running));
}

TEST_CASE("replay: the row beyond the limit is refused before its step runs", "[replay][limit]") {
  cursor c = loaded(3);
  c.journal_limit = 4;
  reserve_row(c, 3, "s3");
  try {
    reserve_row(c, 4, "s4");
    FAIL("no journal_limit_exceeded");
  } catch (const journal_limit_exceeded& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("row 5") && Catch::Contains("limit of 4"));
  }
  CHECK(c.journal_rows == 4);
  const std::string* why = c.outcome.parked_for(park_cause::journal_limit);
  REQUIRE(why != nullptr);
  CHECK_THAT(*why, Catch::Contains("continue_as_new"));
}

TEST_CASE("replay: once the limit is reached every later step is refused too", "[replay][limit]") {
  cursor c = loaded(2);
  c.journal_limit = 2;
  CHECK_THROWS_AS(check_journal_room(c, 2, "s2"), journal_limit_exceeded);
  release_row(c);  // a row given back does not reopen the journal in this run
  CHECK_THROWS_AS(check_journal_room(c, 3, "s3"), journal_limit_exceeded);
}

TEST_CASE("replay: a held step is counted once, when it is issued", "[replay][limit]") {
  cursor c = loaded(0);
  c.journal_limit = 10;
  {
    row_hold hold(c, 0, "s0");
    CHECK(c.journal_rows == 1);
    reserve_row(c, 0, "s0");  // its write takes the count over
    CHECK(c.journal_rows == 1);
  }
  CHECK(c.journal_rows == 1);  // written: the hold gives nothing back
}

TEST_CASE("replay: a held step that ends without a row gives its count back", "[replay][limit]") {
  cursor c = loaded(0);
  {
    row_hold hold(c, 0, "s0");
    CHECK(c.journal_rows == 1);
  }
  CHECK(c.journal_rows == 0);
  CHECK(c.held_rows.empty());
}

TEST_CASE("replay: a failed write holds the row again for the next attempt", "[replay][limit]") {
  cursor c = loaded(0);
  {
    row_hold hold(c, 0, "s0");
    reserve_row(c, 0, "s0");  // the write takes the count over, and fails
    hold.again();             // the step goes on (another attempt): held again, counted once
    CHECK(c.journal_rows == 1);
    CHECK(c.held_rows.contains(0));
  }
  CHECK(c.journal_rows == 0);  // it ended without a row: the count is given back
}

TEST_CASE("replay: a held step is not refused by the limit it was counted under",
          "[replay][limit]") {
  cursor c = loaded(1);
  c.journal_limit = 2;
  row_hold hold(c, 1, "s1");  // the second and last row
  CHECK_NOTHROW(check_journal_room(c, 1, "s1"));
  CHECK_NOTHROW(reserve_row(c, 1, "s1"));
}

TEST_CASE("replay: concurrent branches cannot pass the limit together", "[replay][limit]") {
  cursor c = loaded(1);
  c.journal_limit = 2;
  row_hold a(c, 1, "a");                                         // issued first: the last row
  CHECK_THROWS_AS(row_hold(c, 2, "b"), journal_limit_exceeded);  // issued second: refused
  CHECK(c.journal_rows == 2);
}

TEST_CASE("replay: the journal warning is reported once, at its share", "[replay][limit]") {
  cursor c = loaded(0);
  c.journal_limit = 10;
  c.journal_warning = 0.5;
  std::vector<std::string> warnings;
  c.report_warning = [&](const std::string& w) { warnings.push_back(w); };
  for (int i = 0; i < 4; ++i) reserve_row(c, i, "s");
  CHECK(warnings.empty());
  for (int i = 4; i < 9; ++i) reserve_row(c, i, "s");
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("5 rows") && Catch::Contains("50 %"));
}

TEST_CASE("replay: a row given back never takes the count below zero", "[replay][limit]") {
  cursor c = loaded(0);
  release_row(c);
  CHECK(c.journal_rows == 0);
}

// ---- the verdict ----------------------------------------------------------------------------

namespace {

/// One verdict of each rank, lowest first: the order verdict.hpp documents.
std::vector<verdict> by_precedence() {
  return {verdict::failed(R"({"type":"E","message":"m"})"),
          verdict::parked(park_cause::codec, "codec"),
          verdict::parked(park_cause::nondeterminism, "changed"),
          verdict::retry("SQLSTATE 08006"),
          verdict::parked(park_cause::journal_refused, "refused"),
          verdict::parked(park_cause::journal_limit, "full"),
          verdict::parked(park_cause::misuse, "nested"),
          verdict::cancelled("deadline", false),
          verdict::released("shutdown")};
}

}  // namespace

TEST_CASE("verdict: a run starts without one", "[replay][verdict]") {
  verdict_slot v;
  CHECK(v.is(verdict::kind::running));
  CHECK_FALSE(v.get().writes_final_state());
  CHECK_FALSE(v.stopped());
}

TEST_CASE("verdict: a higher cause replaces a lower one, in either order", "[replay][verdict]") {
  const auto all = by_precedence();
  for (std::size_t lo = 0; lo < all.size(); ++lo)
    for (std::size_t hi = lo + 1; hi < all.size(); ++hi) {
      INFO("lower " << lo << ", higher " << hi);
      verdict_slot up, down;
      up.note(all[lo]);
      up.note(all[hi]);
      down.note(all[hi]);
      down.note(all[lo]);
      CHECK(up.get().rank() == all[hi].rank());
      CHECK(down.get().rank() == all[hi].rank());
      CHECK(up.get().reason == all[hi].reason);
      CHECK(down.get().reason == all[hi].reason);
    }
}

TEST_CASE("verdict: the workflow's own outcomes rank below everything the run learned",
          "[replay][verdict]") {
  for (const verdict& code : {verdict::succeeded("1"), verdict::failed("{}"),
                              verdict::dead_lettered("step 0 failed", "{}"),
                              verdict::parked(park_cause::requested, "asked")}) {
    verdict_slot v;
    v.note(verdict::parked(park_cause::codec, "codec"));
    v.note(code);
    CHECK(v.parked_for(park_cause::codec) != nullptr);
  }
}

TEST_CASE("verdict: the first of two causes of one rank is kept", "[replay][verdict]") {
  verdict_slot v;
  v.note(verdict::parked(park_cause::misuse, "first"));
  v.note(verdict::parked(park_cause::misuse, "second"));
  REQUIRE(v.parked_for(park_cause::misuse));
  CHECK(*v.parked_for(park_cause::misuse) == "first");
}

TEST_CASE("verdict: the engine's shutdown outranks the failure it caused", "[replay][verdict]") {
  // A shutdown cancels a join or a timer; what that raises escapes the workflow's code.
  verdict_slot v;
  v.note(verdict::released("the engine shut down"));
  v.note(verdict::failed(R"({"type":"std::system_error","message":"Operation aborted."})"));
  CHECK(v.is(verdict::kind::released));
  CHECK_FALSE(v.get().writes_final_state());
}

TEST_CASE("verdict: a continue outranks the release and failure that follow it",
          "[replay][verdict]") {
  verdict_slot v;
  v.note(verdict::continued({7, 2, "[1]"}));
  v.note(verdict::released("shutdown"));
  v.note(verdict::failed("{}"));
  REQUIRE(v.is(verdict::kind::continued));
  CHECK(v.get().next.generation == 2);
  CHECK(v.stopped());
}

TEST_CASE("verdict: a misuse after a continue parks under the new generation's epoch",
          "[replay][verdict]") {
  verdict_slot v;
  v.note(verdict::continued({7, 2, "[1]"}));
  v.note(verdict::parked(park_cause::misuse, "nested step"));
  REQUIRE(v.parked_for(park_cause::misuse));
  REQUIRE(v.get().epoch);
  CHECK(*v.get().epoch == 7);
}

TEST_CASE("verdict: a continue never erases a misuse noted before it", "[replay][verdict]") {
  verdict_slot v;
  v.note(verdict::parked(park_cause::misuse, "nested step"));
  v.note(verdict::continued({7, 2, "[1]"}));
  REQUIRE(v.parked_for(park_cause::misuse));
  REQUIRE(v.get().epoch);  // had the continue committed, the new epoch owns the workflow
  CHECK(*v.get().epoch == 7);
}

TEST_CASE("verdict: after a continue every final state is written under the new epoch",
          "[replay][verdict]") {
  verdict_slot v;
  v.note(verdict::continued({7, 2, "[1]"}));
  v.note(verdict::parked(park_cause::misuse, "nested step"));
  v.note(verdict::cancelled("its deadline passed", false));  // outranks the misuse
  REQUIRE(v.is(verdict::kind::cancelled));
  REQUIRE(v.get().epoch);
  CHECK(*v.get().epoch == 7);
  CHECK(v.continued());  // and no further step starts in this run
  CHECK(v.stopped());
}

TEST_CASE("verdict: a failed journal write still blocks new steps once a misuse outranks it",
          "[replay][verdict]") {
  verdict_slot v;
  v.note(verdict::retry("SQLSTATE 08006"));
  v.note(verdict::parked(park_cause::misuse, "a branch issued a step late"));
  CHECK(v.parked_for(park_cause::misuse) != nullptr);
  CHECK(v.write_failed());
}

TEST_CASE("verdict: a refused journal write blocks new steps whatever outranks it",
          "[replay][verdict]") {
  verdict_slot v;
  CHECK_FALSE(v.write_failed());
  v.note(verdict::parked(park_cause::journal_refused, "value too large"));
  v.note(verdict::parked(park_cause::journal_limit, "full"));
  CHECK(v.parked_for(park_cause::journal_limit) != nullptr);
  CHECK(v.write_failed());
}

TEST_CASE("verdict: a cancel is remembered even under a release", "[replay][verdict]") {
  verdict_slot v;
  v.note(verdict::released("shutdown"));
  CHECK_FALSE(v.cancel_noted());
  v.note(verdict::cancelled("cancelled by an operator", true));
  CHECK(v.is(verdict::kind::released));
  CHECK(v.cancel_noted());
}

TEST_CASE("verdict: a park the run learned replaces the code's outcome noted before it",
          "[replay][verdict]") {
  for (const verdict& code : {verdict::succeeded("1"), verdict::failed("{}"),
                              verdict::dead_lettered("step 0 failed", "{}"),
                              verdict::parked(park_cause::requested, "asked")}) {
    verdict_slot v;
    v.note(code);
    v.note(verdict::parked(park_cause::codec, "codec"));
    CHECK(v.parked_for(park_cause::codec) != nullptr);
  }
}

TEST_CASE("verdict: which outcomes write the workflow's final state", "[replay][verdict]") {
  CHECK(verdict::succeeded("1").writes_final_state());
  CHECK(verdict::failed("{}").writes_final_state());
  CHECK(verdict::dead_lettered("r", "{}").writes_final_state());
  CHECK(verdict::parked(park_cause::misuse, "r").writes_final_state());
  CHECK(verdict::cancelled("deadline", false).writes_final_state());
  CHECK_FALSE(verdict::cancelled("cancel()", true).writes_final_state());  // written already
  CHECK_FALSE(verdict::retry("e").writes_final_state());
  CHECK_FALSE(verdict::released("r").writes_final_state());
  CHECK_FALSE(verdict::continued({}).writes_final_state());
}

TEST_CASE("verdict: parked_for answers only for the cause of the park", "[replay][verdict]") {
  verdict_slot v;
  v.note(verdict::parked(park_cause::journal_refused, "refused"));
  CHECK(v.parked_for(park_cause::journal_refused) != nullptr);
  CHECK(v.parked_for(park_cause::misuse) == nullptr);
  v.note(verdict::released("shutdown"));
  CHECK(v.parked_for(park_cause::journal_refused) == nullptr);
}

TEST_CASE("verdict: every park cause has its own error type", "[replay][verdict]") {
  const park_cause all[] = {park_cause::misuse,          park_cause::journal_limit,
                            park_cause::journal_refused, park_cause::nondeterminism,
                            park_cause::codec,           park_cause::requested,
                            park_cause::journal_error,   park_cause::value_too_large};
  std::vector<std::string> seen;
  for (park_cause c : all) {
    const std::string t(error_type(c));
    CHECK(t.rfind("durable::", 0) == 0);
    CHECK(std::find(seen.begin(), seen.end(), t) == seen.end());
    seen.push_back(t);
  }
  CHECK(error_type(park_cause::journal_limit) == "durable::journal_limit_exceeded");
  CHECK(error_type(park_cause::nondeterminism) == "durable::nondeterminism_error");
  CHECK(error_type(park_cause::value_too_large) == "durable::value_too_large");
}

TEST_CASE("verdict: a retry keeps the latest I/O error, for workflows.last_error",
          "[replay][verdict]") {
  verdict_slot v;
  v.note(verdict::retry("SQLSTATE 57P01: terminating connection"));
  v.note(verdict::retry("SQLSTATE 08006: connection lost"));
  CHECK(v.get().io_error == "SQLSTATE 08006: connection lost");
  CHECK(v.write_failed());
  CHECK_FALSE(v.stopped());
}

TEST_CASE("verdict: a cancel from elsewhere and a local deadline are both cancellations",
          "[replay][verdict]") {
  verdict_slot here, there;
  here.note(verdict::cancelled("its deadline passed", false));
  there.note(verdict::cancelled("cancelled by an operator", true));
  CHECK(here.stopped());
  CHECK(there.stopped());
  CHECK(here.get().writes_final_state());
  CHECK_FALSE(there.get().writes_final_state());
}
