-- workflow_enqueue
-- $1 id text
-- $2 name text
-- $3 inputs jsonb (sent as JSON text)
-- $4 queue text
-- $5 priority integer
-- $6 dedup_key text, null allowed
-- $7 delay_ms bigint
-- $8 app_version text
-- $9 channel text
-- $10 timeout_ms bigint
-- $11 debounce_key text, null allowed
-- $12 debounce_ms bigint
-- $13 traceparent text, null allowed
-- $14 tracestate text, null allowed
--
-- $1 id, $2 name, $3 inputs, $4 queue, $5 priority, $6 dedup_key, $7 delay (ms), $8 app_version,
-- $9 notify channel, $10 timeout (ms from now, 0 = none), $11 debounce key (null: none), $12
-- debounce window (ms), $13 and $14 the W3C trace context (null: none; a debounced burst keeps
-- its first enqueue's). One row: (created, id of the workflow that holds the id or the dedup key,
-- its name, its inputs). With a debounce key, a workflow of the queue that holds it and waits to
-- be dispatched gets $3 as its inputs instead (the row names it, with the new inputs); else the
-- new workflow is due when the window ends. NOTIFY is delivered at commit.
WITH deb AS (
UPDATE :"schema".workflows w SET inputs = $3::jsonb, updated_at = now()
 WHERE $11::text IS NOT NULL AND w.queue = $4 AND w.debounce_key = $11 AND w.name = $2
   AND w.status = 'pending' AND w.executor_id IS NULL
RETURNING w.id, w.name, w.inputs),
ins AS (
INSERT INTO :"schema".workflows (id, name, status, inputs, queue, priority, dedup_key, wake_at,
                           app_version, deadline, debounce_key, traceparent, tracestate)
SELECT $1, $2, 'pending', $3::jsonb, $4, $5, $6,
        CASE WHEN greatest($7::bigint, $12::bigint) > 0
             THEN now() + make_interval(secs => greatest($7::bigint, $12::bigint)::double precision / 1000) END,
        $8,
        CASE WHEN $10::bigint > 0 THEN now() + make_interval(secs => $10::double precision / 1000) END,
        $11, $13, $14
 WHERE NOT EXISTS (SELECT 1 FROM deb)
ON CONFLICT DO NOTHING
RETURNING id),
woken AS (SELECT pg_notify($9, $4) FROM ins)
SELECT true, $1::text, $2::text, $3::text, (SELECT count(*) FROM woken) FROM ins
UNION ALL
SELECT false, d.id, d.name, d.inputs::text, 0 FROM deb d
UNION ALL
(SELECT false, w.id, w.name, w.inputs::text, 0 FROM :"schema".workflows w
WHERE NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM deb)
  AND (w.id = $1 OR (w.queue = $4 AND w.dedup_key = $6
                     AND w.status IN ('pending', 'running', 'sleeping')))
ORDER BY w.id = $1 DESC LIMIT 1)
