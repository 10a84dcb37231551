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
--
-- The ids of the workflows admin_list's filter matches (same parameters, same meaning), by id,
-- at most $9 of them: the set a bulk action of the console counts, confirms and acts on.
SELECT w.id
  FROM :"schema".workflows w
 WHERE (cardinality($1::text[]) = 0 OR w.status = ANY($1::text[]))
   AND ($2::text IS NULL OR w.name = $2::text)
   AND ($3::text IS NULL OR w.queue = $3::text)
   AND ($4::text IS NULL OR w.executor_id = $4::text)
   AND ($10::text IS NULL OR starts_with(w.id, $10::text))
   AND ($5::double precision IS NULL
        OR w.created_at >= now() - make_interval(secs => $5::double precision))
   AND ($6::timestamptz IS NULL OR w.created_at >= $6::timestamptz)
   AND ($7::double precision IS NULL
        OR w.created_at < now() - make_interval(secs => $7::double precision))
   AND ($8::timestamptz IS NULL OR w.created_at < $8::timestamptz)
 ORDER BY w.id
 LIMIT $9
