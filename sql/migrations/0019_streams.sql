-- durable streams
-- The values a workflow appends under a key (ctx.write_stream), in order, for readers
-- outside it (engine::read_stream, `durable stream`). A value's offset is its `position`,
-- counted from 0 in each (workflow, key); a row whose value is NULL is the stream's close
-- (ctx.close_stream), its last row. Each row is written in the statement that journals
-- the step that wrote it (`seq` of generation `generation`), so a replay never appends
-- again. Readers read by position, so a reader that restarts goes on from the offset it
-- had; the stream ends at its close or when the workflow finishes.
CREATE TABLE :"schema".streams (
  workflow_id text NOT NULL,
  key         text NOT NULL,
  position    bigint NOT NULL,
  value       jsonb,
  generation  integer NOT NULL,
  seq         integer NOT NULL,
  written_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workflow_id, key, position)
);

-- $1 workflow, $2 epoch, $3 step, $4 key, $5 value (NULL: close the stream), $6 started_at,
-- $7 step kind, $8 wait channel. Appends to stream p_key of p_id as its step p_seq,
-- journaled in the same transaction (fenced by append_step, DU001). One row:
--   written  true: appended at `position` (a close: its close row, or the close that
--            was there already);
--            false: nothing written, nothing journaled: the stream was closed (at
--            `position`, by step `closed_by`) and this is a value.
-- Writers of one stream are serialized by a transaction lock, so positions are given in
-- the order the rows commit: a reader that sees a position has seen every one before it.
-- Tells readers waiting on the wait channel ('s:' || id) once the row commits.
CREATE FUNCTION :"schema".append_stream(p_id text, p_epoch bigint, p_seq integer,
    p_key text, p_value jsonb, p_started_at double precision, p_kind text,
    p_wait_channel text)
  RETURNS TABLE (written boolean, at_position bigint, closed_by integer)
  LANGUAGE plpgsql
  SET search_path = pg_catalog, :"schema", pg_temp AS $fn$
DECLARE
  last_position bigint;
  last_closes boolean;
  last_seq integer;
  gen integer;
BEGIN
  SELECT w.generation INTO gen FROM workflows w WHERE w.id = p_id AND w.epoch = p_epoch;
  PERFORM pg_advisory_xact_lock(wait_lock('stream', p_id, p_key));
  SELECT s.position, s.value IS NULL, s.seq INTO last_position, last_closes, last_seq
    FROM streams s WHERE s.workflow_id = p_id AND s.key = p_key
   ORDER BY s.position DESC LIMIT 1;
  IF last_closes AND p_value IS NOT NULL THEN
    RETURN QUERY SELECT false, last_position, last_seq;
    RETURN;
  END IF;
  IF last_closes THEN  -- closed again: journaled, nothing appended
    PERFORM append_step(p_id, p_epoch, p_seq, p_key, p_kind, 'succeeded',
                            to_jsonb(last_position), NULL, 1, to_timestamp(p_started_at));
    RETURN QUERY SELECT true, last_position, NULL::integer;
    RETURN;
  END IF;
  last_position := coalesce(last_position + 1, 0);
  PERFORM append_step(p_id, p_epoch, p_seq, p_key, p_kind, 'succeeded',
                          to_jsonb(last_position), NULL, 1, to_timestamp(p_started_at));
  INSERT INTO streams (workflow_id, key, position, value, generation, seq)
  VALUES (p_id, p_key, last_position, p_value, gen, p_seq);
  IF octet_length(p_id) < 7900 THEN  -- else too long for a notification: readers poll
    PERFORM pg_notify(p_wait_channel, 's:' || p_id);
  END IF;
  RETURN QUERY SELECT true, last_position, NULL::integer;
END
$fn$;
