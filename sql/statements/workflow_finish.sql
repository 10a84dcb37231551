-- workflow_finish
-- $1 id text
-- $2 epoch bigint
-- $3 status text
-- $4 output jsonb (sent as JSON text), null allowed
-- $5 error jsonb (sent as JSON text), null allowed
-- $6 reason text, null allowed
--
-- $1 id, $2 epoch, $3 status, $4 output, $5 error, $6 status_reason
UPDATE :"schema".workflows
 SET status = $3, output = $4::jsonb, error = $5::jsonb, status_reason = $6, updated_at = now(),
     completed_at = CASE WHEN $3 IN ('succeeded', 'failed', 'cancelled') THEN now() END
 WHERE id = $1 AND epoch = $2
