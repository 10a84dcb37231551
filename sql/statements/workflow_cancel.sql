-- workflow_cancel
-- $1 id text
-- $2 reason text
-- $3 error_type text
-- $4 cancel_channel text
--
-- $1 id, $2 reason, $3 error type, $4 the cancel channel. Ends an unfinished, parked or
-- dead-lettered workflow, and every unfinished descendant (its child workflows, theirs),
-- as cancelled; the new epoch fences out a run in progress (I3). One row per workflow
-- cancelled (the
-- status it had, the new epoch, its id, whether it is $1), none when it was finished or
-- unknown; at commit
-- "<epoch>:<id>" is announced on $4, so that the process running it stops it at once. A
-- dead letter keeps the number of its failed step, for a later resume.
WITH RECURSIVE tree AS (
SELECT id, 0 AS depth FROM :"schema".workflows
 WHERE id = $1 AND status IN ('pending', 'running', 'sleeping', 'parked', 'dead_letter')
UNION
SELECT c.id, t.depth + 1 FROM :"schema".workflows c JOIN tree t ON c.parent_id = t.id
 WHERE t.depth < 1000),
old AS (
SELECT w.id, w.status, w.error, w.id = $1 AS root FROM :"schema".workflows w
 WHERE w.id IN (SELECT id FROM tree)
   AND w.status IN ('pending', 'running', 'sleeping', 'parked', 'dead_letter')
   FOR UPDATE OF w)
UPDATE :"schema".workflows w
   SET status = 'cancelled',
       status_reason = CASE WHEN old.root THEN $2
                            ELSE 'its parent workflow ''' || $1 || ''' was cancelled: ' || $2 END,
       error = jsonb_build_object('type', $3::text, 'message',
                                  CASE WHEN old.root THEN $2
                                       ELSE 'its parent workflow ''' || $1
                                            || ''' was cancelled: ' || $2 END)
               || CASE WHEN old.status = 'dead_letter' AND old.error ? 'seq'
                       THEN jsonb_build_object('seq', old.error->'seq') ELSE '{}'::jsonb END,
       epoch = w.epoch + 1, wake_at = NULL, completed_at = now(), updated_at = now()
  FROM old
 WHERE w.id = old.id
RETURNING old.status, w.epoch, pg_notify($4, w.epoch || ':' || w.id), w.id, old.root
