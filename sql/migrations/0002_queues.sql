-- queues

CREATE TABLE :"schema".queues (
  name               text PRIMARY KEY,
  concurrency        integer CHECK (concurrency > 0),
  worker_concurrency integer CHECK (worker_concurrency > 0),
  rate_limit         integer CHECK (rate_limit > 0),
  rate_period_ms     integer CHECK (rate_period_ms > 0),
  updated_at         timestamptz NOT NULL DEFAULT now()
);

-- A deduplication key is unique among a queue's unfinished workflows only.
CREATE UNIQUE INDEX workflows_queue_dedup ON :"schema".workflows (queue, dedup_key)
  WHERE dedup_key IS NOT NULL AND status IN ('pending', 'running', 'sleeping');

CREATE INDEX workflows_queued ON :"schema".workflows (queue, priority DESC, created_at)
  WHERE status = 'pending' AND executor_id IS NULL;

CREATE INDEX workflows_queue_running ON :"schema".workflows (queue, executor_id)
  WHERE status = 'running';

CREATE INDEX workflows_queue_started ON :"schema".workflows (queue, started_at);
