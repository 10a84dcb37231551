-- child_start
-- $1 child_id text
-- $2 name text
-- $3 inputs jsonb (sent as JSON text)
-- $4 parent text
-- $5 epoch bigint
-- $6 seq integer
-- $7 started_at double precision
-- $8 app_version text
-- $9 channel text
-- $10 span_id text
--
-- $1 child id, $2 name, $3 inputs, $4 parent, $5 parent's epoch, $6 step, $7 started_at,
-- $8 app_version, $9 channel, $10 the span id of the parent's step $6. Starts the child
-- (due at once for any executor that runs `name`, parent_id recorded) and journals the step
-- in one statement (exactly once; fenced, I3). A child that exists already (the same
-- parent's, from a run whose journal row did not commit) is reattached. The child inherits
-- the parent's trace context with $10 as its parent span id (none if the parent has none).
-- No row: the id is another workflow's.
WITH other AS (
SELECT 1 FROM :"schema".workflows WHERE id = $1 AND (parent_id IS DISTINCT FROM $4 OR name <> $2)),
ins AS (
INSERT INTO :"schema".workflows (id, name, status, inputs, wake_at, app_version, parent_id,
                                  traceparent, tracestate)
SELECT $1, $2, 'sleeping', $3::jsonb, now(), $8, $4,
       (SELECT left(p.traceparent, 36) || $10 || right(p.traceparent, 3)
          FROM :"schema".workflows p WHERE p.id = $4),
       (SELECT p.tracestate FROM :"schema".workflows p WHERE p.id = $4)
 WHERE NOT EXISTS (SELECT 1 FROM other)
ON CONFLICT (id) DO NOTHING
RETURNING id)
SELECT :"schema".append_step($4, $5, $6, $2, 'child', 'succeeded', to_jsonb($1::text), NULL, 1,
                       to_timestamp($7::double precision)),
       (SELECT count(pg_notify($9, '')) FROM ins)
 WHERE NOT EXISTS (SELECT 1 FROM other)
