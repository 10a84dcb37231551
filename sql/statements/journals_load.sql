-- journals_load
-- $1 ids text[]
--
-- $1 ids (text[]). I1: every listed journal in one query.
SELECT workflow_id, seq, name, kind, status, output::text, error::text
FROM :"schema".steps WHERE workflow_id = ANY($1::text[]) ORDER BY workflow_id, seq
