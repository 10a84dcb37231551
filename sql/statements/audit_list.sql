-- audit_list
-- $1 limit bigint
-- $2 before_id bigint, null = from the newest
-- $3 action text, null = any
--
-- The audit, newest first, as JSON objects (`durable audit`, the console's audit page): at most
-- $1 rows with an id below $2.
SELECT row_to_json(t)::text FROM (
SELECT a.id, a.at, a.actor, a.via, a.address, a.action, a.target, a.count, a.result, a.detail
  FROM :"schema".audit a
 WHERE ($2::bigint IS NULL OR a.id < $2::bigint)
   AND ($3::text IS NULL OR a.action = $3::text)
 ORDER BY a.id DESC
 LIMIT $1) t
