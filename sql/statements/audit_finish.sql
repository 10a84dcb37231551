-- audit_finish
-- $1 id bigint
-- $2 target text (JSON)
-- $3 count bigint
-- $4 result text
-- $5 detail text
--
-- The end of an action whose audit row audit_insert wrote first (result 'started', migration
-- 16): its result, what it changed, and its target with what the action learned (a fork's new
-- id, a bulk run's ids). A row that has ended already is left as it is.
UPDATE :"schema".audit
   SET target = $2::jsonb, count = $3::bigint, result = $4::text, detail = $5::text
 WHERE id = $1::bigint AND result = 'started'
RETURNING id
