-- workflow_fork
-- $1 id text
-- $2 new_id text
-- $3 from_step integer
-- $4 app_version text
--
-- $1 source id, $2 new id, $3 first step not copied, $4 app_version. A new workflow
-- (due at once) with the source's name, inputs and generation (the journal is that
-- generation's, and ctx.generation() and the keys must replay alike) and a copy of its
-- journal rows and recorded attempts before step $3 (a step failure the workflow handled
-- replays as such) and the stream values those steps and earlier generations wrote (the
-- copied steps replay without writing them again), in the source's trace (its trace context); the source is not touched.
-- One row: (source found, created, rows copied).
WITH src AS (
SELECT id, name, inputs, queue, priority, generation, traceparent, tracestate
  FROM :"schema".workflows WHERE id = $1),
ins AS (
INSERT INTO :"schema".workflows (id, name, status, inputs, queue, priority, wake_at, app_version,
                           forked_from, generation, traceparent, tracestate)
SELECT $2, name, 'sleeping', inputs, queue, priority, now(), $4, id, generation, traceparent,
       tracestate
  FROM src
ON CONFLICT (id) DO NOTHING
RETURNING id),
copied AS (
INSERT INTO :"schema".steps (workflow_id, seq, name, kind, status, output, error, attempts, epoch,
                       started_at, completed_at)
SELECT $2, s.seq, s.name, s.kind, s.status, s.output, s.error, s.attempts, 0, s.started_at,
       s.completed_at
  FROM :"schema".steps s WHERE s.workflow_id = $1 AND s.seq < $3 AND EXISTS (SELECT 1 FROM ins)
RETURNING 1),
history AS (
INSERT INTO :"schema".step_attempts (workflow_id, seq, attempt, name, kind, outcome, error, epoch,
                               started_at, ended_at, next_attempt_at)
SELECT $2, a.seq, a.attempt, a.name, a.kind, a.outcome, a.error, 0, a.started_at, a.ended_at,
       a.next_attempt_at
  FROM :"schema".step_attempts a
 WHERE a.workflow_id = $1 AND a.seq < $3 AND EXISTS (SELECT 1 FROM ins)
 ORDER BY a.id),
streamed AS (
INSERT INTO :"schema".streams (workflow_id, key, position, value, generation, seq, written_at)
SELECT $2, v.key, v.position, v.value, v.generation, v.seq, v.written_at
  FROM :"schema".streams v, src
 WHERE v.workflow_id = $1 AND EXISTS (SELECT 1 FROM ins)
   AND (v.generation < src.generation OR (v.generation = src.generation AND v.seq < $3)))
SELECT EXISTS (SELECT 1 FROM src), EXISTS (SELECT 1 FROM ins),
       (SELECT count(*) FROM copied)::integer
