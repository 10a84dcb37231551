-- admin_list
-- $1 statuses text[]
-- $2 name text, null = any
-- $3 queue text, null = any
-- $4 executor text, null = any
-- $5 since_s double precision, null allowed
-- $6 since_at timestamptz, null allowed
-- $7 until_s double precision, null allowed
-- $8 until_at timestamptz, null allowed
-- $9 limit bigint
-- $10 offset bigint
-- $11 after_created_at timestamptz, null allowed
-- $12 after_id text, null allowed
-- $13 id_prefix text, null = any
--
-- ---- operator queries (the `durable` command-line program) ----------------------------
-- Each returns its rows as JSON objects (row_to_json), columns in order, so that the
-- program prints tables and --json from the same rows.
-- $1 statuses (text[], empty = all), $2 name, $3 queue, $4 executor (each NULL = any),
-- created: $5 at most this many seconds ago, $6 at or after, $7 at least this many
-- seconds ago, $8 before (each NULL = unbounded), $9 limit, $10 offset, $11 and $12 the
-- cursor: only rows after (created_at $11, id $12) in the order (NULL: from the start),
-- $13 only ids that start with it (a schedule's runs: '<schedule>@').
-- Newest first. steps: the steps `durable show` lists, journal rows and steps with
-- attempts but no row yet (retrying, failed for good, reset, due), counted for the rows
-- returned only. reason: why it is where it is; an error of an earlier run (last_error)
-- only while the workflow has not succeeded.
SELECT row_to_json(t)::text FROM (
SELECT p.id, p.name, p.status, p.queue, p.executor, p.created_at, p.updated_at, p.completed_at,
       (SELECT count(*) FROM :"schema".steps s WHERE s.workflow_id = p.id)
         + (SELECT count(DISTINCT a.seq) FROM :"schema".step_attempts a
             WHERE a.workflow_id = p.id
               AND NOT EXISTS (SELECT 1 FROM :"schema".steps s
                                WHERE s.workflow_id = a.workflow_id AND s.seq = a.seq))
         AS steps, p.reason
  FROM (
SELECT w.id, w.name, w.status, w.queue, w.executor_id AS executor, w.created_at, w.updated_at,
       w.completed_at, coalesce(w.status_reason, w.error->>'message',
                CASE WHEN w.status <> 'succeeded' THEN w.last_error END) AS reason
  FROM :"schema".workflows w
 WHERE (cardinality($1::text[]) = 0 OR w.status = ANY($1::text[]))
   AND ($2::text IS NULL OR w.name = $2::text)
   AND ($3::text IS NULL OR w.queue = $3::text)
   AND ($4::text IS NULL OR w.executor_id = $4::text)
   AND ($13::text IS NULL OR starts_with(w.id, $13::text))
   AND ($5::double precision IS NULL
        OR w.created_at >= now() - make_interval(secs => $5::double precision))
   AND ($6::timestamptz IS NULL OR w.created_at >= $6::timestamptz)
   AND ($7::double precision IS NULL
        OR w.created_at < now() - make_interval(secs => $7::double precision))
   AND ($8::timestamptz IS NULL OR w.created_at < $8::timestamptz)
   AND ($11::timestamptz IS NULL OR (w.created_at, w.id) < ($11::timestamptz, $12::text))
 ORDER BY w.created_at DESC, w.id DESC
 LIMIT $9 OFFSET $10) p
 ORDER BY p.created_at DESC, p.id DESC) t
