-- event_get
-- $1 id text
-- $2 key text
--
-- $1 workflow, $2 key. The value published last, if any.
SELECT value::text FROM :"schema".events WHERE workflow_id = $1 AND key = $2
