-- admin_stream
-- $1 id text
-- $2 key text
-- $3 from_position bigint
-- $4 limit integer
--
-- $1 workflow, $2 key, $3 first offset, $4 how many rows at most. What the console's stream
-- page reads, one JSON object: the workflow's `status` (null: no such workflow), `closed_at`
-- (the close's offset; null: not closed), `length` (the offset after the stream's last row:
-- where a page that shows the newest values starts), `values` from offset $3 on ({offset,
-- value}, in order, at most $4, and past the first no more than 4 MiB as stored), and `next`
-- (the offset to read from next). One snapshot, as stream_read.
WITH last AS (
SELECT position, value IS NULL AS closes FROM :"schema".streams
 WHERE workflow_id = $1 AND key = $2 ORDER BY position DESC LIMIT 1),
v AS (
SELECT b.position, b.value FROM (
  SELECT a.position, a.value, a.size, sum(a.size) OVER (ORDER BY a.position) AS upto
    FROM (SELECT position, value, pg_column_size(value) AS size FROM :"schema".streams
           WHERE workflow_id = $1 AND key = $2 AND position >= $3 AND value IS NOT NULL
           ORDER BY position LIMIT $4) a) b
 WHERE b.upto - b.size < 4194304)
SELECT json_build_object(
  'status', (SELECT status FROM :"schema".workflows WHERE id = $1),
  'closed_at', (SELECT position FROM last WHERE closes),
  'length', coalesce((SELECT CASE WHEN closes THEN position ELSE position + 1 END FROM last), 0),
  'values', coalesce((SELECT json_agg(json_build_object('offset', position, 'value', value)
                                      ORDER BY position) FROM v), '[]'),
  'next', coalesce((SELECT max(position) + 1 FROM v), $3))::text
