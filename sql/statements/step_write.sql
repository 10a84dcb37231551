-- step_write
-- $1 workflow_id text
-- $2 epoch bigint
-- $3 seq integer
-- $4 name text
-- $5 kind text
-- $6 status text
-- $7 output jsonb (sent as JSON text), null allowed
-- $8 error jsonb (sent as JSON text), null allowed
-- $9 attempts integer
-- $10 started_at double precision
--
-- A step's journal row, fenced by the epoch in the same statement (I3). The workflow's row is
-- locked FOR KEY SHARE, the weakest row lock: a claim (an UPDATE of the epoch, which takes no
-- key lock) does not wait for it, but a claim that committed after this statement began is
-- seen (READ COMMITTED re-reads a locked row's latest version), so the row is inserted only
-- while the workflow is owned under $2, else nothing is inserted (fenced out). A claim still in
-- progress does not make this statement wait: its row may then land after the taker loaded the
-- journal, and the primary key refuses the taker's row for that step (23505; the taker claims
-- the workflow again and replays this row). What deletes the journal (continue_as_new, FOR
-- UPDATE; retention's DELETE) waits for this row's commit, so that a late row cannot land in
-- the next generation's journal. Plain steps take this statement; a transactional step, a
-- message and an event keep append_step(), whose FOR SHARE makes a claim wait for them.
-- $1 id, $2 epoch, $3 seq, $4 name, $5 kind, $6 status, $7 output, $8 error,
-- $9 attempts, $10 started_at (epoch seconds)
INSERT INTO :"schema".steps (workflow_id, seq, name, kind, status, output, error, attempts, epoch,
                             started_at)
SELECT w.id, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9, w.epoch,
       to_timestamp($10::double precision)
  FROM :"schema".workflows w
 WHERE w.id = $1 AND w.epoch = $2
   FOR KEY SHARE
