-- message_send
-- $1 to text
-- $2 topic text
-- $3 payload jsonb (sent as JSON text)
-- $4 key text, null allowed
-- $5 wait_channel text
-- $6 channel text
--
-- ---- messages, events, child workflows, waits (migration 7)
-- $1 recipient, $2 topic, $3 payload (jsonb), $4 idempotency key (null: none), $5 wait
-- channel, $6 channel. Queues a message for an existing workflow; a key it was sent
-- with before sends nothing. Wakes the recipient if it is unloaded waiting for the
-- topic, and tells a run waiting for it (NOTIFY at commit). One row: (queued now, the
-- recipient exists).
SELECT * FROM :"schema".send_message($1, $2, $3::jsonb, $4, $5, $6, NULL,
                                    NULL, NULL, NULL)
