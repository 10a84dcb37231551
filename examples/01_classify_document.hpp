// Example 01's workflow, in a header of its own so that the test suite checks it with the test
// kit (tests/test_kit_examples.cpp: durable::testing::check_crashes) as the program runs it.
//
//   classify_document("doc-42")
//     step        "read"      read the document's text
//     step        "classify"  call an external classification service (billed per call)
//     transaction "store"     write the label into demo.classifications
//
// The workflow reaches the classification service through an interface (a real client in the
// program, a fake that counts calls in a test): a workflow function receives only its journaled
// inputs, so whatever it talks to is reached from outside.
#pragma once

#include <asio/awaitable.hpp>
#include <chrono>
#include <durable.hpp>
#include <functional>
#include <stdexcept>
#include <string>

namespace classify_example {

inline const std::string rule_version = "v1";

// Which step functions really ran in this process. A replayed step returns its journaled result
// without calling its function, so its flag stays false.
struct ran_flags {
  bool read = false;
  bool classify = false;
  bool store = false;
};
inline ran_flags ran;

// ---- the outside world -------------------------------------------------------------------

// Stands in for a document store.
inline std::string read_document(const std::string& id) {
  if (id != "doc-42") throw std::runtime_error("no document " + id);
  return "Invoice INV-0042. Acme Corp, 3 widgets, total EUR 129.00, due 2024-07-31.";
}

// A remote classification API that is slow and billed per call.
class classifier {
public:
  virtual ~classifier() = default;
  virtual asio::awaitable<std::string> classify(std::string idempotency_key, std::string text) = 0;
};

// Set before any workflow runs.
inline classifier* service = nullptr;
// Called once the label is journaled (the demo kills its first run there); may be empty.
inline std::function<void(const std::string& doc, const std::string& text, const std::string& label,
                          const std::string& key)>
    after_classify;

// ---- the workflow ------------------------------------------------------------------------

// On replay this function runs again from the top. Everything that touches the outside world
// goes through a step, so the code between steps may safely run any number of times.
inline asio::awaitable<std::string> classify_document(durable::context& ctx, std::string doc) {
  // Step 0: a plain function. Its result is journaled (as JSON) before the workflow goes on.
  const std::string text = co_await ctx.step("read", [&] {
    ran.read = true;
    return read_document(doc);
  });

  // Step 1: an asynchronous call. The key names the request (document and rule version), not
  // this run: a retry, a replay or another workflow classifying the same document under the
  // same rules sends the same key, so a service that deduplicates on it works only once.
  const std::string key = "classify:" + doc + ":" + rule_version;
  // Its retry policy: up to 5 attempts, 200 ms, 400 ms, ... apart (each +-20 %), each recorded
  // in durable_demo.step_attempts before the next, so a crash continues the count. A
  // permanent_error stops at once; a step that fails for good dead-letters the workflow until
  // someone fixes the cause and calls engine::retry (docs/failures.md).
  const durable::retry policy{
      .max_attempts = 5, .initial = std::chrono::milliseconds(200), .factor = 2.0, .jitter = 0.2};
  const std::string label = co_await ctx.step(
      "classify",
      [&]() -> asio::awaitable<std::string> {
        ran.classify = true;
        co_return co_await service->classify(key, text);
      },
      policy);

  // Here the label is durable: a crash from now on never calls the classifier again. (The demo
  // kills its first run here.)
  if (after_classify) after_classify(doc, text, label, key);

  // Step 2: a transaction step. The INSERT and the step's journal row commit in one database
  // transaction, so the row is written exactly once however the process dies around it.
  // ON CONFLICT DO NOTHING keeps the row unique per rule version across workflows as well.
  co_await ctx.transaction("store", [&](durable::pg::transaction& tx) -> asio::awaitable<void> {
    ran.store = true;
    co_await tx.exec(
        "INSERT INTO demo.classifications (doc_id, rule_version, label) VALUES ($1, $2, $3) "
        "ON CONFLICT (doc_id, rule_version) DO NOTHING",
        doc, rule_version, label);
  });

  co_return label;
}

}  // namespace classify_example
