-- executor_release
-- $1 id text
-- $2 instance text
--
-- $1 id, $2 instance. Graceful shutdown: the lease ends now, so others take over at once.
UPDATE :"schema".executors SET heartbeat_at = '-infinity'
 WHERE id = $1 AND instance = $2
