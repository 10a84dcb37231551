// Example 01: a workflow that survives a crash without calling an external service twice.
//
//   classify_document("doc-42")
//     step        "read"      read the document's text
//     step        "classify"  call an external classification service, which records (and
//                             would bill) every call it receives
//     transaction "store"     write the label into demo.classifications
//
// The program forks itself into two runs, as if a server crashed and restarted:
//
//   run 1  starts the workflow and is killed with SIGKILL right after the "classify" step is
//          journaled, before "store" runs;
//   run 2  is a fresh process with the same executor id. engine::open() finds the unfinished
//          workflow and resumes it: the workflow function runs again from the top, but "read"
//          and "classify" return their journaled results without running, so the service has
//          been called once in total; "store" runs for the first time.
//
// The workflow is in 01_classify_document.hpp, which the test suite also checks with the test
// kit (crashed at every step, docs/testing.md).
//
// Run 2 then checks all of that and prints the journal. The program exits with 0 and prints OK
// only if every expectation holds.
//
// Database: DURABLE_DATABASE_URL (a libpq URL or conninfo string); unset or empty means libpq's
// PG* environment variables. The program drops and recreates the schemas `demo` (the
// application's tables) and `durable_demo` (the engine's journal), so it can run again and again.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/core.h>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/this_coro.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <durable.hpp>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "01_classify_document.hpp"

namespace {

using classify_example::ran;

const std::string doc_id = "doc-42";
// open() resumes the unfinished workflows owned by this id, so it must stay the same across
// restarts of the same process slot (the default is the host name).
const std::string executor_id = "demo-executor";
// The engine's tables (the journal) live in this schema; see engine_options::schema.
const std::string journal_schema = "durable_demo";
// Fault injection: set for run 1 only.
const char* const crash_env = "DURABLE_DEMO_CRASH_AFTER_CLASSIFY";

std::string tag;  // "[run N] pid P", the prefix of this process's output lines

// ---- the outside world -------------------------------------------------------------------

// The classification service, standing in for a remote API: it records every call it receives,
// through its own connection and transaction as a remote system would, so the demo can count
// the calls afterwards. A real service would also deduplicate on the key.
class classifier_service final : public classify_example::classifier {
public:
  explicit classifier_service(durable::pg::pool& pool) : pool_(pool) {}

  asio::awaitable<std::string> classify(std::string idempotency_key, std::string text) override {
    auto conn = co_await pool_.acquire();
    co_await conn->exec("INSERT INTO demo.classifier_calls (idempotency_key) VALUES ($1)",
                        idempotency_key);
    // A request the service can never answer is permanent: retrying it would only bill again.
    if (text.empty()) throw durable::permanent_error("classifier: HTTP 400, empty document");
    std::string label = "other";
    if (text.starts_with("Invoice")) label = "invoice";
    co_return label;
  }

private:
  durable::pg::pool& pool_;
};

// Run 1 kills itself once the label is journaled.
void crash_after_classify(const std::string& doc, const std::string& text, const std::string& label,
                          const std::string& key) {
  if (const char* crash = std::getenv(crash_env); !crash || std::string_view(crash) != "1") return;
  fmt::print(
      "{}: read {} ({} chars), classified as \"{}\" (classifier called with key {}), "
      "journaled; now SIGKILL\n",
      tag, doc, text.size(), label, key);
  std::fflush(stdout);
  ::raise(SIGKILL);  // no destructors, no cleanup: as hard as a crash gets
}

// ---- the two runs ------------------------------------------------------------------------

durable::engine_options demo_options() {
  durable::engine_options o;
  if (const char* url = std::getenv("DURABLE_DATABASE_URL")) o.conninfo = url;
  o.schema = journal_schema;
  o.executor_id = executor_id;
  return o;
}

// Makes the demo repeatable: fresh application tables, and no journal from an earlier run.
asio::awaitable<void> reset_database(durable::pg::pool& pool) {
  std::vector<durable::pg::statement> batch;
  batch.push_back(durable::pg::sql("SET client_min_messages = warning"));  // no NOTICEs on DROP
  batch.push_back(durable::pg::sql("DROP SCHEMA IF EXISTS durable_demo CASCADE"));
  batch.push_back(durable::pg::sql("DROP SCHEMA IF EXISTS demo CASCADE"));
  batch.push_back(durable::pg::sql("CREATE SCHEMA demo"));
  batch.push_back(
      durable::pg::sql("CREATE TABLE demo.classifier_calls (idempotency_key text, called_at "
                       "timestamptz DEFAULT now())"));
  batch.push_back(durable::pg::sql(
      "CREATE TABLE demo.classifications (doc_id text, rule_version text, label text, "
      "UNIQUE (doc_id, rule_version))"));
  auto conn = co_await pool.acquire();
  co_await conn->run_batch(std::move(batch));  // one round trip, one transaction
}

// Run 1: start the workflow; it kills this process after the "classify" step.
asio::awaitable<int> first_run() {
  auto ex = co_await asio::this_coro::executor;
  durable::engine eng(ex, demo_options());
  classifier_service service(eng.pool());
  classify_example::service = &service;
  classify_example::after_classify = crash_after_classify;
  eng.register_workflow("classify_document", &classify_example::classify_document);

  co_await reset_database(eng.pool());
  co_await eng.open();  // creates the journal schema; nothing to resume yet
  // The workflow id is its idempotency key: starting "doc-42" again returns the same workflow.
  auto handle = co_await eng.start("classify_document", doc_id, doc_id);
  fmt::print("{}: started workflow {} as executor {}\n", tag, handle.id(), eng.executor_id());
  co_await handle.result<std::string>();  // does not return: the workflow kills the process
  co_return 1;
}

// Run 2: a restart. Same code path as any start-up: open(), then start() the same id.
asio::awaitable<int> second_run() {
  auto ex = co_await asio::this_coro::executor;
  durable::engine eng(ex, demo_options());
  classifier_service service(eng.pool());
  classify_example::service = &service;
  classify_example::after_classify = crash_after_classify;
  eng.register_workflow("classify_document", &classify_example::classify_document);

  // Resumes by replay every unfinished workflow this executor id owns: here doc-42.
  const std::size_t resumed = co_await eng.open();
  fmt::print("{}: open() as executor {} resumed {} unfinished workflow(s)\n", tag,
             eng.executor_id(), resumed);
  // doc-42 exists, with the same inputs: start() returns a handle to it and runs nothing new.
  auto handle = co_await eng.start("classify_document", doc_id, doc_id);
  const std::string label = co_await handle.result<std::string>();

  auto how = [](bool really_ran) { return really_ran ? "executed" : "replayed"; };
  const auto stats = eng.stats();
  fmt::print("{}: workflow {} finished by replay: read={}, classify={}, store={} -> \"{}\"\n", tag,
             handle.id(), how(ran.read), how(ran.classify), how(ran.store), label);

  auto conn = co_await eng.pool().acquire();
  auto calls =
      co_await conn->exec("SELECT count(*), min(idempotency_key) FROM demo.classifier_calls");
  auto stored = co_await conn->exec(
      "SELECT count(*), min(label) FROM demo.classifications WHERE doc_id = $1", doc_id);
  const long n_calls = calls[0].get<long>(0);
  const long n_rows = stored[0].get<long>(0);
  fmt::print(
      "{}: classifier calls: {} (key {}), rows in demo.classifications for {}: {} (label \"{}\")\n",
      tag, n_calls, calls[0].get<std::optional<std::string>>(1).value_or("-"), doc_id, n_rows,
      stored[0].get<std::optional<std::string>>(1).value_or("-"));

  // The journal is a plain table: one row per step, its result as JSON.
  auto journal = co_await conn->exec(
      "SELECT seq, name, kind, status, output::text FROM durable_demo.steps WHERE workflow_id = $1 "
      "ORDER BY seq",
      doc_id);
  fmt::print("{}: journal ({}.steps):\n", tag, journal_schema);
  fmt::print("  {:<4} {:<9} {:<12} {:<10} {}\n", "seq", "name", "kind", "status", "output");
  std::vector<std::string> steps;
  for (const durable::pg::row r : journal) {
    std::string output = r.get<std::optional<std::string>>(4).value_or("NULL");
    if (output.size() > 40) output = output.substr(0, 37) + "...";
    fmt::print("  {:<4} {:<9} {:<12} {:<10} {}\n", r.get<int>(0), r.text(1), r.text(2), r.text(3),
               output);
    steps.push_back(std::string(r.text(1)) + ":" + std::string(r.text(3)));
  }

  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (ok) return;
    ++failures;
    fmt::print("FAILED: {}\n", what);
  };
  expect(resumed == 1, "open() should resume exactly one workflow");
  expect(label == "invoice", "the workflow should return \"invoice\"");
  expect(!ran.read && !ran.classify, "read and classify should be replayed, not run again");
  expect(ran.store, "store should run in run 2");
  expect(stats.steps_replayed == 2 && stats.steps_executed == 1,
         "engine counters should show 2 steps replayed and 1 executed");
  expect(n_calls == 1, "the classifier should be called exactly once");
  expect(n_rows == 1, "demo.classifications should hold exactly one row for doc-42");
  const std::vector<std::string> expected_steps = {"read:succeeded", "classify:succeeded",
                                                   "store:succeeded"};
  expect(steps == expected_steps,
         "the journal should hold read, classify and store, all succeeded");
  // A process that is done ends its lease, so other executors need not wait for it to expire.
  co_await eng.shutdown(std::chrono::seconds(5));
  co_return failures == 0 ? 0 : 1;
}

// Runs one of the runs on its own io_context; returns the process's exit status.
int run_process(int run) {
  asio::io_context io;
  int rc = 1;
  auto on_done = [&](std::exception_ptr e, int result) {
    io.stop();  // the engine's background loops (heartbeat, dispatch) would keep it running
    if (!e) {
      rc = result;
      return;
    }
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      fmt::print(stderr, "{}: error: {}\n", tag, x.what());
    }
  };
  if (run == 1)
    asio::co_spawn(io, first_run(), on_done);
  else
    asio::co_spawn(io, second_run(), on_done);
  io.run();
  return rc;
}

pid_t spawn_run(int run) {
  std::fflush(stdout);  // or the child would print the parent's buffered output again
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(1);
  }
  if (pid > 0) return pid;
  tag = fmt::format("[run {}] pid {}", run, ::getpid());
  if (run == 1)
    ::setenv(crash_env, "1", 1);
  else
    ::unsetenv(crash_env);
  const int rc = run_process(run);
  std::fflush(stdout);
  std::exit(rc);
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "ended in an unknown way";
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::perror("waitpid");
      std::exit(1);
    }
  }
  return status;
}

}  // namespace

int main() {
  // Each run is a separate process, forked before any io_context exists: a child must not
  // share the parent's epoll instance or sockets. The parent only forks and waits.
  const int first = wait_for(spawn_run(1));
  if (!(WIFSIGNALED(first) && WTERMSIG(first) == SIGKILL)) {
    fmt::print("FAILED: run 1 should be killed by SIGKILL, but it {}\n", describe(first));
    return 1;
  }
  fmt::print("[parent] run 1 killed by SIGKILL\n");

  const int second = wait_for(spawn_run(2));
  if (!(WIFEXITED(second) && WEXITSTATUS(second) == 0)) {
    fmt::print("FAILED: run 2 {}\n", describe(second));
    return 1;
  }
  fmt::print("OK\n");
  return 0;
}
