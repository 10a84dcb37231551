-- admin_ids
-- $1 statuses text[]
-- $2 name text, null = any
-- $3 queue text, null = any
-- $4 executor text, null = any
-- $5 since_s double precision, null allowed
-- $6 since_at timestamptz, null allowed
-- $7 until_s double precision, null allowed
-- $8 until_at timestamptz, null allowed
-- $9 limit bigint
-- $10 id_prefix text, null = any
-- $11 scan bigint, null = unbounded
-- $12 changed_since_s double precision, null allowed
-- $13 retrying boolean
-- $14 text text, null = any
--
-- The ids of the workflows admin_list's filter matches (same parameters, same meaning, read the
-- same way: each status from workflows_status_created within the time range; a status named twice
-- counts once), by id, at most
-- $9 of them (and one more, to tell that there are more): the set a bulk action of the console
-- counts, confirms and acts on. A row with `edge` true comes first and says that a status had
-- more than $11 rows in the range, so the set is not known whole (its id is the last one read,
-- which may not match the filter): the console refuses such a filter. Each row has its status,
-- so that the console can count the workflows its action applies to.
SELECT v.id, v.edge, s.status
  FROM unnest(CASE WHEN cardinality($1::text[]) = 0
                   THEN ARRAY['pending', 'running', 'sleeping', 'succeeded', 'failed', 'parked',
                              'cancelled', 'dead_letter']
                   ELSE ARRAY(SELECT DISTINCT unnest($1::text[])) END) AS s(status)
 CROSS JOIN LATERAL (
   SELECT m.id, m.edge FROM (
     SELECT r.id,
            row_number() OVER (ORDER BY r.created_at DESC, r.id DESC) AS rn,
            -- the last row allowed is an edge only when a row past it exists
            coalesce(row_number() OVER (ORDER BY r.created_at DESC, r.id DESC) = $11::bigint
                     AND lead(r.id) OVER (ORDER BY r.created_at DESC, r.id DESC) IS NOT NULL,
                     false) AS edge,
            ($2::text IS NULL OR r.name = $2::text)
              AND ($3::text IS NULL OR r.queue = $3::text)
              AND ($4::text IS NULL OR r.executor_id = $4::text)
              AND ($10::text IS NULL OR starts_with(r.id, $10::text)) AND r.held AS hit
       FROM (SELECT w.id, w.created_at, w.name, w.queue, w.executor_id,
                    -- what the row holds: changed since $12, retrying a step ($13), text $14
                    ($12::double precision IS NULL
                       OR w.updated_at >= now() - make_interval(secs => $12::double precision))
                    AND (NOT coalesce($13::boolean, false) OR EXISTS (
                          SELECT 1 FROM :"schema".step_retries r
                           WHERE r.workflow_id = w.id AND r.outcome = 'retrying'))
                    AND ($14::text IS NULL
                         OR strpos(lower(w.id), lower($14::text)) > 0
                         OR strpos(lower(w.inputs::text), lower($14::text)) > 0
                         OR strpos(lower(coalesce(w.last_error, '')), lower($14::text)) > 0
                         OR strpos(lower(coalesce(w.error->>'message', '')), lower($14::text)) > 0
                         OR strpos(lower(coalesce(w.status_reason, '')), lower($14::text)) > 0)
                      AS held
               FROM :"schema".workflows w
              WHERE w.status = s.status
                AND w.created_at >= coalesce(greatest(now() - make_interval(
                                               secs => $5::double precision), $6::timestamptz),
                                             '-infinity')
                AND w.created_at < coalesce(least(now() - make_interval(
                                              secs => $7::double precision), $8::timestamptz),
                                            'infinity')
              ORDER BY w.created_at DESC, w.id DESC
              LIMIT $11::bigint + 1) r) m
    WHERE ($11::bigint IS NULL OR m.rn <= $11::bigint) AND (m.hit OR m.edge)
    LIMIT $9::bigint + 1) v
 ORDER BY v.edge DESC, v.id
 LIMIT $9::bigint + 1
