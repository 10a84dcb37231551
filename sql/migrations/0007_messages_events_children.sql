-- messages, events, child workflows, waits

-- What a workflow waits for while it is unloaded ('msg:<topic>',
-- 'event:<workflow id>:<key>', 'child:<child id>'): what arrives for it wakes it at
-- once (wake_at = now()) instead of at the recheck. (parent_id, set for child
-- workflows, is from migration 1.)
ALTER TABLE :"schema".workflows ADD COLUMN wait_for text,
  ADD COLUMN woken boolean NOT NULL DEFAULT false;

CREATE INDEX workflows_by_parent ON :"schema".workflows (parent_id) WHERE parent_id IS NOT NULL;

CREATE INDEX workflows_waiting ON :"schema".workflows (wait_for) WHERE status = 'sleeping';

-- A message is consumed once: the recv that takes it stamps consumed_at and
-- journals it in the same statement.
CREATE TABLE :"schema".messages (
  id              bigserial PRIMARY KEY,
  workflow_id     text NOT NULL,
  topic           text NOT NULL,
  payload         jsonb NOT NULL,
  idempotency_key text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  consumed_at     timestamptz,
  consumed_seq    integer,
  UNIQUE (workflow_id, idempotency_key)
);

CREATE INDEX messages_unconsumed ON :"schema".messages (workflow_id, topic, id)
  WHERE consumed_at IS NULL;

-- The latest value a workflow published under each key.
CREATE TABLE :"schema".events (
  workflow_id text NOT NULL,
  key         text NOT NULL,
  value       jsonb NOT NULL,
  seq         integer NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, key)
);

-- Wake-ups without a lost one. A waiter unloads holding an exclusive transaction
-- lock on what it waits for (wait_lock), taken with try: if a sender, publisher or
-- ending child holds it (shared, until its transaction ends), the waiter stays in
-- its run instead. Otherwise the sender waits for the unload to commit, and its
-- wake-up, a statement of its own, sees the workflow sleeping. The waiter's check of
-- what arrived is a statement after its lock, so it sees every sender that ended.
CREATE FUNCTION :"schema".wait_lock(p_kind text, p_a text, p_b text) RETURNS bigint
  LANGUAGE sql IMMUTABLE AS $fn$
SELECT hashtextextended(p_kind || ':' || octet_length(p_a) || ':' || p_a || ':' ||
                        coalesce(p_b, ''), 0)
$fn$;

-- $1 id, $2 epoch, $3 wait_for, $4 recheck (ms), $5 kind, $6, $7 what (wait_lock).
-- 'unloaded', 'busy' (something for it is being sent now: stay in the run), or
-- 'fenced' (another epoch owns it, I3).
CREATE FUNCTION :"schema".unload_to_wait(p_id text, p_epoch bigint, p_wait_for text,
    p_recheck_ms double precision, p_kind text, p_a text, p_b text)
  RETURNS text LANGUAGE plpgsql
  SET search_path = pg_catalog, :"schema", pg_temp AS $fn$
DECLARE
  lock_on text := CASE WHEN p_kind = 'msg' THEN p_id ELSE p_a END;
  lock_b text := CASE WHEN p_kind = 'child' THEN NULL WHEN p_kind = 'msg' THEN p_a ELSE p_b END;
  arrived boolean;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM workflows WHERE id = p_id AND epoch = p_epoch) THEN
    RETURN 'fenced';
  END IF;
  IF NOT pg_try_advisory_xact_lock(wait_lock(p_kind, lock_on, lock_b)) THEN
    RETURN 'busy';
  END IF;
  arrived := CASE p_kind
    WHEN 'msg' THEN EXISTS (SELECT 1 FROM messages m WHERE m.workflow_id = p_id
                              AND m.topic = p_a AND m.consumed_at IS NULL)
    WHEN 'child' THEN EXISTS (SELECT 1 FROM workflows c WHERE c.id = p_a
                                AND c.status IN ('succeeded', 'failed', 'cancelled'))
    WHEN 'event' THEN EXISTS (SELECT 1 FROM events e WHERE e.workflow_id = p_a
                                AND e.key = p_b)
    ELSE false END;
  UPDATE workflows
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
$fn$;

-- Queues a message for an existing workflow (a key it was sent with before sends
-- nothing), wakes the recipient if it is unloaded waiting for the topic, tells a run
-- waiting for it, and, from a workflow (p_from set), journals the sending step
-- (fenced, DU001). One row: (queued now, the recipient exists).
CREATE FUNCTION :"schema".send_message(p_to text, p_topic text, p_payload jsonb,
    p_key text, p_wait_channel text, p_channel text, p_from text, p_epoch bigint,
    p_seq integer, p_started_at double precision)
  RETURNS TABLE (queued boolean, recipient_exists boolean) LANGUAGE plpgsql
  SET search_path = pg_catalog, :"schema", pg_temp AS $fn$
DECLARE
  new_id bigint;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM workflows WHERE id = p_to) THEN
    RETURN QUERY SELECT false, false;
    RETURN;
  END IF;
  PERFORM pg_advisory_xact_lock_shared(wait_lock('msg', p_to, p_topic));
  INSERT INTO messages (workflow_id, topic, payload, idempotency_key)
  VALUES (p_to, p_topic, p_payload, p_key)
  ON CONFLICT (workflow_id, idempotency_key) DO NOTHING
  RETURNING id INTO new_id;
  IF p_from IS NOT NULL THEN
    PERFORM append_step(p_from, p_epoch, p_seq, p_topic, 'send', 'succeeded',
                            to_jsonb(p_to), NULL, 1, to_timestamp(p_started_at));
  END IF;
  IF new_id IS NOT NULL THEN
    PERFORM pg_notify(p_wait_channel, p_to);
    UPDATE workflows SET wake_at = now(), updated_at = now()
     WHERE id = p_to AND status = 'sleeping' AND wait_for = 'msg:' || p_topic;
    IF FOUND THEN
      PERFORM pg_notify(p_channel, '');
    END IF;
  END IF;
  RETURN QUERY SELECT new_id IS NOT NULL, true;
END
$fn$;

-- Publishes event p_key of workflow p_id (the latest wins) as its step p_seq,
-- journaled (fenced, DU001); wakes workflows unloaded waiting for it, and tells runs
-- waiting for it.
CREATE FUNCTION :"schema".publish_event(p_id text, p_epoch bigint, p_seq integer,
    p_key text, p_value jsonb, p_started_at double precision, p_wait_channel text,
    p_channel text)
  RETURNS boolean LANGUAGE plpgsql
  SET search_path = pg_catalog, :"schema", pg_temp AS $fn$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(wait_lock('event', p_id, p_key));
  INSERT INTO events (workflow_id, key, value, seq) VALUES (p_id, p_key, p_value, p_seq)
  ON CONFLICT (workflow_id, key) DO UPDATE
     SET value = excluded.value, seq = excluded.seq, updated_at = now();
  PERFORM append_step(p_id, p_epoch, p_seq, p_key, 'event', 'succeeded', NULL, NULL, 1,
                          to_timestamp(p_started_at));
  PERFORM pg_notify(p_wait_channel, 'e:' || p_id);
  UPDATE workflows SET wake_at = now(), updated_at = now()
   WHERE status = 'sleeping'
     AND wait_for = 'event:' || octet_length(p_id) || ':' || p_id || ':' || p_key;
  IF FOUND THEN
    PERFORM pg_notify(p_channel, '');
  END IF;
  RETURN true;
END
$fn$;

-- A child that ends (succeeded, failed, cancelled: whichever statement ends it)
-- wakes its parent if the parent is unloaded waiting for it, and tells a parent
-- waiting in its run.
CREATE FUNCTION :"schema".wake_parent() RETURNS trigger LANGUAGE plpgsql
  SET search_path = pg_catalog, :"schema", pg_temp AS $fn$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(wait_lock('child', NEW.id, NULL));
  UPDATE workflows SET wake_at = now(), updated_at = now()
   WHERE id = NEW.parent_id AND status = 'sleeping' AND wait_for = 'child:' || NEW.id;
  IF FOUND THEN
    PERFORM pg_notify(TG_ARGV[0], '');
  END IF;
  PERFORM pg_notify(TG_ARGV[1], NEW.parent_id);
  RETURN NULL;
END
$fn$;

CREATE TRIGGER workflows_wake_parent AFTER UPDATE OF status ON :"schema".workflows
  FOR EACH ROW WHEN (NEW.parent_id IS NOT NULL
                     AND NEW.status IN ('succeeded', 'failed', 'cancelled')
                     AND OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION :"schema".wake_parent(:'channel', :'wait_channel');
