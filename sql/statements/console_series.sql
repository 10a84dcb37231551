-- console_series
--
-- The web console's overview charts: workflows created, finished (succeeded or cancelled) and
-- failed (failed or dead letter, by their last update) per minute over the last hour and per
-- hour over the last day, oldest first, empty buckets as zeros. "at" is the bucket's start in
-- epoch seconds. Buckets are cut in UTC, whatever the session's time zone (an hour of a zone
-- with a half-hour offset, or the repeated hour of a daylight-saving change, would not be one
-- bucket). One pass over the day's rows, grouped twice; the rows created are read status by status
-- from workflows_status_created (an index-only range each).
WITH bounds AS (
  SELECT date_trunc('minute', now(), 'UTC') AS minute, date_trunc('hour', now(), 'UTC') AS hour),
-- The day's bound is written out (not read from `bounds`), so that the planner estimates each
-- range from the statistics: a CTE's value would be unknown to it, its estimate hundreds of
-- thousands of rows at 1 000 000 workflows, and the statement's cost would have it compiled
-- with JIT first (40 ms and more of a 75 ms statement).
happened AS (
  SELECT 'started' AS what, w.created_at AS at
    FROM unnest(ARRAY['pending', 'running', 'sleeping', 'succeeded', 'failed', 'parked',
                      'cancelled', 'dead_letter']) AS s(status),
         LATERAL (SELECT x.created_at FROM :"schema".workflows x
                   WHERE x.status = s.status
                     AND x.created_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours') w
  UNION ALL
  SELECT 'finished', w.completed_at FROM :"schema".workflows w
   WHERE w.completed_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours'
     AND w.status IN ('succeeded', 'cancelled')
  UNION ALL
  SELECT 'failed', w.updated_at FROM :"schema".workflows w
   WHERE w.updated_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours'
     AND w.status IN ('failed', 'dead_letter')),
per_minute AS (
  SELECT date_trunc('minute', h.at, 'UTC') AS at, count(*) FILTER (WHERE h.what = 'started') AS started,
         count(*) FILTER (WHERE h.what = 'finished') AS finished,
         count(*) FILTER (WHERE h.what = 'failed') AS failed
    FROM happened h, bounds b WHERE h.at >= b.minute - interval '59 minutes' GROUP BY 1),
per_hour AS (
  SELECT date_trunc('hour', h.at, 'UTC') AS at, count(*) FILTER (WHERE h.what = 'started') AS started,
         count(*) FILTER (WHERE h.what = 'finished') AS finished,
         count(*) FILTER (WHERE h.what = 'failed') AS failed
    FROM happened h GROUP BY 1)
SELECT json_build_object(
  'hour', (SELECT json_agg(json_build_object(
                    'at', extract(epoch FROM g)::bigint, 'started', coalesce(m.started, 0),
                    'finished', coalesce(m.finished, 0), 'failed', coalesce(m.failed, 0))
                  ORDER BY g)
             FROM bounds b
             CROSS JOIN generate_series(b.minute - interval '59 minutes', b.minute,
                                        interval '1 minute') g
             LEFT JOIN per_minute m ON m.at = g),
  'day', (SELECT json_agg(json_build_object(
                   'at', extract(epoch FROM g)::bigint, 'started', coalesce(h.started, 0),
                   'finished', coalesce(h.finished, 0), 'failed', coalesce(h.failed, 0))
                 ORDER BY g)
            FROM bounds b
            CROSS JOIN generate_series(b.hour - interval '23 hours', b.hour, interval '1 hour') g
            LEFT JOIN per_hour h ON h.at = g))::text
