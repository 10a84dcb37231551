-- workflow_await
-- $1 id text
-- $2 channel text
--
-- $1 id, $2 the enqueue channel (store::channel).
-- A result() about to wait for a workflow of another process marks it (migration 15), so that
-- its end is told on the result channel. The row lock orders the mark and the end: either the
-- end's update sees the mark, or the mark sees the end and updates nothing. A row: the
-- workflow is unfinished and marked (again, if another result() marked it before: the mark
-- stays on across a resume or retry). No row: the workflow ended, or does not exist
-- (workflow_get tells which).
-- The mark holds the row's lock for an instant, and the statements that wake or dispatch
-- workflows skip locked rows: a workflow marked while it waits to be claimed (sleeping or
-- pending) is announced on the enqueue channel once the mark commits, so that the executors
-- look again at once instead of at their next tick.
WITH marked AS (
UPDATE :"schema".workflows SET awaited = true
 WHERE id = $1
   AND status NOT IN ('succeeded', 'failed', 'cancelled', 'parked', 'dead_letter')
RETURNING name, status, status_reason, inputs::text AS inputs, output::text AS output,
     error::text AS error, executor_id, epoch, attempts, traceparent),
told AS (
SELECT pg_notify($2, '') FROM marked WHERE status IN ('sleeping', 'pending'))
SELECT m.name, m.status, m.status_reason, m.inputs, m.output, m.error, m.executor_id, m.epoch,
       m.attempts, m.traceparent
  FROM marked m CROSS JOIN (SELECT count(*) FROM told) t
