-- queue_upsert
-- $1 name text
-- $2 concurrency integer, null allowed
-- $3 worker_concurrency integer, null allowed
-- $4 rate_limit integer, null allowed
-- $5 rate_period_ms integer
--
-- $1 name, $2 concurrency, $3 worker_concurrency, $4 rate_limit, $5 rate_period_ms
INSERT INTO :"schema".queues (name, concurrency, worker_concurrency, rate_limit,
                       rate_period_ms)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,
worker_concurrency = excluded.worker_concurrency, rate_limit = excluded.rate_limit,
rate_period_ms = excluded.rate_period_ms, updated_at = now()
