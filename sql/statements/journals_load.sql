-- journals_load
-- $1 ids text[]
--
-- $1 ids (text[]). I1: every listed journal in one query. In no particular order: the
-- client places each row by its step number (sorting 1 000 rows on the server cost a third of
-- a replay's load, docs/performance.md run Z).
SELECT workflow_id, seq, name, kind, status, output::text, error::text
FROM :"schema".steps WHERE workflow_id = ANY($1::text[])
