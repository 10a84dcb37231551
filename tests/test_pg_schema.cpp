// The PostgreSQL layer against a real server: schema migrations, the typed states against the
// CHECK constraints, the SQL files of sql/, schema names, and the typed store.
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
using test::connect;
using test::sleep_for;

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

TEST_CASE("a migration waits and runs whatever the connection's statement_timeout",
          "[pg][migrate]") {
  // The application's conninfo bounds every statement by 100 ms; another process holds the
  // schema's migration lock for longer than that. The migration waits its turn and runs, and the
  // connection's own statements keep their timeout afterwards.
  constexpr int timeout_ms = 100;
  const std::string schema = test::fresh_schema("migto");
  const auto key = detail::fnv1a("durable.migrate:" + schema);
  test::run([&]() -> asio::awaitable<void> {
    auto holder = co_await connect();
    co_await holder->exec("SELECT pg_advisory_lock($1)", key);
    auto c = co_await pg::connection::connect(test::with_option(
        test::conninfo(), "options", "-c statement_timeout=" + std::to_string(timeout_ms)));
    auto ex = co_await asio::this_coro::executor;
    bool migrated = false;
    std::exception_ptr failed;
    asio::co_spawn(
        ex,
        [&]() -> asio::awaitable<void> {
          store st(schema);
          co_await st.migrate(*c);
          migrated = true;
        },
        [&](std::exception_ptr e) { failed = e; });
    // Until the migration waits for the lock, then three of its timeouts more.
    auto watch = co_await connect();
    for (;;) {
      auto r = co_await watch->exec(
          "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
      if (r[0].get<long>(0) > 0 || failed) break;
      co_await sleep_for(std::chrono::milliseconds(5));
    }
    co_await sleep_for(std::chrono::milliseconds(3 * timeout_ms));
    co_await holder->exec("SELECT pg_advisory_unlock($1)", key);
    while (!migrated && !failed) co_await sleep_for(std::chrono::milliseconds(5));
    std::string why;
    if (failed) {
      try {
        std::rethrow_exception(failed);
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    INFO(why);
    CHECK(migrated);
    const auto slow = co_await test::error_of<pg::error>(c->exec("SELECT pg_sleep(1)"));
    REQUIRE(slow);
    CHECK_THAT(*slow, Catch::Contains("57014"));
    co_await watch->exec("DROP SCHEMA " + detail::quote_identifier(schema) + " CASCADE");
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
           "' -v wait_channel='" + psql_store.wait_channel() + "' -v result_channel='" +
           psql_store.result_channel() + "' -f '" + file + "'";
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
