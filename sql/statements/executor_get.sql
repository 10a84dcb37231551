-- executor_get
-- $1 id text
--
-- $1 id: who holds it, and how long ago it heartbeat (ms).
SELECT host, pid, instance,
     CASE WHEN heartbeat_at = '-infinity' THEN 'infinity'::double precision
          ELSE (extract(epoch FROM now() - heartbeat_at) * 1000)::double precision END
FROM :"schema".executors WHERE id = $1
