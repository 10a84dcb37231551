-- executor_heartbeat
-- $1 id text
-- $2 instance text
--
-- $1 id, $2 instance. No row updated: another process took the id over.
-- A released lease ('-infinity') stays released: a heartbeat still in flight when
-- shutdown released it must not renew it. Returns the server's clock (Unix seconds,
-- clock_timestamp()), from which the engine measures every wake-up time (server_clock).
UPDATE :"schema".executors SET heartbeat_at = now()
 WHERE id = $1 AND instance = $2 AND heartbeat_at <> '-infinity'
RETURNING extract(epoch FROM clock_timestamp())::double precision
