// The web console (docs/console.md): pages for the people on call, served over HTTP from the
// application's own process or from `durable ui`. Compiled separately (the durable::console
// target, src/console/); this header pulls in no HTTP library.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace asio {
class io_context;
}

namespace durable {

class engine;

struct console_options {
  /// Where to listen. Loopback by default: the console shows inputs and outputs of workflows.
  std::string address = "127.0.0.1";
  /// 0: any free port (port() says which).
  std::uint16_t port = 8080;
  /// Host headers accepted besides the loopback names and `address` (a reverse proxy's public
  /// name, for example); "*" accepts any. A request naming another host is refused, which keeps
  /// a page on another site from reaching a loopback console through DNS rebinding.
  std::vector<std::string> allowed_hosts;
  /// An executor whose heartbeat is older than this counts as dead on the pages (seconds).
  double lease_s = 30;
  /// Rows per page of the workflow list at most (a request for more is refused).
  std::int64_t max_page = 500;
  /// Rows of each status one list request or bulk count reads at most from the index of a
  /// status (workflows_status_created). A filter on name, queue, executor or id prefix that
  /// matches few of them stops there: the page says how far back it has searched and its next
  /// page goes on from there (exact, nothing skipped); a bulk count that would need more is
  /// refused with a request to narrow the filter. 100 000 reads in about 70 ms here.
  std::int64_t max_scan = 100000;
  /// Requests that use the database at once at most; the others wait their turn. The console
  /// shares the engine's pool: this keeps open tabs from taking it from the workflows.
  std::size_t max_queries = 2;
  /// How long one of the console's statements may take: past it, the statement is cancelled and
  /// the request answered 503 ("the database is not answering"), and an open page keeps its data
  /// with a banner that says as of when. Its own reads, counts and audit rows; an action's
  /// statements are the engine's, under the engine's connection_options::statement_timeout.
  std::chrono::milliseconds query_timeout{std::chrono::seconds(5)};
  /// The token that actions need (cancel, retry, bulk, pause, ...): sent as
  /// `Authorization: Bearer <token>`, or typed once in the sign-in form, which opens a session
  /// (an HttpOnly cookie). At least 16 printable characters. Empty: no actions, the pages are
  /// read-only.
  std::string token;
  /// Serve the pages without any action, even with a token.
  bool read_only = false;
  /// Mark the session cookie Secure (the console is reached through HTTPS, behind a proxy).
  bool secure_cookie = false;
};

/// A token as read from a file: without surrounding white space (a final newline). Throws
/// std::invalid_argument when it has fewer than 16 characters or holds a space or a control
/// character.
std::string console_token(std::string_view text);

/// Serves the console on `io` with the statements and the pool of `eng` (an engine opened by
/// the application, or one that is never opened, as `durable ui` uses). Actions need
/// `options.token`; every action leaves a row in the audit table.
/// The engine and the io_context must outlive the console.
class console {
public:
  console(asio::io_context& io, engine& eng, console_options options = {});
  ~console();
  console(const console&) = delete;
  console& operator=(const console&) = delete;

  /// Binds and listens; call it before `io` runs or on its thread. Throws std::runtime_error
  /// when the address cannot be bound (in use, not local) and std::invalid_argument for an
  /// address that is not an IP address or a token that is too short.
  void start();
  /// Stops listening; call it on the io_context's thread (or when it does not run), before the
  /// engine's shutdown(). Requests in flight stop at their next wait and are answered 503, as is
  /// any request that arrives on a connection still open, which is then closed; an idle
  /// connection closes within 10 s. The destructor stops too.
  void stop();
  /// The port it listens on (after start()).
  [[nodiscard]] std::uint16_t port() const noexcept;
  /// http://address:port/
  [[nodiscard]] std::string url() const;

private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace durable
