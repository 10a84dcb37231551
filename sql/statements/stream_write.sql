-- stream_write
-- $1 id text
-- $2 epoch bigint
-- $3 seq integer
-- $4 key text
-- $5 value jsonb (sent as JSON text; NULL closes the stream)
-- $6 started_at double precision
-- $7 kind text
-- $8 wait_channel text
--
-- $1 workflow, $2 epoch, $3 step, $4 key, $5 value (NULL: the close), $6 started_at, $7
-- the step's kind, $8 wait channel. Appends to the stream and journals the step in one
-- statement (migration 19, append_stream). One row: (written, position, closed_by,
-- closed_generation).
SELECT written, at_position, closed_by, closed_generation
  FROM :"schema".append_stream($1, $2, $3, $4, $5::jsonb, $6::double precision, $7, $8)
