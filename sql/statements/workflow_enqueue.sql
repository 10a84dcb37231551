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
--
-- $1 id, $2 name, $3 inputs, $4 queue, $5 priority, $6 dedup_key, $7 delay (ms),
-- $8 app_version, $9 notify channel, $10 timeout (ms from now, 0 = none). One row:
-- (created, id of the workflow that holds the id or the dedup key, its name, its
-- inputs). NOTIFY is delivered at commit.
WITH ins AS (
INSERT INTO :"schema".workflows (id, name, status, inputs, queue, priority, dedup_key, wake_at,
                           app_version, deadline)
VALUES ($1, $2, 'pending', $3::jsonb, $4, $5, $6,
        CASE WHEN $7::bigint > 0 THEN now() + make_interval(secs => $7::double precision / 1000) END,
        $8,
        CASE WHEN $10::bigint > 0 THEN now() + make_interval(secs => $10::double precision / 1000) END)
ON CONFLICT DO NOTHING
RETURNING id),
woken AS (SELECT pg_notify($9, $4) FROM ins)
SELECT true, $1::text, $2::text, $3::text, (SELECT count(*) FROM woken) FROM ins
UNION ALL
(SELECT false, w.id, w.name, w.inputs::text, 0 FROM :"schema".workflows w
WHERE NOT EXISTS (SELECT 1 FROM ins)
  AND (w.id = $1 OR (w.queue = $4 AND w.dedup_key = $6
                     AND w.status IN ('pending', 'running', 'sleeping')))
ORDER BY w.id = $1 DESC LIMIT 1)
