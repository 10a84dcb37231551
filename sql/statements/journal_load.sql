-- journal_load
-- $1 id text
--
-- $1 id. I1: the whole journal in one query.
SELECT seq, name, kind, status, output::text, error::text
FROM :"schema".steps WHERE workflow_id = $1 ORDER BY seq
