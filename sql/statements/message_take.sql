-- message_take
-- $1 id text
-- $2 epoch bigint
-- $3 seq integer
-- $4 topic text
-- $5 started_at double precision
--
-- $1 workflow, $2 epoch, $3 step, $4 topic, $5 started_at (epoch seconds). Takes the
-- oldest unconsumed message of the topic and journals it as step $3 (output: a
-- one-element array holding it) in one statement: it is consumed exactly when the row
-- commits. The third column says whether another unconsumed message of the topic is left
-- (as of this statement's snapshot): a run that hears every later send then waits for the
-- next one without looking first. Fenced (I3, DU001). No row: no message. FOR UPDATE, not SKIP LOCKED: a
-- fenced-out run's take in flight holds the oldest message until it fails; the new owner
-- waits for it rather than taking a younger one.
WITH m AS (
SELECT id FROM :"schema".messages
 WHERE workflow_id = $1 AND topic = $4 AND consumed_at IS NULL
 ORDER BY id LIMIT 1 FOR UPDATE),
taken AS (
UPDATE :"schema".messages g SET consumed_at = now(), consumed_seq = $3
  FROM m WHERE g.id = m.id
RETURNING g.id, g.payload)
SELECT jsonb_build_array(taken.payload)::text,
       :"schema".append_step($1, $2, $3, $4, 'recv', 'succeeded', jsonb_build_array(taken.payload), NULL,
                       1, to_timestamp($5::double precision)),
       EXISTS (SELECT 1 FROM :"schema".messages o
                WHERE o.workflow_id = $1 AND o.topic = $4 AND o.consumed_at IS NULL
                  AND o.id > taken.id)
  FROM taken
