-- notify
-- $1 channel text
-- $2 payload text
--
-- $1 channel, $2 payload
SELECT pg_notify($1, $2)
