-- operator views, retention

-- Retention finds finished workflows by age (engine_options::retention).
CREATE INDEX workflows_finished ON :"schema".workflows (completed_at)
  WHERE status IN ('succeeded', 'failed', 'cancelled');

-- Workflows that ended badly or were stopped in the last day, newest first.
CREATE VIEW :"schema".recent_failures AS
SELECT w.id, w.name, w.status, w.status_reason, w.error->>'type' AS error_type,
       coalesce(w.error->>'message', w.status_reason) AS error_message,
       (w.error->>'seq')::integer AS failed_seq, w.error->>'step' AS failed_step,
       w.executor_id, w.updated_at
  FROM :"schema".workflows w
 WHERE w.status IN ('failed', 'dead_letter', 'parked', 'cancelled')
   AND w.updated_at > now() - interval '1 day'
 ORDER BY w.updated_at DESC;

-- Workflows that do not move: running under an executor whose lease looks dead (no
-- heartbeat for a minute), due sleepers nobody woke for a minute, queued ones
-- waiting over ten minutes, and waits older than a day; with the reason.
CREATE VIEW :"schema".stuck AS
SELECT w.id, w.name, w.status, w.executor_id, w.updated_at AS since,
       CASE
         WHEN w.status = 'running' THEN
           'running under executor ''' || coalesce(w.executor_id, '?') ||
           ''', whose last heartbeat was ' ||
           coalesce((now() - e.heartbeat_at)::text || ' ago', 'never (unknown executor)')
         WHEN w.status = 'sleeping' AND w.wake_at < now() - interval '1 minute' THEN
           'due since ' || w.wake_at || ' but not woken: no live executor runs ''' || w.name ||
           ''' (or its version)'
         WHEN w.status = 'sleeping' THEN
           'waiting for ' || w.wait_for || ' since ' || w.updated_at
         ELSE 'queued since ' || w.created_at
       END AS reason
  FROM :"schema".workflows w
  LEFT JOIN :"schema".executors e ON e.id = w.executor_id
 WHERE (w.status = 'running'
        AND (e.id IS NULL OR e.heartbeat_at < now() - interval '1 minute'))
    OR (w.status = 'sleeping' AND w.wake_at < now() - interval '1 minute')
    OR (w.status = 'sleeping' AND w.wait_for IS NOT NULL
        AND w.updated_at < now() - interval '1 day')
    OR (w.status = 'pending' AND w.executor_id IS NULL
        AND coalesce(w.wake_at, w.created_at) < now() - interval '10 minutes');

-- Steps by workflow and step name over the last day, slowest first (by p95).
CREATE VIEW :"schema".slowest_steps AS
SELECT w.name AS workflow, s.name AS step, s.kind, count(*) AS steps,
       round((avg(extract(epoch FROM s.completed_at - s.started_at)) * 1000)::numeric, 1)
         AS avg_ms,
       round((percentile_cont(0.95) WITHIN GROUP (
               ORDER BY extract(epoch FROM s.completed_at - s.started_at)) * 1000)::numeric, 1)
         AS p95_ms,
       round((max(extract(epoch FROM s.completed_at - s.started_at)) * 1000)::numeric, 1)
         AS max_ms
  FROM :"schema".steps s JOIN :"schema".workflows w ON w.id = s.workflow_id
 WHERE s.completed_at > now() - interval '1 day' AND s.started_at IS NOT NULL
 GROUP BY w.name, s.name, s.kind
 ORDER BY p95_ms DESC;

-- Failed attempts over the last day by workflow, step and error type: where the
-- retries go, with the latest message.
CREATE VIEW :"schema".retry_hot_spots AS
SELECT w.name AS workflow, a.name AS step, a.error->>'type' AS error_type,
       count(*) AS failed_attempts, count(DISTINCT a.workflow_id) AS workflows,
       count(*) FILTER (WHERE a.outcome = 'failed') AS final_failures,
       max(a.ended_at) AS last_at,
       (array_agg(a.error->>'message' ORDER BY a.id DESC))[1] AS last_error
  FROM :"schema".step_attempts a JOIN :"schema".workflows w ON w.id = a.workflow_id
 WHERE a.outcome IN ('retrying', 'failed') AND a.ended_at > now() - interval '1 day'
 GROUP BY w.name, a.name, a.error->>'type'
 ORDER BY failed_attempts DESC;

-- Per queue and 5-minute bucket over the last day: workflows waiting in the queue at
-- the end of the bucket (created, not yet started), started and finished in it. From
-- the workflows still in the table.
CREATE VIEW :"schema".queue_depth AS
SELECT q.queue, b.bucket,
       (SELECT count(*) FROM :"schema".workflows w WHERE w.queue = q.queue
          AND w.created_at <= b.bucket + interval '5 minutes'
          AND (w.started_at IS NULL OR w.started_at > b.bucket + interval '5 minutes')
          AND (w.completed_at IS NULL OR w.completed_at > b.bucket + interval '5 minutes'))
         AS waiting,
       (SELECT count(*) FROM :"schema".workflows w WHERE w.queue = q.queue
          AND w.started_at >= b.bucket AND w.started_at < b.bucket + interval '5 minutes')
         AS started,
       (SELECT count(*) FROM :"schema".workflows w WHERE w.queue = q.queue
          AND w.completed_at >= b.bucket AND w.completed_at < b.bucket + interval '5 minutes')
         AS finished
  FROM (SELECT DISTINCT queue FROM :"schema".workflows WHERE queue IS NOT NULL) q
 CROSS JOIN generate_series(date_bin('5 minutes', now() - interval '1 day', timestamptz 'epoch'),
                            now(), interval '5 minutes') AS b(bucket)
 ORDER BY q.queue, b.bucket;
