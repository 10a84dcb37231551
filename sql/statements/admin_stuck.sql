-- admin_stuck
-- $1 limit bigint
--
-- The workflows that do not move (the view stuck, migration 17), as JSON objects, longest
-- stuck first: at most $1. Each with why, as the view waiting says it, and whether it can move
-- on its own.
SELECT row_to_json(t)::text FROM (
SELECT s.id, s.name, s.status, s.executor_id, s.since, s.kind, s.blocked, s.reason
  FROM :"schema".stuck s
 ORDER BY s.since, s.id
 LIMIT $1) t
