-- executor_heartbeat
-- $1 id text
-- $2 instance text
--
-- $1 id, $2 instance. No row updated: another process took the id over.
-- A released lease ('-infinity') stays released: a heartbeat still in flight when
-- shutdown released it must not renew it.
UPDATE :"schema".executors SET heartbeat_at = now()
 WHERE id = $1 AND instance = $2 AND heartbeat_at <> '-infinity'
