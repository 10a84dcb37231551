-- schedules, paused queues, debounce
-- Cron schedules that start workflows (docs/schedules.md). A schedule's row is its whole state:
-- executors fire the due ones from their maintenance tick with one SKIP LOCKED query over the
-- partial index below, so an idle schedule costs a row and nothing else. Each slot's workflow
-- id is '<schedule id>@<slot as local ISO 8601 with its offset>', so a slot starts at most one
-- workflow however many executors race for it.

CREATE TABLE :"schema".schedules (
  id              text PRIMARY KEY CHECK (id <> '' AND position('@' IN id) = 0),
  cron            text NOT NULL,
  time_zone       text NOT NULL DEFAULT 'UTC',
  workflow_name   text NOT NULL,
  inputs          jsonb NOT NULL DEFAULT '[]',
  queue           text NOT NULL DEFAULT 'default',
  priority        integer NOT NULL DEFAULT 0,
  timeout_ms      bigint NOT NULL DEFAULT 0 CHECK (timeout_ms >= 0),
  app_version     text NOT NULL DEFAULT '',
  catch_up        text NOT NULL DEFAULT 'skip' CHECK (catch_up IN ('skip', 'latest', 'all')),
  catch_up_max    integer NOT NULL DEFAULT 100 CHECK (catch_up_max > 0),
  late_after_ms   bigint NOT NULL DEFAULT 60000 CHECK (late_after_ms > 0),
  jitter_ms       bigint NOT NULL DEFAULT 0 CHECK (jitter_ms >= 0),
  -- The slot (local ISO 8601 text) goes first in the workflow's arguments.
  pass_slot       boolean NOT NULL DEFAULT false,
  start_at        timestamptz,
  end_at          timestamptz,
  paused          boolean NOT NULL DEFAULT false,
  -- The next slot not yet fired (null: none left before end_at, or the expression has none).
  next_fire_at    timestamptz,
  last_slot_at    timestamptz,
  last_fired_at   timestamptz,
  last_workflow_id text,
  fired           bigint NOT NULL DEFAULT 0,
  missed          bigint NOT NULL DEFAULT 0,
  late            bigint NOT NULL DEFAULT 0,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  CHECK (end_at IS NULL OR start_at IS NULL OR end_at > start_at)
);

CREATE INDEX schedules_due ON :"schema".schedules (next_fire_at)
  WHERE NOT paused AND next_fire_at IS NOT NULL;

-- One row per schedule, with the status of the workflow its last slot started.
CREATE VIEW :"schema".schedules_overview AS
SELECT s.id, s.cron, s.time_zone, s.workflow_name, s.queue, s.paused, s.catch_up,
       s.next_fire_at, s.last_slot_at, s.last_fired_at, s.last_workflow_id,
       w.status AS last_status, s.fired, s.missed, s.late
  FROM :"schema".schedules s
  LEFT JOIN :"schema".workflows w ON w.id = s.last_workflow_id;

-- Flow control for operators: a paused queue dispatches nothing (what runs finishes).
ALTER TABLE :"schema".queues ADD COLUMN paused boolean NOT NULL DEFAULT false;

-- Debounce (enqueue_options::debounce): at most one workflow per queue, name and key waits to be
-- dispatched; a burst of enqueues with the key updates its arguments instead of adding one.
ALTER TABLE :"schema".workflows ADD COLUMN debounce_key text;
CREATE UNIQUE INDEX workflows_debounce ON :"schema".workflows (queue, name, debounce_key)
  WHERE debounce_key IS NOT NULL AND status = 'pending' AND executor_id IS NULL;

-- The queued view says when a workflow waits because its queue is paused.
CREATE OR REPLACE VIEW :"schema".queued AS
SELECT w.id, w.name, w.queue, w.priority, w.app_version, w.created_at, w.wake_at,
       CASE
         WHEN EXISTS (SELECT 1 FROM :"schema".queues q WHERE q.name = w.queue AND q.paused)
           THEN 'queue ''' || w.queue || ''' is paused (durable queue resume ' || w.queue || ')'
         WHEN w.wake_at > now() THEN 'delayed until ' || w.wake_at
         WHEN NOT EXISTS (
           SELECT 1 FROM :"schema".executors e
            WHERE e.heartbeat_at > now() - interval '1 minute'
              AND (cardinality(e.versions) = 0 OR w.app_version = ANY(e.versions)))
           THEN 'no live executor runs application version ''' || w.app_version || ''''
         ELSE 'waiting for room in queue ''' || coalesce(w.queue, '') || ''''
       END AS reason
  FROM :"schema".workflows w
 WHERE w.status = 'pending' AND w.executor_id IS NULL;
