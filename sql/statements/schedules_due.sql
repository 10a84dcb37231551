-- schedules_due
-- $1 limit bigint
--
-- Up to $1 schedules whose next slot has come, oldest first, locked for this transaction
-- (SKIP LOCKED: executors that fire at the same moment take different ones), with the server's
-- now (Unix seconds, fractional). Times are Unix seconds (a next slot written with a fraction,
-- by hand, is read as the second after it).
SELECT s.id, s.cron, s.time_zone, s.catch_up, s.catch_up_max, s.late_after_ms, s.jitter_ms,
       ceil(extract(epoch FROM s.end_at))::bigint, ceil(extract(epoch FROM s.next_fire_at))::bigint,
       extract(epoch FROM now())::double precision
  FROM :"schema".schedules s
 WHERE NOT s.paused AND s.next_fire_at IS NOT NULL AND s.next_fire_at <= now()
 ORDER BY s.next_fire_at
 LIMIT $1
   FOR UPDATE SKIP LOCKED
