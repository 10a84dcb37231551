-- admin_queues
--
-- Queues with unfinished workflows or limits: their depth, what runs, paused or not, their
-- limits.
SELECT row_to_json(t)::text FROM (
SELECT n.queue,
       count(w.id) FILTER (WHERE w.status = 'pending' AND w.executor_id IS NULL
                             AND (w.wake_at IS NULL OR w.wake_at <= now())) AS queued,
       count(w.id) FILTER (WHERE w.status = 'pending' AND w.executor_id IS NULL
                             AND w.wake_at > now()) AS delayed,
       count(w.id) FILTER (WHERE w.status = 'running'
                             OR (w.status = 'pending' AND w.executor_id IS NOT NULL)) AS running,
       count(w.id) FILTER (WHERE w.status = 'sleeping') AS sleeping,
       coalesce(q.paused, false) AS paused,
       q.concurrency, q.worker_concurrency, q.rate_limit, q.rate_period_ms,
       round(extract(epoch FROM now() - min(coalesce(w.wake_at, w.created_at))
                 FILTER (WHERE w.status = 'pending' AND w.executor_id IS NULL
                           AND (w.wake_at IS NULL OR w.wake_at <= now()))))::bigint
         AS oldest_queued_s
  FROM (SELECT name AS queue FROM :"schema".queues
        UNION SELECT DISTINCT queue FROM :"schema".workflows
               WHERE queue IS NOT NULL AND status IN ('pending', 'running', 'sleeping')) n
  LEFT JOIN :"schema".queues q ON q.name = n.queue
  LEFT JOIN :"schema".workflows w ON w.queue = n.queue AND w.status IN ('pending', 'running', 'sleeping')
 GROUP BY n.queue, q.paused, q.concurrency, q.worker_concurrency, q.rate_limit, q.rate_period_ms
 ORDER BY n.queue) t
