-- stream_read
-- $1 id text
-- $2 key text
-- $3 from_position bigint
-- $4 limit integer
--
-- $1 workflow, $2 key, $3 first offset, $4 how many values at most. The workflow's status
-- (NULL: no such workflow) and whether a reader marked it awaited, the offset of the
-- stream's close if it is closed (its last row is the close; one read of the primary key
-- backwards), and the stream's rows from offset $3 on, in order, at most $4 and past the
-- first no more than 8 MiB of values (as stored): (status, awaited, closed_at, position,
-- value as JSON text). One snapshot: when the status is finished, every row the workflow
-- wrote is among those after $3. At least one row; position NULL: no row there yet. A row
-- whose value is NULL is the stream's close.
SELECT w.status, w.awaited, CASE WHEN l.closes THEN l.position END, s.position, s.value::text
  FROM (SELECT 1) AS one
  LEFT JOIN :"schema".workflows w ON w.id = $1
  LEFT JOIN LATERAL (SELECT position, value IS NULL AS closes FROM :"schema".streams
                      WHERE workflow_id = $1 AND key = $2
                      ORDER BY position DESC LIMIT 1) l ON true
  LEFT JOIN LATERAL (
    SELECT b.position, b.value FROM (
      SELECT a.position, a.value, a.size, sum(a.size) OVER (ORDER BY a.position) AS upto
        FROM (SELECT position, value, coalesce(pg_column_size(value), 0) AS size
                FROM :"schema".streams
               WHERE workflow_id = $1 AND key = $2 AND position >= $3
               ORDER BY position LIMIT $4) a) b
     WHERE b.upto - b.size < 8388608) s ON true
 ORDER BY s.position
