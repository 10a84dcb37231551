-- schedule_upsert
-- $1 id text
-- $2 cron text
-- $3 time_zone text
-- $4 workflow_name text
-- $5 inputs jsonb (sent as JSON text)
-- $6 queue text
-- $7 priority integer
-- $8 timeout_ms bigint
-- $9 app_version text
-- $10 catch_up text
-- $11 catch_up_max integer
-- $12 late_after_ms bigint
-- $13 jitter_ms bigint
-- $14 start_at bigint, null allowed
-- $15 end_at bigint, null allowed
-- $16 next_fire_at bigint, null allowed
-- $17 paused boolean
-- $18 pass_slot boolean
--
-- Creates schedule $1 or replaces its definition (times in Unix seconds). An update keeps the
-- pause, the counters and the last fire, and keeps the next slot unless the timetable (cron,
-- time zone, start, end) changed: then the next slot is $16, the one the caller computed from
-- now (a slot already fired is not fired again: its workflow id exists). One row: true if
-- created.
INSERT INTO :"schema".schedules AS s (id, cron, time_zone, workflow_name, inputs, queue, priority,
       timeout_ms, app_version, catch_up, catch_up_max, late_after_ms, jitter_ms, start_at, end_at,
       next_fire_at, paused, pass_slot)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11, $12, $13, to_timestamp($14::bigint),
        to_timestamp($15::bigint), to_timestamp($16::bigint), $17, $18)
ON CONFLICT (id) DO UPDATE SET cron = excluded.cron, time_zone = excluded.time_zone,
  workflow_name = excluded.workflow_name, inputs = excluded.inputs, queue = excluded.queue,
  priority = excluded.priority, timeout_ms = excluded.timeout_ms,
  app_version = excluded.app_version, catch_up = excluded.catch_up,
  catch_up_max = excluded.catch_up_max, late_after_ms = excluded.late_after_ms,
  jitter_ms = excluded.jitter_ms, start_at = excluded.start_at, end_at = excluded.end_at,
  next_fire_at = CASE WHEN s.cron = excluded.cron AND s.time_zone = excluded.time_zone
                           AND s.start_at IS NOT DISTINCT FROM excluded.start_at
                           AND s.end_at IS NOT DISTINCT FROM excluded.end_at
                      THEN s.next_fire_at ELSE excluded.next_fire_at END,
  pass_slot = excluded.pass_slot, updated_at = now()
RETURNING (xmax = 0)
