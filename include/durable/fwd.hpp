// Forward declarations of durable's public types, for a header that only passes them around
// (takes an engine&, returns a workflow_handle, stores an engine_options*). Include the full
// headers (durable.hpp, or durable/engine.hpp and durable/context.hpp) where they are used.
#pragma once

namespace durable {

// durable/engine.hpp
class engine;
class workflow_handle;

// durable/context.hpp
class context;
class child_handle;
struct retry;
struct step_info;

// durable/options.hpp
struct engine_options;
struct start_options;
struct enqueue_options;
struct queue_options;
struct engine_stats;
struct workflow_status;

// durable/events.hpp, durable/metrics.hpp
struct event;
struct engine_metrics;
struct queue_depth;

// durable/codec.hpp: specialize codec<T> (template <> struct durable::codec<T>) to journal a T
template <class T, class Enable = void>
struct codec;

// durable/error.hpp
class error;
class codec_error;
class workflow_error;
class step_failed;
class permanent_error;
class step_timeout;
class workflow_dead_letter;
class workflow_cancelled;
class nondeterminism_error;
class ownership_lost;
class workflow_conflict;
class duplicate_workflow;
class workflow_failed;
class workflow_parked;
class journal_limit_exceeded;
class value_too_large;

namespace pg {
// durable/pg/connection.hpp, durable/pg/pool.hpp
class connection;
class transaction;
class pool;
struct statement;
}  // namespace pg

}  // namespace durable
