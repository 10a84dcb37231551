-- steps_append_many
-- $1 workflow_ids text[]
-- $2 epochs bigint[]
-- $3 seqs integer[]
-- $4 names text[]
-- $5 kinds text[]
-- $6 statuses text[]
-- $7 outputs jsonb[] (elements JSON text or null)
-- $8 errors jsonb[] (elements JSON text or null)
-- $9 attempts integer[]
-- $10 started_at double precision[]
--
-- Group commit of journal rows: many rows, one statement (see append_steps in
-- migration 4). Arrays, one element per row: $1 workflow ids, $2 epochs, $3 seqs,
-- $4 names, $5 kinds, $6 statuses, $7 outputs (jsonb), $8 errors (jsonb), $9 attempts,
-- $10 started_at (epoch seconds). Returns (workflow id, seq) of the rows written. A
-- duplicate row fails the statement; the group committer then sends each row alone
-- through step_append.
SELECT written_id, written_seq FROM :"schema".append_steps(
$1::text[], $2::bigint[], $3::integer[], $4::text[], $5::text[], $6::text[], $7::jsonb[],
$8::jsonb[], $9::integer[], $10::double precision[])
