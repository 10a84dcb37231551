-- trace context
-- The W3C trace context of the span that started a workflow (engine::start, enqueue, or a
-- parent's ctx.start_child), kept for its whole life: `traceparent` as
-- 00-<trace id>-<parent span id>-<flags>, `tracestate` the vendors' entries. NULL: started
-- with none. A child's traceparent has its parent's trace id and flags, and as parent span id
-- the span id of the parent's step that started it (docs/tracing.md). The trace id of a
-- workflow in psql: substr(traceparent, 4, 32).
--
-- The checks are added NOT VALID: the columns are new, so every existing row is NULL and
-- passes, and a validating scan would hold the table's lock for nothing. They hold for every
-- row written from now on.
ALTER TABLE :"schema".workflows ADD COLUMN traceparent text, ADD COLUMN tracestate text;
ALTER TABLE :"schema".workflows ADD CONSTRAINT workflows_traceparent_check
  CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
         AND traceparent !~ '^00-0{32}-' AND traceparent !~ '^00-[0-9a-f]{32}-0{16}-') NOT VALID;
ALTER TABLE :"schema".workflows ADD CONSTRAINT workflows_tracestate_check
  CHECK (tracestate IS NULL OR (octet_length(tracestate) <= 512
                                AND tracestate ~ '^[\x20-\x7e]*$' AND traceparent IS NOT NULL))
  NOT VALID;
