-- workflows_delete_finished
-- $1 age_ms bigint
-- $2 limit bigint
-- $3 statuses text[] (a literal, built by detail::text_array)
--
-- $1 age (ms), $2 how many at most, $3 statuses (text[]). Retention and `durable gc`:
-- deletes finished workflows (succeeded, failed, cancelled; those of $3) that completed
-- longer than $1 ago, oldest first, with their journal, attempts, messages, events,
-- streams and history. SKIP LOCKED and a small batch: no long locks, and a workflow being resumed or
-- read is left for the next round. Dead letters and parked workflows wait for a person
-- and are never deleted; nor is a child whose parent is unfinished (the parent reads
-- its result when it awaits it, perhaps after a retry). Returns the ids deleted.
WITH doomed AS (
SELECT w.id FROM :"schema".workflows w
 WHERE w.status IN ('succeeded', 'failed', 'cancelled') AND w.status = ANY($3::text[])
   AND w.completed_at < now() - make_interval(secs => $1::double precision / 1000)
   AND (w.parent_id IS NULL OR NOT EXISTS (
         SELECT 1 FROM :"schema".workflows p WHERE p.id = w.parent_id
            AND p.status NOT IN ('succeeded', 'failed', 'cancelled')))
 ORDER BY w.completed_at LIMIT $2 FOR UPDATE OF w SKIP LOCKED),
journal AS (DELETE FROM :"schema".steps WHERE workflow_id IN (SELECT id FROM doomed)),
attempts AS (DELETE FROM :"schema".step_attempts WHERE workflow_id IN (SELECT id FROM doomed)),
inbox AS (DELETE FROM :"schema".messages WHERE workflow_id IN (SELECT id FROM doomed)),
published AS (DELETE FROM :"schema".events WHERE workflow_id IN (SELECT id FROM doomed)),
streamed AS (DELETE FROM :"schema".streams WHERE workflow_id IN (SELECT id FROM doomed)),
history AS (DELETE FROM :"schema".workflow_history WHERE workflow_id IN (SELECT id FROM doomed))
DELETE FROM :"schema".workflows w USING doomed WHERE w.id = doomed.id
RETURNING w.id
