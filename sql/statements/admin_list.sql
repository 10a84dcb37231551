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
-- $14 scan bigint, null = unbounded
-- $15 changed_since_s double precision, null allowed
-- $16 retrying boolean
-- $17 text text, null = any
--
-- ---- operator queries (the `durable` command-line program, the web console) ---------------
-- Each returns its rows as JSON objects (row_to_json), columns in order, so that the
-- program prints tables and --json from the same rows.
-- $1 statuses (text[], empty = all), $2 name, $3 queue, $4 executor (each NULL = any),
-- created: $5 at most this many seconds ago, $6 at or after, $7 at least this many
-- seconds ago, $8 before (each NULL = unbounded), $9 limit, $10 offset, $11 and $12 the
-- cursor: only rows after (created_at $11, id $12) in the order (NULL: from the start),
-- $13 only ids that start with it (a schedule's runs: '<schedule>@'), $14 how many rows of
-- each status past the cursor it may look at (NULL: all), $15 only rows changed (updated_at) at
-- most this many seconds ago, $16 only workflows retrying a step (its latest attempt says
-- 'retrying' and it has no journal row yet), $17 only rows that hold this text, in any case, in
-- their id, inputs (as JSON text), last error, error message or status reason. A status named
-- twice counts once.
-- Newest first. Each status is read from workflows_status_created, newest first from the cursor
-- and within the time range (index conditions), and the merged heads are sorted: a status few
-- rows have costs a probe. Name, queue, executor, id prefix, change time, retrying and text are
-- filters on those rows; with
-- $14 a status stops after $14 rows, and its last row read is returned as a row of its own,
-- {"scanned_to": {"created_at", "id"}}, the newest such edge of all statuses (a status of exactly
-- $14 rows has none: one row more is read to tell): every row of the
-- filter newer than the edge has been found (rows past it are left out, as another status may
-- hold unread rows between), and a next request with the edge as its cursor goes on from there.
-- steps: the steps `durable show` lists, journal rows and steps with attempts but no row yet
-- (retrying, failed for good, reset, due), counted for the rows returned only. reason: why it
-- is where it is: for a workflow that has not ended, what it waits for (the view waiting;
-- blocked: it cannot move on its own); else its status reason or error, and an error of an
-- earlier run (last_error) unless it succeeded.
WITH head AS (
SELECT v.id, v.created_at, v.hit, v.edge
  FROM unnest(CASE WHEN cardinality($1::text[]) = 0
                   THEN ARRAY['pending', 'running', 'sleeping', 'succeeded', 'failed', 'parked',
                              'cancelled', 'dead_letter']
                   ELSE ARRAY(SELECT DISTINCT unnest($1::text[])) END) AS s(status)
 CROSS JOIN LATERAL (
   SELECT m.id, m.created_at, m.hit, m.edge FROM (
     SELECT r.id, r.created_at,
            row_number() OVER (ORDER BY r.created_at DESC, r.id DESC) AS rn,
            -- the last row allowed is an edge only when a row past it exists
            coalesce(row_number() OVER (ORDER BY r.created_at DESC, r.id DESC) = $14::bigint
                     AND lead(r.id) OVER (ORDER BY r.created_at DESC, r.id DESC) IS NOT NULL,
                     false) AS edge,
            ($2::text IS NULL OR r.name = $2::text)
              AND ($3::text IS NULL OR r.queue = $3::text)
              AND ($4::text IS NULL OR r.executor_id = $4::text)
              AND ($13::text IS NULL OR starts_with(r.id, $13::text)) AND r.held AS hit
       FROM (SELECT w.id, w.created_at, w.name, w.queue, w.executor_id,
                    -- what the row holds: changed since $15, retrying a step ($16), text $17
                    ($15::double precision IS NULL
                       OR w.updated_at >= now() - make_interval(secs => $15::double precision))
                    AND (NOT coalesce($16::boolean, false) OR EXISTS (
                          SELECT 1 FROM :"schema".step_retries r
                           WHERE r.workflow_id = w.id AND r.outcome = 'retrying'))
                    AND ($17::text IS NULL
                         OR strpos(lower(w.id), lower($17::text)) > 0
                         OR strpos(lower(w.inputs::text), lower($17::text)) > 0
                         OR strpos(lower(coalesce(w.last_error, '')), lower($17::text)) > 0
                         OR strpos(lower(coalesce(w.error->>'message', '')), lower($17::text)) > 0
                         OR strpos(lower(coalesce(w.status_reason, '')), lower($17::text)) > 0)
                      AS held
               FROM :"schema".workflows w
              WHERE w.status = s.status
                AND w.created_at >= coalesce(greatest(now() - make_interval(
                                               secs => $5::double precision), $6::timestamptz),
                                             '-infinity')
                AND w.created_at < coalesce(least(now() - make_interval(
                                              secs => $7::double precision), $8::timestamptz),
                                            'infinity')
                AND (w.created_at, w.id) < (coalesce($11::timestamptz, 'infinity'),
                                            coalesce($12::text, ''))
              ORDER BY w.created_at DESC, w.id DESC
              LIMIT $14::bigint + 1) r) m
    WHERE ($14::bigint IS NULL OR m.rn <= $14::bigint) AND (m.hit OR m.edge)
    LIMIT $9::bigint + $10::bigint + 1) v),
edge AS (
SELECT h.created_at, h.id FROM head h WHERE h.edge ORDER BY h.created_at DESC, h.id DESC LIMIT 1),
page AS (
SELECT h.id FROM head h
 WHERE h.hit
   AND NOT EXISTS (SELECT 1 FROM edge e WHERE (h.created_at, h.id) < (e.created_at, e.id))
 ORDER BY h.created_at DESC, h.id DESC
 LIMIT $9 OFFSET $10)
SELECT row_to_json(t)::text FROM (
SELECT p.id, p.name, p.status, p.queue, p.executor, p.created_at, p.updated_at, p.completed_at,
       (SELECT count(*) FROM :"schema".steps s WHERE s.workflow_id = p.id)
         + (SELECT count(DISTINCT a.seq) FROM :"schema".step_attempts a
             WHERE a.workflow_id = p.id
               AND NOT EXISTS (SELECT 1 FROM :"schema".steps s
                                WHERE s.workflow_id = a.workflow_id AND s.seq = a.seq))
         AS steps, p.reason, p.blocked
  FROM (
SELECT w.id, w.name, w.status, w.queue, w.executor_id AS executor, w.created_at, w.updated_at,
       w.completed_at,
       -- unfinished: why it waits (the view waiting); ended: its reason or error
       CASE WHEN w.status IN ('pending', 'running', 'sleeping') THEN x.reason
            ELSE coalesce(w.status_reason, w.error->>'message',
                          CASE WHEN w.status <> 'succeeded' THEN w.last_error END) END AS reason,
       x.blocked
  FROM page g JOIN :"schema".workflows w ON w.id = g.id
  LEFT JOIN :"schema".waiting x ON x.id = g.id) p
 ORDER BY p.created_at DESC, p.id DESC) t
UNION ALL
SELECT json_build_object('scanned_to', json_build_object('created_at', e.created_at, 'id', e.id))::text
  FROM edge e
