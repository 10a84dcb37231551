-- event_set
-- $1 id text
-- $2 epoch bigint
-- $3 seq integer
-- $4 key text
-- $5 value jsonb (sent as JSON text)
-- $6 started_at double precision
-- $7 wait_channel text
-- $8 channel text
--
-- $1 workflow, $2 epoch, $3 step, $4 key, $5 value (jsonb), $6 started_at, $7 wait
-- channel, $8 channel. Publishes the value (the latest wins) and journals it in one
-- statement; wakes workflows unloaded waiting for it, and tells runs waiting for it.
SELECT :"schema".publish_event($1, $2, $3, $4, $5::jsonb,
                          $6::double precision, $7, $8)
