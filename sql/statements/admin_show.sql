-- admin_show
-- $1 id text
--
-- $1 id. One JSON object: the workflow's row, why it waits (null once it has ended), its history (created, started, what
-- workflow_history recorded, and its end), its steps (journal rows, journaled true, and
-- the steps that have none yet: their status is the outcome of their latest attempt,
-- retrying, failed (for good), reset (retry() gave it fresh attempts) or due (resume()
-- made its next attempt due now)), every attempt of its steps (the newest 1 000: each failed
-- or retrying attempt's row, the marks of retry() and resume(), and the attempt that succeeded,
-- from its journal row, for a step that had more than one), its children, its unconsumed
-- messages, its events and its streams. admin_list counts the same steps. No row: no such
-- workflow.
SELECT json_build_object(
  'workflow', row_to_json(w),
  -- why it is where it is, for a workflow that has not ended (the view waiting, migration 17)
  'waiting', (SELECT json_build_object('kind', x.kind, 'reason', x.reason, 'blocked', x.blocked,
                                       'since', x.since, 'next_at', x.next_at)
                FROM :"schema".waiting x WHERE x.id = w.id),
  'history', (SELECT coalesce(json_agg(json_build_object(
      'at', h.at, 'previous', h.previous, 'status', h.status, 'reason', h.reason,
      'executor_id', h.executor_id, 'previous_executor', h.previous_executor, 'epoch', h.epoch)
      ORDER BY h.at, h.ord, h.id), '[]') FROM (
      SELECT 0 AS ord, 0::bigint AS id, w.created_at AS at, NULL AS previous,
             'created' AS status, NULL AS reason, NULL AS executor_id,
             NULL AS previous_executor, NULL::bigint AS epoch
      UNION ALL
      SELECT 1, 0, w.started_at, NULL, 'started', NULL, NULL, NULL, NULL
       WHERE w.started_at IS NOT NULL
      UNION ALL
      SELECT 2, id, at, previous, status, reason, executor_id, previous_executor, epoch
        FROM :"schema".workflow_history WHERE workflow_id = w.id
      UNION ALL
      SELECT 3, 0, w.completed_at, NULL, w.status, NULL, w.executor_id, NULL, w.epoch
       WHERE w.completed_at IS NOT NULL
         AND NOT EXISTS (SELECT 1 FROM :"schema".workflow_history x
                          WHERE x.workflow_id = w.id AND x.status = w.status
                            AND x.at >= w.completed_at)) h),
  'steps', (SELECT coalesce(json_agg(x ORDER BY x.seq), '[]') FROM (
      SELECT s.seq, s.name, s.kind, s.status, true AS journaled, s.attempts,
             round((extract(epoch FROM s.completed_at - s.started_at) * 1000)::numeric, 3)
               AS duration_ms,
             s.started_at, s.completed_at, NULL::timestamptz AS next_attempt_at,
             coalesce(s.error->>'message',
                      (SELECT a.error->>'message' FROM :"schema".step_attempts a
                        WHERE a.workflow_id = s.workflow_id AND a.seq = s.seq
                          AND a.outcome IN ('retrying', 'failed')
                        ORDER BY a.id DESC LIMIT 1)) AS last_error,
             s.output
        FROM :"schema".steps s WHERE s.workflow_id = w.id
      UNION ALL
      SELECT r.seq, r.step, r.kind, r.outcome, false, r.failed_attempts::integer, NULL, NULL, r.last_attempt_at, r.next_attempt_at,
             r.last_error, NULL
        FROM :"schema".step_retries r WHERE r.workflow_id = w.id) x),
  'attempts', (SELECT coalesce(json_agg(x ORDER BY x.seq, x.ended_at, x.attempt), '[]') FROM (
      SELECT * FROM (
        SELECT a.seq, a.name, a.kind, a.attempt, a.outcome, a.error->>'type' AS error_type,
               a.error->>'message' AS error, a.started_at, a.ended_at,
               round((extract(epoch FROM a.ended_at - a.started_at) * 1000)::numeric, 3)
                 AS duration_ms,
               a.next_attempt_at, a.epoch
          FROM :"schema".step_attempts a WHERE a.workflow_id = w.id
        UNION ALL
        SELECT s.seq, s.name, s.kind, s.attempts, s.status, s.error->>'type', s.error->>'message',
               s.started_at, s.completed_at,
               round((extract(epoch FROM s.completed_at - s.started_at) * 1000)::numeric, 3),
               NULL, s.epoch
          FROM :"schema".steps s
         WHERE s.workflow_id = w.id
           AND EXISTS (SELECT 1 FROM :"schema".step_attempts a
                        WHERE a.workflow_id = s.workflow_id AND a.seq = s.seq)
        ORDER BY ended_at DESC, attempt DESC LIMIT 1000) newest) x),
  'children', (SELECT coalesce(json_agg(c ORDER BY c.created_at, c.id), '[]') FROM (
      SELECT id, name, status, created_at, completed_at
        FROM :"schema".workflows WHERE parent_id = w.id) c),
  'inbox', (SELECT coalesce(json_agg(m ORDER BY m.id), '[]') FROM (
      SELECT id, topic, payload, created_at FROM :"schema".messages
       WHERE workflow_id = w.id AND consumed_at IS NULL) m),
  'events', (SELECT coalesce(json_agg(e ORDER BY e.key), '[]') FROM (
      SELECT key, value, updated_at FROM :"schema".events WHERE workflow_id = w.id) e),
  -- each stream: its key, how many values (from its last row: the close's offset, or the
  -- last offset + 1), closed or not, its last write; the keys found by a skip scan of the
  -- primary key and the last rows read backwards, so a long stream costs no more than a short
  'streams', (WITH RECURSIVE k AS (
        SELECT (SELECT min(key) FROM :"schema".streams WHERE workflow_id = w.id) AS key
        UNION ALL
        SELECT (SELECT min(key) FROM :"schema".streams WHERE workflow_id = w.id AND key > k.key)
          FROM k WHERE k.key IS NOT NULL)
      SELECT coalesce(json_agg(json_build_object(
          'key', k.key, 'values', CASE WHEN l.closes THEN l.position ELSE l.position + 1 END,
          'closed', l.closes, 'last_at', l.written_at) ORDER BY k.key), '[]')
        FROM k CROSS JOIN LATERAL (
          SELECT position, value IS NULL AS closes, written_at FROM :"schema".streams
           WHERE workflow_id = w.id AND key = k.key ORDER BY position DESC LIMIT 1) l
       WHERE k.key IS NOT NULL)
)::text FROM (SELECT * FROM :"schema".workflows WHERE id = $1) w
