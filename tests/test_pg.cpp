// The PostgreSQL layer against a real server: connections, types, errors and their classes,
// pipelines, transactions, the pool, LISTEN/NOTIFY, and a server restart under a live pool
// (schemas and migrations: test_pg_schema.cpp; connecting and deadlines: test_pg_connect.cpp).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <durable/detail/failure.hpp>
#include <durable/detail/group_commit.hpp>
#include <durable/detail/sql_text.hpp>
#include <durable/pg.hpp>
#include <durable/states.hpp>
#include <durable/store.hpp>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <typeinfo>

#include "support/conninfo.hpp"
#include "support/db.hpp"
#include "support/pg_cases.hpp"
#include "support/processes.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::closed_port;
using test::connect;
using test::connect_error;
using test::sleep_for;

TEST_CASE("connection errors name their cause", "[pg][connect]") {
  SECTION("unknown host") {
    auto msg = connect_error(test::with_option(test::conninfo(), "host", "no-such-host.invalid"));
    CHECK_THAT(msg, Catch::Contains("could not resolve host name \"no-such-host.invalid\""));
  }
  SECTION("server not running") {
    auto ci = test::with_option(test::with_option(test::conninfo(), "host", "127.0.0.1"), "port",
                                std::to_string(closed_port()));
    auto msg = connect_error(ci);
    CHECK_THAT(msg, Catch::Contains("Connection refused"));
    CHECK_THAT(msg, Catch::Contains("Is the server running"));
  }
  SECTION("wrong password") {
    auto msg = connect_error(test::with_option(test::conninfo(), "password", "certainly-wrong"));
    if (msg.empty()) {
      WARN("the server accepted a wrong password (trust authentication); nothing to check");
    } else {
      CHECK_THAT(msg, Catch::Contains("password authentication failed"));
    }
  }
  SECTION("malformed connection string") {
    auto msg = connect_error("host=x port");
    CHECK_THAT(msg, Catch::Contains("invalid PostgreSQL connection string"));
  }
}

TEST_CASE("parameters and results round trip for every supported type", "[pg][types]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    const std::string text = "it's \"quoted\", \\ back\\slashed, ünïcödé, \t tab";
    pg::bytea bytes;
    for (int i = 0; i < 256; ++i) bytes.push_back(std::byte(i));
    auto r = co_await c->exec(
        "SELECT $1::bool, $2::bool, $3::int2, $4::int4, $5::int8, $6::int8, $7::float4, "
        "$8::float8, "
        "$9::float8, $10::float8, $11::text, $12::text, $13::bytea, $14::int4, $15::text, "
        "$16::int8",
        true, false, std::int16_t(-32768), std::int32_t(2147483647),
        std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), 1.5f,
        0.1, std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::infinity(),
        text, std::string_view(""), bytes, std::optional<int>(), std::nullopt,
        std::optional<std::int64_t>(42));
    REQUIRE(r.rows() == 1);
    auto row = r[0];
    CHECK(row.get<bool>(0) == true);
    CHECK(row.get<bool>(1) == false);
    CHECK(row.get<std::int16_t>(2) == -32768);
    CHECK(row.get<std::int32_t>(3) == 2147483647);
    CHECK(row.get<std::int64_t>(4) == std::numeric_limits<std::int64_t>::min());
    CHECK(row.get<std::int64_t>(5) == std::numeric_limits<std::int64_t>::max());
    CHECK(row.get<float>(6) == 1.5f);
    CHECK(row.get<double>(7) == 0.1);
    CHECK(std::isnan(row.get<double>(8)));
    CHECK(row.get<double>(9) == -std::numeric_limits<double>::infinity());
    CHECK(row.get<std::string>(10) == text);
    CHECK(row.get<std::string>(11).empty());
    CHECK(!row.is_null(11));
    CHECK(row.get<pg::bytea>(12) == bytes);
    CHECK(row.is_null(13));
    CHECK(row.get<std::optional<int>>(13) == std::nullopt);
    CHECK(row.get<std::optional<std::string>>(14) == std::nullopt);
    CHECK(row.get<std::optional<std::int64_t>>(15) == 42);
    auto [a, b, i16] = row.as<bool, bool, std::int16_t>();
    CHECK((a && !b && i16 == -32768));

    // Reading a NULL or a value of the wrong type says which column and row.
    CHECK_THROWS_WITH(row.get<int>(13),
                      Catch::Contains("is NULL") && Catch::Contains("std::optional"));
    CHECK_THROWS_AS(row.get<int>(10), pg::conversion_error);
    CHECK_THROWS_AS(row.get<std::int16_t>(5), pg::conversion_error);  // out of range
    CHECK_THROWS_AS(r.get<int>(1, 0), pg::conversion_error);          // no such row
  }());
}

TEST_CASE("server errors carry SQLSTATE, message and statement", "[pg][errors]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    co_await c->exec("CREATE TEMP TABLE u (k int PRIMARY KEY)");
    co_await c->exec("INSERT INTO u VALUES ($1)", 1);
    try {
      co_await c->exec("INSERT INTO u VALUES ($1)", 1);
      FAIL("a duplicate key was accepted");
    } catch (const pg::sql_error& e) {
      CHECK(e.sqlstate() == "23505");
      CHECK_THAT(e.server_message(), Catch::Contains("duplicate key"));
      CHECK(e.statement() == "INSERT INTO u VALUES ($1)");
    }
    // A prepared statement's error names the statement.
    co_await c->prepare("insert_u", "INSERT INTO u VALUES ($1)");
    try {
      co_await c->run(pg::prepared("insert_u", 1));
      FAIL("a duplicate key was accepted");
    } catch (const pg::sql_error& e) {
      CHECK(e.statement() == "insert_u");
    }
    // The connection stays usable after errors.
    auto r = co_await c->exec("SELECT count(*) FROM u");
    CHECK(r[0].get<int>(0) == 1);
  }());
}

namespace {

// What `text` raises when run alone on `c` (null if it succeeds).
asio::awaitable<std::exception_ptr> raised_by(pg::connection& c, std::string text) {
  co_return co_await test::exception_of(c.exec(std::move(text)));
}

// The exception `e` holds; it lives as long as `e` does.
const std::exception& thrown(const std::exception_ptr& e) {
  static const std::logic_error none("nothing was thrown");
  static const std::logic_error other("an exception not derived from std::exception");
  if (!e) return none;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x;
  } catch (...) {
  }
  return other;
}

std::string sqlstate_of(const std::exception_ptr& e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const pg::sql_error& s) {
    return s.sqlstate();
  } catch (...) {
  }
  return "";
}

}  // namespace

static_assert(std::is_base_of_v<std::runtime_error, pg::error>);
static_assert(!std::is_base_of_v<durable::error, pg::error>, "pg/ stands alone");
static_assert(std::is_base_of_v<pg::error, pg::sql_error>);
static_assert(std::is_base_of_v<pg::error, pg::connection_error>);
static_assert(std::is_base_of_v<pg::connection_error, pg::connection_lost>);
static_assert(std::is_base_of_v<pg::connection_error, pg::statement_timeout>);
static_assert(std::is_base_of_v<pg::error, pg::conversion_error>);

TEST_CASE("server errors are raised as the exception class of their SQLSTATE",
          "[pg][errors][classes]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    co_await c->exec("CREATE TEMP TABLE parent (k int PRIMARY KEY)");
    co_await c->exec(
        "CREATE TEMP TABLE child (k int PRIMARY KEY, p int REFERENCES parent, "
        "v int NOT NULL CHECK (v >= 0), r int4range, EXCLUDE USING gist (r WITH &&))");
    co_await c->exec("INSERT INTO parent VALUES (1)");
    co_await c->exec("INSERT INTO child VALUES (1, 1, 0, '[0,10)')");

    // A duplicate key: catchable as itself, its class, sql_error, pg::error; not durable::error.
    auto dup = co_await raised_by(*c, "INSERT INTO child VALUES (1, 1, 0, '[20,30)')");
    CHECK(test::holds<pg::unique_violation>(dup));
    CHECK(test::holds<pg::integrity_constraint_violation>(dup));
    CHECK(test::holds<pg::sql_error>(dup));
    CHECK(test::holds<pg::error>(dup));
    CHECK(test::holds<std::runtime_error>(dup));
    CHECK_FALSE(test::holds<durable::error>(dup));
    CHECK_FALSE(test::holds<pg::check_violation>(dup));
    CHECK(sqlstate_of(dup) == "23505");
    try {
      std::rethrow_exception(dup);
    } catch (const pg::unique_violation& e) {  // the accessors are sql_error's
      CHECK_THAT(e.server_message(), Catch::Contains("duplicate key"));
      CHECK_THAT(e.detail(), Catch::Contains("(k)=(1)"));
      CHECK(e.statement() == "INSERT INTO child VALUES (1, 1, 0, '[20,30)')");
      CHECK(e.batch_index() == 0);
    }

    auto check = co_await raised_by(*c, "INSERT INTO child VALUES (2, 1, -1, '[20,30)')");
    CHECK(test::holds<pg::check_violation>(check));
    CHECK(test::holds<pg::integrity_constraint_violation>(check));
    CHECK_FALSE(test::holds<pg::unique_violation>(check));
    auto not_null = co_await raised_by(*c, "INSERT INTO child VALUES (2, 1, NULL, '[20,30)')");
    CHECK(test::holds<pg::not_null_violation>(not_null));
    auto fk = co_await raised_by(*c, "INSERT INTO child VALUES (2, 99, 0, '[20,30)')");
    CHECK(test::holds<pg::foreign_key_violation>(fk));
    auto overlap = co_await raised_by(*c, "INSERT INTO child VALUES (2, 1, 0, '[5,15)')");
    CHECK(test::holds<pg::exclusion_violation>(overlap));
    CHECK(sqlstate_of(overlap) == "23P01");

    // A SQLSTATE without a class of its own here falls back to its class...
    auto other23 = co_await raised_by(
        *c, "DO $$ BEGIN RAISE EXCEPTION 'made up' USING ERRCODE = '23999'; END $$");
    CHECK(test::holds<pg::integrity_constraint_violation>(other23));
    CHECK_FALSE(test::holds<pg::unique_violation>(other23));
    CHECK(sqlstate_of(other23) == "23999");
    // ... and one of an unknown class is a plain sql_error.
    auto custom = co_await raised_by(
        *c, "DO $$ BEGIN RAISE EXCEPTION 'custom' USING ERRCODE = 'DU999'; END $$");
    REQUIRE(test::holds<pg::sql_error>(custom));
    try {
      std::rethrow_exception(custom);
    } catch (const pg::sql_error& e) {
      CHECK(typeid(e) == typeid(pg::sql_error));
      CHECK(e.server_message() == "custom");
    }
    auto raised = co_await raised_by(*c, "DO $$ BEGIN RAISE EXCEPTION 'plain'; END $$");
    CHECK(test::holds<pg::raise_exception>(raised));
    CHECK(test::holds<pg::plpgsql_error>(raised));

    // Class 42.
    auto table = co_await raised_by(*c, "SELECT * FROM no_such_table");
    CHECK(test::holds<pg::undefined_table>(table));
    CHECK(test::holds<pg::syntax_error_or_access_rule_violation>(table));
    auto column = co_await raised_by(*c, "SELECT no_such_column FROM parent");
    CHECK(test::holds<pg::undefined_column>(column));
    auto function = co_await raised_by(*c, "SELECT no_such_function(1)");
    CHECK(test::holds<pg::undefined_function>(function));
    auto syntax = co_await raised_by(*c, "SELEKT 1");
    CHECK(test::holds<pg::syntax_error>(syntax));
    auto schema = co_await raised_by(*c, "CREATE TABLE no_such_schema.t (i int)");
    CHECK(test::holds<pg::invalid_schema_name>(schema));

    // Class 22.
    auto zero = co_await raised_by(*c, "SELECT 1/0");
    CHECK(test::holds<pg::division_by_zero>(zero));
    CHECK(test::holds<pg::data_exception>(zero));
    auto text = co_await raised_by(*c, "SELECT 'x'::int");
    CHECK(test::holds<pg::invalid_text_representation>(text));
    auto range = co_await raised_by(*c, "SELECT 40000::smallint");
    CHECK(test::holds<pg::numeric_value_out_of_range>(range));
    auto date = co_await raised_by(*c, "SELECT 'not a date'::timestamptz");
    CHECK(test::holds<pg::invalid_datetime_format>(date));

    // Classes 25, 54, 55.
    {
      auto tx = c->begin();
      co_await tx.exec("SET TRANSACTION READ ONLY");
      // (A READ ONLY transaction may still write temporary tables.)
      auto ro = co_await test::exception_of(tx.exec("CREATE TABLE read_only_refused (i int)"));
      CHECK(test::holds<pg::read_only_sql_transaction>(ro));
      CHECK(test::holds<pg::invalid_transaction_state>(ro));
      co_await tx.rollback();
    }
    auto limit = co_await raised_by(*c, "SELECT repeat('xx', 1073741823)");
    CHECK(test::holds<pg::program_limit_exceeded>(limit));
    co_await c->exec("CREATE TEMP SEQUENCE never_used");
    auto state = co_await raised_by(*c, "SELECT currval('never_used')");
    CHECK(test::holds<pg::object_not_in_prerequisite_state>(state));
    CHECK_FALSE(test::holds<pg::lock_not_available>(state));

    // The server's own statement_timeout cancels the query: 57014.
    co_await c->exec("SET statement_timeout = 50");
    auto cancelled = co_await raised_by(*c, "SELECT pg_sleep(10)");
    CHECK(test::holds<pg::query_canceled>(cancelled));
    CHECK(test::holds<pg::operator_intervention>(cancelled));
    co_await c->exec("SET statement_timeout = 0");

    // The connection stays usable after all of these.
    auto r = co_await c->exec("SELECT count(*) FROM child");
    CHECK(r[0].get<int>(0) == 1);
  }());
}

TEST_CASE("a permission refused is insufficient_privilege", "[pg][errors][classes]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    const std::string role = test::fresh_schema("noperm");
    co_await c->exec("CREATE TEMP TABLE secret (k int)");
    co_await c->exec("CREATE ROLE " + role + " NOLOGIN");
    co_await c->exec("SET ROLE " + role);
    auto refused = co_await raised_by(*c, "SELECT * FROM secret");
    co_await c->exec("RESET ROLE");
    co_await c->exec("DROP ROLE " + role);
    CHECK(test::holds<pg::insufficient_privilege>(refused));
    CHECK(test::holds<pg::syntax_error_or_access_rule_violation>(refused));
    CHECK(sqlstate_of(refused) == "42501");
  }());
}

TEST_CASE("races between two connections: lock_not_available, serialization_failure, deadlock",
          "[pg][errors][classes]") {
  test::run([]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    const std::string table = test::fresh_schema("race");
    auto a = co_await connect();
    auto b = co_await connect();
    co_await a->exec("CREATE TABLE " + table + " (k int PRIMARY KEY, v int)");
    co_await a->exec("INSERT INTO " + table + " VALUES (1, 0), (2, 0)");

    {  // NOWAIT on a row another transaction holds.
      auto tx = a->begin();
      co_await tx.exec("SELECT v FROM " + table + " WHERE k = 1 FOR UPDATE");
      auto busy =
          co_await raised_by(*b, "SELECT v FROM " + table + " WHERE k = 1 FOR UPDATE NOWAIT");
      CHECK(test::holds<pg::lock_not_available>(busy));
      CHECK(test::holds<pg::object_not_in_prerequisite_state>(busy));
      CHECK(pg::classify(thrown(busy)) == pg::failure_kind::transient);
      co_await tx.commit();
    }

    {  // REPEATABLE READ: the row changed after the snapshot was taken.
      auto tx = a->begin();
      co_await tx.exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
      co_await tx.exec("SELECT v FROM " + table + " WHERE k = 1");  // takes the snapshot
      co_await b->exec("UPDATE " + table + " SET v = v + 1 WHERE k = 1");
      auto lost =
          co_await test::exception_of(tx.exec("UPDATE " + table + " SET v = v + 1 WHERE k = 1"));
      CHECK(test::holds<pg::serialization_failure>(lost));
      CHECK(test::holds<pg::transaction_rollback>(lost));
      CHECK(pg::is_contention(thrown(lost)));
      CHECK(pg::classify(thrown(lost)) == pg::failure_kind::transient);
      co_await tx.rollback();
    }

    {  // Each transaction holds the row the other wants: one of them is chosen to fail.
      auto ta = a->begin();
      auto tb = b->begin();
      co_await ta.exec("UPDATE " + table + " SET v = 10 WHERE k = 1");
      co_await tb.exec("UPDATE " + table + " SET v = 20 WHERE k = 2");
      std::exception_ptr outcome[2];
      pg::transaction* txs[2] = {&ta, &tb};
      auto both = test::spawn_all(ex, 2, [&](int i) -> asio::awaitable<void> {
        const int other = i == 0 ? 2 : 1;
        outcome[i] = co_await test::exception_of(
            txs[i]->exec("UPDATE " + table + " SET v = " + std::to_string(30 + i) +
                         " WHERE k = " + std::to_string(other)));
        if (outcome[i]) co_await txs[i]->rollback();  // frees the other
      });
      co_await test::wait_all(both);
      const bool a_failed = test::holds<pg::deadlock_detected>(outcome[0]);
      const bool b_failed = test::holds<pg::deadlock_detected>(outcome[1]);
      CHECK(a_failed != b_failed);
      CHECK((outcome[0] == nullptr) == b_failed);
      CHECK((outcome[1] == nullptr) == a_failed);
      const auto& dead = a_failed ? outcome[0] : outcome[1];
      CHECK(test::holds<pg::transaction_rollback>(dead));
      CHECK(pg::is_contention(thrown(dead)));
      if (!a_failed) co_await ta.commit();
      if (!b_failed) co_await tb.commit();
    }
    co_await a->exec("DROP TABLE " + table);
  }());
}

TEST_CASE("an error in a batch or at commit keeps its class and its index in the batch",
          "[pg][errors][classes][pipeline]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    co_await c->exec("CREATE TEMP TABLE b (k int PRIMARY KEY CHECK (k < 100))");
    std::vector<pg::statement> batch;
    batch.push_back(pg::sql("INSERT INTO b VALUES ($1)", 1));
    batch.push_back(pg::sql("INSERT INTO b VALUES ($1)", 2));
    batch.push_back(pg::sql("INSERT INTO b VALUES ($1)", 1));
    batch.push_back(pg::sql("INSERT INTO b VALUES ($1)", 3));
    auto dup = co_await test::exception_of(c->run_batch(std::move(batch)));
    REQUIRE(test::holds<pg::unique_violation>(dup));
    CHECK(dynamic_cast<const pg::sql_error&>(thrown(dup)).batch_index() == 2);

    {  // Through a transaction: the statements given to commit() count from 0.
      auto tx = c->begin();
      co_await tx.exec("INSERT INTO b VALUES ($1)", 10);
      std::vector<pg::statement> last;
      last.push_back(pg::sql("INSERT INTO b VALUES ($1)", 11));
      last.push_back(pg::sql("INSERT INTO b VALUES ($1)", 500));
      auto check = co_await test::exception_of(tx.commit(std::move(last)));
      REQUIRE(test::holds<pg::check_violation>(check));
      CHECK(dynamic_cast<const pg::sql_error&>(thrown(check)).batch_index() == 1);
    }  // the failed transaction is rolled back when it goes
    auto r = co_await c->exec("SELECT count(*) FROM b");
    CHECK(r[0].get<int>(0) == 0);
  }());
}

/// Inserts `v` into the temporary table n (a coroutine of its own: exec() throws as it builds the
/// statement, and exception_of() takes what the coroutine throws).
namespace {
asio::awaitable<void> insert_text(pg::connection& c, std::string v) {
  co_await c.exec("INSERT INTO n VALUES ($1)", v);
}
}  // namespace

TEST_CASE("a text parameter with a NUL character is refused before it is sent", "[pg][errors]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    co_await c->exec("CREATE TEMP TABLE n (t text)");
    // libpq sends a text parameter as a C string: sent, this one would arrive as "ab".
    const std::string nul("ab\0cd", 5);
    auto refused = co_await test::exception_of(insert_text(*c, nul));
    REQUIRE(test::holds<pg::character_not_in_repertoire>(refused));
    const auto& e = dynamic_cast<const pg::sql_error&>(thrown(refused));
    CHECK(e.sqlstate() == "22021");
    CHECK_THAT(std::string(e.what()),
               Catch::Contains("parameter $1 holds a NUL character (at byte 2)") &&
                   Catch::Contains("the statement was not sent"));
    CHECK(pg::classify(e) == pg::failure_kind::permanent);
    // A prepared statement's call is refused the same way, and names the statement.
    CHECK_THROWS_WITH(
        pg::prepared("some_name", 1, nul),
        Catch::Contains("statement 'some_name'") && Catch::Contains("parameter $2 holds a NUL"));
    // Nothing reached the table, and the connection goes on.
    auto r = co_await c->exec("SELECT count(*) FROM n");
    CHECK(r[0].get<int>(0) == 0);
    co_await c->exec("INSERT INTO n VALUES ($1)", std::string("ab"));
    r = co_await c->exec("SELECT count(*) FROM n");
    CHECK(r[0].get<int>(0) == 1);
  }());
}

TEST_CASE("an error through the group committer keeps its class", "[pg][errors][group-commit]") {
  test::run([]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    const std::string table = test::fresh_schema("gcclass");
    auto setup = co_await connect();
    co_await setup->exec("CREATE TABLE " + table + " (k int PRIMARY KEY, v int NOT NULL)");
    co_await setup->exec("INSERT INTO " + table + " VALUES (1, 0)");
    pg::pool pool(ex, test::conninfo(), 2);
    detail::group_committer committer(ex, pool, {.max_batch = 512, .max_in_flight = 1});
    // Submitted in the same turn of the event loop: one batch, in which two statements fail
    // for different reasons; each submitter gets its own statement's error, as its own class.
    std::exception_ptr outcome[4];
    auto all = test::spawn_all(ex, 4, [&](int i) -> asio::awaitable<void> {
      const std::string values[4] = {"(2, 0)", "(1, 0)", "(3, NULL)", "(4, 0)"};
      outcome[i] = co_await test::exception_of(
          committer.run(pg::sql("INSERT INTO " + table + " VALUES " + values[i])));
    });
    co_await test::wait_all(all);
    CHECK(outcome[0] == nullptr);
    CHECK(test::holds<pg::unique_violation>(outcome[1]));
    CHECK(test::holds<pg::not_null_violation>(outcome[2]));
    CHECK(outcome[3] == nullptr);
    CHECK(committer.stats().batches >= 2);  // the failures took their batches down with them
    auto r = co_await setup->exec("SELECT count(*) FROM " + table);
    CHECK(r[0].get<int>(0) == 3);
    co_await setup->exec("DROP TABLE " + table);
  }());
}

TEST_CASE("SQLSTATEs map to their classes, and classify() follows the failure model",
          "[pg][errors][classify]") {
  // Exact codes, then the class fallback, then a plain sql_error.
  CHECK(test::holds<pg::unique_violation>(pg::make_sql_error("23505", "m", "s")));
  CHECK(test::holds<pg::foreign_key_violation>(pg::make_sql_error("23503", "m", "s")));
  CHECK(test::holds<pg::serialization_failure>(pg::make_sql_error("40001", "m", "s")));
  CHECK(test::holds<pg::deadlock_detected>(pg::make_sql_error("40P01", "m", "s")));
  CHECK(test::holds<pg::query_canceled>(pg::make_sql_error("57014", "m", "s")));
  CHECK(test::holds<pg::admin_shutdown>(pg::make_sql_error("57P01", "m", "s")));
  CHECK(test::holds<pg::too_many_connections>(pg::make_sql_error("53300", "m", "s")));
  CHECK(test::holds<pg::lock_not_available>(pg::make_sql_error("55P03", "m", "s")));
  CHECK(test::holds<pg::connection_exception>(pg::make_sql_error("08P01", "m", "s")));
  CHECK(test::holds<pg::program_limit_exceeded>(pg::make_sql_error("54000", "m", "s")));
  CHECK(test::holds<pg::transaction_rollback>(pg::make_sql_error("40002", "m", "s")));
  CHECK_FALSE(test::holds<pg::serialization_failure>(pg::make_sql_error("40002", "m", "s")));
  for (const char* plain : {"DU001", "", "2350", "235050", "ZZ000"}) {
    const auto e = pg::make_sql_error(plain, "m", "s");
    REQUIRE(test::holds<pg::sql_error>(e));
    const std::exception& x = thrown(e);  // typeid of a call would warn (clang)
    CHECK(typeid(x) == typeid(pg::sql_error));
    CHECK(dynamic_cast<const pg::sql_error&>(thrown(e)).sqlstate() == plain);
  }
  const auto indexed = pg::make_sql_error("23514", "msg", "stmt", "detail", 3);
  const auto& fields = dynamic_cast<const pg::sql_error&>(thrown(indexed));
  CHECK(fields.server_message() == "msg");
  CHECK(fields.statement() == "stmt");
  CHECK(fields.detail() == "detail");
  CHECK(fields.batch_index() == 3);
  CHECK_THROWS_AS(pg::throw_sql_error("42P01", "m", "s"), pg::undefined_table);

  // docs/architecture.md#failure-model: transient ...
  for (const char* code :
       {"08000", "08006", "08P01", "40001", "40P01", "40003", "57014", "55P03", "53000", "53100",
        "53200", "53300", "57P01", "57P02", "57P03", "57P04", "57P05", "58000", "58030", "25P03"}) {
    INFO(code);
    CHECK(pg::is_transient_sqlstate(code));
    CHECK(pg::classify(thrown(pg::make_sql_error(code, "m", "s"))) == pg::failure_kind::transient);
  }
  // ... and permanent: invalid encoding, value too large, permission denied, undefined table or
  // function, constraint violations, and whatever the server raises that is not listed above.
  for (const char* code : {"22021", "22P05", "22012", "22P02", "54000", "42501", "42883",
                           "42P01", "42703", "42601", "23505", "23514", "23503", "23502",
                           "25006", "55000", "40002", "P0001", "XX000", "DU001", ""}) {
    INFO(code);
    CHECK_FALSE(pg::is_transient_sqlstate(code));
    CHECK(pg::classify(thrown(pg::make_sql_error(code, "m", "s"))) == pg::failure_kind::permanent);
  }
  // What is not a server error is transient: the server did not refuse the statement.
  CHECK(pg::classify(pg::connection_error("x")) == pg::failure_kind::transient);
  CHECK(pg::classify(pg::connection_lost("x")) == pg::failure_kind::transient);
  CHECK(pg::classify(pg::statement_timeout("s", 10ms, false)) == pg::failure_kind::transient);
  CHECK(pg::classify(std::runtime_error("x")) == pg::failure_kind::transient);
  // Contention: a transaction that may simply be run again.
  CHECK(pg::is_contention(thrown(pg::make_sql_error("40001", "m", "s"))));
  CHECK(pg::is_contention(thrown(pg::make_sql_error("40P01", "m", "s"))));
  CHECK_FALSE(pg::is_contention(thrown(pg::make_sql_error("40003", "m", "s"))));
  CHECK_FALSE(pg::is_contention(thrown(pg::make_sql_error("23505", "m", "s"))));
  // The engine's names for the same thing.
  CHECK(detail::classify(thrown(pg::make_sql_error("42P01", "m", "s"))) ==
        detail::io_verdict::permanent);
}

TEST_CASE("a pipeline of 1000 statements is one round trip", "[pg][pipeline]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    co_await c->exec("CREATE TEMP TABLE p (i int PRIMARY KEY, s text)");
    std::vector<pg::statement> batch;
    for (int i = 0; i < 1000; ++i)
      batch.push_back(
          pg::sql("INSERT INTO p VALUES ($1, $2) RETURNING i * 2", i, std::string(200, 'x')));
    const auto before = c->stats();
    auto results = co_await c->run_batch(std::move(batch));
    CHECK(c->stats().round_trips - before.round_trips == 1);
    CHECK(c->stats().statements - before.statements == 1000);
    REQUIRE(results.size() == 1000);
    CHECK(results[999][0].get<int>(0) == 1998);
    auto n = co_await c->exec("SELECT count(*) FROM p");
    CHECK(n[0].get<int>(0) == 1000);

    // A batch is atomic outside a transaction: a failure in the middle leaves nothing.
    std::vector<pg::statement> bad;
    for (int i = 1000; i < 1010; ++i) bad.push_back(pg::sql("INSERT INTO p VALUES ($1, 'y')", i));
    bad.push_back(pg::sql("INSERT INTO p VALUES ($1, 'dup')", 5));
    bad.push_back(pg::sql("INSERT INTO p VALUES ($1, 'z')", 2000));
    auto failed = co_await test::error_of<pg::sql_error>(c->run_batch(std::move(bad)));
    CHECK(failed);
    n = co_await c->exec("SELECT count(*) FROM p");
    CHECK(n[0].get<int>(0) == 1000);
  }());
}

TEST_CASE("a pipeline larger than the socket buffers does not deadlock", "[pg][pipeline]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    std::vector<pg::statement> batch;
    const std::string big(64 * 1024, 'b');
    for (int i = 0; i < 200; ++i)
      batch.push_back(pg::sql("SELECT $1::text", big));  // ~13 MB each way
    auto results = co_await c->run_batch(std::move(batch));
    REQUIRE(results.size() == 200);
    CHECK(results[199][0].text(0).size() == big.size());
  }());
}

TEST_CASE("transactions commit, roll back, and roll back when abandoned", "[pg][tx]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    auto other = co_await connect();
    const std::string table = test::fresh_schema("tx");
    co_await c->exec("CREATE TABLE " + table + " (v int)");
    int n = 0;  // Catch's macros must not contain co_await (GCC 12 miscompiles it)
    auto count = [&]() -> asio::awaitable<int> {
      auto r = co_await other->exec("SELECT count(*) FROM " + table);
      co_return r[0].get<int>(0);
    };
    {
      auto tx = c->begin();
      co_await tx.exec("INSERT INTO " + table + " VALUES ($1)", 1);
      n = co_await count();
      CHECK(n == 0);  // not visible before commit
      co_await tx.commit();
    }
    n = co_await count();
    CHECK(n == 1);
    {
      auto tx = c->begin();
      co_await tx.exec("INSERT INTO " + table + " VALUES ($1)", 2);
      co_await tx.rollback();
    }
    n = co_await count();
    CHECK(n == 1);
    {
      auto tx = c->begin();
      co_await tx.exec("INSERT INTO " + table + " VALUES ($1)", 3);
      // scope ends without commit
    }
    CHECK(c->in_transaction());
    auto r = co_await c->exec("SELECT count(*) FROM " + table);  // runs after the lazy ROLLBACK
    CHECK(r[0].get<int>(0) == 1);
    CHECK(!c->in_transaction());
    n = co_await count();
    CHECK(n == 1);
    {
      // A failed statement dooms the transaction; commit says so instead of pretending.
      auto tx = c->begin();
      co_await tx.exec("INSERT INTO " + table + " VALUES ($1)", 4);
      auto division = co_await test::error_of<pg::sql_error>(tx.exec("SELECT 1/0"));
      CHECK(division);
      auto commit = co_await test::error_of<pg::error>(tx.commit());
      REQUIRE(commit);
      CHECK_THAT(*commit, Catch::Contains("rolled back"));
    }
    n = co_await count();
    CHECK(n == 1);
    co_await c->exec("DROP TABLE " + table);
  }());
}

TEST_CASE("an exhausted pool makes the next caller wait, then proceed", "[pg][pool]") {
  test::run([]() -> asio::awaitable<void> {
    pg::pool pool(co_await asio::this_coro::executor, test::conninfo(), 1);
    std::vector<std::string> events;
    auto first = std::make_unique<pg::pool::lease>(co_await pool.acquire());
    events.push_back("first acquired");
    bool second_done = false;
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [&]() -> asio::awaitable<void> {
          auto l = co_await pool.acquire();
          events.push_back("second acquired");
          auto r = co_await l->exec("SELECT 7");
          CHECK(r[0].get<int>(0) == 7);
          second_done = true;
        },
        asio::detached);
    // While the only connection is out, the second caller waits (it does not fail).
    for (int i = 0; i < 5; ++i) co_await (*first)->exec("SELECT pg_sleep(0.01)");
    CHECK(events.size() == 1);
    first.reset();
    events.push_back("first released");
    while (!second_done) co_await sleep_for(1ms);
    CHECK(events ==
          std::vector<std::string>{"first acquired", "first released", "second acquired"});
  }());
}

TEST_CASE("group commit: concurrent statements share a round trip, a failing one fails alone",
          "[pg][group-commit]") {
  test::run([]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    const std::string table = test::fresh_schema("gc");
    auto setup = co_await connect();
    co_await setup->exec("CREATE TABLE " + table + " (k int PRIMARY KEY CHECK (k <> 13))");
    pg::pool pool(ex, test::conninfo(), 2);
    detail::group_committer committer(ex, pool,
                                      {.max_batch = 512, .max_in_flight = 1, .send_alone = true});
    pg::statement first = pg::sql("SELECT 1");  // connects the pool's first connection
    (void)co_await committer.run(std::move(first));
    CHECK(committer.stats().sent_alone == 0);  // (it had no open connection at hand)
    constexpr int n = 50;
    std::vector<std::string> outcomes(n);
    // Each statement is submitted from its own coroutine; all are submitted in the same turn
    // of the event loop. The first finds nothing in flight and goes out at once, alone; the
    // other 49 wait for it (one batch in flight at most) and travel together.
    auto all = test::spawn_all(ex, n, [&](int i) -> asio::awaitable<void> {
      pg::statement st = pg::sql("INSERT INTO " + table + " VALUES ($1) RETURNING k", i);
      try {
        auto r = co_await committer.run(std::move(st));
        outcomes[std::size_t(i)] = "ok " + std::to_string(r[0].get<int>(0));
      } catch (const pg::sql_error& e) {
        outcomes[std::size_t(i)] = e.sqlstate();
      }
    });
    co_await test::wait_all(all);
    for (int i = 0; i < n; ++i)
      CHECK(outcomes[std::size_t(i)] == (i == 13 ? "23514" : "ok " + std::to_string(i)));
    // Row 0 alone; one batch with the other 49 failed on row 13; its 48 others went out
    // again and committed.
    CHECK(committer.stats().batches == 4);
    CHECK(committer.stats().sent_alone == 1);
    CHECK(committer.stats().largest_batch == std::size_t(n - 1));
    auto r = co_await setup->exec("SELECT count(*), sum(k) FROM " + table);
    CHECK(r[0].get<int>(0) == n - 1);
    CHECK(r[0].get<long>(1) == long(n * (n - 1) / 2 - 13));

    // A statement submitted alone, with no batch in flight, goes out at once and alone: after
    // a batch of many through a flusher (which would have taken others of its turn), and
    // after a batch of one from its submitter.
    pg::statement one = pg::sql("INSERT INTO " + table + " VALUES ($1)", 1000);
    (void)co_await committer.run(std::move(one));
    CHECK(committer.stats().batches == 5);
    CHECK(committer.stats().sent_alone == 1);
    pg::statement two = pg::sql("INSERT INTO " + table + " VALUES ($1)", 1001);
    (void)co_await committer.run(std::move(two));
    CHECK(committer.stats().batches == 6);
    CHECK(committer.stats().sent_alone == 2);
    co_await setup->exec("DROP TABLE " + table);
  }());
}

TEST_CASE("a lone statement's wait ends when its submitter is cancelled, and at cancel_all",
          "[pg][group-commit]") {
  test::run([]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    const std::string table = test::fresh_schema("gclone");
    auto setup = co_await connect();
    co_await setup->exec("CREATE TABLE " + table + " (k int PRIMARY KEY, v int NOT NULL)");
    co_await setup->exec("INSERT INTO " + table + " VALUES (1, 0)");
    // One connection: the statements after each cancelled one need the connection whose
    // answer was never read to have been replaced. Each wait below is ended by the test long
    // before the statement deadline, which only turns a wait nothing ended into a failure.
    const auto deadline = 30s;
    pg::pool pool(ex, test::conninfo(), 1, {}, {.statement_timeout = deadline});
    // One batch in flight at most: a statement submitted while the lone one is out waits.
    detail::group_committer committer(ex, pool, {.max_in_flight = 1, .send_alone = true});
    const std::string update = "UPDATE " + table + " SET v = v + 1 WHERE k = 1";
    pg::statement warm = pg::sql("SELECT 1");  // an open connection at hand from now on
    (void)co_await committer.run(std::move(warm));
    // Waits for `done`, for longer than the statement deadline.
    auto wait_for = [&](const auto& done, const char* what) -> asio::awaitable<void> {
      const auto until = std::chrono::steady_clock::now() + 2 * deadline;
      while (!done()) {
        if (std::chrono::steady_clock::now() > until) throw std::runtime_error(what);
        co_await sleep_for(2ms);
      }
    };

    for (const bool by_cancel_all : {false, true}) {
      CAPTURE(by_cancel_all);
      auto locker = co_await connect();
      auto tx = locker->begin();
      co_await tx.exec("SELECT v FROM " + table + " WHERE k = 1 FOR UPDATE");
      // Submitted with nothing in flight (the last batch carried one statement): it goes out
      // from its own coroutine and waits for the row lock.
      const auto alone_before = committer.stats().sent_alone;
      const auto batches_before = committer.stats().batches;
      asio::cancellation_signal cancel;
      std::optional<std::exception_ptr> outcome, queued;
      asio::co_spawn(ex, test::exception_of(committer.run(pg::sql(update))),
                     asio::bind_cancellation_slot(
                         cancel.slot(), [&](std::exception_ptr e, std::exception_ptr thrown) {
                           outcome = e ? e : thrown;
                         }));
      co_await test::wait_lock_waiter(*setup, table);
      CHECK(committer.stats().sent_alone == alone_before + 1);
      // Submitted while the lone one is out: it waits for it, then goes with a flusher.
      asio::co_spawn(
          ex, test::exception_of(committer.run(pg::sql("SELECT 2"))),
          [&](std::exception_ptr e, std::exception_ptr thrown) { queued = e ? e : thrown; });
      co_await sleep_for(1ms);  // (it is queued at once; this lets it be)
      CHECK_FALSE(queued);
      if (by_cancel_all)
        committer.cancel_all();
      else
        cancel.emit(asio::cancellation_type::terminal);
      // Named, not temporaries: GCC 12 and co_await (docs/concepts.md).
      const auto cancelled = [&] { return outcome.has_value(); };
      const auto ran = [&] { return queued.has_value(); };
      co_await wait_for(cancelled, "the cancelled wait did not end");
      // Ended while the row is still locked, so its statement had not run: the outcome the
      // submitter learns is "unknown", never an answer it did not read.
      REQUIRE(*outcome);
      CHECK(test::holds<asio::system_error>(*outcome));
      CHECK_THAT(std::string(thrown(*outcome).what()), Catch::Contains("outcome is unknown"));
      CHECK_FALSE(test::holds<pg::statement_timeout>(*outcome));
      // The queued statement was not stranded: it ran, on a new connection, with the row
      // still locked (it does not need the lock).
      co_await wait_for(ran, "the queued statement never ran");
      CHECK(*queued == nullptr);
      CHECK(committer.stats().batches == batches_before + 2);
      co_await tx.commit();  // the cancelled statement runs and commits on the server now
      auto next = co_await committer.run(pg::sql("SELECT v FROM " + table + " WHERE k = 1"));
      CHECK(next.rows() == 1);
    }
    co_await setup->exec("DROP TABLE " + table);
  }());
}

TEST_CASE("prepared statements from the catalog cost no extra round trip", "[pg][prepared]") {
  test::run([]() -> asio::awaitable<void> {
    auto catalog = std::make_shared<pg::statement_catalog>();
    (*catalog)["add"] = "SELECT $1::int + $2::int";
    auto c = co_await pg::connection::connect(test::conninfo(), catalog);
    auto r = co_await c->run(pg::prepared("add", 2, 3));
    CHECK(r[0].get<int>(0) == 5);
    CHECK(c->stats().round_trips == 1);
    r = co_await c->run(pg::prepared("add", 4, 3));
    CHECK(r[0].get<int>(0) == 7);
    CHECK(c->stats().round_trips == 2);
    auto missing = co_await test::error_of<pg::error>(c->run(pg::prepared("missing")));
    REQUIRE(missing);
    CHECK_THAT(*missing, Catch::Contains("not prepared"));
  }());
}

TEST_CASE("LISTEN/NOTIFY wakes an awaiting coroutine", "[pg][notify]") {
  test::run([]() -> asio::awaitable<void> {
    auto listener = co_await connect();
    auto sender = co_await connect();
    const std::string channel = test::fresh_schema("chan");
    co_await listener->listen(channel);
    std::optional<pg::notification> got;
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [&]() -> asio::awaitable<void> { got = co_await listener->wait_notification(); },
        asio::detached);
    co_await sleep_for(5ms);
    CHECK(!got);
    co_await sender->exec("SELECT pg_notify($1, $2)", channel, std::string("hello"));
    for (int i = 0; i < 5000 && !got; ++i) co_await sleep_for(1ms);
    REQUIRE(got);
    CHECK(got->channel == channel);
    CHECK(got->payload == "hello");
    CHECK(got->backend_pid == sender->backend_pid());
  }());
}

TEST_CASE("the event loop stays free while a query runs", "[pg][nonblocking]") {
  test::run([]() -> asio::awaitable<void> {
    using namespace asio::experimental::awaitable_operators;
    auto ex = co_await asio::this_coro::executor;
    int ticks = 0;
    bool done = false, stopped = false;
    asio::co_spawn(
        ex,
        [&]() -> asio::awaitable<void> {
          asio::steady_timer t(co_await asio::this_coro::executor);
          while (!done) {
            t.expires_after(1ms);
            co_await t.async_wait(asio::use_awaitable);
            ++ticks;
          }
          stopped = true;
        },
        asio::detached);
    auto c = co_await connect();  // connecting does not block the loop either
    const int ticks_before = ticks;
    co_await c->exec("SELECT pg_sleep(0.2)");
    const int during = ticks - ticks_before;
    done = true;
    // A blocking call would starve the timer for the whole 200 ms.
    CHECK(during >= 20);
    while (!stopped) co_await sleep_for(1ms);
  }());
}

TEST_CASE("a terminated backend is reported and replaced by the pool", "[pg][pool][failure]") {
  test::run([]() -> asio::awaitable<void> {
    pg::pool pool(co_await asio::this_coro::executor, test::conninfo(), 1);
    auto killer = co_await connect();
    int pid = 0;
    bool killed = false;
    {
      auto l = co_await pool.acquire();
      pid = l->backend_pid();
      asio::co_spawn(
          co_await asio::this_coro::executor,
          [&, pid]() -> asio::awaitable<void> {
            co_await sleep_for(50ms);
            co_await killer->exec("SELECT pg_terminate_backend($1)", pid);
            killed = true;
          },
          asio::detached);
      auto lost = co_await test::error_of<pg::connection_lost>(l->exec("SELECT pg_sleep(10)"));
      CHECK(lost);
      CHECK(!l->is_open());
    }
    while (!killed) co_await sleep_for(1ms);
    auto l = co_await pool.acquire();
    CHECK(l->backend_pid() != pid);
    auto r = co_await l->exec("SELECT 1");
    CHECK(r[0].get<int>(0) == 1);
  }());
}

TEST_CASE("a lost connection gives its descriptor up at once: one reusing the number is woken",
          "[pg][failure]") {
  test::run([]() -> asio::awaitable<void> {
    auto killer = co_await connect();
    auto first = co_await connect();
    const int pid = first->backend_pid();
    co_await killer->exec("SELECT pg_terminate_backend($1)", pid);
    // The first statement after the kill finds the connection closed: libpq closes its socket.
    std::optional<std::string> lost;
    for (int i = 0; i < 100 && !lost; ++i) {
      lost = co_await test::error_of<pg::connection_lost>(first->exec("SELECT 1"));
      if (!lost) co_await sleep_for(10ms);
    }
    REQUIRE(lost);
    // A new connection most likely gets the lowest free descriptor number: the same one.
    pg::connection_options o;
    o.statement_timeout = 10s;
    auto second = co_await pg::connection::connect(test::conninfo(), nullptr, o);
    // The first one goes now. Had it kept the number registered with the reactor until this
    // moment, deregistering it would remove the second one's registration, and the second
    // one's reads would never be woken (its statements would end at their deadline).
    first.reset();
    auto r = co_await test::error_of<pg::statement_timeout>(second->exec("SELECT pg_sleep(0.05)"));
    CHECK(!r);
    auto one = co_await second->exec("SELECT 1");
    CHECK(one[0].get<int>(0) == 1);
  }());
}

TEST_CASE("the server restarted under a live pool", "[pg][pool][failure][restart][serial]") {
  const char* restart = std::getenv("DURABLE_TEST_RESTART_CMD");
  if (!restart || !*restart) {
    WARN("DURABLE_TEST_RESTART_CMD is not set (external server): skipping the restart test");
    return;
  }
  test::run([&]() -> asio::awaitable<void> {
    pg::pool pool(co_await asio::this_coro::executor, test::conninfo(), 2);
    {  // two live connections, one idle and one busy when the server goes away
      auto a = co_await pool.acquire();
      auto b = co_await pool.acquire();
      co_await a->exec("SELECT 1");
      co_await b->exec("SELECT 1");
    }
    auto busy = co_await pool.acquire();
    pid_t child = -1;
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [&]() -> asio::awaitable<void> {
          co_await sleep_for(100ms);
          child = ::fork();
          if (child == 0) {
            ::execl("/bin/sh", "sh", "-c", restart, static_cast<char*>(nullptr));
            ::_exit(127);
          }
        },
        asio::detached);
    try {
      co_await busy->exec("SELECT pg_sleep(30)");
      FAIL("the in-flight query survived a server restart");
    } catch (const pg::connection_error& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("lost"));
    }
    // Wait for the restart command without blocking the loop.
    int status = 0;
    while (child <= 0 || ::waitpid(child, &status, WNOHANG) == 0) co_await sleep_for(20ms);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    { auto gone = std::move(busy); }
    // Both connections are dead now; each next call gets a fresh one and succeeds.
    for (int i = 0; i < 2; ++i) {
      auto a = co_await pool.acquire();
      auto b = co_await pool.acquire();
      auto r1 = co_await a->exec("SELECT 1");
      auto r2 = co_await b->exec("SELECT 2");
      CHECK(r1[0].get<int>(0) + r2[0].get<int>(0) == 3);
    }
  }());
}
