-- executor_register
-- $1 id text
-- $2 host text
-- $3 pid integer
-- $4 app_version text
-- $5 versions text[] (a literal, built by detail::text_array)
-- $6 instance text
-- $7 lease_ms bigint
-- $8 force boolean
-- $9 workflows text[] (a literal, built by detail::text_array)
-- $10 queues text[] (a literal, built by detail::text_array)
--
-- $1 id, $2 host, $3 pid, $4 app_version, $5 versions it runs (text[], empty = all),
-- $6 instance, $7 lease timeout (ms; kept in the row since migration 17, for the view waiting),
-- $8 take the id even if its holder looks alive, $9 the workflow names it registered, $10 the
-- queues it dispatches from (both kept for the view waiting).
-- Registers this process under the id unless another live process holds it (its
-- heartbeat is younger than the lease): then no row. The row holds the server's clock (Unix
-- seconds, clock_timestamp()), the engine's first reading of it (server_clock).
INSERT INTO :"schema".executors AS e (id, host, pid, app_version, versions,
                               instance, lease_ms, workflows, queues)
VALUES ($1, $2, $3, $4, $5::text[], $6, $7::bigint, $9::text[], $10::text[])
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
app_version = excluded.app_version, versions = excluded.versions, instance = excluded.instance,
lease_ms = excluded.lease_ms, workflows = excluded.workflows, queues = excluded.queues,
started_at = now(), heartbeat_at = now()
WHERE e.instance = excluded.instance OR $8::boolean
   OR e.heartbeat_at < now() - make_interval(secs => $7::double precision / 1000)
RETURNING extract(epoch FROM clock_timestamp())::double precision
