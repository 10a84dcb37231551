-- result notifications
-- A workflow's end (succeeded, failed, cancelled, parked, dead letter: whichever statement puts
-- it there) is told to the processes whose result() waits for it, on the result channel
-- (store::result_channel). Only a workflow someone awaits is announced: result() of a workflow
-- running elsewhere sets `awaited` (workflow_await.sql) before it waits, so the NOTIFY, which
-- serializes the commits that send one, costs nothing to a workflow nobody waits for.
--
-- No wake-up is lost: the mark and the end are both updates of the workflow's row, so one waits
-- for the other. A mark made first is in the row the end updates (the trigger sees it); a mark
-- that comes after the end finds the row ended and updates nothing (result() reads the end).
--
-- The payload is the outcome, a newline, and the id. The outcome is 's' and the output's JSON
-- for a success, 'f' and the error's JSON for a failure, and nothing otherwise or when the whole
-- would not fit NOTIFY's 8 000 bytes (then result() reads the row). JSON as jsonb prints it
-- holds no raw newline, so the first newline ends the outcome whatever the id holds. An id too
-- long to send at all (7 900 bytes or more, which a compressible id in the primary key can be)
-- is never marked (result() polls for it), and the trigger skips it rather than fail the
-- statement that ends the workflow.
ALTER TABLE :"schema".workflows ADD COLUMN awaited boolean NOT NULL DEFAULT false;

CREATE FUNCTION :"schema".wake_result() RETURNS trigger LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  told text := CASE NEW.status WHEN 'succeeded' THEN 's' || coalesce(NEW.output::text, 'null')
                               WHEN 'failed' THEN 'f' || coalesce(NEW.error::text, '{}')
                               ELSE '' END;
BEGIN
  IF octet_length(NEW.id) < 7900 THEN
    IF octet_length(told) + octet_length(NEW.id) >= 7990 THEN
      told := '';
    END IF;
    PERFORM pg_notify(TG_ARGV[0], told || E'\n' || NEW.id);
  END IF;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER workflows_wake_result AFTER UPDATE OF status ON :"schema".workflows
  FOR EACH ROW WHEN (NEW.awaited
                     AND NEW.status IN ('succeeded', 'failed', 'cancelled', 'parked', 'dead_letter')
                     AND OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION :"schema".wake_result(:'result_channel');
