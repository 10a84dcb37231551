-- executor_upsert
-- $1 id text
-- $2 host text
-- $3 pid integer
-- $4 app_version text
-- $5 versions text[] (a literal, built by detail::text_array)
--
-- $1 id, $2 host, $3 pid, $4 app_version, $5 versions it runs (text[], empty = all)
INSERT INTO :"schema".executors (id, host, pid, app_version, versions)
VALUES ($1, $2, $3, $4, $5::text[])
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
app_version = excluded.app_version, versions = excluded.versions, started_at = now(),
heartbeat_at = now()
