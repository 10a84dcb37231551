-- workflow_sleep
-- $1 id text
-- $2 epoch bigint
-- $3 pause_ms double precision
--
-- $1 id, $2 epoch, $3 pause (ms). Unloads the workflow until its next attempt is due
-- (claimed before that: after a resume, say), under a new epoch (I3).
UPDATE :"schema".workflows
   SET status = 'sleeping', wake_at = now() + make_interval(secs => $3::double precision / 1000),
       executor_id = NULL, epoch = epoch + 1, updated_at = now()
 WHERE id = $1 AND epoch = $2
