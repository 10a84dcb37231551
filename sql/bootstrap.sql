-- The schema and its record of applied migrations. migrate() runs this before the migrations,
-- every time (it changes nothing once done); by hand, run it once before the first migration.
CREATE SCHEMA IF NOT EXISTS :"schema";

CREATE TABLE IF NOT EXISTS :"schema".schema_migrations (
  version     integer PRIMARY KEY,
  description text NOT NULL,
  applied_at  timestamptz NOT NULL DEFAULT now()
);
