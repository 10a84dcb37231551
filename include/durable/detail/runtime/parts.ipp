// The engine's runtime parts, each in a file of its own, each started by open() under the
// supervisor (see docs/architecture.md#runtime-parts):
//   runner       claims, loads, replays and finishes runs (runner.ipp)
//   lease keeper registration and heartbeat (lease_keeper.ipp)
//   maintenance  takeover, orphans, due wake-ups (maintenance.ipp)
//   dispatcher   queued workflows within their queues' limits (dispatcher.ipp)
//   listener     LISTEN, with polling as the fallback (listener.ipp)
//   journal      what runs reach PostgreSQL through (engine_journal.ipp)
// The group committer is detail/group_commit.hpp. Included only by impl/engine.ipp and
// impl/metrics_server.ipp.
#pragma once

#include "durable/detail/runtime/dispatcher.ipp"
#include "durable/detail/runtime/engine_journal.ipp"
#include "durable/detail/runtime/lease_keeper.ipp"
#include "durable/detail/runtime/listener.ipp"
#include "durable/detail/runtime/maintenance.ipp"
#include "durable/detail/runtime/runner.ipp"
#include "durable/detail/runtime/supervisor.ipp"
