-- workflows_cancelled
-- $1 ids text[]
--
-- $1 ids (text[]) running in this process. Those cancelled meanwhile (the polling
-- fallback of the cancel notification).
SELECT id, epoch FROM :"schema".workflows
 WHERE id = ANY($1::text[]) AND status = 'cancelled'
