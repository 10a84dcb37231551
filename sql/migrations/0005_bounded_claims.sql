-- bounded claims, executor instances

-- I9: a claim that finds no journal row added since the previous claim counts as a
-- claim without progress; past the engine's limit the claim parks the workflow.
ALTER TABLE :"schema".workflows
  ADD COLUMN stalled_claims integer NOT NULL DEFAULT 0,
  ADD COLUMN progress_mark  integer NOT NULL DEFAULT 0,
  ADD COLUMN last_error     text;

-- The process that holds an executor id now (a random token per engine), so that a
-- second live process with the same id is refused instead of fighting over work.
ALTER TABLE :"schema".executors ADD COLUMN instance text NOT NULL DEFAULT '';
