-- admin_queue_known
-- $1 name text
--
-- Whether queue $1 is known: 1 when it has a row in queues (limits, a pause) or a workflow was
-- ever enqueued on it (an index probe of workflows_queue_started), else 0. The console and the
-- CLI refuse to pause or resume a name that is neither unless told to create it: a typo would
-- otherwise pause a queue nobody uses while the real one goes on dispatching.
SELECT (EXISTS (SELECT 1 FROM :"schema".queues q WHERE q.name = $1::text)
        OR EXISTS (SELECT 1 FROM :"schema".workflows w WHERE w.queue = $1::text))::int::bigint
