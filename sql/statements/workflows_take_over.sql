-- workflows_take_over
-- $1 executor_id text
-- $2 lease_ms bigint
-- $3 names text[] (a literal, built by detail::text_array)
-- $4 limit bigint
-- $5 versions text[] (a literal, built by detail::text_array)
--
-- $1 this executor, $2 lease timeout (ms), $3 workflow names it runs (text[]),
-- $4 how many at most, $5 versions it runs (text[], empty = all). SKIP LOCKED: two live
-- executors never take the same workflow;
-- the new owner then claims each one, which bumps its epoch (I3).
WITH dead AS (
SELECT id FROM :"schema".executors
 WHERE id <> $1 AND heartbeat_at < now() - make_interval(secs => $2::double precision / 1000)),
taken AS (
SELECT w.id FROM :"schema".workflows w
 WHERE w.executor_id IN (SELECT id FROM dead) AND w.status IN ('pending', 'running')
   AND w.name = ANY($3::text[])
   AND (cardinality($5::text[]) = 0 OR w.app_version = ANY($5::text[]))
 ORDER BY w.created_at LIMIT $4
 FOR UPDATE OF w SKIP LOCKED)
UPDATE :"schema".workflows w SET executor_id = $1, updated_at = now()
FROM taken WHERE w.id = taken.id
RETURNING w.id
