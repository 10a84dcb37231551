-- continue as new

-- ctx.continue_as_new(): a workflow starts again under the same id with new inputs
-- and an empty journal. Each start is a generation; keys derived from step numbers
-- (child ids, idempotency keys) include it from generation 1 on.
ALTER TABLE :"schema".workflows ADD COLUMN generation integer NOT NULL DEFAULT 0;

-- Ends generation n of workflow p_id and makes generation n + 1 with inputs p_inputs,
-- in one transaction: fenced by the epoch (I3, DU001; the row is locked, so a claim
-- waits for it and then sees the new epoch), the journal, the recorded attempts and
-- the consumed messages without an idempotency key of the old generation are deleted
-- (unconsumed messages stay for the new one; a consumed message with a key stays,
-- until retention deletes the workflow, so that a retried send with that key still
-- sends nothing), waits, the last error and the count of claims without progress
-- (I9) are reset, and the epoch moves on so that nothing the old run still holds can
-- be written.
-- The workflow stays running, owned by the same executor. Children of the old
-- generation are left as they are; events published stay.
CREATE FUNCTION :"schema".continue_as_new(p_id text, p_epoch bigint, p_inputs jsonb)
  RETURNS TABLE (new_epoch bigint, new_generation integer) LANGUAGE plpgsql
  SET search_path = pg_catalog, :"schema", pg_temp AS $fn$
BEGIN
  PERFORM 1 FROM workflows WHERE id = p_id AND epoch = p_epoch FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'workflow % is not owned under epoch % (it cannot continue as new)',
      p_id, p_epoch USING ERRCODE = 'DU001';
  END IF;
  DELETE FROM steps WHERE workflow_id = p_id;
  DELETE FROM step_attempts WHERE workflow_id = p_id;
  DELETE FROM messages
   WHERE workflow_id = p_id AND consumed_at IS NOT NULL AND idempotency_key IS NULL;
  RETURN QUERY
  UPDATE workflows w
     SET inputs = p_inputs, generation = w.generation + 1, epoch = w.epoch + 1,
         status = 'running', status_reason = NULL, output = NULL, error = NULL, wake_at = NULL,
         wait_for = NULL, woken = false, stalled_claims = 0, progress_mark = 0,
         last_error = NULL, updated_at = now()
   WHERE w.id = p_id
  RETURNING w.epoch, w.generation;
END
$fn$;
