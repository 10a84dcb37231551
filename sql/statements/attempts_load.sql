-- attempts_load
-- $1 ids text[]
--
-- $1 ids (text[]). The attempts of every step of these workflows that has no journal
-- row, oldest first (loaded with the journals, I1); the next attempt as seconds from the
-- server's now().
SELECT a.workflow_id, a.seq, a.attempt, a.outcome, a.error::text,
       extract(epoch FROM a.next_attempt_at - now())::double precision, a.name, a.kind
  FROM :"schema".step_attempts a
 WHERE a.workflow_id = ANY($1::text[])
   AND NOT EXISTS (SELECT 1 FROM :"schema".steps s WHERE s.workflow_id = a.workflow_id AND s.seq = a.seq)
 ORDER BY a.workflow_id, a.seq, a.id
