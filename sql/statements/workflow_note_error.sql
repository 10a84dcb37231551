-- workflow_note_error
-- $1 id text
-- $2 epoch bigint
-- $3 error text
--
-- $1 id, $2 epoch, $3 the error that ended the run (shown when I9 parks it).
UPDATE :"schema".workflows SET last_error = $3, updated_at = now()
 WHERE id = $1 AND epoch = $2
