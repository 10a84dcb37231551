// Example 04: a workflow's spans written as an OTLP/JSON file (docs/tracing.md).
//
// The engine's span hook (engine_options::on_span) hands each span to this program when it
// starts and when it ends; the ended ones are kept and, once the workflow has finished, written
// as one OTLP/JSON ExportTraceServiceRequest: the format an OpenTelemetry Collector's file
// receiver, or `otlp` HTTP endpoints with Content-Type application/json, read. The workflow is
// started in the trace of an incoming request (its traceparent), retries a step once, starts a
// child workflow and waits for a message, so the file holds every kind of span.
//
// Usage: 04_otlp_trace [file]   (default durable-trace.json)
// Database: DURABLE_DATABASE_URL (a libpq URL or conninfo string); unset or empty means libpq's
// PG* environment variables. The program uses the schema `durable_demo_trace` and drops it first.

#include <fmt/core.h>

#include <chrono>
#include <cstdlib>
#include <durable.hpp>
#include <exception>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

int declines = 0;  // the card is declined once: the charge step is retried

asio::awaitable<std::string> receipt(durable::context& ctx, int cents) {
  co_return co_await ctx.step("render", [cents] { return fmt::format("paid {} cents", cents); });
}

asio::awaitable<std::string> order(durable::context& ctx, int cents) {
  co_await ctx.step("reserve", [] { return true; });
  const durable::retry twice{.max_attempts = 2, .initial = std::chrono::milliseconds(10)};
  const int paid = co_await ctx.step(
      "charge",
      [cents] {
        if (declines++ == 0) throw std::runtime_error("card declined, try again");
        return cents;
      },
      twice);
  auto child = co_await ctx.start_child("receipt", paid);
  const std::string text = co_await child.result<std::string>();
  const auto shipped = co_await ctx.recv<std::string>("shipped", std::chrono::seconds(30));
  co_return text + ", shipped by " + shipped.value_or("nobody");
}

/// Nanoseconds since the Unix epoch, as OTLP/JSON writes 64-bit integers: a decimal string.
std::string unix_nanos(std::chrono::system_clock::time_point t) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

nlohmann::json attribute(const std::string& key, const nlohmann::json& value) {
  nlohmann::json v;
  if (value.is_number_integer())
    v["intValue"] = std::to_string(value.get<long long>());  // int64: a string too
  else
    v["stringValue"] = value;
  return {{"key", key}, {"value", v}};
}

/// One ended span as an OTLP/JSON Span (ids as lowercase hex, as OTLP/JSON has them).
nlohmann::json otlp_span(const durable::span& sp) {
  const std::string kind(durable::to_string(sp.kind));
  std::string name = kind + " " + std::string(sp.name);
  if (sp.kind == durable::span_kind::attempt) name += " #" + std::to_string(sp.attempt);
  nlohmann::json attributes =
      nlohmann::json::array({attribute("durable.workflow.id", std::string(sp.workflow_id)),
                             attribute("durable.workflow.name", std::string(sp.workflow_name)),
                             attribute("durable.epoch", sp.epoch)});
  if (sp.step >= 0) attributes.push_back(attribute("durable.step", sp.step));
  if (!sp.step_kind.empty())
    attributes.push_back(attribute("durable.step.kind", std::string(sp.step_kind)));
  if (sp.attempt > 0) attributes.push_back(attribute("durable.attempt", sp.attempt));
  nlohmann::json s = {{"traceId", std::string(sp.trace_id)},
                      {"spanId", std::string(sp.span_id)},
                      {"name", name},
                      {"kind", 1},  // SPAN_KIND_INTERNAL
                      {"startTimeUnixNano", unix_nanos(sp.start)},
                      {"endTimeUnixNano", unix_nanos(sp.end)},
                      {"attributes", attributes}};
  if (!sp.parent_id.empty()) s["parentSpanId"] = std::string(sp.parent_id);
  if (sp.failed)
    s["status"] = {{"code", 2}, {"message", std::string(sp.error)}};  // STATUS_CODE_ERROR
  else
    s["status"] = {{"code", 1}};  // STATUS_CODE_OK
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "durable-trace.json";
  // The request that starts the order came with this trace context (W3C headers).
  const std::string traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  asio::io_context io;
  std::vector<nlohmann::json> spans;  // ended ones; the hook runs on the io_context's thread
  int status = 0;
  try {
    durable::engine_options options;
    if (const char* url = std::getenv("DURABLE_DATABASE_URL")) options.conninfo = url;
    options.schema = "durable_demo_trace";
    options.on_span = [&spans](const durable::span& sp) {
      if (sp.ended && sp.sampled) spans.push_back(otlp_span(sp));  // the caller's sampling
    };
    durable::engine eng(io.get_executor(), options);
    eng.register_workflow("order", &order);
    eng.register_workflow("receipt", &receipt);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto c = co_await durable::pg::connection::connect(options.conninfo);
          co_await c->exec("DROP SCHEMA IF EXISTS durable_demo_trace CASCADE");
          (void)co_await eng.open();
          const auto context = durable::trace_context::from_headers(traceparent, "");
          durable::start_options so;
          so.traceparent = context->traceparent;
          auto h = co_await eng.start(so, "order", "order-7", 1250);
          (void)co_await eng.send("order-7", "shipped", std::string("DHL"));
          const std::string out = co_await h.result<std::string>();
          fmt::print("{}: {}\n", h.id(), out);
          co_await eng.shutdown();
        },
        [&status](std::exception_ptr e) {
          if (!e) return;
          status = 1;
          try {
            std::rethrow_exception(e);
          } catch (const std::exception& x) {
            fmt::print(stderr, "error: {}\n", x.what());
          }
        });
    io.run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    status = 1;
  }
  if (status != 0) return status;
  const nlohmann::json request = {
      {"resourceSpans",
       nlohmann::json::array(
           {{{"resource",
              {{"attributes",
                nlohmann::json::array({attribute("service.name", "durable-example-04")})}}},
             {"scopeSpans",
              nlohmann::json::array({{{"scope", {{"name", "durable"}}}, {"spans", spans}}})}}})}};
  std::ofstream(path) << request.dump(2) << "\n";
  fmt::print("{} spans written to {} (trace {})\n", spans.size(), path, traceparent.substr(3, 32));
  return spans.empty() ? 1 : 0;
}
