-- status history

-- What happened to a workflow off the routine path, for operators (`durable show`):
-- every change into or out of failed, parked, cancelled and dead_letter (a park, a
-- dead letter, a cancel, a resume, a retry), and every move from one owner to
-- another (a takeover). The routine path (created, started, sleeping and woken,
-- succeeded) writes nothing here: workflows' timestamps and the journal tell it, and
-- a workflow that succeeds costs no extra row.
CREATE TABLE :"schema".workflow_history (
  id          bigserial,
  workflow_id text NOT NULL,
  status      text NOT NULL,
  previous    text,
  reason      text,
  executor_id text,
  previous_executor text,
  epoch       bigint NOT NULL,
  at          timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, id)
);

-- Failures by time, for `durable stats`, its metrics and recent_failures, without
-- scanning every workflow (only failing ones are in the index).
CREATE INDEX workflows_failures ON :"schema".workflows (updated_at)
  WHERE status IN ('failed', 'dead_letter');

-- SECURITY DEFINER: the history is the library's own bookkeeping, written with the
-- schema owner's rights, so that a role allowed to update workflows (parks above
-- all) needs no grant on the history table or its sequence (search_path pinned, as
-- such functions should have).
CREATE FUNCTION :"schema".record_status() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, :"schema", pg_temp AS $fn$
BEGIN
  INSERT INTO workflow_history (workflow_id, status, previous, reason, executor_id,
                                     previous_executor, epoch)
  VALUES (NEW.id, NEW.status, OLD.status, NEW.status_reason, NEW.executor_id, OLD.executor_id,
          NEW.epoch);
  RETURN NULL;
END
$fn$;

CREATE TRIGGER workflows_history AFTER UPDATE OF status, executor_id
  ON :"schema".workflows FOR EACH ROW
  WHEN ((OLD.status IS DISTINCT FROM NEW.status
         AND (OLD.status NOT IN ('pending', 'running', 'sleeping')
              OR NEW.status NOT IN ('pending', 'running', 'sleeping', 'succeeded')))
        OR OLD.executor_id <> NEW.executor_id)
  EXECUTE FUNCTION :"schema".record_status();
