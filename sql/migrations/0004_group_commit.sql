-- group commit of journal rows

-- Many journal rows in one statement, fenced row by row (I3): a row is written only
-- while its workflow is owned under the row's epoch, checked under FOR SHARE (a
-- takeover in progress is waited for, and its new epoch then excludes the row).
-- Returns the rows written; a missing row was fenced out. The lateral lookup keeps
-- it one index probe per row whatever the table's size, and the generic plan is
-- forced: with array parameters the planner would otherwise plan every call anew.
CREATE FUNCTION :"schema".append_steps(
    p_workflow_ids text[], p_epochs bigint[], p_seqs integer[], p_names text[], p_kinds text[],
    p_statuses text[], p_outputs jsonb[], p_errors jsonb[], p_attempts integer[],
    p_started_at double precision[])
  RETURNS TABLE (written_id text, written_seq integer)
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan
  SET search_path = pg_catalog, :"schema", pg_temp AS $fn$
BEGIN
  RETURN QUERY
  INSERT INTO steps AS s (workflow_id, seq, name, kind, status, output, error, attempts,
                              epoch, started_at)
  SELECT r.workflow_id, r.seq, r.name, r.kind, r.status, r.output, r.error, r.attempts, r.epoch,
         to_timestamp(r.started_at)
    FROM unnest(p_workflow_ids, p_epochs, p_seqs, p_names, p_kinds, p_statuses, p_outputs,
                p_errors, p_attempts, p_started_at)
           AS r(workflow_id, epoch, seq, name, kind, status, output, error, attempts, started_at),
         LATERAL (SELECT FROM workflows w
                   WHERE w.id = r.workflow_id AND w.epoch = r.epoch FOR SHARE) AS owned
  RETURNING s.workflow_id, s.seq;
END
$fn$;
