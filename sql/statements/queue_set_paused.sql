-- queue_set_paused
-- $1 name text
-- $2 paused boolean
-- $3 channel text
--
-- Pauses or resumes queue $1 (creating its row, without limits, if it has none). A paused
-- queue dispatches nothing; what runs finishes. A resume notifies the dispatchers at commit.
WITH up AS (
INSERT INTO :"schema".queues (name, paused) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = now()
RETURNING name, paused)
SELECT up.name, (SELECT count(*) FROM (SELECT pg_notify($3, up.name) WHERE NOT up.paused) n)
  FROM up
