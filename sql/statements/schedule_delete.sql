-- schedule_delete
-- $1 id text
--
-- Deletes schedule $1; the workflows it started stay. One row if it existed.
DELETE FROM :"schema".schedules WHERE id = $1 RETURNING id
