-- workflows_wake
-- $1 executor_id text
-- $2 names text[] (a literal, built by detail::text_array)
-- $3 versions text[] (a literal, built by detail::text_array)
-- $4 limit bigint
-- $5 busy text[]
--
-- $1 this executor, $2 workflow names it runs (text[]), $3 versions it runs (text[],
-- empty = all), $4 how many at most, $5 ids it still runs (text[]: not woken now).
-- Sleeping workflows whose wake-up is due move to this executor (to be claimed next);
-- SKIP LOCKED: two executors never take the same. A queue with a concurrency limit wakes
-- only as many as it has room for (running, or claimed and about to run), oldest due
-- first; this is checked without the queue's lock, so two executors waking at the same
-- moment may exceed it; rate limits and worker_concurrency do not apply to wake-ups.
WITH candidates AS (
SELECT w.id, w.queue, w.wake_at,
       row_number() OVER (PARTITION BY w.queue ORDER BY w.wake_at, w.id) AS place
  FROM :"schema".workflows w
 WHERE w.status = 'sleeping' AND w.wake_at <= now() AND w.name = ANY($2::text[])
   AND (cardinality($3::text[]) = 0 OR w.app_version = ANY($3::text[]))
   AND NOT (w.id = ANY($5::text[]))),
room AS (
SELECT q.name, q.concurrency - (SELECT count(*) FROM :"schema".workflows r
                                 WHERE r.queue = q.name
                                   AND (r.status = 'running'
                                        OR (r.status = 'pending' AND r.executor_id IS NOT NULL)))
         AS free
  FROM :"schema".queues q WHERE q.concurrency IS NOT NULL),
due AS (
SELECT w.id FROM :"schema".workflows w
  JOIN candidates c ON c.id = w.id
  LEFT JOIN room ON room.name = c.queue
 WHERE w.status = 'sleeping' AND (room.name IS NULL OR c.place <= room.free)
 ORDER BY c.wake_at LIMIT $4
 FOR UPDATE OF w SKIP LOCKED)
UPDATE :"schema".workflows w SET status = 'pending', executor_id = $1, wake_at = NULL,
       wait_for = NULL, woken = true, updated_at = now()
  FROM due WHERE w.id = due.id
RETURNING w.id
