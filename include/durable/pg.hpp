// Asynchronous PostgreSQL on Asio: connections, pipelines, transactions, pool, LISTEN/NOTIFY.
#pragma once

#include "durable/pg/classify.hpp"
#include "durable/pg/connection.hpp"
#include "durable/pg/error.hpp"
#include "durable/pg/pool.hpp"
#include "durable/pg/result.hpp"
#include "durable/pg/traits.hpp"
