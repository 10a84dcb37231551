-- workflows by status, newest first
-- The console's workflow list (admin_list.sql) and a bulk action's set (admin_ids.sql) read each
-- status they show from this index, newest first, from the page's cursor: a status that few rows
-- have, or none, is a short probe however large the table is, where the walk of
-- workflows_created looked at every row of the table for it (381 ms at 1 000 000 rows, run Q of
-- docs/performance.md). An unfiltered page merges the statuses' heads (eight short scans), and the
-- overview's chart reads the day's rows status by status, so workflows_created is no longer read
-- and is dropped; so is workflows_stopped, whose counts (parked, dead letters: admin_stats.sql)
-- this index gives as well. A write to `workflows` keeps as many index entries as under
-- migration 13 (one fewer for a parked or dead-lettered row).
-- Like every migration it runs in one transaction: building the index holds off writes to
-- `workflows` for about a second per million rows here.
CREATE INDEX workflows_status_created ON :"schema".workflows (status, created_at, id);
DROP INDEX :"schema".workflows_created;
DROP INDEX :"schema".workflows_stopped;
