// The separately compiled part of durable: every non-template function the headers declare when
// DURABLE_SEPARATE_COMPILATION is defined. Include this file in exactly one .cpp of the program
// (compiled, like every other, with DURABLE_SEPARATE_COMPILATION defined), as with Asio's
// asio/impl/src.hpp; or link the CMake target durable::compiled, which is that .cpp
// (src/durable.cpp). See docs/getting-started.md, "Separate compilation".
#pragma once

#if !defined(DURABLE_SEPARATE_COMPILATION)
#error \
    "durable/src.hpp is for DURABLE_SEPARATE_COMPILATION builds; header-only builds need no source"
#endif

#include "durable.hpp"
#include "durable/detail/replay/memory_journal.hpp"
#include "durable/metrics_server.hpp"
#include "durable/testing/check_crashes.hpp"
#include "durable/testing/harness.hpp"

// GCC 12 gives the frame of a coroutine with external linkage that holds a local type (a
// lambda, a local struct) -Wsubobject-linkage, which the same coroutine declared inline never
// gets; the frame is private to the coroutine, so the warning is moot here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsubobject-linkage"
#endif

#include "durable/detail/impl/group_commit.ipp"
#include "durable/detail/impl/run_state.ipp"
#include "durable/detail/replay/impl/cursor.ipp"
#include "durable/detail/replay/impl/memory_journal.ipp"
#include "durable/impl/context.ipp"
#include "durable/impl/cron.ipp"
#include "durable/impl/engine.ipp"
#include "durable/impl/metrics_server.ipp"
#include "durable/impl/prometheus.ipp"
#include "durable/impl/store.ipp"
#include "durable/pg/impl/connection.ipp"
#include "durable/pg/impl/error.ipp"
// The harness before check_crashes, which uses its helpers (a block of its own: kept in order).
#include "durable/testing/impl/harness.ipp"

#include "durable/testing/impl/check_crashes.ipp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
