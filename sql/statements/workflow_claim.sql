-- workflow_claim
-- $1 id text
-- $2 executor_id text
-- $3 names text[] (a literal, built by detail::text_array)
--
-- $1 id, $2 executor_id, $3 workflow names this executor runs (text[]). A new epoch
-- fences out any previous owner (I3).
UPDATE :"schema".workflows
 SET status = 'running', executor_id = $2, epoch = epoch + 1, attempts = attempts + 1,
     started_at = coalesce(started_at, now()), updated_at = now()
 WHERE id = $1 AND status IN ('pending', 'running') AND name = ANY($3::text[])
RETURNING name, inputs::text, epoch
