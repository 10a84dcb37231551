-- workflow_get
-- $1 id text
--
-- $1 id
SELECT name, status, status_reason, inputs::text, output::text, error::text,
     executor_id, epoch, attempts, traceparent
FROM :"schema".workflows WHERE id = $1
