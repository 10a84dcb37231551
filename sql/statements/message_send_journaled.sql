-- message_send_journaled
-- $1 to text
-- $2 topic text
-- $3 payload jsonb (sent as JSON text)
-- $4 key text
-- $5 wait_channel text
-- $6 channel text
-- $7 from text
-- $8 epoch bigint
-- $9 seq integer
-- $10 started_at double precision
--
-- The same from a workflow, journaled in the same transaction (exactly once): $7
-- sender, $8 its epoch, $9 the step, $10 started_at (epoch seconds); the idempotency key
-- is "<sender>:<step>". Fenced (I3, DU001). Nothing is journaled when the recipient
-- does not exist. One row: (queued now, the recipient exists).
SELECT * FROM :"schema".send_message($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9,
                                    $10::double precision)
