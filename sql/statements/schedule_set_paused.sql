-- schedule_set_paused
-- $1 id text
-- $2 paused boolean
-- $3 next_fire_at bigint, null allowed
--
-- Pauses or resumes schedule $1. A resume of a paused schedule sets the next slot to $3 (Unix
-- seconds, the first slot after now that the caller computed): the slots that passed while it
-- was paused are not fired. A pause, or a resume of a schedule that is not paused, keeps the
-- next slot. One row if the schedule exists.
UPDATE :"schema".schedules
   SET next_fire_at = CASE WHEN paused AND NOT $2 THEN to_timestamp($3::bigint)
                           ELSE next_fire_at END,
       paused = $2,
       updated_at = now()
 WHERE id = $1
RETURNING id
