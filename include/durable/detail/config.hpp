// Header-only or separately compiled: which of the two this build of durable is.
//
// By default durable is header-only: every function is defined (inline) in the headers, and
// every translation unit that uses the engine compiles the engine, the runtime and the
// PostgreSQL connection again. With DURABLE_SEPARATE_COMPILATION defined (on every translation
// unit of the program; the CMake target durable::compiled does it) the headers only declare
// the library's non-template functions, and one translation unit defines them by including
// durable/src.hpp (the target durable::compiled is that translation unit, src/durable.cpp).
// Templates (register_workflow, start, enqueue, context::step, ...) stay in the headers.
// This mirrors Asio's ASIO_SEPARATE_COMPILATION, ASIO_HEADER_ONLY and ASIO_DECL.
#pragma once

#if !defined(DURABLE_SEPARATE_COMPILATION)
#define DURABLE_HEADER_ONLY 1
#endif

// DURABLE_DECL marks a non-template function whose body lives in an .ipp file: inline when
// the .ipp is included at the end of its header (header-only), an ordinary external function
// defined once by durable/src.hpp otherwise.
#if defined(DURABLE_HEADER_ONLY)
#define DURABLE_DECL inline
#else
#define DURABLE_DECL
#endif
