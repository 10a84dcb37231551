-- why a workflow waits
-- One answer, in words, to "why is this workflow not moving?" for every workflow that has not
-- ended, and whether it can move on its own: the view `waiting`. The console (a workflow's page,
-- the list), the `durable` program (show, list, stuck) and the views `stuck` and `queued` read
-- it, so that they all say the same thing.

-- What an executor runs, written when it registers: its lease (engine_options::lease_timeout: a
-- workflow it runs is taken over once its heartbeat is older than that), the workflow names it
-- has registered and the queues it dispatches from (NULL: not said, by an older version).
ALTER TABLE :"schema".executors ADD COLUMN lease_ms bigint,
                                ADD COLUMN workflows text[],
                                ADD COLUMN queues text[];

-- The attempts the step's retry policy allows in all (retry::max_attempts), with each attempt,
-- and in step_retries (its definition of migration 6, with the column added at its end).
ALTER TABLE :"schema".step_attempts ADD COLUMN max_attempts integer;
CREATE OR REPLACE VIEW :"schema".step_retries AS
SELECT DISTINCT ON (a.workflow_id, a.seq)
       a.workflow_id, w.name AS workflow, w.status, w.status_reason, a.seq, a.name AS step,
       a.kind, a.attempt, a.outcome, a.error->>'type' AS error_type,
       a.error->>'message' AS last_error, a.ended_at AS last_attempt_at, a.next_attempt_at,
       (SELECT count(*) FROM :"schema".step_attempts c
         WHERE c.workflow_id = a.workflow_id AND c.seq = a.seq
           AND c.outcome IN ('retrying', 'failed'))
         AS failed_attempts,
       a.max_attempts
  FROM :"schema".step_attempts a
  JOIN :"schema".workflows w ON w.id = a.workflow_id
 WHERE NOT EXISTS (SELECT 1 FROM :"schema".steps s WHERE s.workflow_id = a.workflow_id AND s.seq = a.seq)
 ORDER BY a.workflow_id, a.seq, a.id DESC;

-- An interval in words, to the two largest units: '12 s', '47 min', '3 h 5 min', '2 d 4 h'.
CREATE FUNCTION :"schema".interval_words(i interval) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
  SELECT CASE
    WHEN i IS NULL THEN NULL
    WHEN s < 60 THEN floor(s)::bigint || ' s'
    WHEN s < 3600 THEN floor(s / 60)::bigint || ' min'
    WHEN s < 86400 THEN floor(s / 3600)::bigint || ' h'
                        || CASE WHEN floor(s / 60)::bigint % 60 > 0
                                THEN ' ' || floor(s / 60)::bigint % 60 || ' min' ELSE '' END
    ELSE floor(s / 86400)::bigint || ' d'
         || CASE WHEN floor(s / 3600)::bigint % 24 > 0
                 THEN ' ' || floor(s / 3600)::bigint % 24 || ' h' ELSE '' END
  END FROM (SELECT abs(extract(epoch FROM i)) AS s) x
$fn$;

-- A time in sentences: '2026-12-06 14:03:09 UTC'.
CREATE FUNCTION :"schema".time_words(t timestamptz) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
  SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
$fn$;

-- Every workflow that has not ended, with why it is where it is:
--   kind     what it waits for: starting, queue_paused, delayed, no_executor, queued, running,
--            takeover (its executor stopped), retrying, message, event, child, sleeping,
--            parked, dead_letter
--   reason   the same in a sentence, with what to do when it cannot move on its own
--   blocked  true when it cannot move on its own (a paused queue, no live executor for it, a
--            child or a workflow it waits for that stopped, parked, dead-lettered)
--   since    when it came to this (its row's last change)
--   next_at  when it moves next on its own, when that is known (a wake-up, a retry's attempt, a
--            wait's timeout, a delayed start)
-- Read one workflow at a time (WHERE id = ...) or a page of them: the parts are index probes
-- of the workflow's own rows, and a look at the executors table (a few rows) for each.
CREATE VIEW :"schema".waiting AS
SELECT w.id, w.name, w.status, v.kind,
       CASE v.kind
         WHEN 'parked' THEN
           'parked: ' || coalesce(w.status_reason, 'no reason recorded')
           || ' — it waits for an operator: fix the cause, then durable resume'
         WHEN 'dead_letter' THEN
           'dead-lettered: ' || coalesce(w.status_reason, w.last_error, 'no reason recorded')
           || ' — it waits for an operator: fix the cause, then durable retry (or cancel it)'
         WHEN 'starting' THEN
           'pending: claimed by executor ' || quote_literal(w.executor_id) || ', starting'
         WHEN 'queue_paused' THEN
           'pending: queue ' || quote_literal(w.queue) || ' is paused (durable queue resume '
           || w.queue || ')'
         WHEN 'delayed' THEN 'pending: delayed until ' || :"schema".time_words(w.wake_at)
         WHEN 'no_executor' THEN 'pending: ' || v.missing || ': it starts once one does'
         WHEN 'queued' THEN
           'pending: queued for ' || :"schema".interval_words(now() - coalesce(w.wake_at, w.created_at))
           || CASE WHEN w.queue IS NULL THEN ', for the next free executor'
                   ELSE ', waiting for room in queue ' || quote_literal(w.queue) END
         WHEN 'running' THEN
           'running on executor ' || quote_literal(w.executor_id) || ' (last heartbeat '
           || :"schema".interval_words(now() - e.heartbeat_at) || ' ago)'
         WHEN 'takeover' THEN
           CASE WHEN e.id IS NULL
                THEN 'running on executor ' || quote_literal(w.executor_id)
                     || ', which is not registered'
                -- a graceful shutdown (executor_release) leaves '-infinity'
                WHEN NOT isfinite(e.heartbeat_at)
                THEN 'running on executor ' || quote_literal(w.executor_id)
                     || ', which shut down and released it'
                ELSE 'running on executor ' || quote_literal(w.executor_id) || ', last heartbeat '
                     || :"schema".interval_words(now() - e.heartbeat_at) || ' ago'
                     || ' — its lease ended at ' || :"schema".time_words(v.lease_end)
           END
           || CASE WHEN v.live THEN ': the next live executor takes it over'
                   ELSE ': ' || v.missing || ', so it waits until one starts' END
         WHEN 'retrying' THEN
           'retrying step ' || r.seq || ' ' || quote_literal(r.step) || ': attempt '
           || (r.failures + 1)
           || coalesce(' of ' || r.max_attempts, '') || ' at '
           || :"schema".time_words(r.next_attempt_at)
           || coalesce(' (attempt ' || r.failures || ' failed: ' || r.error || ')', '')
         WHEN 'message' THEN
           'waiting for a message on topic ' || quote_literal(substr(w.wait_for, 5)) || ' since '
           || :"schema".time_words(w.updated_at)
           || coalesce(' until ' || :"schema".time_words(v.deadline) || ' (its timeout)', '')
           || coalesce(' (' || (
                SELECT string_agg(m.n || ' unconsumed message' || CASE WHEN m.n = 1 THEN '' ELSE 's' END
                                  || ' on topic ' || quote_literal(m.topic), ', '
                                  ORDER BY m.n DESC, m.topic)
                  FROM (SELECT x.topic, count(*) AS n FROM :"schema".messages x
                         WHERE x.workflow_id = w.id AND x.consumed_at IS NULL
                           AND x.topic <> substr(w.wait_for, 5)
                         GROUP BY x.topic ORDER BY count(*) DESC, x.topic LIMIT 3) m) || ')', '')
         WHEN 'event' THEN
           'waiting for event ' || quote_literal(v.event_key) || ' of workflow '
           || quote_literal(v.event_of)
           || coalesce(' until ' || :"schema".time_words(v.deadline) || ' (its timeout)', '')
           || CASE WHEN v.other_status IS NULL THEN ', which does not exist (yet)'
                   WHEN v.other_status IN ('succeeded', 'failed', 'cancelled')
                     THEN ', which ended (' || v.other_status || ') without setting it'
                   ELSE ', which is ' || v.other_status END
         WHEN 'child' THEN
           'waiting for child ' || quote_literal(substr(w.wait_for, 7))
           || CASE WHEN v.other_status IS NULL THEN ', which does not exist'
                   WHEN v.other_status IN ('succeeded', 'failed', 'cancelled')
                     THEN ', which ended (' || v.other_status || '): it wakes now'
                   WHEN v.other_status IN ('parked', 'dead_letter')
                     THEN ', which is ' || v.other_status
                          || ': it waits until the child is resumed, retried or cancelled'
                   ELSE ' (' || v.other_status || ')' END
         ELSE 'sleeping until ' || coalesce(:"schema".time_words(w.wake_at), 'woken')
       END
       || CASE WHEN v.kind IN ('retrying', 'message', 'event', 'child', 'sleeping')
                    AND w.status = 'sleeping' AND w.wake_at < now() - interval '1 minute'
               THEN ' — due since ' || :"schema".time_words(w.wake_at) || ' but not woken: '
                    || CASE WHEN v.live THEN 'a live executor takes it at its next look'
                            ELSE v.missing END
               ELSE '' END AS reason,
       coalesce(v.kind IN ('parked', 'dead_letter', 'queue_paused', 'no_executor')
                OR (v.kind = 'takeover' AND NOT v.live)
                OR (v.kind = 'child' AND v.other_status IN ('parked', 'dead_letter'))
                OR (v.kind = 'event' AND v.other_status IN ('succeeded', 'failed', 'cancelled')
                    AND v.deadline IS NULL)
                OR (w.status = 'sleeping' AND w.wake_at < now() - interval '1 minute'
                    AND NOT v.live), false) AS blocked,
       w.updated_at AS since,
       CASE v.kind
         WHEN 'delayed' THEN w.wake_at
         WHEN 'retrying' THEN r.next_attempt_at
         WHEN 'message' THEN v.deadline
         WHEN 'event' THEN v.deadline
         WHEN 'sleeping' THEN w.wake_at
       END AS next_at
  FROM :"schema".workflows w
  LEFT JOIN :"schema".executors e ON e.id = w.executor_id
  -- the step being retried (step_retries: its latest attempt says 'retrying' and it has no
  -- journal row yet); failures counted since the last reset (retry() gives fresh attempts)
  LEFT JOIN LATERAL (
    SELECT x.seq, x.step, x.last_error AS error, x.next_attempt_at, x.max_attempts,
           (SELECT count(*) FROM :"schema".step_attempts c
             WHERE c.workflow_id = x.workflow_id AND c.seq = x.seq
               AND c.outcome IN ('retrying', 'failed')
               AND c.id > coalesce((SELECT max(z.id) FROM :"schema".step_attempts z
                                     WHERE z.workflow_id = x.workflow_id AND z.seq = x.seq
                                       AND z.outcome = 'reset'), 0)) AS failures
      FROM :"schema".step_retries x
     WHERE x.workflow_id = w.id AND x.outcome = 'retrying'
       AND w.status IN ('running', 'sleeping') AND w.wait_for IS NULL
     ORDER BY x.last_attempt_at DESC, x.seq DESC LIMIT 1) r ON true
  -- the live executors (a heartbeat within their lease) that could run it: any, of its
  -- application version, with its workflow registered, dispatching its queue
  CROSS JOIN LATERAL (
    SELECT bool_or(true) AS any_live,
           bool_or(cardinality(x.versions) = 0 OR w.app_version = ANY(x.versions)) AS of_version,
           bool_or((cardinality(x.versions) = 0 OR w.app_version = ANY(x.versions))
                   AND (x.workflows IS NULL OR w.name = ANY(x.workflows))) AS of_name,
           bool_or((cardinality(x.versions) = 0 OR w.app_version = ANY(x.versions))
                   AND (x.workflows IS NULL OR w.name = ANY(x.workflows))
                   AND (w.queue IS NULL OR x.queues IS NULL OR w.queue = ANY(x.queues)))
             AS of_queue
      FROM :"schema".executors x
     WHERE x.heartbeat_at > now() - make_interval(secs => coalesce(x.lease_ms, 60000) / 1000.0)
  ) l
  CROSS JOIN LATERAL (
    SELECT k.*,
           -- a pending one needs an executor that serves its queue; one that was claimed once
           -- (a takeover, a wake-up) one that runs its name
           coalesce(CASE WHEN w.status = 'pending' THEN l.of_queue ELSE l.of_name END, false)
             AS live,
           CASE WHEN NOT coalesce(l.any_live, false) THEN 'no executor is alive'
                WHEN NOT l.of_version THEN 'no live executor runs application version '
                                           || quote_literal(w.app_version)
                WHEN NOT l.of_name THEN 'no live executor runs the workflow '
                                        || quote_literal(w.name)
                WHEN w.status = 'pending' AND NOT l.of_queue
                  THEN 'no live executor serves queue ' || quote_literal(w.queue)
           END AS missing,
           e.heartbeat_at + make_interval(secs => coalesce(e.lease_ms, 60000) / 1000.0)
             AS lease_end,
           -- a wait's timeout: its deadline row, the latest of the journal while it waits (the
           -- wake_at of a wait is when the engine looks again, not when the wait ends)
           (SELECT to_timestamp((d.output #>> '{}')::double precision)
              FROM :"schema".steps d
             WHERE d.workflow_id = w.id AND d.kind = 'deadline' AND w.wait_for IS NOT NULL
               AND d.seq = (SELECT max(m.seq) FROM :"schema".steps m
                             WHERE m.workflow_id = w.id)) AS deadline,
           -- the workflow an event or a child wait is on, and its status
           (SELECT o.status FROM :"schema".workflows o
             WHERE o.id = CASE k.kind WHEN 'child' THEN substr(w.wait_for, 7)
                                      WHEN 'event' THEN k.event_of END) AS other_status
      FROM (SELECT CASE
               WHEN w.status = 'parked' THEN 'parked'
               WHEN w.status = 'dead_letter' THEN 'dead_letter'
               WHEN w.status = 'pending' AND w.executor_id IS NOT NULL THEN 'starting'
               WHEN w.status = 'pending' AND EXISTS (SELECT 1 FROM :"schema".queues q
                                                      WHERE q.name = w.queue AND q.paused)
                 THEN 'queue_paused'
               WHEN w.status = 'pending' AND w.wake_at > now() THEN 'delayed'
               WHEN w.status = 'pending' AND NOT coalesce(l.of_queue, false) THEN 'no_executor'
               WHEN w.status = 'pending' THEN 'queued'
               WHEN w.status = 'running'
                    AND (e.id IS NULL OR e.heartbeat_at < now() - make_interval(
                           secs => coalesce(e.lease_ms, 60000) / 1000.0))
                 THEN 'takeover'
               WHEN r.seq IS NOT NULL THEN 'retrying'
               WHEN w.status = 'running' THEN 'running'
               WHEN w.wait_for LIKE 'msg:%' THEN 'message'
               WHEN w.wait_for LIKE 'event:%' THEN 'event'
               WHEN w.wait_for LIKE 'child:%' THEN 'child'
               ELSE 'sleeping'
             END AS kind,
             -- 'event:<length of id in bytes>:<id>:<key>', cut in bytes
             CASE WHEN w.wait_for LIKE 'event:%' THEN convert_from(substring(
               convert_to(w.wait_for, 'UTF8')
               FROM 8 + length(split_part(substr(w.wait_for, 7), ':', 1))
               FOR split_part(substr(w.wait_for, 7), ':', 1)::integer), 'UTF8')
               -- (convert_from takes its collation from the encoding's name: "C")
               COLLATE "default" END AS event_of,
             CASE WHEN w.wait_for LIKE 'event:%' THEN convert_from(substring(
               convert_to(w.wait_for, 'UTF8')
               FROM 9 + length(split_part(substr(w.wait_for, 7), ':', 1))
                      + split_part(substr(w.wait_for, 7), ':', 1)::integer), 'UTF8')
               COLLATE "default" END AS event_key) k) v
 WHERE w.status IN ('pending', 'running', 'sleeping', 'parked', 'dead_letter');

-- Workflows that do not move: running under an executor whose lease ended, due sleepers nobody
-- woke for a minute, queued ones waiting over ten minutes, waits older than a day, and every
-- one that cannot move on its own (waiting.blocked: a paused queue, no live executor for it, a
-- child that stopped); the reason as `waiting` says it, and its kind and blocked.
CREATE OR REPLACE VIEW :"schema".stuck AS
SELECT w.id, w.name, w.status, w.executor_id, w.updated_at AS since, x.reason, x.kind, x.blocked
  FROM :"schema".workflows w
  JOIN :"schema".waiting x ON x.id = w.id
 WHERE w.status IN ('pending', 'running', 'sleeping')
   AND (x.blocked
        OR x.kind = 'takeover'
        OR (w.status = 'sleeping' AND w.wake_at < now() - interval '1 minute')
        OR (w.status = 'sleeping' AND w.wait_for IS NOT NULL
            AND w.updated_at < now() - interval '1 day')
        OR (w.status = 'pending' AND w.executor_id IS NULL
            AND coalesce(w.wake_at, w.created_at) < now() - interval '10 minutes'));

-- The queued view's reason is waiting's.
CREATE OR REPLACE VIEW :"schema".queued AS
SELECT w.id, w.name, w.queue, w.priority, w.app_version, w.created_at, w.wake_at, x.reason
  FROM :"schema".workflows w
  JOIN :"schema".waiting x ON x.id = w.id
 WHERE w.status = 'pending' AND w.executor_id IS NULL;
