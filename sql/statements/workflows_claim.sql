-- workflows_claim
-- $1 ids text[]
-- $2 executor_id text
-- $3 names text[] (a literal, built by detail::text_array)
-- $4 versions text[] (a literal, built by detail::text_array)
-- $5 max_claims_without_progress integer
--
-- $1 ids (text[]), $2 executor_id, $3 workflow names it runs (text[]), $4 versions it
-- runs (text[], empty = all), $5 most claims in a row without progress (I9). The claim
-- that follows a wake-up (woken: the workflow unloaded itself to sleep or wait, a
-- decision, not a failure) is not counted, and does not clear the count either.
-- Claims every listed workflow that is unfinished and runnable here, bumping its epoch
-- (I3). A claim that finds no journal row added since the previous claim counts as
-- stalled; past the limit the workflow is parked instead (status 'parked' returned).
-- The journal is counted once per workflow (OFFSET 0 keeps the count from being pulled up and
-- repeated for each expression that reads it: four scans of the journal instead of one,
-- docs/performance.md run AB), and per workflow row, so that a generic plan costs about what
-- a custom one does and the statement is not planned again at every claim.
UPDATE :"schema".workflows w
 SET (stalled_claims, progress_mark, status, status_reason) = (
       SELECT CASE WHEN w.woken THEN w.stalled_claims
                   WHEN j.n = w.progress_mark THEN w.stalled_claims + 1 ELSE 0 END,
              j.n,
              CASE WHEN NOT w.woken AND j.n = w.progress_mark AND w.stalled_claims >= $5
                   THEN 'parked' ELSE 'running' END,
              CASE WHEN NOT w.woken AND j.n = w.progress_mark AND w.stalled_claims >= $5
                THEN format('claimed %s times in a row without journaling a step (the limit is '
                            'max_claims_without_progress = %s); last error: %s',
                            w.stalled_claims + 1, $5, coalesce(w.last_error, 'none recorded'))
                ELSE w.status_reason END
         FROM (SELECT (SELECT count(*)::integer FROM :"schema".steps s
                        WHERE s.workflow_id = w.id)
                      + (SELECT count(*)::integer FROM :"schema".step_attempts a
                          WHERE a.workflow_id = w.id) AS n
               OFFSET 0) j),
     woken = false, executor_id = $2, epoch = w.epoch + 1, attempts = w.attempts + 1,
     started_at = coalesce(w.started_at, now()), updated_at = now()
 WHERE w.id = ANY($1::text[]) AND w.status IN ('pending', 'running') AND w.name = ANY($3::text[])
 AND (cardinality($4::text[]) = 0 OR w.app_version = ANY($4::text[]))
RETURNING w.id, w.name, w.inputs::text, w.epoch, w.status, w.status_reason,
          extract(epoch FROM w.deadline - now())::double precision, w.generation,
          w.queue IS NOT NULL, w.traceparent
