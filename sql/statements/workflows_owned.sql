-- workflows_owned
-- $1 executor_id text
-- $2 versions text[] (a literal, built by detail::text_array)
--
-- $1 executor_id, $2 versions it runs (text[], empty = all)
SELECT id, name FROM :"schema".workflows
 WHERE executor_id = $1 AND status IN ('pending', 'running')
 AND (cardinality($2::text[]) = 0 OR app_version = ANY($2::text[]))
 ORDER BY created_at
