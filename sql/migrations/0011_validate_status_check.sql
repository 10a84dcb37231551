-- validate the status check of migration 6
-- Migration 6 re-added workflows_status_check as NOT VALID, which takes the table's lock only for
-- a moment. VALIDATE CONSTRAINT scans the table under a SHARE UPDATE EXCLUSIVE lock, which lets
-- reads and writes go on; it runs here, in its own transaction, because in the one of migration 6
-- the lock that DROP CONSTRAINT takes would still be held during the scan. On a database whose
-- check is valid already (one migrated before the check was NOT VALID) it does nothing.
ALTER TABLE :"schema".workflows VALIDATE CONSTRAINT workflows_status_check;
