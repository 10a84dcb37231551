// What a translation unit pays that only names durable::context& (a helper that takes the
// workflow's context and passes it on): durable/fwd.hpp declares it. scripts/compile-cost
// --file bench/compile_context_ref.cpp measures it (docs/performance.md#compile-cost).
#include <durable/fwd.hpp>

int pass_on(durable::context& ctx);
int forward(durable::context& ctx) { return pass_on(ctx); }
