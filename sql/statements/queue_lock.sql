-- queue_lock
-- $1 queue text
--
-- $1 queue. Serializes the dispatchers of one queue, so that the counts the next
-- statement reads (in its own, later snapshot) cannot be outdated by another one.
SELECT name FROM :"schema".queues WHERE name = $1 FOR UPDATE
