-- application versions

ALTER TABLE :"schema".executors ADD COLUMN versions text[] NOT NULL DEFAULT '{}';

-- Why each queued workflow is still waiting, for operators (SELECT * FROM queued).
CREATE VIEW :"schema".queued AS
SELECT w.id, w.name, w.queue, w.priority, w.app_version, w.created_at, w.wake_at,
       CASE
         WHEN w.wake_at > now() THEN 'delayed until ' || w.wake_at
         WHEN NOT EXISTS (
           SELECT 1 FROM :"schema".executors e
            WHERE e.heartbeat_at > now() - interval '1 minute'
              AND (cardinality(e.versions) = 0 OR w.app_version = ANY(e.versions)))
           THEN 'no live executor runs application version ''' || w.app_version || ''''
         ELSE 'waiting for room in queue ''' || coalesce(w.queue, '') || ''''
       END AS reason
  FROM :"schema".workflows w
 WHERE w.status = 'pending' AND w.executor_id IS NULL;
