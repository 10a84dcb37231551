-- schedules_list
-- $1 id_prefix text
--
-- Every schedule whose id starts with $1 ('' for all), as schedule_get's JSON, by id, and
-- overdue: a schedule not paused whose next slot passed over a minute ago and was not fired
-- (no live executor runs schedules, or they are behind), how long ago in words and seconds.
SELECT json_build_object(
  'id', s.id, 'cron', s.cron, 'time_zone', s.time_zone, 'workflow_name', s.workflow_name,
  'inputs', s.inputs, 'queue', s.queue, 'priority', s.priority, 'timeout_ms', s.timeout_ms,
  'app_version', s.app_version, 'catch_up', s.catch_up, 'catch_up_max', s.catch_up_max,
  'late_after_ms', s.late_after_ms, 'jitter_ms', s.jitter_ms, 'pass_slot', s.pass_slot,
  'start_at', extract(epoch FROM s.start_at)::bigint, 'end_at', extract(epoch FROM s.end_at)::bigint,
  'paused', s.paused, 'next_fire_at', extract(epoch FROM s.next_fire_at)::bigint,
  'last_slot_at', extract(epoch FROM s.last_slot_at)::bigint,
  'last_fired_at', s.last_fired_at, 'last_workflow_id', s.last_workflow_id,
  'last_status', w.status, 'fired', s.fired, 'missed', s.missed, 'late', s.late,
  'created_at', s.created_at, 'updated_at', s.updated_at,
  'now', extract(epoch FROM now())::double precision,
  'overdue', CASE WHEN NOT s.paused AND s.next_fire_at < now() - interval '1 minute'
                  THEN :"schema".interval_words(now() - s.next_fire_at) END,
  'overdue_s', CASE WHEN NOT s.paused AND s.next_fire_at < now() - interval '1 minute'
                    THEN floor(extract(epoch FROM now() - s.next_fire_at))::bigint END)::text
  FROM :"schema".schedules s
  LEFT JOIN :"schema".workflows w ON w.id = s.last_workflow_id
 WHERE starts_with(s.id, $1)
 ORDER BY s.id
