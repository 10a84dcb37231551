-- admin_import
-- $1 document jsonb
-- $2 new_id text
-- $3 reason text
--
-- $1 an admin_export document, $2 the id its root gets here (NULL: its own), $3 the reason
-- an unfinished workflow is parked with. Inserts every workflow of the document (a
-- descendant's id keeps its place under the root: "<root>/..." becomes "<new id>/...", and
-- so do the ids journaled in its parent's rows: the output of 'child' rows, the name of
-- 'child-result' rows, the "<id>:" that starts the name of 'get_event' and 'deadline' rows)
-- with its journal rows, attempts, messages, events and stream rows, under epoch 0 and no executor. A
-- finished one keeps its status; the root, unfinished, is parked with $3 until `durable
-- resume`; an unfinished descendant is due at once (its parent, once resumed, waits for
-- it). Each keeps its trace context (none in a document older than migration 18). One
-- row: (workflows inserted, rows inserted, the root's id here); if any id exists
-- already nothing is written (0 workflows).
WITH doc AS (SELECT $1::jsonb AS d),
root AS (SELECT d->>'root' AS old, coalesce($2, d->>'root') AS new FROM doc),
ids AS (
  SELECT w->>'id' AS old,
         CASE WHEN w->>'id' = r.old THEN r.new
              WHEN left(w->>'id', length(r.old) + 1) = r.old || '/'
                THEN r.new || substr(w->>'id', length(r.old) + 1)
              ELSE w->>'id' END AS new,
         w
    FROM doc, root r, jsonb_array_elements(d->'workflows') w),
taken AS (SELECT 1 FROM :"schema".workflows x JOIN ids i ON x.id = i.new LIMIT 1),
ins_w AS (
INSERT INTO :"schema".workflows (id, name, status, status_reason, inputs, output, error,
                                 generation, app_version, parent_id, queue, epoch, created_at,
                                 completed_at, wake_at, traceparent, tracestate)
SELECT i.new, i.w->>'name',
       CASE WHEN i.w->>'status' IN ('succeeded', 'failed', 'cancelled') THEN i.w->>'status'
            WHEN i.old = r.old THEN 'parked' ELSE 'sleeping' END,
       CASE WHEN i.w->>'status' IN ('succeeded', 'failed', 'cancelled')
            THEN i.w->>'status_reason' WHEN i.old = r.old THEN $3 END,
       i.w->'inputs', i.w->'output', i.w->'error', (i.w->>'generation')::integer,
       coalesce(i.w->>'app_version', ''), p.new, i.w->>'queue', 0,
       coalesce((i.w->>'created_at')::timestamptz, now()), (i.w->>'completed_at')::timestamptz,
       CASE WHEN i.w->>'status' NOT IN ('succeeded', 'failed', 'cancelled') AND i.old <> r.old
            THEN now() END,
       i.w->>'traceparent', i.w->>'tracestate'
  FROM ids i CROSS JOIN root r LEFT JOIN ids p ON p.old = i.w->>'parent_id'
 WHERE NOT EXISTS (SELECT 1 FROM taken)
RETURNING id),
ins_s AS (
INSERT INTO :"schema".steps (workflow_id, seq, name, kind, status, output, error, attempts, epoch,
                             started_at, completed_at)
SELECT i.new, (s->>'seq')::integer,
       CASE WHEN s->>'kind' = 'child-result' THEN coalesce(
              (SELECT c.new FROM ids c WHERE c.old = s->>'name'), s->>'name')
            WHEN s->>'kind' IN ('get_event', 'deadline') THEN coalesce(
              (SELECT c.new || substr(s->>'name', length(c.old) + 1) FROM ids c
                WHERE left(s->>'name', length(c.old) + 1) = c.old || ':'
                ORDER BY length(c.old) DESC LIMIT 1), s->>'name')
            ELSE s->>'name' END,
       s->>'kind', s->>'status',
       CASE WHEN s->>'kind' = 'child' THEN coalesce(
              (SELECT to_jsonb(c.new) FROM ids c WHERE c.old = s->>'output'), s->'output')
            ELSE s->'output' END,
       s->'error', (s->>'attempts')::integer, 0, (s->>'started_at')::timestamptz,
       coalesce((s->>'completed_at')::timestamptz, now())
  FROM ids i, jsonb_array_elements(i.w->'steps') s
 WHERE NOT EXISTS (SELECT 1 FROM taken)
RETURNING 1),
ins_a AS (
INSERT INTO :"schema".step_attempts (workflow_id, seq, attempt, name, kind, outcome, error, epoch,
                                     started_at, ended_at, next_attempt_at)
SELECT i.new, (a->>'seq')::integer, (a->>'attempt')::integer, a->>'name', a->>'kind',
       a->>'outcome', a->'error', 0, (a->>'started_at')::timestamptz,
       coalesce((a->>'ended_at')::timestamptz, now()), (a->>'next_attempt_at')::timestamptz
  FROM ids i, jsonb_array_elements(i.w->'attempts') a
 WHERE NOT EXISTS (SELECT 1 FROM taken)
RETURNING 1),
ins_m AS (
INSERT INTO :"schema".messages (workflow_id, topic, payload, idempotency_key, created_at,
                                consumed_at, consumed_seq)
SELECT i.new, m->>'topic', m->'payload', m->>'idempotency_key',
       coalesce((m->>'created_at')::timestamptz, now()),
       CASE WHEN m->>'consumed_seq' IS NOT NULL THEN now() END, (m->>'consumed_seq')::integer
  FROM ids i, jsonb_array_elements(i.w->'messages') m
 WHERE NOT EXISTS (SELECT 1 FROM taken)
RETURNING 1),
ins_e AS (
INSERT INTO :"schema".events (workflow_id, key, value, seq)
SELECT i.new, e->>'key', e->'value', (e->>'seq')::integer
  FROM ids i, jsonb_array_elements(i.w->'events') e
 WHERE NOT EXISTS (SELECT 1 FROM taken)
RETURNING 1),
ins_v AS (
INSERT INTO :"schema".streams (workflow_id, key, position, value, generation, seq, written_at)
SELECT i.new, v->>'key', (v->>'position')::bigint,
       CASE WHEN (v->>'closes')::boolean THEN NULL ELSE v->'value' END,
       (v->>'generation')::integer, (v->>'seq')::integer,
       coalesce((v->>'written_at')::timestamptz, now())
  FROM ids i, jsonb_array_elements(coalesce(i.w->'streams', '[]'::jsonb)) v
 WHERE NOT EXISTS (SELECT 1 FROM taken)
RETURNING 1)
SELECT (SELECT count(*) FROM ins_w), (SELECT count(*) FROM ins_s) + (SELECT count(*) FROM ins_a)
       + (SELECT count(*) FROM ins_m) + (SELECT count(*) FROM ins_e) + (SELECT count(*) FROM ins_v),
       (SELECT new FROM root)
