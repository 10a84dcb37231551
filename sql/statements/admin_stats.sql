-- admin_stats
-- $1 lease_s double precision
-- $2 schema text
--
-- $1 lease (seconds), $2 the schema's name. One JSON object: counts for a dashboard.
-- Each is an index probe or a scan of unfinished rows: the unfinished statuses are counted
-- exactly over partial indexes; the finished ones (succeeded, failed, cancelled) too while the
-- table holds under 200 000 rows by the planner's estimate, and above that they are the
-- planner's estimate (its most common values), listed in workflows_estimated, since counting
-- them would scan the table (0.4 s at 1 000 000 rows). The journal's size is an estimate too.
WITH size AS (
  SELECT coalesce((SELECT c.reltuples FROM pg_class c
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = $2::text AND c.relname = 'workflows'), 0) > 200000 AS big),
estimates AS (
  SELECT v.status, round(v.freq * c.reltuples)::bigint AS n
    FROM pg_stats s
    JOIN pg_namespace n ON n.nspname = s.schemaname
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = s.tablename,
         unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS v(status, freq)
   WHERE s.schemaname = $2::text AND s.tablename = 'workflows' AND s.attname = 'status'
     AND v.status IN ('succeeded', 'failed', 'cancelled'))
SELECT json_build_object(
  'schema_version', (SELECT max(version) FROM :"schema".schema_migrations),
  'workflows', (SELECT coalesce(json_object_agg(status, n ORDER BY status), '{}') FROM (
      SELECT status, count(*) AS n FROM :"schema".workflows
       WHERE status IN ('pending', 'running', 'sleeping') GROUP BY status
      UNION ALL
      SELECT status, count(*) FROM :"schema".workflows
       WHERE status IN ('parked', 'dead_letter') GROUP BY status
      UNION ALL
      -- (LATERAL on size: a plain NOT (SELECT big ...) filter still ran the parallel scan)
      SELECT f.status, f.n FROM size,
             LATERAL (SELECT status, count(*) AS n FROM :"schema".workflows
                       WHERE status IN ('succeeded', 'failed', 'cancelled') AND NOT size.big
                       GROUP BY status) f
      UNION ALL
      SELECT status, n FROM estimates WHERE (SELECT big FROM size)) c),
  'workflows_estimated', (SELECT coalesce(json_agg(status ORDER BY status), '[]')
                            FROM estimates WHERE (SELECT big FROM size)),
  'journal_rows_estimate', (SELECT CASE WHEN c.reltuples < 0 THEN NULL
                                        ELSE c.reltuples::bigint END
                              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                             WHERE n.nspname = $2::text AND c.relname = 'steps'),
  -- steps of unfinished workflows only: a workflow cancelled or failed mid-retry retries nothing
  'steps_retrying', (SELECT count(*) FROM :"schema".step_retries
                      WHERE outcome = 'retrying' AND status IN ('pending', 'running', 'sleeping')),
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
