// The typed states (durable/states.hpp) without a server: every value has one spelling that
// parses back to it, no two values share a spelling, and a word that is not one is refused.
// tests/test_pg.cpp compares the same lists with the CHECK constraints of a migrated schema.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <string_view>

#include "durable/states.hpp"

using namespace durable;

namespace {

template <class E, std::size_t N, class Parse>
void round_trips(const std::array<E, N>& all, Parse parse) {
  std::set<std::string_view> seen;
  for (const E e : all) {
    const std::string_view text = to_string(e);
    INFO("spelling '" << std::string(text) << "'");
    CHECK(text != "unknown");
    CHECK(seen.insert(text).second);  // one spelling per value
    const auto back = parse(text);
    REQUIRE(back.has_value());
    CHECK(*back == e);
  }
  for (std::string_view word : {"", "unknown", "Pending", "SUCCEEDED", " failed", "failed ",
                                "child_result", "set_event", "dead-letter", "finished"}) {
    INFO("word '" << std::string(word) << "'");
    CHECK_FALSE(parse(word).has_value());
  }
}

}  // namespace

TEST_CASE("states: every workflow status round-trips through its spelling", "[states]") {
  round_trips(all_workflow_states, [](std::string_view t) { return parse_workflow_state(t); });
  CHECK(all_workflow_states.size() == 8);
  static_assert(to_string(workflow_state::dead_letter) == "dead_letter");
  static_assert(parse_workflow_state("parked") == workflow_state::parked);
}

TEST_CASE("states: every step kind round-trips, with the persisted spellings kept", "[states]") {
  round_trips(all_step_kinds, [](std::string_view t) { return parse_step_kind(t); });
  CHECK(all_step_kinds.size() == 17);
  // Journals already written hold these words; renaming them would break replay (I5).
  CHECK(to_string(step_kind::child_result) == "child-result");
  CHECK(to_string(step_kind::set_event) == "event");
  CHECK(to_string(step_kind::get_event) == "get_event");
  CHECK(to_string(step_kind::step) == "step");
  CHECK(to_string(step_kind::transaction) == "transaction");
}

TEST_CASE("states: step statuses and attempt outcomes round-trip", "[states]") {
  round_trips(all_step_statuses, [](std::string_view t) { return parse_step_status(t); });
  round_trips(all_attempt_outcomes, [](std::string_view t) { return parse_attempt_outcome(t); });
  CHECK(all_step_statuses.size() == 2);
  CHECK(all_attempt_outcomes.size() == 4);
}

TEST_CASE("states: the finished statuses are succeeded, failed and cancelled", "[states]") {
  std::set<std::string_view> finished;
  for (const auto s : finished_workflow_states) finished.insert(to_string(s));
  CHECK(finished == std::set<std::string_view>{"succeeded", "failed", "cancelled"});
  for (const auto s : all_workflow_states) CHECK(is_finished(s) == finished.count(to_string(s)));
}

TEST_CASE("states: an unknown status is refused with the list of statuses", "[states]") {
  CHECK(workflow_state_of("sleeping") == workflow_state::sleeping);
  CHECK(workflow_state_spellings() ==
        "pending, running, sleeping, succeeded, failed, parked, cancelled, dead_letter");
  try {
    (void)workflow_state_of("finished");
    FAIL("workflow_state_of accepted 'finished'");
  } catch (const durable::error& e) {
    CHECK(std::string(e.what()) ==
          "unknown status 'finished'; one of: pending, running, sleeping, succeeded, failed, "
          "parked, cancelled, dead_letter");
  }
}
