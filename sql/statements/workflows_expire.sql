-- workflows_expire
-- $1 limit bigint
--
-- $1 how many at most. Workflows that wait (queued, or sleeping until a retry) past
-- their deadline end as cancelled; a running one is ended by its run, or by the run
-- that claims it, or here once it is 10 s past (a run that cannot end, a step holding
-- it). The new epoch fences out a run or claim in flight (I3).
WITH late AS (
SELECT id FROM :"schema".workflows
 WHERE deadline < now()
   AND (status IN ('pending', 'sleeping')
        OR (status = 'running' AND deadline < now() - interval '10 seconds'))
 ORDER BY deadline LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE :"schema".workflows w
   SET status = 'cancelled', epoch = w.epoch + 1, wake_at = NULL, completed_at = now(),
       updated_at = now(),
       status_reason = 'its deadline (' || w.deadline || ') passed before it finished',
       error = jsonb_build_object('type', 'durable::deadline_exceeded', 'message',
                                  'its deadline (' || w.deadline || ') passed before it finished')
  FROM late WHERE w.id = late.id
RETURNING w.id
