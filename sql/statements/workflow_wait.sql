-- workflow_wait
-- $1 id text
-- $2 epoch bigint
-- $3 tag text
-- $4 recheck_ms double precision
-- $5 kind text
-- $6 a text
-- $7 b text, null allowed
--
-- $1 id, $2 epoch, $3 what it waits for ('msg:<topic>', 'event:<bytes of id>:<id>:<key>',
-- 'child:<id>'), $4 the longest it sleeps before it looks again (ms), $5 'msg', 'event'
-- or 'child', $6 the topic, the publisher or the child, $7 the event's key. See
-- unload_to_wait in migration 7: 'unloaded', 'busy' or 'fenced'. Unloads the
-- workflow under a new epoch (I3) until what it waits for arrives (a send, an event or a
-- child's end sets wake_at = now()) or $4 passes. What arrived before this statement
-- makes it due at once, so nothing arrives unnoticed in between.
SELECT :"schema".unload_to_wait($1, $2, $3, $4::double precision, $5, $6,
                          $7)
