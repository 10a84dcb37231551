// durable's test kit: test your own workflows without a database. A harness runs registered
// workflows on the in-memory journal and a virtual clock (sleeps, backoffs, timeouts and
// deadlines pass at once); check_crashes() kills the simulated process at every step in three
// ways and checks that replay ends the workflow as an uninterrupted run did. Works with any
// test framework (failures are exceptions whose what() is a readable report). Fakes of outside
// systems (testing::service) let the kit see external calls. CMake target:
// durable::testing. Guide: docs/testing.md.
#pragma once

#include "durable/testing/check_crashes.hpp"
#include "durable/testing/harness.hpp"
#include "durable/testing/replay.hpp"
#include "durable/testing/service.hpp"
