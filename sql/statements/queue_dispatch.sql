-- queue_dispatch
-- $1 executor_id text
-- $2 queue text
-- $3 names text[] (a literal, built by detail::text_array)
-- $4 limit integer
-- $5 versions text[] (a literal, built by detail::text_array)
--
-- $1 executor, $2 queue, $3 workflow names it runs (text[]), $4 how many at most,
-- $5 application versions it runs (text[], empty = all).
-- Claims queued workflows within the queue's limits, by priority then age; none while the
-- queue is paused.
WITH q AS (
SELECT concurrency, worker_concurrency, rate_limit, rate_period_ms, paused FROM :"schema".queues WHERE name = $2),
budget AS (
SELECT greatest(0, least(
  $4::integer,
  (SELECT CASE WHEN q.paused THEN 0 END FROM q),
  (SELECT q.concurrency - (SELECT count(*) FROM :"schema".workflows
                            WHERE queue = $2 AND status = 'running') FROM q),
  (SELECT q.worker_concurrency - (SELECT count(*) FROM :"schema".workflows
                            WHERE queue = $2 AND status = 'running' AND executor_id = $1) FROM q),
  (SELECT q.rate_limit - (SELECT count(*) FROM :"schema".workflows WHERE queue = $2
                            AND started_at > now() - make_interval(secs => q.rate_period_ms / 1000.0))
     FROM q))) AS n),
picked AS (
SELECT w.id FROM :"schema".workflows w
 WHERE w.queue = $2 AND w.status = 'pending' AND w.executor_id IS NULL
   AND (w.wake_at IS NULL OR w.wake_at <= now()) AND w.name = ANY($3::text[])
   AND (cardinality($5::text[]) = 0 OR w.app_version = ANY($5::text[]))
 ORDER BY w.priority DESC, w.created_at, w.id
 LIMIT (SELECT n FROM budget)
 FOR UPDATE OF w SKIP LOCKED)
UPDATE :"schema".workflows w
 SET status = 'running', executor_id = $1, epoch = w.epoch + 1, attempts = w.attempts + 1,
     started_at = now(), updated_at = now()
FROM picked WHERE w.id = picked.id
RETURNING w.id, w.name, w.inputs::text, w.epoch,
          extract(epoch FROM w.deadline - now())::double precision, w.generation, w.traceparent
