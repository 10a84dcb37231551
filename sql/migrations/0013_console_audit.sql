-- console audit, list index
-- What operators did through the console (docs/console.md#audit): one row per action, single or
-- bulk, whatever its result, written after the action (a refused or failed action too). The
-- console shows the table and `durable audit` prints it; it is meant to be read in SQL as well.
CREATE TABLE :"schema".audit (
  id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at       timestamptz NOT NULL DEFAULT now(),
  -- Who: the name given when signing in to the console, or 'token' for a request that carried
  -- the token itself (Authorization: Bearer).
  actor    text NOT NULL,
  -- Through what ('console') and from which client address.
  via      text NOT NULL,
  address  text NOT NULL DEFAULT '',
  -- cancel, resume, retry, fork, send, pause_queue, resume_queue, pause_schedule,
  -- resume_schedule, trigger_schedule; bulk_cancel, bulk_resume, bulk_retry.
  action   text NOT NULL,
  -- What it applied to: {"id": ...}, {"queue": ...}, {"schedule": ...}, or for a bulk action
  -- {"filter": {...}, "ids": [...]}.
  target   jsonb NOT NULL,
  -- Workflows (or queues, schedules) it changed.
  count    bigint NOT NULL DEFAULT 0,
  result   text NOT NULL CHECK (result IN ('done', 'refused', 'failed')),
  detail   text NOT NULL DEFAULT ''
);
CREATE INDEX audit_at ON :"schema".audit (at);

-- The console's workflow list pages newest first, by (created_at, id): an index in that order
-- keeps each page a short index scan however large the table is.
CREATE INDEX workflows_created ON :"schema".workflows (created_at, id);

-- The overview counts the workflows of each unfinished status exactly (admin_stats.sql):
-- pending, running and sleeping over workflows_open_by_executor, parked and dead letters over
-- this one, which holds only the rows that wait for a person.
CREATE INDEX workflows_stopped ON :"schema".workflows (status)
  WHERE status IN ('parked', 'dead_letter');
