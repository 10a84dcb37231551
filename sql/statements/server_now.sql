-- server_now
--
-- The server's clock now (Unix seconds, fractional): what schedules count from, whatever the
-- clock of the host that asks.
SELECT extract(epoch FROM now())::double precision
