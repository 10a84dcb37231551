-- audit_insert
-- $1 actor text
-- $2 via text
-- $3 address text
-- $4 action text
-- $5 target text (JSON)
-- $6 count bigint
-- $7 result text
-- $8 detail text
--
-- One row of the console's audit (migration 13); its id.
INSERT INTO :"schema".audit (actor, via, address, action, target, count, result, detail)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::jsonb, $6::bigint, $7::text, $8::text)
RETURNING id
