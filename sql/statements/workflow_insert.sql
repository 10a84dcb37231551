-- workflow_insert
-- $1 id text
-- $2 name text
-- $3 inputs jsonb (sent as JSON text)
-- $4 executor_id text
-- $5 app_version text
-- $6 timeout_ms bigint
-- $7 traceparent text, null allowed
-- $8 tracestate text, null allowed
--
-- $1 id, $2 name, $3 inputs, $4 executor_id, $5 app_version, $6 timeout (ms, 0 = none),
-- $7 and $8 the W3C trace context (null: none; checked by the caller and by the table)
WITH ins AS (
INSERT INTO :"schema".workflows (id, name, status, inputs, executor_id, epoch, attempts, started_at,
                           app_version, deadline, traceparent, tracestate)
VALUES ($1, $2, 'running', $3::jsonb, $4, 1, 1, now(), $5,
        CASE WHEN $6::bigint > 0 THEN now() + make_interval(secs => $6::double precision / 1000) END,
        $7, $8)
ON CONFLICT (id) DO NOTHING
RETURNING id)
SELECT true, NULL::text, NULL::text, NULL::text FROM ins
UNION ALL
SELECT false, w.name, w.inputs::text, w.status FROM :"schema".workflows w
 WHERE w.id = $1 AND NOT EXISTS (SELECT 1 FROM ins)
