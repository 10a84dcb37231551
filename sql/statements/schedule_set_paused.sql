-- schedule_set_paused
-- $1 id text
-- $2 paused boolean
-- $3 next_fire_at bigint, null allowed
--
-- Pauses or resumes schedule $1. A resume sets the next slot to $3 (Unix seconds, the first
-- slot after now that the caller computed): the slots that passed while it was paused are not
-- fired. A pause keeps the next slot. One row if the schedule exists.
UPDATE :"schema".schedules
   SET paused = $2,
       next_fire_at = CASE WHEN $2 THEN next_fire_at ELSE to_timestamp($3::bigint) END,
       updated_at = now()
 WHERE id = $1
RETURNING id
