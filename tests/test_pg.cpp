// The PostgreSQL layer against a real server: connections, types, pipelines, transactions,
// the pool, LISTEN/NOTIFY, migrations, and a server restart under a live pool.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <durable/detail/group_commit.hpp>
#include <durable/pg.hpp>
#include <durable/store.hpp>
#include <limits>
#include <set>

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
      auto commit = co_await test::error_of<durable::error>(tx.commit());
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
    auto missing = co_await test::error_of<durable::error>(c->run(pg::prepared("missing")));
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

TEST_CASE("the server restarted under a live pool", "[pg][pool][failure][restart]") {
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
