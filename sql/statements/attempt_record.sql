-- attempt_record
-- $1 id text
-- $2 epoch bigint
-- $3 seq integer
-- $4 attempt integer
-- $5 name text
-- $6 kind text
-- $7 outcome text
-- $8 error jsonb (sent as JSON text)
-- $9 started_at double precision
-- $10 pause_ms double precision, null allowed
-- $11 unload boolean
-- $12 max_attempts integer, null allowed
--
-- $1 id, $2 epoch, $3 seq, $4 attempt, $5 name, $6 kind, $7 outcome ('retrying' or
-- 'failed'), $8 error (jsonb), $9 started_at (epoch seconds), $10 pause before the next
-- attempt (ms, or null; the due time is the server's now() plus it, so clocks of
-- application hosts do not matter), $11 unload: the workflow sleeps until the next
-- attempt, owned by nobody, and its epoch moves on (nothing more of this run can be
-- written, I3), $12 the attempts the step's policy allows in all (migration 17: the view
-- waiting says "attempt 4 of 5"). Fenced: nothing is written unless the workflow is owned
-- under $2.
-- started_at is the engine's estimate of the server's clock, which can be off by half the
-- round trip of its reading; the attempt began before this statement, so an estimate later
-- than now() is cut to now() and an attempt never ends before it starts.
WITH w AS (
UPDATE :"schema".workflows
   SET last_error = $8::jsonb->>'message', updated_at = now(),
       status = CASE WHEN $11::boolean THEN 'sleeping' ELSE status END,
       wake_at = CASE WHEN $11::boolean
                      THEN now() + make_interval(secs => $10::double precision / 1000)
                      ELSE wake_at END,
       executor_id = CASE WHEN $11::boolean THEN NULL ELSE executor_id END,
       epoch = CASE WHEN $11::boolean THEN epoch + 1 ELSE epoch END
 WHERE id = $1 AND epoch = $2
RETURNING id)
INSERT INTO :"schema".step_attempts (workflow_id, seq, attempt, name, kind, outcome, error, epoch,
                               started_at, next_attempt_at, max_attempts)
SELECT w.id, $3, $4, $5, $6, $7, $8::jsonb, $2, least(to_timestamp($9::double precision), now()),
       now() + make_interval(secs => $10::double precision / 1000), $12::integer
  FROM w
