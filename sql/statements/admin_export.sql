-- admin_export
-- $1 id text
-- $2 children boolean
--
-- $1 id, $2 with its descendants. One JSON document (format "durable.journal", version 1):
-- the workflow's row (and, with $2, every descendant's, parents first) with its journal
-- rows, its recorded attempts, its messages (consumed or not), its events and its
-- streams' rows (a stream's close: `closes` true), as
-- durable::testing::replay and admin_import read them. No row: no such workflow.
WITH RECURSIVE tree AS (
  SELECT id, 0 AS depth FROM :"schema".workflows WHERE id = $1
  UNION ALL
  SELECT w.id, t.depth + 1 FROM :"schema".workflows w JOIN tree t ON w.parent_id = t.id
   WHERE $2)
SELECT json_build_object(
  'format', 'durable.journal', 'version', 1, 'root', $1, 'exported_at', now(),
  'workflows', (SELECT json_agg(json_build_object(
      'id', w.id, 'name', w.name, 'status', w.status, 'status_reason', w.status_reason,
      'inputs', w.inputs, 'output', w.output, 'error', w.error, 'generation', w.generation,
      'app_version', w.app_version, 'parent_id', w.parent_id, 'queue', w.queue,
      'created_at', w.created_at, 'completed_at', w.completed_at, 'deadline', w.deadline,
      'traceparent', w.traceparent, 'tracestate', w.tracestate,
      'steps', (SELECT coalesce(json_agg(json_build_object(
          'seq', s.seq, 'name', s.name, 'kind', s.kind, 'status', s.status,
          'output', s.output, 'error', s.error, 'attempts', s.attempts,
          'started_at', s.started_at, 'completed_at', s.completed_at) ORDER BY s.seq), '[]')
          FROM :"schema".steps s WHERE s.workflow_id = w.id),
      'attempts', (SELECT coalesce(json_agg(json_build_object(
          'seq', a.seq, 'attempt', a.attempt, 'name', a.name, 'kind', a.kind,
          'outcome', a.outcome, 'error', a.error, 'started_at', a.started_at,
          'ended_at', a.ended_at, 'next_attempt_at', a.next_attempt_at) ORDER BY a.id), '[]')
          FROM :"schema".step_attempts a WHERE a.workflow_id = w.id),
      'messages', (SELECT coalesce(json_agg(json_build_object(
          'topic', m.topic, 'payload', m.payload, 'idempotency_key', m.idempotency_key,
          'created_at', m.created_at, 'consumed_seq', m.consumed_seq) ORDER BY m.id), '[]')
          FROM :"schema".messages m WHERE m.workflow_id = w.id),
      'events', (SELECT coalesce(json_agg(json_build_object('key', e.key, 'value', e.value, 'seq', e.seq)
          ORDER BY e.key), '[]') FROM :"schema".events e WHERE e.workflow_id = w.id),
      'streams', (SELECT coalesce(json_agg(json_build_object(
          'key', v.key, 'position', v.position, 'value', v.value, 'closes', v.value IS NULL,
          'generation', v.generation,
          'seq', v.seq, 'written_at', v.written_at) ORDER BY v.key, v.position), '[]')
          FROM :"schema".streams v WHERE v.workflow_id = w.id))
      ORDER BY t.depth, w.created_at, w.id)
    FROM tree t JOIN :"schema".workflows w ON w.id = t.id)
)::text WHERE EXISTS (SELECT 1 FROM :"schema".workflows WHERE id = $1)
