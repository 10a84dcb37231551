// The non-template part of durable/store.hpp (the schema's migrations, the statement texts,
// migrate and version): included at its end when header-only, by durable/src.hpp otherwise.
// The SQL itself is in sql/, embedded into durable/detail/sql_text.hpp by cmake/embed_sql.cmake.
#pragma once

#include "durable/detail/sql_text.hpp"

namespace durable {
namespace detail {

DURABLE_DECL const std::vector<migration>& migrations() {
  static const std::vector<migration> all = [] {
    std::vector<migration> out;
    for (const auto& m : sql::migrations)
      out.push_back({m.version, m.name, m.description, m.sha256, m.text});
    return out;
  }();
  return all;
}

}  // namespace detail

DURABLE_DECL const std::vector<std::pair<std::string_view, std::string_view>>& store::texts() {
  static const std::vector<std::pair<std::string_view, std::string_view>> all = [] {
    std::vector<std::pair<std::string_view, std::string_view>> out;
    for (const auto& st : detail::sql::statements) out.emplace_back(st.name, st.text);
    return out;
  }();
  return all;
}

DURABLE_DECL asio::awaitable<int> store::version(pg::connection& c) const {
  pg::statement exists = pg::sql("SELECT CASE WHEN to_regclass($1) IS NULL THEN 0 ELSE 1 END",
                                 schema_ + ".schema_migrations");
  auto r = co_await c.run(std::move(exists));
  if (r[0].get<int>(0) == 0) co_return 0;
  pg::statement max_version =
      plain("SELECT coalesce(max(version), 0) FROM :\"schema\".schema_migrations");
  auto v = co_await c.run(std::move(max_version));
  co_return v[0].get<int>(0);
}

DURABLE_DECL asio::awaitable<int> store::migrate(pg::connection& c) const {
  // The files' psql variables: what `psql -v schema=... -v channel=... -v wait_channel=...
  // -v result_channel=...` is given when a migration is applied by hand (docs/architecture.md,
  // "The SQL files").
  const detail::sql_variables vars{{"\"schema\"", schema_},
                                   {"'channel'", detail::quote_literal(channel())},
                                   {"'wait_channel'", detail::quote_literal(wait_channel())},
                                   {"'result_channel'", detail::quote_literal(result_channel())}};
  const auto& all = detail::migrations();
  int applied = 0;
  // Each migration commits with its version row in a transaction of its own, so that a later one
  // runs without the locks of an earlier one (migration 11 validates the check that migration 6
  // added NOT VALID, without the exclusive lock that 6 took). Every transaction takes the
  // schema's advisory lock and then reads the version: processes migrating at once take turns,
  // and each applies only what is still missing.
  for (bool first = true;; first = false) {
    auto tx = c.begin();
    // The transaction's statements have no statement_timeout: a conninfo's or a role's is meant
    // for the application's queries, not for waiting while another process migrates, or for
    // building an index over a large table (lock_timeout still applies). Then the lock: even
    // CREATE SCHEMA IF NOT EXISTS races between sessions. One round trip.
    std::vector<pg::statement> lock;
    lock.push_back(plain("SELECT set_config('statement_timeout', '0', true)"));
    lock.push_back(pg::sql("SELECT pg_advisory_xact_lock($1)",
                           detail::fnv1a("durable.migrate:" + schema_name_)));
    co_await tx.run_batch(std::move(lock));
    if (first) {
      std::vector<pg::statement> bootstrap;
      for (auto& text : detail::sql_statements(detail::sql::bootstrap, vars))
        bootstrap.push_back(pg::statement{std::move(text), {}, false});
      co_await tx.run_batch(std::move(bootstrap));
    }
    pg::statement max_version =
        plain("SELECT coalesce(max(version), 0) FROM :\"schema\".schema_migrations");
    auto r = co_await tx.run(std::move(max_version));
    const int current = r[0].get<int>(0);
    if (current > latest_version())
      throw schema_too_new(
          "the database schema '" + schema_name_ + "' is at version " + std::to_string(current) +
          " but this build of durable knows versions up to " + std::to_string(latest_version()) +
          "; upgrade the library in this application, or use another schema");
    if (current == latest_version()) {
      co_await tx.commit();
      break;
    }
    const detail::migration& m = all[std::size_t(current)];  // version current + 1
    std::vector<pg::statement> batch;
    for (auto& text : detail::sql_statements(m.text, vars))
      batch.push_back(pg::statement{std::move(text), {}, false});
    batch.push_back(
        pg::sql(plain("INSERT INTO :\"schema\".schema_migrations (version, description) "
                      "VALUES ($1, $2)")
                    .text,
                m.version, std::string(m.description)));
    co_await tx.run_batch(std::move(batch));
    co_await tx.commit();
    ++applied;
  }
  co_return applied;
}

}  // namespace durable
