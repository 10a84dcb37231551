-- audit written before the action
-- An action of the console or the `durable` program writes its audit row before it does
-- anything, with the result 'started', and sets the result (done, refused, failed) when it ends.
-- An action whose row cannot be written is not done: every action the tools take has a row. A
-- row still 'started' is an action whose end was not recorded (the tool lost the database or
-- stopped partway): look at its target to see what it did.
ALTER TABLE :"schema".audit DROP CONSTRAINT audit_result_check;
ALTER TABLE :"schema".audit ADD CONSTRAINT audit_result_check
  CHECK (result IN ('started', 'done', 'refused', 'failed'));
