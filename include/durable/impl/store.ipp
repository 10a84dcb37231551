// The non-template part of durable/store.hpp (the schema's migrations, the statement texts,
// migrate and version): included at its end when header-only, by durable/src.hpp otherwise.
#pragma once

namespace durable {
namespace detail {

DURABLE_DECL const std::vector<migration>& migrations() {
  static const std::vector<migration> all = {
      {1,
       "workflows, steps, executors",
       {
           R"(CREATE TABLE {s}.executors (
  id           text PRIMARY KEY,
  host         text NOT NULL,
  pid          integer NOT NULL,
  app_version  text NOT NULL DEFAULT '',
  started_at   timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now()
))",
           R"(CREATE TABLE {s}.workflows (
  id            text PRIMARY KEY,
  name          text NOT NULL,
  status        text NOT NULL CHECK (status IN
                  ('pending', 'running', 'sleeping', 'succeeded', 'failed', 'parked', 'cancelled')),
  status_reason text,
  inputs        jsonb NOT NULL,
  output        jsonb,
  error         jsonb,
  queue         text,
  priority      integer NOT NULL DEFAULT 0,
  dedup_key     text,
  executor_id   text,
  epoch         bigint NOT NULL DEFAULT 0,
  attempts      integer NOT NULL DEFAULT 0,
  created_at    timestamptz NOT NULL DEFAULT now(),
  started_at    timestamptz,
  updated_at    timestamptz NOT NULL DEFAULT now(),
  completed_at  timestamptz,
  wake_at       timestamptz,
  deadline      timestamptz,
  parent_id     text,
  app_version   text NOT NULL DEFAULT ''
))",
           R"(CREATE INDEX workflows_open_by_executor ON {s}.workflows (executor_id)
  WHERE status IN ('pending', 'running', 'sleeping'))",
           R"(CREATE TABLE {s}.steps (
  workflow_id  text NOT NULL,
  seq          integer NOT NULL,
  name         text NOT NULL,
  kind         text NOT NULL,
  status       text NOT NULL CHECK (status IN ('succeeded', 'failed')),
  output       jsonb,
  error        jsonb,
  attempts     integer NOT NULL DEFAULT 1,
  epoch        bigint NOT NULL,
  started_at   timestamptz,
  completed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, seq)
))",
           // I3: the fence and the write are one statement. FOR SHARE makes a takeover
           // (which bumps the epoch) wait for this row's commit, and makes this call wait
           // for a takeover in progress and then see its new epoch.
           R"(CREATE FUNCTION {s}.append_step(
    p_workflow_id text, p_epoch bigint, p_seq integer, p_name text, p_kind text,
    p_status text, p_output jsonb, p_error jsonb, p_attempts integer, p_started_at timestamptz)
  RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  current_epoch bigint;
BEGIN
  SELECT epoch INTO current_epoch FROM {s}.workflows WHERE id = p_workflow_id FOR SHARE;
  IF current_epoch IS DISTINCT FROM p_epoch THEN
    RAISE EXCEPTION 'workflow % is owned under epoch %, not %', p_workflow_id,
      coalesce(current_epoch::text, '(no such workflow)'), p_epoch
      USING ERRCODE = 'DU001';
  END IF;
  INSERT INTO {s}.steps (workflow_id, seq, name, kind, status, output, error, attempts, epoch,
                         started_at)
  VALUES (p_workflow_id, p_seq, p_name, p_kind, p_status, p_output, p_error, p_attempts, p_epoch,
          p_started_at);
END
$fn$)",
       }},
      {2,
       "queues",
       {
           R"(CREATE TABLE {s}.queues (
  name               text PRIMARY KEY,
  concurrency        integer CHECK (concurrency > 0),
  worker_concurrency integer CHECK (worker_concurrency > 0),
  rate_limit         integer CHECK (rate_limit > 0),
  rate_period_ms     integer CHECK (rate_period_ms > 0),
  updated_at         timestamptz NOT NULL DEFAULT now()
))",
           // A deduplication key is unique among a queue's unfinished workflows only.
           R"(CREATE UNIQUE INDEX workflows_queue_dedup ON {s}.workflows (queue, dedup_key)
  WHERE dedup_key IS NOT NULL AND status IN ('pending', 'running', 'sleeping'))",
           R"(CREATE INDEX workflows_queued ON {s}.workflows (queue, priority DESC, created_at)
  WHERE status = 'pending' AND executor_id IS NULL)",
           R"(CREATE INDEX workflows_queue_running ON {s}.workflows (queue, executor_id)
  WHERE status = 'running')",
           R"(CREATE INDEX workflows_queue_started ON {s}.workflows (queue, started_at))",
       }},
      {3,
       "application versions",
       {
           R"(ALTER TABLE {s}.executors ADD COLUMN versions text[] NOT NULL DEFAULT '{}')",
           // Why each queued workflow is still waiting, for operators (SELECT * FROM queued).
           R"(CREATE VIEW {s}.queued AS
SELECT w.id, w.name, w.queue, w.priority, w.app_version, w.created_at, w.wake_at,
       CASE
         WHEN w.wake_at > now() THEN 'delayed until ' || w.wake_at
         WHEN NOT EXISTS (
           SELECT 1 FROM {s}.executors e
            WHERE e.heartbeat_at > now() - interval '1 minute'
              AND (cardinality(e.versions) = 0 OR w.app_version = ANY(e.versions)))
           THEN 'no live executor runs application version ''' || w.app_version || ''''
         ELSE 'waiting for room in queue ''' || coalesce(w.queue, '') || ''''
       END AS reason
  FROM {s}.workflows w
 WHERE w.status = 'pending' AND w.executor_id IS NULL)",
       }},
      {4,
       "group commit of journal rows",
       {
           // Many journal rows in one statement, fenced row by row (I3): a row is written only
           // while its workflow is owned under the row's epoch, checked under FOR SHARE (a
           // takeover in progress is waited for, and its new epoch then excludes the row).
           // Returns the rows written; a missing row was fenced out. The lateral lookup keeps
           // it one index probe per row whatever the table's size, and the generic plan is
           // forced: with array parameters the planner would otherwise plan every call anew.
           R"(CREATE FUNCTION {s}.append_steps(
    p_workflow_ids text[], p_epochs bigint[], p_seqs integer[], p_names text[], p_kinds text[],
    p_statuses text[], p_outputs jsonb[], p_errors jsonb[], p_attempts integer[],
    p_started_at double precision[])
  RETURNS TABLE (written_id text, written_seq integer)
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
BEGIN
  RETURN QUERY
  INSERT INTO {s}.steps AS s (workflow_id, seq, name, kind, status, output, error, attempts,
                              epoch, started_at)
  SELECT r.workflow_id, r.seq, r.name, r.kind, r.status, r.output, r.error, r.attempts, r.epoch,
         to_timestamp(r.started_at)
    FROM unnest(p_workflow_ids, p_epochs, p_seqs, p_names, p_kinds, p_statuses, p_outputs,
                p_errors, p_attempts, p_started_at)
           AS r(workflow_id, epoch, seq, name, kind, status, output, error, attempts, started_at),
         LATERAL (SELECT FROM {s}.workflows w
                   WHERE w.id = r.workflow_id AND w.epoch = r.epoch FOR SHARE) AS owned
  RETURNING s.workflow_id, s.seq;
END
$fn$)",
       }},
      {5,
       "bounded claims, executor instances",
       {
           // I9: a claim that finds no journal row added since the previous claim counts as a
           // claim without progress; past the engine's limit the claim parks the workflow.
           R"(ALTER TABLE {s}.workflows
  ADD COLUMN stalled_claims integer NOT NULL DEFAULT 0,
  ADD COLUMN progress_mark  integer NOT NULL DEFAULT 0,
  ADD COLUMN last_error     text)",
           // The process that holds an executor id now (a random token per engine), so that a
           // second live process with the same id is refused instead of fighting over work.
           R"(ALTER TABLE {s}.executors ADD COLUMN instance text NOT NULL DEFAULT '')",
       }},
      {6,
       "journaled retries, dead letters, deadlines, cancellation, fork",
       {
           R"(ALTER TABLE {s}.workflows DROP CONSTRAINT workflows_status_check)",
           R"(ALTER TABLE {s}.workflows ADD CONSTRAINT workflows_status_check CHECK (status IN
  ('pending', 'running', 'sleeping', 'succeeded', 'failed', 'parked', 'cancelled', 'dead_letter')))",
           R"(ALTER TABLE {s}.workflows ADD COLUMN forked_from text)",
           // Attempts are history: a failed attempt is a row of its own, never an update. A
           // step's outcome stays in steps; here are the attempts that failed before it (or
           // instead of it: 'failed' is a final failure), the operator's retries ('reset': a
           // fresh count of attempts) and resumes ('due': the next attempt is due now).
           R"(CREATE TABLE {s}.step_attempts (
  id              bigserial PRIMARY KEY,
  workflow_id     text NOT NULL,
  seq             integer NOT NULL,
  attempt         integer NOT NULL,
  name            text NOT NULL,
  kind            text NOT NULL,
  outcome         text NOT NULL CHECK (outcome IN ('retrying', 'failed', 'reset', 'due')),
  error           jsonb,
  epoch           bigint NOT NULL,
  started_at      timestamptz,
  ended_at        timestamptz NOT NULL DEFAULT now(),
  next_attempt_at timestamptz
))",
           R"(CREATE UNIQUE INDEX step_attempts_unique ON {s}.step_attempts (workflow_id, seq, attempt)
  WHERE outcome IN ('retrying', 'failed'))",
           R"(CREATE INDEX step_attempts_by_step ON {s}.step_attempts (workflow_id, seq, id))",
           // Due wake-ups (retries after a long backoff, resumed workflows) by an index.
           R"(CREATE INDEX workflows_due ON {s}.workflows (wake_at) WHERE status = 'sleeping')",
           R"(CREATE INDEX workflows_deadline ON {s}.workflows (deadline)
  WHERE deadline IS NOT NULL AND status IN ('pending', 'running', 'sleeping'))",
           // The latest attempt of every step that has no journal row: what is being retried,
           // when next, and why; and what failed for good (SELECT * FROM step_retries).
           R"(CREATE VIEW {s}.step_retries AS
SELECT DISTINCT ON (a.workflow_id, a.seq)
       a.workflow_id, w.name AS workflow, w.status, w.status_reason, a.seq, a.name AS step,
       a.kind, a.attempt, a.outcome, a.error->>'type' AS error_type,
       a.error->>'message' AS last_error, a.ended_at AS last_attempt_at, a.next_attempt_at,
       (SELECT count(*) FROM {s}.step_attempts c
         WHERE c.workflow_id = a.workflow_id AND c.seq = a.seq
           AND c.outcome IN ('retrying', 'failed'))
         AS failed_attempts
  FROM {s}.step_attempts a
  JOIN {s}.workflows w ON w.id = a.workflow_id
 WHERE NOT EXISTS (SELECT 1 FROM {s}.steps s WHERE s.workflow_id = a.workflow_id AND s.seq = a.seq)
 ORDER BY a.workflow_id, a.seq, a.id DESC)",
       }},
      {7,
       "messages, events, child workflows, waits",
       {
           // What a workflow waits for while it is unloaded ('msg:<topic>',
           // 'event:<workflow id>:<key>', 'child:<child id>'): what arrives for it wakes it at
           // once (wake_at = now()) instead of at the recheck. (parent_id, set for child
           // workflows, is from migration 1.)
           R"(ALTER TABLE {s}.workflows ADD COLUMN wait_for text,
  ADD COLUMN woken boolean NOT NULL DEFAULT false)",
           R"(CREATE INDEX workflows_by_parent ON {s}.workflows (parent_id) WHERE parent_id IS NOT NULL)",
           R"(CREATE INDEX workflows_waiting ON {s}.workflows (wait_for) WHERE status = 'sleeping')",
           // A message is consumed once: the recv that takes it stamps consumed_at and
           // journals it in the same statement.
           R"(CREATE TABLE {s}.messages (
  id              bigserial PRIMARY KEY,
  workflow_id     text NOT NULL,
  topic           text NOT NULL,
  payload         jsonb NOT NULL,
  idempotency_key text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  consumed_at     timestamptz,
  consumed_seq    integer,
  UNIQUE (workflow_id, idempotency_key)
))",
           R"(CREATE INDEX messages_unconsumed ON {s}.messages (workflow_id, topic, id)
  WHERE consumed_at IS NULL)",
           // The latest value a workflow published under each key.
           R"(CREATE TABLE {s}.events (
  workflow_id text NOT NULL,
  key         text NOT NULL,
  value       jsonb NOT NULL,
  seq         integer NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, key)
))",
           // Wake-ups without a lost one. A waiter unloads holding an exclusive transaction
           // lock on what it waits for (wait_lock), taken with try: if a sender, publisher or
           // ending child holds it (shared, until its transaction ends), the waiter stays in
           // its run instead. Otherwise the sender waits for the unload to commit, and its
           // wake-up, a statement of its own, sees the workflow sleeping. The waiter's check of
           // what arrived is a statement after its lock, so it sees every sender that ended.
           R"(CREATE FUNCTION {s}.wait_lock(p_kind text, p_a text, p_b text) RETURNS bigint
  LANGUAGE sql IMMUTABLE AS $fn$
SELECT hashtextextended(p_kind || ':' || octet_length(p_a) || ':' || p_a || ':' ||
                        coalesce(p_b, ''), 0)
$fn$)",
           // $1 id, $2 epoch, $3 wait_for, $4 recheck (ms), $5 kind, $6, $7 what (wait_lock).
           // 'unloaded', 'busy' (something for it is being sent now: stay in the run), or
           // 'fenced' (another epoch owns it, I3).
           R"(CREATE FUNCTION {s}.unload_to_wait(p_id text, p_epoch bigint, p_wait_for text,
    p_recheck_ms double precision, p_kind text, p_a text, p_b text)
  RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
  lock_on text := CASE WHEN p_kind = 'msg' THEN p_id ELSE p_a END;
  lock_b text := CASE WHEN p_kind = 'child' THEN NULL WHEN p_kind = 'msg' THEN p_a ELSE p_b END;
  arrived boolean;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM {s}.workflows WHERE id = p_id AND epoch = p_epoch) THEN
    RETURN 'fenced';
  END IF;
  IF NOT pg_try_advisory_xact_lock({s}.wait_lock(p_kind, lock_on, lock_b)) THEN
    RETURN 'busy';
  END IF;
  arrived := CASE p_kind
    WHEN 'msg' THEN EXISTS (SELECT 1 FROM {s}.messages m WHERE m.workflow_id = p_id
                              AND m.topic = p_a AND m.consumed_at IS NULL)
    WHEN 'child' THEN EXISTS (SELECT 1 FROM {s}.workflows c WHERE c.id = p_a
                                AND c.status IN ('succeeded', 'failed', 'cancelled'))
    WHEN 'event' THEN EXISTS (SELECT 1 FROM {s}.events e WHERE e.workflow_id = p_a
                                AND e.key = p_b)
    ELSE false END;
  UPDATE {s}.workflows
     SET status = 'sleeping', executor_id = NULL, epoch = epoch + 1, updated_at = now(),
         wait_for = p_wait_for,
         wake_at = CASE WHEN arrived THEN now()
                        ELSE now() + make_interval(secs => p_recheck_ms / 1000) END
   WHERE id = p_id AND epoch = p_epoch;
  IF NOT FOUND THEN
    RETURN 'fenced';
  END IF;
  RETURN 'unloaded';
END
$fn$)",
           // Queues a message for an existing workflow (a key it was sent with before sends
           // nothing), wakes the recipient if it is unloaded waiting for the topic, tells a run
           // waiting for it, and, from a workflow (p_from set), journals the sending step
           // (fenced, DU001). One row: (queued now, the recipient exists).
           R"(CREATE FUNCTION {s}.send_message(p_to text, p_topic text, p_payload jsonb,
    p_key text, p_wait_channel text, p_channel text, p_from text, p_epoch bigint,
    p_seq integer, p_started_at double precision)
  RETURNS TABLE (queued boolean, recipient_exists boolean) LANGUAGE plpgsql AS $fn$
DECLARE
  new_id bigint;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM {s}.workflows WHERE id = p_to) THEN
    RETURN QUERY SELECT false, false;
    RETURN;
  END IF;
  PERFORM pg_advisory_xact_lock_shared({s}.wait_lock('msg', p_to, p_topic));
  INSERT INTO {s}.messages (workflow_id, topic, payload, idempotency_key)
  VALUES (p_to, p_topic, p_payload, p_key)
  ON CONFLICT (workflow_id, idempotency_key) DO NOTHING
  RETURNING id INTO new_id;
  IF p_from IS NOT NULL THEN
    PERFORM {s}.append_step(p_from, p_epoch, p_seq, p_topic, 'send', 'succeeded',
                            to_jsonb(p_to), NULL, 1, to_timestamp(p_started_at));
  END IF;
  IF new_id IS NOT NULL THEN
    PERFORM pg_notify(p_wait_channel, p_to);
    UPDATE {s}.workflows SET wake_at = now(), updated_at = now()
     WHERE id = p_to AND status = 'sleeping' AND wait_for = 'msg:' || p_topic;
    IF FOUND THEN
      PERFORM pg_notify(p_channel, '');
    END IF;
  END IF;
  RETURN QUERY SELECT new_id IS NOT NULL, true;
END
$fn$)",
           // Publishes event p_key of workflow p_id (the latest wins) as its step p_seq,
           // journaled (fenced, DU001); wakes workflows unloaded waiting for it, and tells runs
           // waiting for it.
           R"(CREATE FUNCTION {s}.publish_event(p_id text, p_epoch bigint, p_seq integer,
    p_key text, p_value jsonb, p_started_at double precision, p_wait_channel text,
    p_channel text)
  RETURNS boolean LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_advisory_xact_lock_shared({s}.wait_lock('event', p_id, p_key));
  INSERT INTO {s}.events (workflow_id, key, value, seq) VALUES (p_id, p_key, p_value, p_seq)
  ON CONFLICT (workflow_id, key) DO UPDATE
     SET value = excluded.value, seq = excluded.seq, updated_at = now();
  PERFORM {s}.append_step(p_id, p_epoch, p_seq, p_key, 'event', 'succeeded', NULL, NULL, 1,
                          to_timestamp(p_started_at));
  PERFORM pg_notify(p_wait_channel, 'e:' || p_id);
  UPDATE {s}.workflows SET wake_at = now(), updated_at = now()
   WHERE status = 'sleeping'
     AND wait_for = 'event:' || octet_length(p_id) || ':' || p_id || ':' || p_key;
  IF FOUND THEN
    PERFORM pg_notify(p_channel, '');
  END IF;
  RETURN true;
END
$fn$)",
           // A child that ends (succeeded, failed, cancelled: whichever statement ends it)
           // wakes its parent if the parent is unloaded waiting for it, and tells a parent
           // waiting in its run.
           R"(CREATE FUNCTION {s}.wake_parent() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_advisory_xact_lock_shared({s}.wait_lock('child', NEW.id, NULL));
  UPDATE {s}.workflows SET wake_at = now(), updated_at = now()
   WHERE id = NEW.parent_id AND status = 'sleeping' AND wait_for = 'child:' || NEW.id;
  IF FOUND THEN
    PERFORM pg_notify({channel}, '');
  END IF;
  PERFORM pg_notify({wait_channel}, NEW.parent_id);
  RETURN NULL;
END
$fn$)",
           R"(CREATE TRIGGER workflows_wake_parent AFTER UPDATE OF status ON {s}.workflows
  FOR EACH ROW WHEN (NEW.parent_id IS NOT NULL
                     AND NEW.status IN ('succeeded', 'failed', 'cancelled')
                     AND OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION {s}.wake_parent())",
       }},
      {8,
       "operator views, retention",
       {
           // Retention finds finished workflows by age (engine_options::retention).
           R"(CREATE INDEX workflows_finished ON {s}.workflows (completed_at)
  WHERE status IN ('succeeded', 'failed', 'cancelled'))",
           // Workflows that ended badly or were stopped in the last day, newest first.
           R"(CREATE VIEW {s}.recent_failures AS
SELECT w.id, w.name, w.status, w.status_reason, w.error->>'type' AS error_type,
       coalesce(w.error->>'message', w.status_reason) AS error_message,
       (w.error->>'seq')::integer AS failed_seq, w.error->>'step' AS failed_step,
       w.executor_id, w.updated_at
  FROM {s}.workflows w
 WHERE w.status IN ('failed', 'dead_letter', 'parked', 'cancelled')
   AND w.updated_at > now() - interval '1 day'
 ORDER BY w.updated_at DESC)",
           // Workflows that do not move: running under an executor whose lease looks dead (no
           // heartbeat for a minute), due sleepers nobody woke for a minute, queued ones
           // waiting over ten minutes, and waits older than a day; with the reason.
           R"(CREATE VIEW {s}.stuck AS
SELECT w.id, w.name, w.status, w.executor_id, w.updated_at AS since,
       CASE
         WHEN w.status = 'running' THEN
           'running under executor ''' || coalesce(w.executor_id, '?') ||
           ''', whose last heartbeat was ' ||
           coalesce((now() - e.heartbeat_at)::text || ' ago', 'never (unknown executor)')
         WHEN w.status = 'sleeping' AND w.wake_at < now() - interval '1 minute' THEN
           'due since ' || w.wake_at || ' but not woken: no live executor runs ''' || w.name ||
           ''' (or its version)'
         WHEN w.status = 'sleeping' THEN
           'waiting for ' || w.wait_for || ' since ' || w.updated_at
         ELSE 'queued since ' || w.created_at
       END AS reason
  FROM {s}.workflows w
  LEFT JOIN {s}.executors e ON e.id = w.executor_id
 WHERE (w.status = 'running'
        AND (e.id IS NULL OR e.heartbeat_at < now() - interval '1 minute'))
    OR (w.status = 'sleeping' AND w.wake_at < now() - interval '1 minute')
    OR (w.status = 'sleeping' AND w.wait_for IS NOT NULL
        AND w.updated_at < now() - interval '1 day')
    OR (w.status = 'pending' AND w.executor_id IS NULL
        AND coalesce(w.wake_at, w.created_at) < now() - interval '10 minutes'))",
           // Steps by workflow and step name over the last day, slowest first (by p95).
           R"(CREATE VIEW {s}.slowest_steps AS
SELECT w.name AS workflow, s.name AS step, s.kind, count(*) AS steps,
       round((avg(extract(epoch FROM s.completed_at - s.started_at)) * 1000)::numeric, 1)
         AS avg_ms,
       round((percentile_cont(0.95) WITHIN GROUP (
               ORDER BY extract(epoch FROM s.completed_at - s.started_at)) * 1000)::numeric, 1)
         AS p95_ms,
       round((max(extract(epoch FROM s.completed_at - s.started_at)) * 1000)::numeric, 1)
         AS max_ms
  FROM {s}.steps s JOIN {s}.workflows w ON w.id = s.workflow_id
 WHERE s.completed_at > now() - interval '1 day' AND s.started_at IS NOT NULL
 GROUP BY w.name, s.name, s.kind
 ORDER BY p95_ms DESC)",
           // Failed attempts over the last day by workflow, step and error type: where the
           // retries go, with the latest message.
           R"(CREATE VIEW {s}.retry_hot_spots AS
SELECT w.name AS workflow, a.name AS step, a.error->>'type' AS error_type,
       count(*) AS failed_attempts, count(DISTINCT a.workflow_id) AS workflows,
       count(*) FILTER (WHERE a.outcome = 'failed') AS final_failures,
       max(a.ended_at) AS last_at,
       (array_agg(a.error->>'message' ORDER BY a.id DESC))[1] AS last_error
  FROM {s}.step_attempts a JOIN {s}.workflows w ON w.id = a.workflow_id
 WHERE a.outcome IN ('retrying', 'failed') AND a.ended_at > now() - interval '1 day'
 GROUP BY w.name, a.name, a.error->>'type'
 ORDER BY failed_attempts DESC)",
           // Per queue and 5-minute bucket over the last day: workflows waiting in the queue at
           // the end of the bucket (created, not yet started), started and finished in it. From
           // the workflows still in the table.
           R"(CREATE VIEW {s}.queue_depth AS
SELECT q.queue, b.bucket,
       (SELECT count(*) FROM {s}.workflows w WHERE w.queue = q.queue
          AND w.created_at <= b.bucket + interval '5 minutes'
          AND (w.started_at IS NULL OR w.started_at > b.bucket + interval '5 minutes')
          AND (w.completed_at IS NULL OR w.completed_at > b.bucket + interval '5 minutes'))
         AS waiting,
       (SELECT count(*) FROM {s}.workflows w WHERE w.queue = q.queue
          AND w.started_at >= b.bucket AND w.started_at < b.bucket + interval '5 minutes')
         AS started,
       (SELECT count(*) FROM {s}.workflows w WHERE w.queue = q.queue
          AND w.completed_at >= b.bucket AND w.completed_at < b.bucket + interval '5 minutes')
         AS finished
  FROM (SELECT DISTINCT queue FROM {s}.workflows WHERE queue IS NOT NULL) q
 CROSS JOIN generate_series(date_bin('5 minutes', now() - interval '1 day', timestamptz 'epoch'),
                            now(), interval '5 minutes') AS b(bucket)
 ORDER BY q.queue, b.bucket)",
       }},
      {9,
       "continue as new",
       {
           // ctx.continue_as_new(): a workflow starts again under the same id with new inputs
           // and an empty journal. Each start is a generation; keys derived from step numbers
           // (child ids, idempotency keys) include it from generation 1 on.
           R"(ALTER TABLE {s}.workflows ADD COLUMN generation integer NOT NULL DEFAULT 0)",
           // Ends generation n of workflow p_id and makes generation n + 1 with inputs p_inputs,
           // in one transaction: fenced by the epoch (I3, DU001; the row is locked, so a claim
           // waits for it and then sees the new epoch), the journal, the recorded attempts and
           // the consumed messages without an idempotency key of the old generation are deleted
           // (unconsumed messages stay for the new one; a consumed message with a key stays,
           // until retention deletes the workflow, so that a retried send with that key still
           // sends nothing), waits, the last error and the count of claims without progress
           // (I9) are reset, and the epoch moves on so that nothing the old run still holds can
           // be written.
           // The workflow stays running, owned by the same executor. Children of the old
           // generation are left as they are; events published stay.
           R"(CREATE FUNCTION {s}.continue_as_new(p_id text, p_epoch bigint, p_inputs jsonb)
  RETURNS TABLE (new_epoch bigint, new_generation integer) LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM 1 FROM {s}.workflows WHERE id = p_id AND epoch = p_epoch FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'workflow % is not owned under epoch % (it cannot continue as new)',
      p_id, p_epoch USING ERRCODE = 'DU001';
  END IF;
  DELETE FROM {s}.steps WHERE workflow_id = p_id;
  DELETE FROM {s}.step_attempts WHERE workflow_id = p_id;
  DELETE FROM {s}.messages
   WHERE workflow_id = p_id AND consumed_at IS NOT NULL AND idempotency_key IS NULL;
  RETURN QUERY
  UPDATE {s}.workflows w
     SET inputs = p_inputs, generation = w.generation + 1, epoch = w.epoch + 1,
         status = 'running', status_reason = NULL, output = NULL, error = NULL, wake_at = NULL,
         wait_for = NULL, woken = false, stalled_claims = 0, progress_mark = 0,
         last_error = NULL, updated_at = now()
   WHERE w.id = p_id
  RETURNING w.epoch, w.generation;
END
$fn$)",
       }},
      {10,
       "status history",
       {
           // What happened to a workflow off the routine path, for operators (`durable show`):
           // every change into or out of failed, parked, cancelled and dead_letter (a park, a
           // dead letter, a cancel, a resume, a retry), and every move from one owner to
           // another (a takeover). The routine path (created, started, sleeping and woken,
           // succeeded) writes nothing here: workflows' timestamps and the journal tell it, and
           // a workflow that succeeds costs no extra row.
           R"(CREATE TABLE {s}.workflow_history (
  id          bigserial,
  workflow_id text NOT NULL,
  status      text NOT NULL,
  previous    text,
  reason      text,
  executor_id text,
  previous_executor text,
  epoch       bigint NOT NULL,
  at          timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, id)
))",
           // Failures by time, for `durable stats`, its metrics and recent_failures, without
           // scanning every workflow (only failing ones are in the index).
           R"(CREATE INDEX workflows_failures ON {s}.workflows (updated_at)
  WHERE status IN ('failed', 'dead_letter'))",
           // SECURITY DEFINER: the history is the library's own bookkeeping, written with the
           // schema owner's rights, so that a role allowed to update workflows (parks above
           // all) needs no grant on the history table or its sequence (search_path pinned, as
           // such functions should have).
           R"(CREATE FUNCTION {s}.record_status() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  INSERT INTO {s}.workflow_history (workflow_id, status, previous, reason, executor_id,
                                     previous_executor, epoch)
  VALUES (NEW.id, NEW.status, OLD.status, NEW.status_reason, NEW.executor_id, OLD.executor_id,
          NEW.epoch);
  RETURN NULL;
END
$fn$)",
           R"(CREATE TRIGGER workflows_history AFTER UPDATE OF status, executor_id
  ON {s}.workflows FOR EACH ROW
  WHEN ((OLD.status IS DISTINCT FROM NEW.status
         AND (OLD.status NOT IN ('pending', 'running', 'sleeping')
              OR NEW.status NOT IN ('pending', 'running', 'sleeping', 'succeeded')))
        OR OLD.executor_id <> NEW.executor_id)
  EXECUTE FUNCTION {s}.record_status())",
       }},
  };
  return all;
}

}  // namespace detail

DURABLE_DECL const std::vector<std::pair<const char*, const char*>>& store::texts() {
  static const std::vector<std::pair<const char*, const char*>> all = {
      // $1 id, $2 name, $3 inputs, $4 executor_id, $5 app_version, $6 timeout (ms, 0 = none)
      {"workflow_insert", R"(WITH ins AS (
INSERT INTO {s}.workflows (id, name, status, inputs, executor_id, epoch, attempts, started_at,
                           app_version, deadline)
VALUES ($1, $2, 'running', $3::jsonb, $4, 1, 1, now(), $5,
        CASE WHEN $6::bigint > 0 THEN now() + make_interval(secs => $6::double precision / 1000) END)
ON CONFLICT (id) DO NOTHING
RETURNING id)
SELECT true, NULL::text, NULL::text, NULL::text FROM ins
UNION ALL
SELECT false, w.name, w.inputs::text, w.status FROM {s}.workflows w
 WHERE w.id = $1 AND NOT EXISTS (SELECT 1 FROM ins))"},
      // $1 id
      {"workflow_get",
       R"(SELECT name, status, status_reason, inputs::text, output::text, error::text,
     executor_id, epoch, attempts
FROM {s}.workflows WHERE id = $1)"},
      // $1 id, $2 executor_id, $3 workflow names this executor runs (text[]). A new epoch
      // fences out any previous owner (I3).
      {"workflow_claim", R"(UPDATE {s}.workflows
 SET status = 'running', executor_id = $2, epoch = epoch + 1, attempts = attempts + 1,
     started_at = coalesce(started_at, now()), updated_at = now()
 WHERE id = $1 AND status IN ('pending', 'running') AND name = ANY($3::text[])
RETURNING name, inputs::text, epoch)"},
      // $1 id, $2 epoch, $3 status, $4 output, $5 error, $6 status_reason
      {"workflow_finish", R"(UPDATE {s}.workflows
 SET status = $3, output = $4::jsonb, error = $5::jsonb, status_reason = $6, updated_at = now(),
     completed_at = CASE WHEN $3 IN ('succeeded', 'failed', 'cancelled') THEN now() END
 WHERE id = $1 AND epoch = $2)"},
      // $1 executor_id, $2 versions it runs (text[], empty = all)
      {"workflows_owned", R"(SELECT id, name FROM {s}.workflows
 WHERE executor_id = $1 AND status IN ('pending', 'running')
 AND (cardinality($2::text[]) = 0 OR app_version = ANY($2::text[]))
 ORDER BY created_at)"},
      // $1 ids (text[]), $2 executor_id, $3 workflow names it runs (text[]), $4 versions it
      // runs (text[], empty = all), $5 most claims in a row without progress (I9). The claim
      // that follows a wake-up (woken: the workflow unloaded itself to sleep or wait, a
      // decision, not a failure) is not counted, and does not clear the count either.
      // Claims every listed workflow that is unfinished and runnable here, bumping its epoch
      // (I3). A claim that finds no journal row added since the previous claim counts as
      // stalled; past the limit the workflow is parked instead (status 'parked' returned).
      {"workflows_claim", R"(UPDATE {s}.workflows w
 SET stalled_claims = CASE WHEN w.woken THEN w.stalled_claims
                          WHEN j.n = w.progress_mark THEN w.stalled_claims + 1 ELSE 0 END,
     progress_mark = j.n, woken = false,
     status = CASE WHEN NOT w.woken AND j.n = w.progress_mark AND w.stalled_claims >= $5
                   THEN 'parked' ELSE 'running' END,
     status_reason = CASE WHEN NOT w.woken AND j.n = w.progress_mark AND w.stalled_claims >= $5
       THEN format('claimed %s times in a row without journaling a step (the limit is '
                   'max_claims_without_progress = %s); last error: %s',
                   w.stalled_claims + 1, $5, coalesce(w.last_error, 'none recorded'))
       ELSE w.status_reason END,
     executor_id = $2, epoch = w.epoch + 1, attempts = w.attempts + 1,
     started_at = coalesce(w.started_at, now()), updated_at = now()
FROM (SELECT x.id, (SELECT count(*)::integer FROM {s}.steps s WHERE s.workflow_id = x.id)
                  + (SELECT count(*)::integer FROM {s}.step_attempts a WHERE a.workflow_id = x.id)
                  AS n
        FROM {s}.workflows x WHERE x.id = ANY($1::text[])) j
 WHERE w.id = j.id AND w.status IN ('pending', 'running') AND w.name = ANY($3::text[])
 AND (cardinality($4::text[]) = 0 OR w.app_version = ANY($4::text[]))
RETURNING w.id, w.name, w.inputs::text, w.epoch, w.status, w.status_reason,
          extract(epoch FROM w.deadline - now())::double precision, w.generation)"},
      // $1 ids (text[]). I1: every listed journal in one query.
      {"journals_load", R"(SELECT workflow_id, seq, name, kind, status, output::text, error::text
FROM {s}.steps WHERE workflow_id = ANY($1::text[]) ORDER BY workflow_id, seq)"},
      // $1 id, $2 epoch, $3 the error that ended the run (shown when I9 parks it).
      {"workflow_note_error", R"(UPDATE {s}.workflows SET last_error = $3, updated_at = now()
 WHERE id = $1 AND epoch = $2)"},
      // $1 id. I1: the whole journal in one query.
      {"journal_load", R"(SELECT seq, name, kind, status, output::text, error::text
FROM {s}.steps WHERE workflow_id = $1 ORDER BY seq)"},
      // $1 id, $2 epoch, $3 seq, $4 name, $5 kind, $6 status, $7 output, $8 error,
      // $9 attempts, $10 started_at (epoch seconds)
      {"step_append", R"(SELECT {s}.append_step($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9,
                      to_timestamp($10::double precision)))"},
      // Group commit of journal rows: many rows, one statement (see append_steps in
      // migration 4). Arrays, one element per row: $1 workflow ids, $2 epochs, $3 seqs,
      // $4 names, $5 kinds, $6 statuses, $7 outputs (jsonb), $8 errors (jsonb), $9 attempts,
      // $10 started_at (epoch seconds). Returns (workflow id, seq) of the rows written. A
      // duplicate row fails the statement; the group committer then sends each row alone
      // through step_append.
      {"steps_append_many", R"(SELECT written_id, written_seq FROM {s}.append_steps(
$1::text[], $2::bigint[], $3::integer[], $4::text[], $5::text[], $6::text[], $7::jsonb[],
$8::jsonb[], $9::integer[], $10::double precision[]))"},
      // $1 id, $2 name, $3 inputs, $4 queue, $5 priority, $6 dedup_key, $7 delay (ms),
      // $8 app_version, $9 notify channel, $10 timeout (ms from now, 0 = none). One row:
      // (created, id of the workflow that holds the id or the dedup key, its name, its
      // inputs). NOTIFY is delivered at commit.
      {"workflow_enqueue", R"(WITH ins AS (
INSERT INTO {s}.workflows (id, name, status, inputs, queue, priority, dedup_key, wake_at,
                           app_version, deadline)
VALUES ($1, $2, 'pending', $3::jsonb, $4, $5, $6,
        CASE WHEN $7::bigint > 0 THEN now() + make_interval(secs => $7::double precision / 1000) END,
        $8,
        CASE WHEN $10::bigint > 0 THEN now() + make_interval(secs => $10::double precision / 1000) END)
ON CONFLICT DO NOTHING
RETURNING id),
woken AS (SELECT pg_notify($9, $4) FROM ins)
SELECT true, $1::text, $2::text, $3::text, (SELECT count(*) FROM woken) FROM ins
UNION ALL
(SELECT false, w.id, w.name, w.inputs::text, 0 FROM {s}.workflows w
WHERE NOT EXISTS (SELECT 1 FROM ins)
  AND (w.id = $1 OR (w.queue = $4 AND w.dedup_key = $6
                     AND w.status IN ('pending', 'running', 'sleeping')))
ORDER BY w.id = $1 DESC LIMIT 1))"},
      // $1 name, $2 concurrency, $3 worker_concurrency, $4 rate_limit, $5 rate_period_ms
      {"queue_upsert",
       R"(INSERT INTO {s}.queues (name, concurrency, worker_concurrency, rate_limit,
                       rate_period_ms)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,
worker_concurrency = excluded.worker_concurrency, rate_limit = excluded.rate_limit,
rate_period_ms = excluded.rate_period_ms, updated_at = now())"},
      // $1 queue. Serializes the dispatchers of one queue, so that the counts the next
      // statement reads (in its own, later snapshot) cannot be outdated by another one.
      {"queue_lock", R"(SELECT name FROM {s}.queues WHERE name = $1 FOR UPDATE)"},
      // $1 queue names (text[]). Each count is one scan of a partial index (workflows_queued,
      // workflows_queue_running).
      {"queue_depths", R"(SELECT q.name,
       (SELECT count(*) FROM {s}.workflows w
         WHERE w.queue = q.name AND w.status = 'pending' AND w.executor_id IS NULL),
       (SELECT count(*) FROM {s}.workflows w WHERE w.queue = q.name AND w.status = 'running')
  FROM (SELECT DISTINCT unnest($1::text[]) AS name) q ORDER BY q.name)"},
      // $1 executor, $2 queue, $3 workflow names it runs (text[]), $4 how many at most,
      // $5 application versions it runs (text[], empty = all).
      // Claims queued workflows within the queue's limits, by priority then age.
      {"queue_dispatch", R"(WITH q AS (
SELECT concurrency, worker_concurrency, rate_limit, rate_period_ms FROM {s}.queues WHERE name = $2),
budget AS (
SELECT greatest(0, least(
  $4::integer,
  (SELECT q.concurrency - (SELECT count(*) FROM {s}.workflows
                            WHERE queue = $2 AND status = 'running') FROM q),
  (SELECT q.worker_concurrency - (SELECT count(*) FROM {s}.workflows
                            WHERE queue = $2 AND status = 'running' AND executor_id = $1) FROM q),
  (SELECT q.rate_limit - (SELECT count(*) FROM {s}.workflows WHERE queue = $2
                            AND started_at > now() - make_interval(secs => q.rate_period_ms / 1000.0))
     FROM q))) AS n),
picked AS (
SELECT w.id FROM {s}.workflows w
 WHERE w.queue = $2 AND w.status = 'pending' AND w.executor_id IS NULL
   AND (w.wake_at IS NULL OR w.wake_at <= now()) AND w.name = ANY($3::text[])
   AND (cardinality($5::text[]) = 0 OR w.app_version = ANY($5::text[]))
 ORDER BY w.priority DESC, w.created_at, w.id
 LIMIT (SELECT n FROM budget)
 FOR UPDATE OF w SKIP LOCKED)
UPDATE {s}.workflows w
 SET status = 'running', executor_id = $1, epoch = w.epoch + 1, attempts = w.attempts + 1,
     started_at = now(), updated_at = now()
FROM picked WHERE w.id = picked.id
RETURNING w.id, w.name, w.inputs::text, w.epoch,
          extract(epoch FROM w.deadline - now())::double precision, w.generation)"},
      // $1 channel, $2 payload
      {"notify", R"(SELECT pg_notify($1, $2))"},
      // $1 id, $2 instance. No row updated: another process took the id over.
      // A released lease ('-infinity') stays released: a heartbeat still in flight when
      // shutdown released it must not renew it.
      {"executor_heartbeat", R"(UPDATE {s}.executors SET heartbeat_at = now()
 WHERE id = $1 AND instance = $2 AND heartbeat_at <> '-infinity')"},
      // $1 id, $2 instance. Graceful shutdown: the lease ends now, so others take over at once.
      {"executor_release", R"(UPDATE {s}.executors SET heartbeat_at = '-infinity'
 WHERE id = $1 AND instance = $2)"},
      // $1 this executor, $2 lease timeout (ms), $3 workflow names it runs (text[]),
      // $4 how many at most, $5 versions it runs (text[], empty = all). SKIP LOCKED: two live
      // executors never take the same workflow;
      // the new owner then claims each one, which bumps its epoch (I3).
      {"workflows_take_over", R"(WITH dead AS (
SELECT id FROM {s}.executors
 WHERE id <> $1 AND heartbeat_at < now() - make_interval(secs => $2::double precision / 1000)),
taken AS (
SELECT w.id FROM {s}.workflows w
 WHERE w.executor_id IN (SELECT id FROM dead) AND w.status IN ('pending', 'running')
   AND w.name = ANY($3::text[])
   AND (cardinality($5::text[]) = 0 OR w.app_version = ANY($5::text[]))
 ORDER BY w.created_at LIMIT $4
 FOR UPDATE OF w SKIP LOCKED)
UPDATE {s}.workflows w SET executor_id = $1, updated_at = now()
FROM taken WHERE w.id = taken.id
RETURNING w.id)"},
      // $1 id, $2 host, $3 pid, $4 app_version, $5 versions it runs (text[], empty = all),
      // $6 instance, $7 lease timeout (ms), $8 take the id even if its holder looks alive.
      // Registers this process under the id unless another live process holds it (its
      // heartbeat is younger than the lease): then no row.
      {"executor_register",
       R"(INSERT INTO {s}.executors AS e (id, host, pid, app_version, versions,
                               instance)
VALUES ($1, $2, $3, $4, $5::text[], $6)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
app_version = excluded.app_version, versions = excluded.versions, instance = excluded.instance,
started_at = now(), heartbeat_at = now()
WHERE e.instance = excluded.instance OR $8::boolean
   OR e.heartbeat_at < now() - make_interval(secs => $7::double precision / 1000)
RETURNING true)"},
      // $1 id: who holds it, and how long ago it heartbeat (ms).
      {"executor_get", R"(SELECT host, pid, instance,
     CASE WHEN heartbeat_at = '-infinity' THEN 'infinity'::double precision
          ELSE (extract(epoch FROM now() - heartbeat_at) * 1000)::double precision END
FROM {s}.executors WHERE id = $1)"},
      // $1 id, $2 epoch, $3 seq, $4 attempt, $5 name, $6 kind, $7 outcome ('retrying' or
      // 'failed'), $8 error (jsonb), $9 started_at (epoch seconds), $10 pause before the next
      // attempt (ms, or null; the due time is the server's now() plus it, so clocks of
      // application hosts do not matter), $11 unload: the workflow sleeps until the next
      // attempt, owned by nobody, and its epoch moves on (nothing more of this run can be
      // written, I3). Fenced: nothing is written unless the workflow is owned under $2.
      {"attempt_record", R"(WITH w AS (
UPDATE {s}.workflows
   SET last_error = $8::jsonb->>'message', updated_at = now(),
       status = CASE WHEN $11::boolean THEN 'sleeping' ELSE status END,
       wake_at = CASE WHEN $11::boolean
                      THEN now() + make_interval(secs => $10::double precision / 1000)
                      ELSE wake_at END,
       executor_id = CASE WHEN $11::boolean THEN NULL ELSE executor_id END,
       epoch = CASE WHEN $11::boolean THEN epoch + 1 ELSE epoch END
 WHERE id = $1 AND epoch = $2
RETURNING id)
INSERT INTO {s}.step_attempts (workflow_id, seq, attempt, name, kind, outcome, error, epoch,
                               started_at, next_attempt_at)
SELECT w.id, $3, $4, $5, $6, $7, $8::jsonb, $2, to_timestamp($9::double precision),
       now() + make_interval(secs => $10::double precision / 1000)
  FROM w)"},
      // $1 id, $2 epoch, $3 pause (ms). Unloads the workflow until its next attempt is due
      // (claimed before that: after a resume, say), under a new epoch (I3).
      {"workflow_sleep", R"(UPDATE {s}.workflows
   SET status = 'sleeping', wake_at = now() + make_interval(secs => $3::double precision / 1000),
       executor_id = NULL, epoch = epoch + 1, updated_at = now()
 WHERE id = $1 AND epoch = $2)"},
      // $1 ids (text[]). The attempts of every step of these workflows that has no journal
      // row, oldest first (loaded with the journals, I1); the next attempt as seconds from the
      // server's now().
      {"attempts_load", R"(SELECT a.workflow_id, a.seq, a.attempt, a.outcome, a.error::text,
       extract(epoch FROM a.next_attempt_at - now())::double precision, a.name, a.kind
  FROM {s}.step_attempts a
 WHERE a.workflow_id = ANY($1::text[])
   AND NOT EXISTS (SELECT 1 FROM {s}.steps s WHERE s.workflow_id = a.workflow_id AND s.seq = a.seq)
 ORDER BY a.workflow_id, a.seq, a.id)"},
      // $1 this executor, $2 workflow names it runs (text[]), $3 versions it runs (text[],
      // empty = all), $4 how many at most, $5 ids it still runs (text[]: not woken now).
      // Sleeping workflows whose wake-up is due move to this executor (to be claimed next);
      // SKIP LOCKED: two executors never take the same. A queue with a concurrency limit wakes
      // only as many as it has room for (running, or claimed and about to run), oldest due
      // first; this is checked without the queue's lock, so two executors waking at the same
      // moment may exceed it; rate limits and worker_concurrency do not apply to wake-ups.
      {"workflows_wake", R"(WITH candidates AS (
SELECT w.id, w.queue, w.wake_at,
       row_number() OVER (PARTITION BY w.queue ORDER BY w.wake_at, w.id) AS place
  FROM {s}.workflows w
 WHERE w.status = 'sleeping' AND w.wake_at <= now() AND w.name = ANY($2::text[])
   AND (cardinality($3::text[]) = 0 OR w.app_version = ANY($3::text[]))
   AND NOT (w.id = ANY($5::text[]))),
room AS (
SELECT q.name, q.concurrency - (SELECT count(*) FROM {s}.workflows r
                                 WHERE r.queue = q.name
                                   AND (r.status = 'running'
                                        OR (r.status = 'pending' AND r.executor_id IS NOT NULL)))
         AS free
  FROM {s}.queues q WHERE q.concurrency IS NOT NULL),
due AS (
SELECT w.id FROM {s}.workflows w
  JOIN candidates c ON c.id = w.id
  LEFT JOIN room ON room.name = c.queue
 WHERE w.status = 'sleeping' AND (room.name IS NULL OR c.place <= room.free)
 ORDER BY c.wake_at LIMIT $4
 FOR UPDATE OF w SKIP LOCKED)
UPDATE {s}.workflows w SET status = 'pending', executor_id = $1, wake_at = NULL,
       wait_for = NULL, woken = true, updated_at = now()
  FROM due WHERE w.id = due.id
RETURNING w.id)"},
      // $1 id, $2 reason, $3 error type, $4 the cancel channel. Ends an unfinished, parked or
      // dead-lettered workflow, and every unfinished descendant (its child workflows, theirs),
      // as cancelled; the new epoch fences out a run in progress (I3). One row per workflow
      // cancelled (the
      // status it had, the new epoch, its id, whether it is $1), none when it was finished or
      // unknown; at commit
      // "<epoch>:<id>" is announced on $4, so that the process running it stops it at once. A
      // dead letter keeps the number of its failed step, for a later resume.
      {"workflow_cancel", R"(WITH RECURSIVE tree AS (
SELECT id, 0 AS depth FROM {s}.workflows
 WHERE id = $1 AND status IN ('pending', 'running', 'sleeping', 'parked', 'dead_letter')
UNION
SELECT c.id, t.depth + 1 FROM {s}.workflows c JOIN tree t ON c.parent_id = t.id
 WHERE t.depth < 1000),
old AS (
SELECT w.id, w.status, w.error, w.id = $1 AS root FROM {s}.workflows w
 WHERE w.id IN (SELECT id FROM tree)
   AND w.status IN ('pending', 'running', 'sleeping', 'parked', 'dead_letter')
   FOR UPDATE OF w)
UPDATE {s}.workflows w
   SET status = 'cancelled',
       status_reason = CASE WHEN old.root THEN $2
                            ELSE 'its parent workflow ''' || $1 || ''' was cancelled: ' || $2 END,
       error = jsonb_build_object('type', $3::text, 'message',
                                  CASE WHEN old.root THEN $2
                                       ELSE 'its parent workflow ''' || $1
                                            || ''' was cancelled: ' || $2 END)
               || CASE WHEN old.status = 'dead_letter' AND old.error ? 'seq'
                       THEN jsonb_build_object('seq', old.error->'seq') ELSE '{}'::jsonb END,
       epoch = w.epoch + 1, wake_at = NULL, completed_at = now(), updated_at = now()
  FROM old
 WHERE w.id = old.id
RETURNING old.status, w.epoch, pg_notify($4, w.epoch || ':' || w.id), w.id, old.root)"},
      // $1 id, $2 statuses it may have (text[]). A cancelled, parked or dead-lettered
      // workflow becomes due at once (any executor claims it and replays its journal); its
      // deadline and its count of claims without progress are cleared. A dead-lettered one
      // (also one cancelled since) gets a 'reset' row after its failed step's attempts: that
      // step runs again, and the failed attempts stay in the history. A step waiting for its
      // next attempt gets a 'due' row: the attempt is due now (the count goes on). One row (the
      // status it had),
      // none when it had
      // another status or does not exist.
      {"workflow_resume", R"(WITH old AS (
SELECT id, status, (error->>'seq')::integer AS seq FROM {s}.workflows
 WHERE id = $1 AND status = ANY($2::text[]) FOR UPDATE),
w AS (
UPDATE {s}.workflows w
   SET status = 'sleeping', wake_at = now(), executor_id = NULL, deadline = NULL,
       status_reason = NULL, error = NULL, output = NULL, completed_at = NULL,
       stalled_claims = 0, updated_at = now()
  FROM old WHERE w.id = old.id
RETURNING w.id, w.epoch, old.status, old.seq),
last AS (
SELECT DISTINCT ON (a.seq) a.seq, a.attempt, a.name, a.kind, a.outcome
  FROM {s}.step_attempts a, w
 WHERE a.workflow_id = w.id AND a.seq = w.seq ORDER BY a.seq, a.id DESC),
reset AS (
INSERT INTO {s}.step_attempts (workflow_id, seq, attempt, name, kind, outcome, epoch, started_at)
SELECT w.id, last.seq, last.attempt, last.name, last.kind, 'reset', w.epoch, now()
  FROM w JOIN last ON last.seq = w.seq
 WHERE last.outcome = 'failed'
RETURNING 1),
pending AS (
SELECT DISTINCT ON (a.seq) a.seq, a.attempt, a.name, a.kind, a.outcome, a.next_attempt_at
  FROM {s}.step_attempts a, w
 WHERE a.workflow_id = w.id
   AND NOT EXISTS (SELECT 1 FROM {s}.steps s WHERE s.workflow_id = a.workflow_id AND s.seq = a.seq)
 ORDER BY a.seq, a.id DESC),
due AS (
INSERT INTO {s}.step_attempts (workflow_id, seq, attempt, name, kind, outcome, epoch, started_at)
SELECT w.id, pending.seq, pending.attempt, pending.name, pending.kind, 'due', w.epoch, now()
  FROM w, pending
 WHERE pending.outcome = 'retrying' AND pending.next_attempt_at > now()
RETURNING 1)
SELECT w.status, (SELECT count(*) FROM reset)::integer, (SELECT count(*) FROM due)::integer
  FROM w)"},
      // $1 source id, $2 new id, $3 first step not copied, $4 app_version. A new workflow
      // (due at once) with the source's name, inputs and generation (the journal is that
      // generation's, and ctx.generation() and the keys must replay alike) and a copy of its
      // journal rows and recorded attempts before step $3 (a step failure the workflow handled
      // replays as such); the source is not touched. One row: (source found, created, rows
      // copied).
      {"workflow_fork", R"(WITH src AS (
SELECT id, name, inputs, queue, priority, generation FROM {s}.workflows WHERE id = $1),
ins AS (
INSERT INTO {s}.workflows (id, name, status, inputs, queue, priority, wake_at, app_version,
                           forked_from, generation)
SELECT $2, name, 'sleeping', inputs, queue, priority, now(), $4, id, generation FROM src
ON CONFLICT (id) DO NOTHING
RETURNING id),
copied AS (
INSERT INTO {s}.steps (workflow_id, seq, name, kind, status, output, error, attempts, epoch,
                       started_at, completed_at)
SELECT $2, s.seq, s.name, s.kind, s.status, s.output, s.error, s.attempts, 0, s.started_at,
       s.completed_at
  FROM {s}.steps s WHERE s.workflow_id = $1 AND s.seq < $3 AND EXISTS (SELECT 1 FROM ins)
RETURNING 1),
history AS (
INSERT INTO {s}.step_attempts (workflow_id, seq, attempt, name, kind, outcome, error, epoch,
                               started_at, ended_at, next_attempt_at)
SELECT $2, a.seq, a.attempt, a.name, a.kind, a.outcome, a.error, 0, a.started_at, a.ended_at,
       a.next_attempt_at
  FROM {s}.step_attempts a
 WHERE a.workflow_id = $1 AND a.seq < $3 AND EXISTS (SELECT 1 FROM ins)
 ORDER BY a.id)
SELECT EXISTS (SELECT 1 FROM src), EXISTS (SELECT 1 FROM ins),
       (SELECT count(*) FROM copied)::integer)"},
      // ---- messages, events, child workflows, waits (migration 7)
      // $1 recipient, $2 topic, $3 payload (jsonb), $4 idempotency key (null: none), $5 wait
      // channel, $6 channel. Queues a message for an existing workflow; a key it was sent
      // with before sends nothing. Wakes the recipient if it is unloaded waiting for the
      // topic, and tells a run waiting for it (NOTIFY at commit). One row: (queued now, the
      // recipient exists).
      {"message_send", R"(SELECT * FROM {s}.send_message($1, $2, $3::jsonb, $4, $5, $6, NULL,
                                    NULL, NULL, NULL))"},
      // The same from a workflow, journaled in the same transaction (exactly once): $7
      // sender, $8 its epoch, $9 the step, $10 started_at (epoch seconds); the idempotency key
      // is "<sender>:<step>". Fenced (I3, DU001). Nothing is journaled when the recipient
      // does not exist. One row: (queued now, the recipient exists).
      {"message_send_journaled",
       R"(SELECT * FROM {s}.send_message($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9,
                                    $10::double precision))"},
      // $1 workflow, $2 epoch, $3 step, $4 topic, $5 started_at (epoch seconds). Takes the
      // oldest unconsumed message of the topic and journals it as step $3 (output: a
      // one-element array holding it) in one statement: it is consumed exactly when the row
      // commits. Fenced (I3, DU001). No row: no message. FOR UPDATE, not SKIP LOCKED: a
      // fenced-out run's take in flight holds the oldest message until it fails; the new owner
      // waits for it rather than taking a younger one.
      {"message_take", R"(WITH m AS (
SELECT id FROM {s}.messages
 WHERE workflow_id = $1 AND topic = $4 AND consumed_at IS NULL
 ORDER BY id LIMIT 1 FOR UPDATE),
taken AS (
UPDATE {s}.messages g SET consumed_at = now(), consumed_seq = $3
  FROM m WHERE g.id = m.id
RETURNING g.payload)
SELECT jsonb_build_array(taken.payload)::text,
       {s}.append_step($1, $2, $3, $4, 'recv', 'succeeded', jsonb_build_array(taken.payload), NULL,
                       1, to_timestamp($5::double precision))
  FROM taken)"},
      // $1 workflow, $2 epoch, $3 step, $4 key, $5 value (jsonb), $6 started_at, $7 wait
      // channel, $8 channel. Publishes the value (the latest wins) and journals it in one
      // statement; wakes workflows unloaded waiting for it, and tells runs waiting for it.
      {"event_set", R"(SELECT {s}.publish_event($1, $2, $3, $4, $5::jsonb,
                          $6::double precision, $7, $8))"},
      // $1 workflow, $2 key. The value published last, if any.
      {"event_get", R"(SELECT value::text FROM {s}.events WHERE workflow_id = $1 AND key = $2)"},
      // $1 id, $2 epoch, $3 what it waits for ('msg:<topic>', 'event:<bytes of id>:<id>:<key>',
      // 'child:<id>'), $4 the longest it sleeps before it looks again (ms), $5 'msg', 'event'
      // or 'child', $6 the topic, the publisher or the child, $7 the event's key. See
      // unload_to_wait in migration 7: 'unloaded', 'busy' or 'fenced'. Unloads the
      // workflow under a new epoch (I3) until what it waits for arrives (a send, an event or a
      // child's end sets wake_at = now()) or $4 passes. What arrived before this statement
      // makes it due at once, so nothing arrives unnoticed in between.
      {"workflow_wait", R"(SELECT {s}.unload_to_wait($1, $2, $3, $4::double precision, $5, $6,
                          $7))"},
      // $1 child id, $2 name, $3 inputs, $4 parent, $5 parent's epoch, $6 step, $7 started_at,
      // $8 app_version, $9 channel. Starts the child (due at once for any executor that runs
      // `name`, parent_id recorded) and journals the step in one statement (exactly once;
      // fenced, I3). A child that exists already (the same parent's, from a run whose journal
      // row did not commit) is reattached. No row: the id is another workflow's.
      {"child_start", R"(WITH other AS (
SELECT 1 FROM {s}.workflows WHERE id = $1 AND (parent_id IS DISTINCT FROM $4 OR name <> $2)),
ins AS (
INSERT INTO {s}.workflows (id, name, status, inputs, wake_at, app_version, parent_id)
SELECT $1, $2, 'sleeping', $3::jsonb, now(), $8, $4 WHERE NOT EXISTS (SELECT 1 FROM other)
ON CONFLICT (id) DO NOTHING
RETURNING id)
SELECT {s}.append_step($4, $5, $6, $2, 'child', 'succeeded', to_jsonb($1::text), NULL, 1,
                       to_timestamp($7::double precision)),
       (SELECT count(pg_notify($9, '')) FROM ins)
 WHERE NOT EXISTS (SELECT 1 FROM other))"},
      // $1 how many at most. Workflows that wait (queued, or sleeping until a retry) past
      // their deadline end as cancelled; a running one is ended by its run, or by the run
      // that claims it, or here once it is 10 s past (a run that cannot end, a step holding
      // it). The new epoch fences out a run or claim in flight (I3).
      {"workflows_expire", R"(WITH late AS (
SELECT id FROM {s}.workflows
 WHERE deadline < now()
   AND (status IN ('pending', 'sleeping')
        OR (status = 'running' AND deadline < now() - interval '10 seconds'))
 ORDER BY deadline LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE {s}.workflows w
   SET status = 'cancelled', epoch = w.epoch + 1, wake_at = NULL, completed_at = now(),
       updated_at = now(),
       status_reason = 'its deadline (' || w.deadline || ') passed before it finished',
       error = jsonb_build_object('type', 'durable::deadline_exceeded', 'message',
                                  'its deadline (' || w.deadline || ') passed before it finished')
  FROM late WHERE w.id = late.id
RETURNING w.id)"},
      // $1 age (ms), $2 how many at most, $3 statuses (text[]). Retention and `durable gc`:
      // deletes finished workflows (succeeded, failed, cancelled; those of $3) that completed
      // longer than $1 ago, oldest first, with their journal, attempts, messages, events and
      // history. SKIP LOCKED and a small batch: no long locks, and a workflow being resumed or
      // read is left for the next round. Dead letters and parked workflows wait for a person
      // and are never deleted; nor is a child whose parent is unfinished (the parent reads
      // its result when it awaits it, perhaps after a retry). Returns the ids deleted.
      {"workflows_delete_finished", R"(WITH doomed AS (
SELECT w.id FROM {s}.workflows w
 WHERE w.status IN ('succeeded', 'failed', 'cancelled') AND w.status = ANY($3::text[])
   AND w.completed_at < now() - make_interval(secs => $1::double precision / 1000)
   AND (w.parent_id IS NULL OR NOT EXISTS (
         SELECT 1 FROM {s}.workflows p WHERE p.id = w.parent_id
            AND p.status NOT IN ('succeeded', 'failed', 'cancelled')))
 ORDER BY w.completed_at LIMIT $2 FOR UPDATE OF w SKIP LOCKED),
journal AS (DELETE FROM {s}.steps WHERE workflow_id IN (SELECT id FROM doomed)),
attempts AS (DELETE FROM {s}.step_attempts WHERE workflow_id IN (SELECT id FROM doomed)),
inbox AS (DELETE FROM {s}.messages WHERE workflow_id IN (SELECT id FROM doomed)),
published AS (DELETE FROM {s}.events WHERE workflow_id IN (SELECT id FROM doomed)),
history AS (DELETE FROM {s}.workflow_history WHERE workflow_id IN (SELECT id FROM doomed))
DELETE FROM {s}.workflows w USING doomed WHERE w.id = doomed.id
RETURNING w.id)"},
      // $1 id, $2 epoch, $3 the next generation's inputs (jsonb). ctx.continue_as_new: see
      // continue_as_new in migration 9. One row: (new epoch, new generation). Fenced (DU001).
      {"workflow_continue",
       R"(SELECT new_epoch, new_generation::bigint FROM {s}.continue_as_new($1, $2, $3::jsonb))"},
      // $1 ids (text[]) running in this process. Those cancelled meanwhile (the polling
      // fallback of the cancel notification).
      {"workflows_cancelled", R"(SELECT id, epoch FROM {s}.workflows
 WHERE id = ANY($1::text[]) AND status = 'cancelled')"},
      // ---- operator queries (the `durable` command-line program) ----------------------------
      // Each returns its rows as JSON objects (row_to_json), columns in order, so that the
      // program prints tables and --json from the same rows.
      // $1 statuses (text[], empty = all), $2 name, $3 queue, $4 executor (each NULL = any),
      // created: $5 at most this many seconds ago, $6 at or after, $7 at least this many
      // seconds ago, $8 before (each NULL = unbounded), $9 limit, $10 offset, $11 and $12 the
      // cursor: only rows after (created_at $11, id $12) in the order (NULL: from the start).
      // Newest first; the journal sizes are counted for the rows returned only.
      {"admin_list", R"(SELECT row_to_json(t)::text FROM (
SELECT p.id, p.name, p.status, p.queue, p.executor, p.created_at, p.updated_at, p.completed_at,
       (SELECT count(*) FROM {s}.steps s WHERE s.workflow_id = p.id) AS steps, p.reason
  FROM (
SELECT w.id, w.name, w.status, w.queue, w.executor_id AS executor, w.created_at, w.updated_at,
       w.completed_at, coalesce(w.status_reason, w.error->>'message', w.last_error) AS reason
  FROM {s}.workflows w
 WHERE (cardinality($1::text[]) = 0 OR w.status = ANY($1::text[]))
   AND ($2::text IS NULL OR w.name = $2::text)
   AND ($3::text IS NULL OR w.queue = $3::text)
   AND ($4::text IS NULL OR w.executor_id = $4::text)
   AND ($5::double precision IS NULL
        OR w.created_at >= now() - make_interval(secs => $5::double precision))
   AND ($6::timestamptz IS NULL OR w.created_at >= $6::timestamptz)
   AND ($7::double precision IS NULL
        OR w.created_at < now() - make_interval(secs => $7::double precision))
   AND ($8::timestamptz IS NULL OR w.created_at < $8::timestamptz)
   AND ($11::timestamptz IS NULL OR (w.created_at, w.id) < ($11::timestamptz, $12::text))
 ORDER BY w.created_at DESC, w.id DESC
 LIMIT $9 OFFSET $10) p
 ORDER BY p.created_at DESC, p.id DESC) t)"},
      // $1 id. One JSON object: the workflow's row, its history (created, started, what
      // workflow_history recorded, and its end), its steps (journal
      // rows, and steps being retried or failed for good, which have none), its children, its
      // unconsumed messages and its events. No row: no such workflow.
      {"admin_show", R"(SELECT json_build_object(
  'workflow', row_to_json(w),
  'history', (SELECT coalesce(json_agg(json_build_object(
      'at', h.at, 'previous', h.previous, 'status', h.status, 'reason', h.reason,
      'executor_id', h.executor_id, 'previous_executor', h.previous_executor, 'epoch', h.epoch)
      ORDER BY h.at, h.ord, h.id), '[]') FROM (
      SELECT 0 AS ord, 0::bigint AS id, w.created_at AS at, NULL AS previous,
             'created' AS status, NULL AS reason, NULL AS executor_id,
             NULL AS previous_executor, NULL::bigint AS epoch
      UNION ALL
      SELECT 1, 0, w.started_at, NULL, 'started', NULL, NULL, NULL, NULL
       WHERE w.started_at IS NOT NULL
      UNION ALL
      SELECT 2, id, at, previous, status, reason, executor_id, previous_executor, epoch
        FROM {s}.workflow_history WHERE workflow_id = w.id
      UNION ALL
      SELECT 3, 0, w.completed_at, NULL, w.status, NULL, w.executor_id, NULL, w.epoch
       WHERE w.completed_at IS NOT NULL
         AND NOT EXISTS (SELECT 1 FROM {s}.workflow_history x
                          WHERE x.workflow_id = w.id AND x.status = w.status
                            AND x.at >= w.completed_at)) h),
  'steps', (SELECT coalesce(json_agg(x ORDER BY x.seq), '[]') FROM (
      SELECT s.seq, s.name, s.kind, s.status, s.attempts,
             round((extract(epoch FROM s.completed_at - s.started_at) * 1000)::numeric, 3)
               AS duration_ms,
             s.started_at, s.completed_at, NULL::timestamptz AS next_attempt_at,
             coalesce(s.error->>'message',
                      (SELECT a.error->>'message' FROM {s}.step_attempts a
                        WHERE a.workflow_id = s.workflow_id AND a.seq = s.seq
                          AND a.outcome IN ('retrying', 'failed')
                        ORDER BY a.id DESC LIMIT 1)) AS last_error,
             s.output
        FROM {s}.steps s WHERE s.workflow_id = w.id
      UNION ALL
      SELECT r.seq, r.step, r.kind,
             CASE r.outcome WHEN 'retrying' THEN 'retrying' WHEN 'failed' THEN 'failed'
                            ELSE 'due' END,
             r.failed_attempts::integer, NULL, NULL, r.last_attempt_at, r.next_attempt_at,
             r.last_error, NULL
        FROM {s}.step_retries r WHERE r.workflow_id = w.id) x),
  'children', (SELECT coalesce(json_agg(c ORDER BY c.created_at, c.id), '[]') FROM (
      SELECT id, name, status, created_at, completed_at
        FROM {s}.workflows WHERE parent_id = w.id) c),
  'inbox', (SELECT coalesce(json_agg(m ORDER BY m.id), '[]') FROM (
      SELECT id, topic, payload, created_at FROM {s}.messages
       WHERE workflow_id = w.id AND consumed_at IS NULL) m),
  'events', (SELECT coalesce(json_agg(e ORDER BY e.key), '[]') FROM (
      SELECT key, value, updated_at FROM {s}.events WHERE workflow_id = w.id) e)
)::text FROM (SELECT * FROM {s}.workflows WHERE id = $1) w)"},
      // Queues with unfinished workflows or limits: their depth, what runs, their limits.
      {"admin_queues", R"(SELECT row_to_json(t)::text FROM (
SELECT n.queue,
       count(w.id) FILTER (WHERE w.status = 'pending' AND w.executor_id IS NULL
                             AND (w.wake_at IS NULL OR w.wake_at <= now())) AS queued,
       count(w.id) FILTER (WHERE w.status = 'pending' AND w.executor_id IS NULL
                             AND w.wake_at > now()) AS delayed,
       count(w.id) FILTER (WHERE w.status = 'running'
                             OR (w.status = 'pending' AND w.executor_id IS NOT NULL)) AS running,
       count(w.id) FILTER (WHERE w.status = 'sleeping') AS sleeping,
       q.concurrency, q.worker_concurrency, q.rate_limit, q.rate_period_ms,
       round(extract(epoch FROM now() - min(coalesce(w.wake_at, w.created_at))
                 FILTER (WHERE w.status = 'pending' AND w.executor_id IS NULL
                           AND (w.wake_at IS NULL OR w.wake_at <= now()))))::bigint
         AS oldest_queued_s
  FROM (SELECT name AS queue FROM {s}.queues
        UNION SELECT DISTINCT queue FROM {s}.workflows
               WHERE queue IS NOT NULL AND status IN ('pending', 'running', 'sleeping')) n
  LEFT JOIN {s}.queues q ON q.name = n.queue
  LEFT JOIN {s}.workflows w ON w.queue = n.queue AND w.status IN ('pending', 'running', 'sleeping')
 GROUP BY n.queue, q.concurrency, q.worker_concurrency, q.rate_limit, q.rate_period_ms
 ORDER BY n.queue) t)"},
      // $1 lease (seconds): an executor that heartbeat within it is alive. A released one
      // (graceful shutdown) has heartbeat_at '-infinity'.
      {"admin_executors", R"(SELECT row_to_json(t)::text FROM (
SELECT e.id, e.host, e.pid, e.app_version, e.versions, e.started_at,
       CASE WHEN e.heartbeat_at = '-infinity' THEN NULL ELSE e.heartbeat_at END AS heartbeat_at,
       CASE WHEN e.heartbeat_at = '-infinity' THEN NULL
            ELSE round(extract(epoch FROM now() - e.heartbeat_at)::numeric, 1) END
         AS heartbeat_age_s,
       CASE WHEN e.heartbeat_at = '-infinity' THEN 'released'
            WHEN e.heartbeat_at > now() - make_interval(secs => $1::double precision)
              THEN 'alive'
            ELSE 'dead' END AS state,
       (SELECT count(*) FROM {s}.workflows w
         WHERE w.executor_id = e.id AND w.status IN ('pending', 'running', 'sleeping')) AS owned
  FROM {s}.executors e
 ORDER BY (e.heartbeat_at > now() - make_interval(secs => $1::double precision)) DESC,
          e.heartbeat_at DESC, e.id) t)"},
      // $1 lease (seconds), $2 the schema's name. One JSON object: counts for a dashboard.
      // Each is an index probe or a scan of unfinished rows, except the count by status; the
      // journal's size is the planner's estimate (counting it would scan the largest table).
      {"admin_stats", R"(SELECT json_build_object(
  'schema_version', (SELECT max(version) FROM {s}.schema_migrations),
  'workflows', (SELECT coalesce(json_object_agg(status, n ORDER BY status), '{}')
                  FROM (SELECT status, count(*) AS n FROM {s}.workflows GROUP BY status) c),
  'journal_rows_estimate', (SELECT CASE WHEN c.reltuples < 0 THEN NULL
                                        ELSE c.reltuples::bigint END
                              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                             WHERE n.nspname = $2::text AND c.relname = 'steps'),
  'steps_retrying', (SELECT count(*) FROM {s}.step_retries WHERE outcome = 'retrying'),
  'finished_last_hour', (SELECT count(*) FROM {s}.workflows
                          WHERE status IN ('succeeded', 'failed', 'cancelled')
                            AND completed_at > now() - interval '1 hour'),
  'failed_last_hour', (SELECT count(*) FROM {s}.workflows
                        WHERE status IN ('failed', 'dead_letter')
                          AND updated_at > now() - interval '1 hour'),
  'failed_last_day', (SELECT count(*) FROM {s}.workflows
                       WHERE status IN ('failed', 'dead_letter')
                         AND updated_at > now() - interval '1 day'),
  'queued', (SELECT count(*) FROM {s}.workflows
              WHERE status = 'pending' AND executor_id IS NULL
                AND (wake_at IS NULL OR wake_at <= now())),
  'oldest_queued_s', (SELECT round(extract(epoch FROM now() - min(coalesce(wake_at, created_at))))::bigint
                        FROM {s}.workflows
                       WHERE status = 'pending' AND executor_id IS NULL
                         AND (wake_at IS NULL OR wake_at <= now())),
  'messages_unconsumed', (SELECT count(*) FROM {s}.messages WHERE consumed_at IS NULL),
  'executors_alive', (SELECT count(*) FROM {s}.executors
                       WHERE heartbeat_at > now() - make_interval(secs => $1::double precision))
)::text)"},
      // $1 age (seconds), $2 statuses (text[]; only finished ones count). How many
      // workflows `durable gc` would delete.
      {"admin_gc_count", R"(SELECT count(*) FROM {s}.workflows w
 WHERE w.status = ANY($2::text[]) AND w.status IN ('succeeded', 'failed', 'cancelled')
   AND w.completed_at < now() - make_interval(secs => $1::double precision)
   AND (w.parent_id IS NULL OR NOT EXISTS (
         SELECT 1 FROM {s}.workflows p WHERE p.id = w.parent_id
            AND p.status NOT IN ('succeeded', 'failed', 'cancelled'))))"},
      // $1 id, $2 host, $3 pid, $4 app_version, $5 versions it runs (text[], empty = all)
      {"executor_upsert", R"(INSERT INTO {s}.executors (id, host, pid, app_version, versions)
VALUES ($1, $2, $3, $4, $5::text[])
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
app_version = excluded.app_version, versions = excluded.versions, started_at = now(),
heartbeat_at = now())"},
  };
  return all;
}

DURABLE_DECL asio::awaitable<int> store::version(pg::connection& c) const {
  pg::statement exists = pg::sql("SELECT CASE WHEN to_regclass($1) IS NULL THEN 0 ELSE 1 END",
                                 schema_ + ".schema_migrations");
  auto r = co_await c.run(std::move(exists));
  if (r[0].get<int>(0) == 0) co_return 0;
  pg::statement max_version = plain("SELECT coalesce(max(version), 0) FROM {s}.schema_migrations");
  auto v = co_await c.run(std::move(max_version));
  co_return v[0].get<int>(0);
}

DURABLE_DECL asio::awaitable<int> store::migrate(pg::connection& c) const {
  auto tx = c.begin();
  // The lock comes first: even CREATE SCHEMA IF NOT EXISTS races between sessions.
  pg::statement lock =
      pg::sql("SELECT pg_advisory_xact_lock($1)", detail::fnv1a("durable.migrate:" + schema_name_));
  co_await tx.run(std::move(lock));
  std::vector<pg::statement> bootstrap;
  bootstrap.push_back(plain("CREATE SCHEMA IF NOT EXISTS {s}"));
  bootstrap.push_back(plain(R"(CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
  version     integer PRIMARY KEY,
  description text NOT NULL,
  applied_at  timestamptz NOT NULL DEFAULT now()
))"));
  co_await tx.run_batch(std::move(bootstrap));
  pg::statement max_version = plain("SELECT coalesce(max(version), 0) FROM {s}.schema_migrations");
  auto r = co_await tx.run(std::move(max_version));
  const int current = r[0].get<int>(0);
  if (current > latest_version())
    throw schema_too_new(
        "the database schema '" + schema_name_ + "' is at version " + std::to_string(current) +
        " but this build of durable knows versions up to " + std::to_string(latest_version()) +
        "; upgrade the library in this application, or use another schema");
  int applied = 0;
  for (const auto& m : detail::migrations()) {
    if (m.version <= current) continue;
    std::vector<pg::statement> batch;
    for (const char* text : m.statements) {
      // Triggers notify on this schema's channels, named here as literals.
      std::string t = detail::with_schema(text, schema_);
      for (const auto& [tag, value] : {std::pair<std::string, std::string>{"{channel}", channel()},
                                       {"{wait_channel}", wait_channel()}}) {
        std::string literal = "'";
        for (char ch : value) literal += ch == '\'' ? std::string("''") : std::string(1, ch);
        literal += "'";
        for (auto at = t.find(tag); at != std::string::npos; at = t.find(tag, at + literal.size()))
          t.replace(at, tag.size(), literal);
      }
      batch.push_back(pg::statement{std::move(t), {}, false});
    }
    batch.push_back(pg::sql(
        detail::with_schema(
            "INSERT INTO {s}.schema_migrations (version, description) VALUES ($1, $2)", schema_),
        m.version, std::string(m.description)));
    co_await tx.run_batch(std::move(batch));
    ++applied;
  }
  co_await tx.commit();
  co_return applied;
}

}  // namespace durable
