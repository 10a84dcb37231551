// An asynchronous PostgreSQL connection on Asio.
//
// libpq runs in non-blocking mode and permanently in pipeline mode; the connection's socket
// is awaited through asio::posix::stream_descriptor, so no call here blocks the thread that
// runs the io_context (host names are resolved with Asio's resolver before libpq connects).
// Every batch of statements ends with one Sync: a batch is one round trip and, unless an
// explicit transaction is open, one implicit transaction.
#pragma once

#include <libpq-fe.h>

#include <asio/awaitable.hpp>

#if !defined(ASIO_HAS_CO_AWAIT)
// Asio 1.22 does not detect C++20 coroutines on Clang 14+; durable::durable defines the macro.
#error "durable needs Asio's co_await support: with Clang, define ASIO_HAS_CO_AWAIT=1"
#endif

#include <algorithm>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "durable/detail/config.hpp"
#include "durable/pg/error.hpp"
#include "durable/pg/result.hpp"
#include "durable/pg/traits.hpp"

namespace durable::pg {

/// A statement and its bound parameters. `text` is SQL, or the name of a prepared statement.
struct statement {
  std::string text;
  std::vector<param_value> params;
  bool prepared = false;
};

namespace detail {
/// `s`, unless a parameter holds a NUL character: libpq sends a text parameter as a C string,
/// so the server would get only the text before the NUL (another id, another queue's name) and
/// act on that. Such a statement is refused before anything is sent, as the server refuses
/// bytes that are not text: character_not_in_repertoire (22021), which is permanent.
inline statement refuse_nul(statement s) {
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    const auto& p = s.params[i];
    const auto at = p ? p->find('\0') : std::string::npos;
    if (at == std::string::npos) continue;
    std::string label = s.text.substr(0, std::min(s.text.find('\n'), std::size_t(60)));
    if (label.size() < s.text.size() && !s.prepared) label += "...";
    throw_sql_error("22021",
                    "parameter $" + std::to_string(i + 1) + " holds a NUL character (at byte " +
                        std::to_string(at) +
                        "), which PostgreSQL text cannot hold: the statement was not sent",
                    std::move(label));
  }
  return s;
}
}  // namespace detail

/// A SQL statement with bound parameters ($1, $2, ...). Values are never spliced into text.
/// A text parameter that holds a NUL character is refused (detail::refuse_nul).
template <class... Args>
[[nodiscard]] statement sql(std::string text, const Args&... args) {
  return detail::refuse_nul(statement{std::move(text), {to_param(args)...}, false});
}

/// A call of a prepared statement by name; a parameter with a NUL is refused, as by sql().
template <class... Args>
[[nodiscard]] statement prepared(std::string name, const Args&... args) {
  return detail::refuse_nul(statement{std::move(name), {to_param(args)...}, true});
}

/// Statement texts a connection prepares on first use, by name (the prepare travels in the
/// same round trip as the first execution).
using statement_catalog = std::map<std::string, std::string, std::less<>>;

struct notification {
  std::string channel;
  std::string payload;
  int backend_pid = 0;
};

/// Counters a test or benchmark reads to prove how much I/O a piece of work cost.
struct connection_stats {
  std::uint64_t round_trips = 0;  ///< batches sent (each ends with one Sync)
  std::uint64_t statements = 0;   ///< statements executed, prepares not counted
};

/// libpq's connect_timeout, when neither the conninfo nor PGCONNECT_TIMEOUT sets one.
inline constexpr std::chrono::seconds default_connect_timeout{10};

/// Settings of a connection that are not part of the conninfo.
struct connection_options {
  /// Deadline of each batch of statements (run, exec, run_batch, a transaction's statements
  /// and its commit), from sending to the last result. A batch without a complete answer by
  /// then is cancelled on the server and fails with statement_timeout. 0 means no deadline.
  std::chrono::milliseconds statement_timeout{std::chrono::seconds(60)};
  /// After a deadline passed and a cancel request was sent, how long to wait for the
  /// server's answer before giving the connection up as broken (a dead network, a frozen
  /// server).
  std::chrono::milliseconds cancel_grace{std::chrono::seconds(5)};
};

class transaction;

class connection {
public:
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() {
    deadline_->owner = nullptr;
    forget_closed_socket();
    if (socket_.is_open()) socket_.release();  // libpq owns the descriptor
    if (conn_) PQfinish(conn_);
  }

  /// Connects with a conninfo string ("host=... dbname=...") or a URL
  /// ("postgresql://user@host/db"); unset fields come from the PG* environment variables.
  ///
  /// Host lists (host=a,b port=1,2, or postgresql://a:1,b:2/db) are tried in order; host
  /// names are resolved without blocking the event loop. connect_timeout (or
  /// PGCONNECT_TIMEOUT; default_connect_timeout if neither is set; 0 = none) bounds each
  /// host's name resolution and each address's connection attempt, authentication included.
  /// TCP keepalives are on (keepalives_idle=60, keepalives_interval=10, keepalives_count=6)
  /// unless the conninfo sets them. Error messages never contain a password.
  [[nodiscard]] static asio::awaitable<std::unique_ptr<connection>> connect(
      std::string conninfo, std::shared_ptr<const statement_catalog> catalog = {},
      connection_options options = {}) {
    return connect_impl(std::move(conninfo), std::move(catalog), options);
  }

  /// Runs one statement in its own round trip.
  template <class... Args>
  [[nodiscard]] asio::awaitable<result> exec(std::string text, const Args&... args) {
    return run(sql(std::move(text), args...));
  }
  [[nodiscard]] asio::awaitable<result> run(statement s) { return run_one(std::move(s)); }

  /// Sends every statement, then one Sync, and reads every result: one round trip.
  /// Outside a transaction the batch is atomic. Throws the first statement's error.
  [[nodiscard]] DURABLE_DECL asio::awaitable<std::vector<result>> run_batch(
      std::vector<statement> batch);

  /// Prepares a statement on this connection now (run() prepares catalog entries lazily).
  [[nodiscard]] asio::awaitable<void> prepare(std::string name, std::string text) {
    return prepare_impl(std::move(name), std::move(text));
  }

  /// Starts a transaction. BEGIN travels with the transaction's first statement.
  [[nodiscard]] DURABLE_DECL transaction begin();

  [[nodiscard]] DURABLE_DECL asio::awaitable<void> listen(std::string_view channel);
  [[nodiscard]] DURABLE_DECL asio::awaitable<void> unlisten(std::string_view channel);
  /// Waits for the next NOTIFY on a channel this connection listens to.
  [[nodiscard]] DURABLE_DECL asio::awaitable<notification> wait_notification();

  /// False after the connection broke; a pool then replaces it.
  [[nodiscard]] bool is_open() const noexcept {
    return conn_ && !broken_ && !in_flight_ && PQstatus(conn_) == CONNECTION_OK;
  }
  [[nodiscard]] PGconn* native_handle() const noexcept { return conn_; }
  [[nodiscard]] const connection_stats& stats() const noexcept { return stats_; }
  [[nodiscard]] int backend_pid() const noexcept { return PQbackendPID(conn_); }
  [[nodiscard]] const connection_options& options() const noexcept { return options_; }
  /// Changes the deadline of the batches sent from now on (0 = none).
  void set_statement_timeout(std::chrono::milliseconds t) noexcept {
    options_.statement_timeout = t;
  }
  /// Ends the socket wait of the batch in progress at once: the batch fails with
  /// operation_aborted, its outcome unknown, and the connection is given up (a pool replaces
  /// it). For a batch that must not outlive a shutdown; does nothing while no batch waits on
  /// the socket (after a statement deadline, the wait for the cancel request's processing ends
  /// within cancel_grace on its own).
  void interrupt() noexcept {
    asio::error_code ignored;
    socket_.cancel(ignored);
  }
  /// Whether a transaction is open (or was left open and awaits its lazy ROLLBACK).
  [[nodiscard]] bool in_transaction() const noexcept {
    return begin_pending_ || rollback_pending_ || PQtransactionStatus(conn_) != PQTRANS_IDLE;
  }

private:
  // Public entry points that take class types by value are plain functions forwarding to
  // these coroutines: GCC 12 miscompiles a prvalue argument passed straight to a coroutine
  // inside a co_await expression (the parameter copy is not move-constructed).
  DURABLE_DECL static asio::awaitable<std::unique_ptr<connection>> connect_impl(
      std::string conninfo, std::shared_ptr<const statement_catalog> catalog,
      connection_options options);
  DURABLE_DECL asio::awaitable<result> run_one(statement s);
  DURABLE_DECL asio::awaitable<void> prepare_impl(std::string name, std::string text);

  friend class transaction;
  explicit connection(asio::any_io_executor ex, PGconn* c,
                      std::shared_ptr<const statement_catalog> catalog, connection_options options)
      : conn_(c), socket_(ex), timer_(ex), catalog_(std::move(catalog)), options_(options) {
    deadline_->owner = this;
  }

  DURABLE_DECL asio::awaitable<std::vector<result>> run_internal(
      std::vector<statement> batch, std::pair<std::string, std::string> explicit_prepare = {});
  DURABLE_DECL asio::awaitable<void> flush();
  DURABLE_DECL asio::awaitable<void> wait_readable();
  DURABLE_DECL asio::awaitable<PGresult*> next_result();
  DURABLE_DECL void send(const statement& s);
  DURABLE_DECL void send_prepare(const std::string& name, const std::string& text);
  [[noreturn]] DURABLE_DECL void fail_lost(std::string_view during);
  /// Once libpq has closed its socket (a lost connection), the descriptor is given up at once:
  /// its number may be reused by the next connection, and giving it up later (in the
  /// destructor) would take that connection's registration out of the reactor, leaving its
  /// waits without wake-ups until their deadline.
  DURABLE_DECL void forget_closed_socket() noexcept;
  DURABLE_DECL void arm_deadline(std::chrono::milliseconds in);
  DURABLE_DECL void disarm_deadline() noexcept;
  DURABLE_DECL void deadline_passed();
  DURABLE_DECL void send_cancel() noexcept;
  /// Waits (at most cancel_grace) until the cancel request sent last has been processed by the
  /// server; false if it was not in time.
  DURABLE_DECL asio::awaitable<bool> cancel_processed();
  DURABLE_DECL std::string statement_label(const statement& s) const;
  DURABLE_DECL std::string quote_identifier(std::string_view id) const;

  PGconn* conn_ = nullptr;
  asio::posix::stream_descriptor socket_;
  asio::steady_timer timer_;
  std::shared_ptr<const statement_catalog> catalog_;
  connection_options options_;
  // The deadline of the batch in flight. The timer's handler may run after this connection
  // is gone, so it reaches the connection only through this shared state (owner is reset by
  // the destructor), and ignores expiries of earlier batches (generation).
  struct deadline_state {
    connection* owner = nullptr;
    std::uint64_t generation = 0;
    bool expired = false;
  };
  std::shared_ptr<deadline_state> deadline_ = std::make_shared<deadline_state>();
  bool cancel_sent_ = false;
  // Set by the thread that sent the last cancel request once the server has processed it (its
  // cancel connection closed); null when none was sent.
  std::shared_ptr<std::atomic<bool>> cancel_done_;
  const std::string* awaiting_ = nullptr;  // label of the statement whose results we await
  std::vector<std::string> prepared_;
  connection_stats stats_;
  bool broken_ = false;
  bool in_flight_ = false;
  bool begin_pending_ = false;
  bool rollback_pending_ = false;
};

/// A transaction on one connection. Commit or roll back explicitly; a transaction that goes
/// out of scope unfinished is rolled back (the ROLLBACK travels with the connection's next
/// statement, so a destructor never blocks).
class transaction {
public:
  explicit transaction(connection& c) noexcept : conn_(&c) { c.begin_pending_ = true; }
  transaction(transaction&& o) noexcept : conn_(std::exchange(o.conn_, nullptr)) {}
  transaction& operator=(transaction&&) = delete;
  ~transaction() { abandon(); }

  template <class... Args>
  [[nodiscard]] asio::awaitable<result> exec(std::string text, const Args&... args) {
    return run(sql(std::move(text), args...));
  }
  [[nodiscard]] asio::awaitable<result> run(statement s) { return active().run(std::move(s)); }
  [[nodiscard]] asio::awaitable<std::vector<result>> run_batch(std::vector<statement> batch) {
    return active().run_batch(std::move(batch));
  }

  /// Runs `last` (e.g. a journal row) and COMMIT in one round trip; returns the results of
  /// `last`. Throws if the transaction had failed (it is then rolled back).
  [[nodiscard]] asio::awaitable<std::vector<result>> commit(std::vector<statement> last = {}) {
    return commit_impl(std::move(last));
  }
  [[nodiscard]] DURABLE_DECL asio::awaitable<void> rollback();

  [[nodiscard]] connection& conn() { return active(); }

private:
  DURABLE_DECL asio::awaitable<std::vector<result>> commit_impl(std::vector<statement> last);
  connection& active() {
    if (!conn_) throw error("transaction already committed or rolled back");
    return *conn_;
  }
  void abandon() noexcept {
    if (!conn_) return;
    if (conn_->begin_pending_)
      conn_->begin_pending_ = false;  // nothing was sent: nothing to roll back
    else
      conn_->rollback_pending_ = true;
    conn_ = nullptr;
  }
  connection* conn_;
};

/// Runs a statement on a connection the application manages itself, blocking the calling
/// thread: for synchronous code with its own PGconn* (e.g. to enqueue a workflow inside the
/// application's transaction). Never call it on an event loop thread.
[[nodiscard]] DURABLE_DECL result exec_blocking(PGconn* conn, const statement& s);

namespace detail {
/// `message` without any password of `conninfo` and without the password of any URL or
/// `password=` setting it quotes; each becomes "***".
DURABLE_DECL std::string redact(std::string message, std::string_view conninfo);
}  // namespace detail

}  // namespace durable::pg

#if defined(DURABLE_HEADER_ONLY)
#include "durable/pg/impl/connection.ipp"
#endif
