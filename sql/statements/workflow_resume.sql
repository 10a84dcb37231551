-- workflow_resume
-- $1 id text
-- $2 statuses text[] (a literal, built by detail::text_array)
--
-- $1 id, $2 statuses it may have (text[]). A cancelled, parked or dead-lettered
-- workflow becomes due at once (any executor claims it and replays its journal); its
-- deadline and its count of claims without progress are cleared. A dead-lettered one
-- (also one cancelled since) gets a 'reset' row after its failed step's attempts: that
-- step runs again, and the failed attempts stay in the history. A step waiting for its
-- next attempt gets a 'due' row: the attempt is due now (the count goes on). One row (the
-- status it had),
-- none when it had
-- another status or does not exist.
WITH old AS (
SELECT id, status, (error->>'seq')::integer AS seq FROM :"schema".workflows
 WHERE id = $1 AND status = ANY($2::text[]) FOR UPDATE),
w AS (
UPDATE :"schema".workflows w
   SET status = 'sleeping', wake_at = now(), executor_id = NULL, deadline = NULL,
       status_reason = NULL, error = NULL, output = NULL, completed_at = NULL,
       stalled_claims = 0, updated_at = now()
  FROM old WHERE w.id = old.id
RETURNING w.id, w.epoch, old.status, old.seq),
last AS (
SELECT DISTINCT ON (a.seq) a.seq, a.attempt, a.name, a.kind, a.outcome
  FROM :"schema".step_attempts a, w
 WHERE a.workflow_id = w.id AND a.seq = w.seq ORDER BY a.seq, a.id DESC),
reset AS (
INSERT INTO :"schema".step_attempts (workflow_id, seq, attempt, name, kind, outcome, epoch, started_at)
SELECT w.id, last.seq, last.attempt, last.name, last.kind, 'reset', w.epoch, now()
  FROM w JOIN last ON last.seq = w.seq
 WHERE last.outcome = 'failed'
RETURNING 1),
pending AS (
SELECT DISTINCT ON (a.seq) a.seq, a.attempt, a.name, a.kind, a.outcome, a.next_attempt_at
  FROM :"schema".step_attempts a, w
 WHERE a.workflow_id = w.id
   AND NOT EXISTS (SELECT 1 FROM :"schema".steps s WHERE s.workflow_id = a.workflow_id AND s.seq = a.seq)
 ORDER BY a.seq, a.id DESC),
due AS (
INSERT INTO :"schema".step_attempts (workflow_id, seq, attempt, name, kind, outcome, epoch, started_at)
SELECT w.id, pending.seq, pending.attempt, pending.name, pending.kind, 'due', w.epoch, now()
  FROM w, pending
 WHERE pending.outcome = 'retrying' AND pending.next_attempt_at > now()
RETURNING 1)
SELECT w.status, (SELECT count(*) FROM reset)::integer, (SELECT count(*) FROM due)::integer
  FROM w
