-- journaled retries, dead letters, deadlines, cancellation, fork

-- NOT VALID: adding the check scans no row (the table is locked only for a moment); migration 11
-- validates it in a transaction of its own, which scans the table without blocking writes.
ALTER TABLE :"schema".workflows DROP CONSTRAINT workflows_status_check;

ALTER TABLE :"schema".workflows ADD CONSTRAINT workflows_status_check CHECK (status IN
  ('pending', 'running', 'sleeping', 'succeeded', 'failed', 'parked', 'cancelled', 'dead_letter'))
  NOT VALID;

ALTER TABLE :"schema".workflows ADD COLUMN forked_from text;

-- Attempts are history: a failed attempt is a row of its own, never an update. A
-- step's outcome stays in steps; here are the attempts that failed before it (or
-- instead of it: 'failed' is a final failure), the operator's retries ('reset': a
-- fresh count of attempts) and resumes ('due': the next attempt is due now).
CREATE TABLE :"schema".step_attempts (
  id              bigserial PRIMARY KEY,
  workflow_id     text NOT NULL,
  seq             integer NOT NULL,
  attempt         integer NOT NULL,
  name            text NOT NULL,
  kind            text NOT NULL,
  outcome         text NOT NULL CHECK (outcome IN ('retrying', 'failed', 'reset', 'due')),
  error           jsonb,
  epoch           bigint NOT NULL,
  started_at      timestamptz,
  ended_at        timestamptz NOT NULL DEFAULT now(),
  next_attempt_at timestamptz
);

CREATE UNIQUE INDEX step_attempts_unique ON :"schema".step_attempts (workflow_id, seq, attempt)
  WHERE outcome IN ('retrying', 'failed');

CREATE INDEX step_attempts_by_step ON :"schema".step_attempts (workflow_id, seq, id);

-- Due wake-ups (retries after a long backoff, resumed workflows) by an index.
CREATE INDEX workflows_due ON :"schema".workflows (wake_at) WHERE status = 'sleeping';

CREATE INDEX workflows_deadline ON :"schema".workflows (deadline)
  WHERE deadline IS NOT NULL AND status IN ('pending', 'running', 'sleeping');

-- The latest attempt of every step that has no journal row: what is being retried,
-- when next, and why; and what failed for good (SELECT * FROM step_retries).
CREATE VIEW :"schema".step_retries AS
SELECT DISTINCT ON (a.workflow_id, a.seq)
       a.workflow_id, w.name AS workflow, w.status, w.status_reason, a.seq, a.name AS step,
       a.kind, a.attempt, a.outcome, a.error->>'type' AS error_type,
       a.error->>'message' AS last_error, a.ended_at AS last_attempt_at, a.next_attempt_at,
       (SELECT count(*) FROM :"schema".step_attempts c
         WHERE c.workflow_id = a.workflow_id AND c.seq = a.seq
           AND c.outcome IN ('retrying', 'failed'))
         AS failed_attempts
  FROM :"schema".step_attempts a
  JOIN :"schema".workflows w ON w.id = a.workflow_id
 WHERE NOT EXISTS (SELECT 1 FROM :"schema".steps s WHERE s.workflow_id = a.workflow_id AND s.seq = a.seq)
 ORDER BY a.workflow_id, a.seq, a.id DESC;
