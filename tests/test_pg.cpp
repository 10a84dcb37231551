// The PostgreSQL layer against a real server: connections, types, pipelines, transactions,
// the pool, LISTEN/NOTIFY, migrations, and a server restart under a live pool.
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
#include "support/processes.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

asio::awaitable<std::unique_ptr<pg::connection>> connect() {
  co_return co_await pg::connection::connect(test::conninfo());
}

std::string connect_error(const std::string& conninfo) {
  try {
    test::run(
        [&]() -> asio::awaitable<void> { (void)co_await pg::connection::connect(conninfo); }());
  } catch (const pg::connection_error& e) {
    return e.what();
  }
  return "";
}

int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

}  // namespace

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
    detail::group_committer committer(ex, pool, {.max_batch = 512, .max_in_flight = 1});
    constexpr int n = 50;
    std::vector<std::string> outcomes(n);
    // Each statement is submitted from its own coroutine; all are submitted in the same turn
    // of the event loop, so they travel in one batch.
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
    // One batch with all 50 failed on row 13; the other 49 went out again and committed.
    CHECK(committer.stats().batches == 2);
    CHECK(committer.stats().largest_batch == std::size_t(n));
    auto r = co_await setup->exec("SELECT count(*), sum(k) FROM " + table);
    CHECK(r[0].get<int>(0) == n - 1);
    CHECK(r[0].get<long>(1) == long(n * (n - 1) / 2 - 13));

    // A statement submitted alone, with no batch in flight, goes out at once and alone.
    pg::statement one = pg::sql("INSERT INTO " + table + " VALUES ($1)", 1000);
    (void)co_await committer.run(std::move(one));
    CHECK(committer.stats().batches == 3);
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

// ---- schema migrations ----------------------------------------------------------------------

TEST_CASE("four processes migrating one empty schema at once end with one correct schema",
          "[pg][migrate]") {
  const std::string schema = test::fresh_schema("mig");
  const auto codes = test::run_together(4, [&](int, test::start_gate gate) {
    return test::run([&]() -> asio::awaitable<int> {
      auto c = co_await pg::connection::connect(test::conninfo());
      if (!gate.wait()) co_return 2;  // connected; now migrate all at once
      store st(schema);
      co_await st.migrate(*c);
      co_return co_await st.version(*c) == store::latest_version() ? 0 : 3;
    }());
  });
  CHECK(codes == std::vector<int>(4, 0));
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await connect();
    auto r = co_await c->exec("SELECT version FROM " + detail::quote_identifier(schema) +
                              ".schema_migrations ORDER BY version");
    REQUIRE(r.rows() == store::latest_version());
    for (int i = 0; i < r.rows(); ++i) CHECK(r[i].get<int>(0) == i + 1);
    auto t = co_await c->exec(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = "
        "ANY($2)",
        schema, std::string("{workflows,steps,executors,schema_migrations}"));
    CHECK(t[0].get<int>(0) == 4);
    // Running it again is a no-op.
    store st(schema);
    const int applied = co_await st.migrate(*c);
    CHECK(applied == 0);
    co_await c->exec("DROP SCHEMA " + detail::quote_identifier(schema) + " CASCADE");
  }());
}

TEST_CASE("a schema newer than the library is refused with a clear error", "[pg][migrate]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    const std::string schema = test::fresh_schema("newer");
    store st(schema);
    co_await st.migrate(*c);
    co_await c->exec("INSERT INTO " + detail::quote_identifier(schema) +
                         ".schema_migrations (version, description) VALUES ($1, 'from the future')",
                     999);
    try {
      co_await st.migrate(*c);
      FAIL("migrate accepted a newer schema");
    } catch (const schema_too_new& e) {
      CHECK_THAT(std::string(e.what()),
                 Catch::Contains("version 999") && Catch::Contains("upgrade"));
    }
    co_await c->exec("DROP SCHEMA " + detail::quote_identifier(schema) + " CASCADE");
  }());
}

// ---- the typed states (durable/states.hpp) against the CHECK constraints ----------------------

namespace {

/// The words a CHECK constraint on `table`.`column` allows, as the server prints the constraint
/// (pg_get_constraintdef: "CHECK ((status = ANY (ARRAY['pending'::text, ...])))"); nullopt when
/// the column has no CHECK constraint. Fails the test when it has more than one.
asio::awaitable<std::optional<std::set<std::string>>> checked_words(pg::connection& c,
                                                                    const std::string& schema,
                                                                    const std::string& table,
                                                                    const std::string& column) {
  auto r = co_await c.exec(
      "SELECT pg_get_constraintdef(co.oid) FROM pg_constraint co"
      " JOIN pg_class t ON t.oid = co.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace"
      " JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY (co.conkey)"
      " WHERE co.contype = 'c' AND n.nspname = $1 AND t.relname = $2 AND a.attname = $3",
      schema, table, column);
  if (r.rows() == 0) co_return std::nullopt;
  INFO(table << "." << column << ": " << r[0].get<std::string>(0));
  REQUIRE(r.rows() == 1);
  const std::string def = r[0].get<std::string>(0);
  std::set<std::string> words;
  for (auto at = def.find('\''); at != std::string::npos; at = def.find('\'', at)) {
    const auto end = def.find('\'', at + 1);
    REQUIRE(end != std::string::npos);
    words.insert(def.substr(at + 1, end - at - 1));
    at = end + 1;
  }
  co_return words;
}

template <class E, std::size_t N>
std::set<std::string> spelled(const std::array<E, N>& all) {
  std::set<std::string> out;
  for (const E e : all) out.emplace(to_string(e));
  return out;
}

}  // namespace

TEST_CASE("the typed states spell what the CHECK constraints of a migrated schema allow",
          "[pg][migrate][states]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    const std::string schema = test::fresh_schema("states");
    store st(schema);
    co_await st.migrate(*c);
    const auto workflows = co_await checked_words(*c, schema, "workflows", "status");
    REQUIRE(workflows);
    CHECK(*workflows == spelled(all_workflow_states));
    const auto steps = co_await checked_words(*c, schema, "steps", "status");
    REQUIRE(steps);
    CHECK(*steps == spelled(all_step_statuses));
    const auto attempts = co_await checked_words(*c, schema, "step_attempts", "outcome");
    REQUIRE(attempts);
    CHECK(*attempts == spelled(all_attempt_outcomes));
    // No CHECK lists the step kinds (states.hpp says why); if one is added, it must agree.
    for (const char* table : {"steps", "step_attempts"})
      if (const auto kinds = co_await checked_words(*c, schema, table, "kind"))
        CHECK(*kinds == spelled(all_step_kinds));
    co_await c->exec("DROP SCHEMA " + detail::quote_identifier(schema) + " CASCADE");
  }());
}

// ---- the SQL files (sql/) --------------------------------------------------------------------

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string migration_file(const detail::migration& m) {
  char number[8];
  std::snprintf(number, sizeof number, "%04d", m.version);
  return std::string(DURABLE_SQL_DIR) + "/migrations/" + number + "_" + std::string(m.name) +
         ".sql";
}

// What a DBA compares between two schemas: relations, columns (type, default, nullability),
// constraints, indexes, views, functions and triggers, each as the server prints it, with the
// schema's name replaced by <schema>; and the versions recorded.
asio::awaitable<std::vector<std::string>> catalog_of(pg::connection& c, const std::string& schema) {
  static const char* const queries[] = {
      "SELECT 'relation ' || c.relkind::text || ' ' || c.relname FROM pg_class c"
      " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1",
      "SELECT 'column ' || c.relname || '.' || a.attname || ' #' || a.attnum || ' '"
      " || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' NOT NULL'"
      " ELSE '' END || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')"
      " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
      " JOIN pg_namespace n ON n.oid = c.relnamespace"
      " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
      " WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'v')",
      "SELECT 'constraint ' || c.relname || ' ' || co.conname || ' ' || co.contype::text || ' '"
      " || pg_get_constraintdef(co.oid) || CASE WHEN co.convalidated THEN '' ELSE ' (not valid)'"
      " END FROM pg_constraint co JOIN pg_class c ON c.oid = co.conrelid"
      " JOIN pg_namespace n ON n.oid = co.connamespace WHERE n.nspname = $1",
      "SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i"
      " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
      " WHERE n.nspname = $1",
      "SELECT 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid) FROM pg_class c"
      " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'v'",
      "SELECT 'function ' || pg_get_functiondef(p.oid) FROM pg_proc p"
      " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1",
      "SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t"
      " JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
      " WHERE n.nspname = $1 AND NOT t.tgisinternal",
  };
  std::vector<std::string> out;
  auto add = [&](std::string line) {
    for (auto at = line.find(schema); at != std::string::npos; at = line.find(schema, at))
      line.replace(at, schema.size(), "<schema>");
    out.push_back(std::move(line));
  };
  for (const char* q : queries) {
    auto r = co_await c.exec(q, schema);
    for (int i = 0; i < r.rows(); ++i) add(r[i].get<std::string>(0));
  }
  auto versions = co_await c.exec("SELECT 'version ' || version || ' ' || description FROM " +
                                  detail::quote_identifier(schema) + ".schema_migrations");
  for (int i = 0; i < versions.rows(); ++i) add(versions[i].get<std::string>(0));
  std::sort(out.begin(), out.end());
  co_return out;
}

}  // namespace

TEST_CASE("the embedded SQL is the text of the files in sql/", "[pg][migrate][sql]") {
  CHECK(read_file(std::string(DURABLE_SQL_DIR) + "/bootstrap.sql") == detail::sql::bootstrap);
  for (const auto& m : detail::migrations()) {
    INFO(migration_file(m));
    CHECK(read_file(migration_file(m)) == m.text);
  }
  CHECK(detail::migrations().size() == std::size(detail::sql::migrations));
}

TEST_CASE("the migration files applied with psql -f give the schema that migrate() creates",
          "[pg][migrate][sql]") {
  const std::string by_psql = test::fresh_schema("psql");
  const std::string by_migrate = test::fresh_schema("migrate");
  const store psql_store(by_psql);
  // As docs/architecture.md tells a DBA to apply them: the bootstrap, then each migration in a
  // transaction of its own with its version row.
  auto psql = [&](const std::string& file, const std::string& then) {
    std::string cmd = std::string(DURABLE_PSQL) + " -X -q -v ON_ERROR_STOP=1 -1";
    if (!test::conninfo().empty()) cmd += " -d '" + test::conninfo() + "'";
    cmd += " -v schema=" + by_psql + " -v channel='" + psql_store.channel() +
           "' -v wait_channel='" + psql_store.wait_channel() + "' -f '" + file + "'";
    if (!then.empty()) cmd += " -c \"" + then + "\"";
    INFO(cmd);
    REQUIRE(std::system(cmd.c_str()) == 0);
  };
  psql(std::string(DURABLE_SQL_DIR) + "/bootstrap.sql", "");
  for (const auto& m : detail::migrations())
    psql(migration_file(m),
         "INSERT INTO " + by_psql + ".schema_migrations (version, description) VALUES (" +
             std::to_string(m.version) + ", '" + std::string(m.description) + "')");
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await connect();
    store st(by_migrate);
    const int applied = co_await st.migrate(*c);
    CHECK(applied == store::latest_version());
    const auto from_psql = co_await catalog_of(*c, by_psql);
    const auto from_migrate = co_await catalog_of(*c, by_migrate);
    CHECK(std::count_if(from_psql.begin(), from_psql.end(),
                        [](const std::string& l) { return l.rfind("function ", 0) == 0; }) >= 8);
    // Line by line, so that a difference names the object.
    std::vector<std::string> only_psql, only_migrate;
    std::set_difference(from_psql.begin(), from_psql.end(), from_migrate.begin(),
                        from_migrate.end(), std::back_inserter(only_psql));
    std::set_difference(from_migrate.begin(), from_migrate.end(), from_psql.begin(),
                        from_psql.end(), std::back_inserter(only_migrate));
    CHECK(only_psql == std::vector<std::string>{});
    CHECK(only_migrate == std::vector<std::string>{});
    CHECK(from_psql.size() == from_migrate.size());
    // The status check of migration 6 ends validated (migration 11).
    CHECK(std::find(from_psql.begin(), from_psql.end(),
                    "constraint workflows workflows_status_check c CHECK ((status = ANY "
                    "(ARRAY['pending'::text, 'running'::text, 'sleeping'::text, 'succeeded'::text, "
                    "'failed'::text, 'parked'::text, 'cancelled'::text, 'dead_letter'::text])))") !=
          from_psql.end());
    co_await c->exec("DROP SCHEMA " + detail::quote_identifier(by_psql) + " CASCADE");
    co_await c->exec("DROP SCHEMA " + detail::quote_identifier(by_migrate) + " CASCADE");
  }());
}

// ---- schema names -----------------------------------------------------------------------------

namespace {

// Migrates `schema`, then runs what an engine runs against it: an enqueue whose NOTIFY reaches
// a connection listening on store::channel(), and the shutdown notification.
asio::awaitable<void> schema_round_trip(std::string schema) {
  store st(schema);
  CHECK(st.channel().size() <= 63);
  auto c = co_await pg::connection::connect(test::conninfo(), st.catalog());
  auto listener = co_await connect();
  const int applied = co_await st.migrate(*c);
  CHECK(applied == store::latest_version());
  const int again = co_await st.migrate(*c);
  CHECK(again == 0);
  co_await listener->listen(st.channel());

  auto enqueue = st.workflow_enqueue("w-1", "wf", "[1]", "q-1", 0, std::nullopt, 0, "",
                                     st.channel(), 0, std::nullopt, 0);
  auto r = co_await store::fetch(*c, std::move(enqueue));
  REQUIRE(r.size() == 1);
  CHECK(r[0].created);
  auto n1 = co_await listener->wait_notification();
  CHECK(n1.channel == st.channel());
  CHECK(n1.payload == "q-1");

  pg::statement shutdown = st.notify(st.channel(), "shutdown").st;
  co_await c->run(std::move(shutdown));
  auto n2 = co_await listener->wait_notification();
  CHECK(n2.channel == st.channel());
  CHECK(n2.payload == "shutdown");

  // The function bodies of the migrations work under this name too.
  pg::statement step =
      st.step_append("w-1", 0, 0, "s", "step", "succeeded", "1", std::nullopt, 1, 0.0).st;
  co_await c->run(std::move(step));
  auto rows = co_await c->exec("SELECT count(*) FROM " + detail::quote_identifier(schema) +
                               ".steps WHERE workflow_id = 'w-1'");
  CHECK(rows[0].get<int>(0) == 1);
  co_await c->exec("DROP SCHEMA " + detail::quote_identifier(schema) + " CASCADE");
}

std::string padded(std::string name, std::size_t size, const std::string& fill) {
  while (name.size() + fill.size() <= size) name += fill;
  while (name.size() < size) name += 'x';
  return name;
}

}  // namespace

TEST_CASE("a 63-byte schema name migrates, enqueues and notifies", "[pg][schema-name]") {
  const std::string ascii = padded(test::fresh_schema("long"), 63, "_abcdefghij");
  REQUIRE(ascii.size() == 63);
  CHECK(store(ascii).channel().size() == 63);
  test::run(schema_round_trip(ascii));

  // Multi-byte characters: the channel is cut at a character boundary (else the server
  // would reject it as invalid UTF-8).
  const std::string utf8 = padded(test::fresh_schema("ü"), 63, "ü");
  REQUIRE(utf8.size() == 63);
  test::run(schema_round_trip(utf8));
}

TEST_CASE("schema names up to 55 bytes keep their NOTIFY channel", "[pg][schema-name]") {
  const std::string name(55, 's');
  CHECK(store(name).channel() == "durable:" + name);
  CHECK(store("durable").channel() == "durable:durable");
  // Longer names that share their first 38 bytes still get distinct channels.
  const std::string a = std::string(60, 'a'), b = std::string(59, 'a') + "b";
  CHECK(store(a).channel() != store(b).channel());
  CHECK(store(a).channel().size() == 63);
}

TEST_CASE("a schema name containing $fn$ and a double quote migrates", "[pg][schema-name]") {
  test::run(schema_round_trip(test::fresh_schema("q") + "$fn$\"x$fn_1$"));
  test::run(schema_round_trip(test::fresh_schema("d") + "$fn$"));
}

namespace {

// The typed store: rows decoded into named fields, and the fence's verdict on each kind of
// fenced write.
asio::awaitable<void> typed_store_round_trip(std::string schema) {
  store st(schema);
  auto c = co_await pg::connection::connect(test::conninfo(), st.catalog());
  (void)co_await st.migrate(*c);

  auto insert = st.workflow_insert("w-1", "wf", "[1, 2]", "exec-1", "v1", 0);
  const auto created = co_await store::fetch_one(*c, std::move(insert));
  REQUIRE(created);
  CHECK(created->created);
  auto again = st.workflow_insert("w-1", "other", "[]", "exec-2", "v1", 0);
  const auto existing = co_await store::fetch_one(*c, std::move(again));
  REQUIRE(existing);
  CHECK(!existing->created);
  CHECK(existing->name == "wf");
  CHECK(existing->inputs == "[1, 2]");
  CHECK(existing->status == "running");

  auto get = st.workflow_get("w-1");
  const auto w = co_await store::fetch_one(*c, std::move(get));
  REQUIRE(w);
  CHECK(w->name == "wf");
  CHECK(w->status == "running");
  CHECK(!w->reason);
  CHECK(w->inputs == "[1, 2]");
  CHECK(!w->output);
  CHECK(w->executor_id == std::optional<std::string>("exec-1"));
  CHECK(w->epoch == 1);
  CHECK(w->attempts == 1);
  auto missing = st.workflow_get("w-none");
  const auto none = co_await store::fetch_one(*c, std::move(missing));
  CHECK(!none);

  // A journal row under the owner's epoch is written; under a stale one the fence raises
  // DU001, which is fenced out with the server's message.
  pg::statement row =
      st.step_append("w-1", 1, 0, "s", "step", "succeeded", "7", std::nullopt, 1, 0.0).st;
  co_await c->run(std::move(row));
  pg::statement stale = st.step_append("w-1", 0, 1, "s", "step", "failed", std::nullopt,
                                       R"({"type": "x", "message": "m"})", 2, 0.0)
                            .st;
  std::optional<fence_verdict> rejected;
  try {
    co_await c->run(std::move(stale));
  } catch (const pg::sql_error& e) {
    rejected = store::verdict(e);
  }
  REQUIRE(rejected);
  CHECK(rejected->fenced_out());
  CHECK(rejected->sqlstate == ownership_lost_sqlstate);
  CHECK(rejected->server_message.find("owned under epoch 1, not 0") != std::string::npos);
  CHECK(store::verdict(pg::sql_error("23505", "duplicate key", "x")).failed());

  auto load = st.journal_load("w-1");
  const auto journal = co_await store::fetch(*c, std::move(load));
  REQUIRE(journal.size() == 1);
  CHECK(journal[0].seq == 0);
  CHECK(journal[0].name == "s");
  CHECK(journal[0].kind == "step");
  CHECK(!journal[0].failed);
  CHECK(journal[0].output == std::optional<std::string>("7"));
  CHECK(!journal[0].error);

  // The final state: no row updated under a stale epoch is fenced out.
  fenced_write late =
      st.workflow_finish("w-1", 0, workflow_state::succeeded, "1", std::nullopt, std::nullopt);
  pg::statement late_st = std::move(late.st);
  const pg::result late_r = co_await c->run(std::move(late_st));
  CHECK(late.verdict(late_r).fenced_out());
  fenced_write finish =
      st.workflow_finish("w-1", 1, workflow_state::succeeded, "1", std::nullopt, std::nullopt);
  pg::statement finish_st = std::move(finish.st);
  const pg::result finish_r = co_await c->run(std::move(finish_st));
  CHECK(finish.verdict(finish_r).written());
  co_await c->exec("DROP SCHEMA " + detail::quote_identifier(schema) + " CASCADE");
}

}  // namespace

TEST_CASE("the typed store decodes rows by name and reports each fence's verdict", "[pg][store]") {
  test::run(typed_store_round_trip(test::fresh_schema("typed")));
}

TEST_CASE("invalid schema names are refused with a clear error", "[pg][schema-name]") {
  CHECK_THROWS_WITH(store(""), Catch::Contains("invalid schema name") && Catch::Contains("empty"));
  CHECK_THROWS_WITH(store(std::string(64, 'n')),
                    Catch::Contains("has 64 bytes") && Catch::Contains("at most 63"));
  CHECK_NOTHROW(store(std::string(63, 'n')));
  CHECK_THROWS_WITH(store(std::string("a\0b", 3)),
                    Catch::Contains("NUL character") && Catch::Contains("a\\x00b"));
}

// ---- connecting -------------------------------------------------------------------------------

TEST_CASE("passwords never appear in connection errors", "[pg][connect][secrets]") {
  struct input {
    std::string conninfo, says;
  };
  const std::vector<input> inputs = {
      {"postgresql://user:s3cret@host:notaport/db", "invalid port number \"notaport\""},
      {"postgresql://u:s3cret@[::1/db", "IPv6"},
      {"postgresql://u:s3cret@host/db?nosuchparam=1", "nosuchparam"},
      {"postgresql://u:s%33cret@host/db?port=notaport", "notaport"},
      {"postgresql://u@host/db?password=s3cret&nosuchparam=1", "nosuchparam"},
      {"postgresql://u:s3cret@127.0.0.1/db?sslmode=bogus", "bogus"},
      {"host=localhost password=s3cret port=notaport", "notaport"},
      {"host=localhost password='s3 cret\\' x' port", "missing \"=\" after \"port\""},
      {"host=localhost password = s3cret nosuchkey=1", "nosuchkey"},
      {"password=s3cret sslmode=bogus host=127.0.0.1", "bogus"},
  };
  for (const auto& in : inputs) {
    INFO(in.conninfo);
    const std::string msg = connect_error(in.conninfo);
    REQUIRE(!msg.empty());
    INFO(msg);
    CHECK(msg.find("s3cret") == std::string::npos);
    CHECK(msg.find("s3 cret") == std::string::npos);
    CHECK_THAT(msg, Catch::Contains(in.says));
    if (std::getenv("SHOW_MESSAGES")) std::printf("%s\n", msg.c_str());
  }
}

TEST_CASE("redaction removes passwords from any message quoting a conninfo",
          "[pg][connect][secrets]") {
  const std::string ci = "postgresql://u:p%40ss@h/db";
  CHECK(pg::detail::redact("failed: \"postgresql://u:p%40ss@h/db\"", ci) ==
        "failed: \"postgresql://u:***@h/db\"");
  CHECK(pg::detail::redact("decoded p@ss here", ci) == "decoded *** here");
  // Not from the conninfo at hand, but quoted in the message: still removed.
  CHECK(pg::detail::redact("at postgres://x:other@y and password='a b' and password=c d", "") ==
        "at postgres://x:***@y and password=*** and password=*** d");
}

namespace {

/// A TCP port on 127.0.0.1 whose listener completes the handshake (the kernel does that) but
/// never answers: a server that hangs.
struct silent_listener {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  silent_listener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 16) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~silent_listener() { ::close(fd); }
};

}  // namespace

TEST_CASE("connect_timeout bounds a connection attempt to a server that never answers",
          "[pg][connect][timeout]") {
  silent_listener hung;
  const std::string p = std::to_string(hung.port);
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = connect_error("host=127.0.0.1 port=" + p +
                                        " connect_timeout=1 user=u password=s3cret dbname=d");
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(msg);
  CHECK_THAT(msg, Catch::Contains("127.0.0.1:" + p) && Catch::Contains("timed out") &&
                      Catch::Contains("connect_timeout"));
  CHECK(msg.find("s3cret") == std::string::npos);
  CHECK(took < 10s);  // libpq alone would wait for ever

  // The same through PGCONNECT_TIMEOUT, and in a URL.
  ::setenv("PGCONNECT_TIMEOUT", "2", 1);
  const std::string env_msg = connect_error("postgresql://u:s3cret@127.0.0.1:" + p + "/d");
  ::unsetenv("PGCONNECT_TIMEOUT");
  CHECK_THAT(env_msg, Catch::Contains("timed out after 2 s"));
  CHECK(env_msg.find("s3cret") == std::string::npos);
}

TEST_CASE("a host list falls through a refusing host to the next", "[pg][connect][hosts]") {
  const std::string real_port = [] {
    return test::run([]() -> asio::awaitable<std::string> {
      auto c = co_await connect();
      const char* h = PQhost(c->native_handle());
      if (!h || h[0] == '/' || h[0] == '\0') co_return std::string();  // Unix socket
      co_return std::string(PQport(c->native_handle()));
    }());
  }();
  if (real_port.empty()) {
    WARN("the test server is reached over a Unix socket; skipping the host list test");
    return;
  }
  const std::string closed = std::to_string(closed_port());
  auto ci = test::with_option(test::conninfo(), "host", "127.0.0.1,localhost");
  ci = test::with_option(ci, "port", closed + "," + real_port);
  test::run([&]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(ci);
    auto r = co_await c->exec("SELECT 1");
    CHECK(r[0].get<int>(0) == 1);
    CHECK(std::string(PQport(c->native_handle())) == real_port);
  }());
  // In a URL.
  const std::string url = test::conninfo();
  const auto at = url.find('@'), slash = url.find('/', url.find("://") + 3);
  if (url.rfind("postgresql://", 0) == 0 && at != std::string::npos && slash > at) {
    const std::string multi = url.substr(0, at + 1) + "127.0.0.1:" + closed +
                              ",localhost:" + real_port + url.substr(slash);
    test::run([&]() -> asio::awaitable<void> {
      auto c = co_await pg::connection::connect(multi);
      auto r = co_await c->exec("SELECT 2");
      CHECK(r[0].get<int>(0) == 2);
    }());
  }
  // Every host failing: each one is named.
  auto none = test::with_option(test::conninfo(), "host", "127.0.0.1,no-such-host.invalid");
  none = test::with_option(none, "port", closed + "," + real_port);
  const std::string msg = connect_error(none);
  CHECK_THAT(msg, Catch::Contains("127.0.0.1:" + closed) && Catch::Contains("Connection refused") &&
                      Catch::Contains("could not resolve host name \"no-such-host.invalid\""));
}

TEST_CASE("TCP keepalives are on by default and can be tuned", "[pg][connect][keepalive]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await connect();
    const char* h = PQhost(c->native_handle());
    if (!h || h[0] == '/' || h[0] == '\0') {
      WARN("the test server is reached over a Unix socket; no keepalives to check");
      co_return;
    }
    auto sockopt = [](pg::connection& conn, int level, int name) {
      int v = -1;
      socklen_t len = sizeof v;
      ::getsockopt(PQsocket(conn.native_handle()), level, name, &v, &len);
      return v;
    };
    CHECK(sockopt(*c, SOL_SOCKET, SO_KEEPALIVE) == 1);
    CHECK(sockopt(*c, IPPROTO_TCP, TCP_KEEPIDLE) == 60);
    CHECK(sockopt(*c, IPPROTO_TCP, TCP_KEEPINTVL) == 10);
    CHECK(sockopt(*c, IPPROTO_TCP, TCP_KEEPCNT) == 6);
    const std::string tuned = test::with_option(test::conninfo(), "keepalives_idle", "30");
    auto t = co_await pg::connection::connect(tuned);
    CHECK(sockopt(*t, IPPROTO_TCP, TCP_KEEPIDLE) == 30);
    const std::string off = test::with_option(test::conninfo(), "keepalives", "0");
    auto o = co_await pg::connection::connect(off);
    CHECK(sockopt(*o, SOL_SOCKET, SO_KEEPALIVE) == 0);
  }());
}

// ---- statement deadlines ----------------------------------------------------------------------

namespace {

pg::connection_options deadline_of(std::chrono::milliseconds d) {
  pg::connection_options o;
  o.statement_timeout = d;
  return o;
}

struct timeout_seen {
  bool thrown = false;
  bool broken = false;
  std::string what, statement;
  std::chrono::milliseconds deadline{0};
  std::chrono::steady_clock::duration took{};
};

// Runs `a`, which must fail with pg::statement_timeout, and records what it said. (No co_await
// may appear in a catch handler, nor in Catch's macros.)
asio::awaitable<timeout_seen> expect_timeout_impl(asio::awaitable<pg::result> a) {
  timeout_seen seen;
  const auto start = std::chrono::steady_clock::now();
  try {
    co_await std::move(a);
  } catch (const pg::statement_timeout& e) {
    seen.thrown = true;
    seen.broken = e.connection_broken();
    seen.what = e.what();
    seen.statement = e.statement();
    seen.deadline = e.deadline();
  }
  seen.took = std::chrono::steady_clock::now() - start;
  co_return seen;
}
asio::awaitable<timeout_seen> expect_timeout(asio::awaitable<pg::result> a) {
  return expect_timeout_impl(std::move(a));
}

}  // namespace

TEST_CASE("a statement past its deadline is cancelled and the connection keeps working",
          "[pg][deadline]") {
  test::run([]() -> asio::awaitable<void> {
    auto c = co_await pg::connection::connect(test::conninfo(), {}, deadline_of(300ms));
    const int pid = c->backend_pid();
    auto seen = co_await expect_timeout(c->exec("SELECT pg_sleep(30)"));
    REQUIRE(seen.thrown);
    CHECK(!seen.broken);
    CHECK(seen.statement == "SELECT pg_sleep(30)");
    CHECK(seen.deadline == 300ms);
    CHECK_THAT(seen.what, Catch::Contains("SELECT pg_sleep(30)") && Catch::Contains("300 ms") &&
                              Catch::Contains("cancelled"));
    CHECK(seen.took < 10s);  // the statement alone would take 30 s
    CHECK(c->is_open());
    auto r = co_await c->exec("SELECT 1");
    CHECK(r[0].get<int>(0) == 1);
    CHECK(c->backend_pid() == pid);

    // Within a batch: the statement that hangs is named; the batch did not take effect.
    co_await c->exec("CREATE TEMP TABLE d (v int)");
    std::vector<pg::statement> batch;
    batch.push_back(pg::sql("INSERT INTO d VALUES (1)"));
    batch.push_back(pg::sql("SELECT pg_sleep(30)"));
    batch.push_back(pg::sql("INSERT INTO d VALUES (2)"));
    bool batch_timed_out = false;
    try {
      (void)co_await c->run_batch(std::move(batch));
    } catch (const pg::statement_timeout& e) {
      batch_timed_out = e.statement() == "SELECT pg_sleep(30)";
    }
    CHECK(batch_timed_out);
    r = co_await c->exec("SELECT count(*) FROM d");
    CHECK(r[0].get<int>(0) == 0);

    // 0 means no deadline.
    c->set_statement_timeout(0ms);
    r = co_await c->exec("SELECT pg_sleep(0.5), 2");
    CHECK(r[0].get<int>(1) == 2);
  }());
}

TEST_CASE("a pool's statement deadline applies to its connections, which stay in use",
          "[pg][deadline][pool]") {
  test::run([]() -> asio::awaitable<void> {
    pg::pool pool(co_await asio::this_coro::executor, test::conninfo(), 1, {}, deadline_of(300ms));
    CHECK(pool.options().statement_timeout == 300ms);
    int pid = 0;
    timeout_seen seen;
    {
      auto l = co_await pool.acquire();
      pid = l->backend_pid();
      seen = co_await expect_timeout(l->exec("SELECT pg_sleep(30)"));
    }
    CHECK(seen.thrown);
    CHECK(seen.took < 10s);
    auto l = co_await pool.acquire();
    CHECK(l->backend_pid() == pid);
    auto r = co_await l->exec("SELECT 3");
    CHECK(r[0].get<int>(0) == 3);
  }());
}

TEST_CASE("a statement waiting for a row lock past its deadline is cancelled",
          "[pg][deadline][lock]") {
  test::run([]() -> asio::awaitable<void> {
    const std::string table = test::fresh_schema("lock");
    auto holder = co_await connect();
    auto waiter = co_await pg::connection::connect(test::conninfo(), {}, deadline_of(300ms));
    co_await holder->exec("CREATE TABLE " + table + " (k int PRIMARY KEY, v int)");
    co_await holder->exec("INSERT INTO " + table + " VALUES (1, 0)");
    auto tx = holder->begin();
    co_await tx.exec("UPDATE " + table + " SET v = 1 WHERE k = 1");  // holds the row lock
    auto seen = co_await expect_timeout(
        waiter->exec("UPDATE " + table + " SET v = 2 WHERE k = 1 RETURNING v"));
    REQUIRE(seen.thrown);
    CHECK(!seen.broken);
    CHECK(seen.took < 10s);
    co_await tx.commit();
    // The waiter's connection is fine, and its update never happened.
    auto r = co_await waiter->exec("UPDATE " + table + " SET v = v + 10 WHERE k = 1 RETURNING v");
    CHECK(r[0].get<int>(0) == 11);
    co_await holder->exec("DROP TABLE " + table);
  }());
}

TEST_CASE("a server that does not answer the cancel either: the connection is given up",
          "[pg][deadline][failure][serial]") {
  // Freezes the backend with SIGSTOP, which needs a server on this machine that the test
  // owns (scripts/lib.sh sets DURABLE_TEST_RESTART_CMD only then).
  const char* restart = std::getenv("DURABLE_TEST_RESTART_CMD");
  if (!restart || !*restart) {
    WARN("not our own local server (DURABLE_TEST_RESTART_CMD unset): skipping");
    return;
  }
  test::run([]() -> asio::awaitable<void> {
    pg::connection_options o = deadline_of(300ms);
    o.cancel_grace = 500ms;
    pg::pool pool(co_await asio::this_coro::executor, test::conninfo(), 1, {}, o);
    auto killer = co_await connect();
    int pid = 0;
    timeout_seen seen;
    {
      auto l = co_await pool.acquire();
      pid = l->backend_pid();
      std::string cmdline;
      if (FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/cmdline").c_str(), "r")) {
        char buf[256] = {};
        cmdline.assign(buf, std::fread(buf, 1, sizeof buf - 1, f));
        std::fclose(f);
      }
      if (cmdline.find("postgres") == std::string::npos || ::kill(pid, SIGSTOP) != 0) {
        WARN("cannot freeze the backend process " << pid << ": skipping");
        co_return;
      }
      seen = co_await expect_timeout(l->exec("SELECT 42"));
      ::kill(pid, SIGCONT);
      CHECK(!l->is_open());
    }
    REQUIRE(seen.thrown);
    CHECK(seen.broken);
    CHECK_THAT(seen.what, Catch::Contains("outcome") && Catch::Contains("unknown"));
    CHECK(seen.took < 10s);
    // The pool replaced the connection.
    auto l = co_await pool.acquire();
    CHECK(l->backend_pid() != pid);
    auto r = co_await l->exec("SELECT 4");
    CHECK(r[0].get<int>(0) == 4);
    co_await killer->exec("SELECT pg_terminate_backend($1)", pid);
  }());
}
