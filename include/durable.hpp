// durable: workflows as C++20 coroutines whose steps are journaled in PostgreSQL.
#pragma once

// The store (durable/store.hpp: the schema's migrations and statements) is the library's
// machinery and is not included here; the engine's operations are what an application uses.
#include "durable/codec.hpp"
#include "durable/context.hpp"
#include "durable/cron.hpp"
#include "durable/engine.hpp"
#include "durable/error.hpp"
#include "durable/fwd.hpp"
#include "durable/metrics.hpp"
#include "durable/pg.hpp"
#include "durable/prometheus.hpp"
#include "durable/states.hpp"
#include "durable/version.hpp"
