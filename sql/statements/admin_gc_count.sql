-- admin_gc_count
-- $1 age_s double precision
-- $2 statuses text[] (a literal, built by detail::text_array)
--
-- $1 age (seconds), $2 statuses (text[]; only finished ones count). How many
-- workflows `durable gc` would delete.
SELECT count(*) FROM :"schema".workflows w
 WHERE w.status = ANY($2::text[]) AND w.status IN ('succeeded', 'failed', 'cancelled')
   AND w.completed_at < now() - make_interval(secs => $1::double precision)
   AND (w.parent_id IS NULL OR NOT EXISTS (
         SELECT 1 FROM :"schema".workflows p WHERE p.id = w.parent_id
            AND p.status NOT IN ('succeeded', 'failed', 'cancelled')))
