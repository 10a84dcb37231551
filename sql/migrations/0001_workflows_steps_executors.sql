-- workflows, steps, executors

CREATE TABLE :"schema".executors (
  id           text PRIMARY KEY,
  host         text NOT NULL,
  pid          integer NOT NULL,
  app_version  text NOT NULL DEFAULT '',
  started_at   timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE :"schema".workflows (
  id            text PRIMARY KEY,
  name          text NOT NULL,
  status        text NOT NULL CHECK (status IN
                  ('pending', 'running', 'sleeping', 'succeeded', 'failed', 'parked', 'cancelled')),
  status_reason text,
  inputs        jsonb NOT NULL,
  output        jsonb,
  error         jsonb,
  queue         text,
  priority      integer NOT NULL DEFAULT 0,
  dedup_key     text,
  executor_id   text,
  epoch         bigint NOT NULL DEFAULT 0,
  attempts      integer NOT NULL DEFAULT 0,
  created_at    timestamptz NOT NULL DEFAULT now(),
  started_at    timestamptz,
  updated_at    timestamptz NOT NULL DEFAULT now(),
  completed_at  timestamptz,
  wake_at       timestamptz,
  deadline      timestamptz,
  parent_id     text,
  app_version   text NOT NULL DEFAULT ''
);

CREATE INDEX workflows_open_by_executor ON :"schema".workflows (executor_id)
  WHERE status IN ('pending', 'running', 'sleeping');

CREATE TABLE :"schema".steps (
  workflow_id  text NOT NULL,
  seq          integer NOT NULL,
  name         text NOT NULL,
  kind         text NOT NULL,
  status       text NOT NULL CHECK (status IN ('succeeded', 'failed')),
  output       jsonb,
  error        jsonb,
  attempts     integer NOT NULL DEFAULT 1,
  epoch        bigint NOT NULL,
  started_at   timestamptz,
  completed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, seq)
);

-- I3: the fence and the write are one statement. FOR SHARE makes a takeover
-- (which bumps the epoch) wait for this row's commit, and makes this call wait
-- for a takeover in progress and then see its new epoch.
CREATE FUNCTION :"schema".append_step(
    p_workflow_id text, p_epoch bigint, p_seq integer, p_name text, p_kind text,
    p_status text, p_output jsonb, p_error jsonb, p_attempts integer, p_started_at timestamptz)
  RETURNS void LANGUAGE plpgsql
  SET search_path = pg_catalog, :"schema", pg_temp AS $fn$
DECLARE
  current_epoch bigint;
BEGIN
  SELECT epoch INTO current_epoch FROM workflows WHERE id = p_workflow_id FOR SHARE;
  IF current_epoch IS DISTINCT FROM p_epoch THEN
    RAISE EXCEPTION 'workflow % is owned under epoch %, not %', p_workflow_id,
      coalesce(current_epoch::text, '(no such workflow)'), p_epoch
      USING ERRCODE = 'DU001';
  END IF;
  INSERT INTO steps (workflow_id, seq, name, kind, status, output, error, attempts, epoch,
                         started_at)
  VALUES (p_workflow_id, p_seq, p_name, p_kind, p_status, p_output, p_error, p_attempts, p_epoch,
          p_started_at);
END
$fn$;
