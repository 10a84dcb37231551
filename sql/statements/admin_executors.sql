-- admin_executors
-- $1 lease_s double precision
--
-- $1 lease (seconds): an executor that heartbeat within it is alive. A released one
-- (graceful shutdown) has heartbeat_at '-infinity'.
SELECT row_to_json(t)::text FROM (
SELECT e.id, e.host, e.pid, e.app_version, e.versions, e.started_at,
       CASE WHEN e.heartbeat_at = '-infinity' THEN NULL ELSE e.heartbeat_at END AS heartbeat_at,
       CASE WHEN e.heartbeat_at = '-infinity' THEN NULL
            ELSE round(extract(epoch FROM now() - e.heartbeat_at)::numeric, 1) END
         AS heartbeat_age_s,
       CASE WHEN e.heartbeat_at = '-infinity' THEN 'released'
            WHEN e.heartbeat_at > now() - make_interval(secs => $1::double precision)
              THEN 'alive'
            ELSE 'dead' END AS state,
       (SELECT count(*) FROM :"schema".workflows w
         WHERE w.executor_id = e.id AND w.status IN ('pending', 'running', 'sleeping')) AS owned
  FROM :"schema".executors e
 ORDER BY (e.heartbeat_at > now() - make_interval(secs => $1::double precision)) DESC,
          e.heartbeat_at DESC, e.id) t
