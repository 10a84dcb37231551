-- queue_depths
-- $1 queues text[] (a literal, built by detail::text_array)
--
-- $1 queue names (text[]). Each count is one scan of a partial index (workflows_queued,
-- workflows_queue_running).
SELECT q.name,
       (SELECT count(*) FROM :"schema".workflows w
         WHERE w.queue = q.name AND w.status = 'pending' AND w.executor_id IS NULL),
       (SELECT count(*) FROM :"schema".workflows w WHERE w.queue = q.name AND w.status = 'running')
  FROM (SELECT DISTINCT unnest($1::text[]) AS name) q ORDER BY q.name
