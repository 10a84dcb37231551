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
--            `position`, by step `closed_by` of generation `closed_generation`) and this
--            is a value.
-- A run issues one write of a stream at a time, and a stale owner's write is fenced, so
-- positions are given in the order the rows commit (the transaction lock is a backstop):
-- a reader that sees a position has seen every one before it.
-- Tells readers waiting on the wait channel ('s:' || id) once the row commits, if a reader
-- marked the workflow `awaited` (stream_read's caller does before it waits; the mark and
-- this statement both lock the workflow's row, so either this statement sees the mark or
-- the reader's next read sees this row). Nobody reading: no NOTIFY, which serializes the
-- commits that send one.
CREATE FUNCTION :"schema".append_stream(p_id text, p_epoch bigint, p_seq integer,
    p_key text, p_value jsonb, p_started_at double precision, p_kind text,
    p_wait_channel text)
  RETURNS TABLE (written boolean, at_position bigint, closed_by integer,
                 closed_generation integer)
  LANGUAGE plpgsql
  SET search_path = pg_catalog, :"schema", pg_temp AS $fn$
DECLARE
  last_position bigint;
  last_closes boolean;
  last_seq integer;
  last_generation integer;
  gen integer;
  told boolean;
BEGIN
  PERFORM pg_advisory_xact_lock(wait_lock('stream', p_id, p_key));
  SELECT s.position, s.value IS NULL, s.seq, s.generation
    INTO last_position, last_closes, last_seq, last_generation
    FROM streams s WHERE s.workflow_id = p_id AND s.key = p_key
   ORDER BY s.position DESC LIMIT 1;
  IF last_closes AND p_value IS NOT NULL THEN
    RETURN QUERY SELECT false, last_position, last_seq, last_generation;
    RETURN;
  END IF;
  IF NOT last_closes THEN
    last_position := last_position + 1;
  END IF;
  last_position := coalesce(last_position, 0);
  PERFORM append_step(p_id, p_epoch, p_seq, p_key, p_kind, 'succeeded',
                          to_jsonb(last_position), NULL, 1, to_timestamp(p_started_at));
  IF last_closes THEN  -- closed again: journaled, nothing appended
    RETURN QUERY SELECT true, last_position, NULL::integer, NULL::integer;
    RETURN;
  END IF;
  -- Read after append_step's lock on the row: a reader's mark is either seen here or waits.
  SELECT w.generation, w.awaited INTO gen, told FROM workflows w WHERE w.id = p_id;
  INSERT INTO streams (workflow_id, key, position, value, generation, seq)
  VALUES (p_id, p_key, last_position, p_value, gen, p_seq);
  -- An id of 7 900 bytes or more cannot be told (NOTIFY's limit): its readers poll.
  IF told AND octet_length(p_id) < 7900 THEN
    PERFORM pg_notify(p_wait_channel, 's:' || p_id);
  END IF;
  RETURN QUERY SELECT true, last_position, NULL::integer, NULL::integer;
END
$fn$;
