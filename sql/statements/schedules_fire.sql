-- schedules_fire
-- $1 ids text[]
-- $2 expected bigint[]
-- $3 next bigint[]
-- $4 last_slot bigint[]
-- $5 fired integer[]
-- $6 missed integer[]
-- $7 late integer[]
-- $8 last_workflow text[]
-- $9 slot_schedules text[]
-- $10 slot_ids text[]
-- $11 slot_slots text[]
-- $12 slot_wake double precision[]
-- $13 channel text
--
-- Fires due schedules, in one statement, in the transaction of schedules_due, which holds
-- their rows locked ($2, the next slot read, is kept for the record): for each schedule $1[i]
-- that is not paused, moves the next slot to $3[i] (null: none left)
-- and adds to its counters; and for each slot j of a schedule so advanced, inserts workflow
-- $10[j] (pending in the schedule's queue, due at $12[j], Unix seconds; with the schedule's
-- pass_slot, $11[j] as its first argument). A workflow id that exists is left alone, so a slot
-- starts at most one workflow. Returns the ids inserted; the queues are notified at commit.
WITH f AS (
  SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::integer[],
                       $6::integer[], $7::integer[], $8::text[])
           AS f(id, expected, next, last_slot, fired, missed, late, last_workflow)),
adv AS (
  UPDATE :"schema".schedules s
     SET next_fire_at = to_timestamp(f.next),
         last_slot_at = coalesce(to_timestamp(f.last_slot), s.last_slot_at),
         last_fired_at = CASE WHEN f.fired > 0 THEN now() ELSE s.last_fired_at END,
         last_workflow_id = coalesce(f.last_workflow, s.last_workflow_id),
         fired = s.fired + f.fired, missed = s.missed + f.missed, late = s.late + f.late,
         updated_at = now()
    FROM f
   WHERE s.id = f.id AND NOT s.paused
  RETURNING s.id, s.workflow_name, s.inputs, s.queue, s.priority, s.timeout_ms, s.app_version,
            s.pass_slot),
ins AS (
  INSERT INTO :"schema".workflows (id, name, status, inputs, queue, priority, wake_at,
                                   app_version, deadline)
  SELECT sl.wid, a.workflow_name, 'pending',
         CASE WHEN a.pass_slot THEN jsonb_build_array(sl.slot) || a.inputs ELSE a.inputs END,
         a.queue, a.priority, to_timestamp(sl.wake), a.app_version,
         CASE WHEN a.timeout_ms > 0
              THEN greatest(now(), to_timestamp(sl.wake))
                   + make_interval(secs => a.timeout_ms::double precision / 1000) END
    FROM unnest($9::text[], $10::text[], $11::text[], $12::double precision[])
         AS sl(schedule_id, wid, slot, wake)
    JOIN adv a ON a.id = sl.schedule_id
  ON CONFLICT DO NOTHING
  RETURNING id, queue),
woken AS (SELECT pg_notify($13, q.queue) FROM (SELECT DISTINCT queue FROM ins) q)
SELECT i.id FROM ins i, (SELECT count(*) FROM woken) n
