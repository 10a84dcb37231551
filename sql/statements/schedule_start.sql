-- schedule_start
-- $1 id text
-- $2 workflow_ids text[]
-- $3 slots text[]
-- $4 wake double precision[]
-- $5 channel text
--
-- Starts workflows of schedule $1 outside its timetable (a trigger, a backfill): workflow
-- $2[j], pending in the schedule's queue, due at $4[j] (Unix seconds), with the schedule's
-- pass_slot $3[j] as its first argument. An id that exists is left alone (a repeated
-- backfill starts nothing twice). Returns the ids inserted; none when the schedule does not
-- exist. The queues are notified at commit.
WITH ins AS (
  INSERT INTO :"schema".workflows (id, name, status, inputs, queue, priority, wake_at,
                                   app_version, deadline)
  SELECT sl.wid, s.workflow_name, 'pending',
         CASE WHEN s.pass_slot THEN jsonb_build_array(sl.slot) || s.inputs ELSE s.inputs END,
         s.queue, s.priority, to_timestamp(sl.wake), s.app_version,
         CASE WHEN s.timeout_ms > 0
              THEN greatest(now(), to_timestamp(sl.wake))
                   + make_interval(secs => s.timeout_ms::double precision / 1000) END
    FROM :"schema".schedules s,
         unnest($2::text[], $3::text[], $4::double precision[]) AS sl(wid, slot, wake)
   WHERE s.id = $1
  ON CONFLICT DO NOTHING
  RETURNING id, queue),
woken AS (SELECT pg_notify($5, q.queue) FROM (SELECT DISTINCT queue FROM ins) q)
SELECT i.id FROM ins i, (SELECT count(*) FROM woken) n
