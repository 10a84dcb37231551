-- step_append
-- $1 workflow_id text
-- $2 epoch bigint
-- $3 seq integer
-- $4 name text
-- $5 kind text
-- $6 status text
-- $7 output jsonb (sent as JSON text), null allowed
-- $8 error jsonb (sent as JSON text), null allowed
-- $9 attempts integer
-- $10 started_at double precision
--
-- $1 id, $2 epoch, $3 seq, $4 name, $5 kind, $6 status, $7 output, $8 error,
-- $9 attempts, $10 started_at (epoch seconds)
SELECT :"schema".append_step($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9,
                      to_timestamp($10::double precision))
