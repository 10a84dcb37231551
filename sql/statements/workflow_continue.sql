-- workflow_continue
-- $1 id text
-- $2 epoch bigint
-- $3 inputs jsonb (sent as JSON text)
--
-- $1 id, $2 epoch, $3 the next generation's inputs (jsonb). ctx.continue_as_new: see
-- continue_as_new in migration 9. One row: (new epoch, new generation). Fenced (DU001).
SELECT new_epoch, new_generation FROM :"schema".continue_as_new($1, $2, $3::jsonb)
