// durable: workflows as C++20 coroutines whose steps are journaled in PostgreSQL.
#pragma once

#include "durable/codec.hpp"
#include "durable/context.hpp"
#include "durable/engine.hpp"
#include "durable/error.hpp"
#include "durable/metrics.hpp"
#include "durable/pg.hpp"
#include "durable/prometheus.hpp"
#include "durable/store.hpp"
