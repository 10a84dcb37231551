-- admin_stats
-- $1 lease_s double precision
-- $2 schema text
--
-- $1 lease (seconds), $2 the schema's name. One JSON object: counts for a dashboard.
-- Each is an index probe or a scan of unfinished rows, except the count by status; the
-- journal's size is the planner's estimate (counting it would scan the largest table).
SELECT json_build_object(
  'schema_version', (SELECT max(version) FROM :"schema".schema_migrations),
  'workflows', (SELECT coalesce(json_object_agg(status, n ORDER BY status), '{}')
                  FROM (SELECT status, count(*) AS n FROM :"schema".workflows GROUP BY status) c),
  'journal_rows_estimate', (SELECT CASE WHEN c.reltuples < 0 THEN NULL
                                        ELSE c.reltuples::bigint END
                              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                             WHERE n.nspname = $2::text AND c.relname = 'steps'),
  'steps_retrying', (SELECT count(*) FROM :"schema".step_retries WHERE outcome = 'retrying'),
  'finished_last_hour', (SELECT count(*) FROM :"schema".workflows
                          WHERE status IN ('succeeded', 'failed', 'cancelled')
                            AND completed_at > now() - interval '1 hour'),
  'failed_last_hour', (SELECT count(*) FROM :"schema".workflows
                        WHERE status IN ('failed', 'dead_letter')
                          AND updated_at > now() - interval '1 hour'),
  'failed_last_day', (SELECT count(*) FROM :"schema".workflows
                       WHERE status IN ('failed', 'dead_letter')
                         AND updated_at > now() - interval '1 day'),
  'queued', (SELECT count(*) FROM :"schema".workflows
              WHERE status = 'pending' AND executor_id IS NULL
                AND (wake_at IS NULL OR wake_at <= now())),
  'oldest_queued_s', (SELECT round(extract(epoch FROM now() - min(coalesce(wake_at, created_at))))::bigint
                        FROM :"schema".workflows
                       WHERE status = 'pending' AND executor_id IS NULL
                         AND (wake_at IS NULL OR wake_at <= now())),
  'messages_unconsumed', (SELECT count(*) FROM :"schema".messages WHERE consumed_at IS NULL),
  'executors_alive', (SELECT count(*) FROM :"schema".executors
                       WHERE heartbeat_at > now() - make_interval(secs => $1::double precision))
)::text
