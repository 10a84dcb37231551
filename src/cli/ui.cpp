// durable ui: the web console (durable/console.hpp, docs/console.md) served from this program
// with the session's engine, which is never opened: it runs no workflow, it only reads.
#include <sys/stat.h>

#include <asio/signal_set.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"

#if defined(DURABLE_HAS_CONSOLE)
#include "durable/console.hpp"
#endif

namespace durable_cli {

std::string read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw failure(bad_usage,
                  "--token-file: cannot read '" + one_line(path) + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    std::fprintf(stderr, "durable: warning: others may read the token file '%s'; chmod 600 it\n",
                 one_line(path).c_str());
#if defined(DURABLE_HAS_CONSOLE)
  try {
    return durable::console_token(text.str());
  } catch (const std::invalid_argument& e) {
    throw failure(bad_usage, "--token-file " + one_line(path) + ": " + e.what());
  }
#else
  return text.str();
#endif
}

#if defined(DURABLE_HAS_CONSOLE)
durable::console_options console_options_of(const ui_args& a, double lease_s) {
  const auto where = parse_listen(a.listen);
  durable::console_options o;
  o.address = where.address().to_string();
  o.port = where.port();
  o.allowed_hosts = a.allowed_hosts;
  o.lease_s = lease_s;
  if (!a.token_file.empty()) o.token = read_token_file(a.token_file);
  o.read_only = a.read_only;
  o.secure_cookie = a.secure_cookie;
  o.max_scan = a.max_scan;
  const double limit_s = require_duration("--query-timeout", a.query_timeout);
  if (limit_s < 0.001 || limit_s > 3600)
    throw failure(bad_usage, "--query-timeout: '" + one_line(a.query_timeout) +
                                 "' is not between 1 ms and 1 hour");
  o.query_timeout = std::chrono::milliseconds(std::int64_t(limit_s * 1000));
  return o;
}
#endif

int cmd_ui(session& s, double lease_s, const ui_args& a) {
#if defined(DURABLE_HAS_CONSOLE)
  const auto& listen = a.listen;
  durable::console_options o = console_options_of(a, lease_s);
  // The database first: a wrong URL or a missing schema is said now, not on the first page.
  (void)s.rows(s.st().admin_stats(lease_s));
  const bool actions = !o.read_only && !o.token.empty();
  durable::console c(s.io, s.eng, std::move(o));
  try {
    c.start();
  } catch (const std::exception& e) {
    throw failure(not_done, "--listen " + one_line(listen) + ": " + e.what());
  }
  // On stdout, flushed: scripts (and the browser tests) read the address from it, port 0 too.
  std::printf("durable: the console is at %s (%s; Ctrl-C stops it)\n", c.url().c_str(),
              actions       ? "actions need the token: sign in on the page"
              : a.read_only ? "read-only"
                            : "read-only: no --token-file");
  std::fflush(stdout);
  asio::signal_set stop(s.io, SIGINT, SIGTERM);
  stop.async_wait([&](const asio::error_code&, int) {
    c.stop();
    s.io.stop();
  });
  s.io.restart();
  s.io.run();
  return done;
#else
  (void)s, (void)lease_s, (void)a;
  throw failure(not_done,
                "this durable was built without the web console (CMake did not find RESTinio; "
                "Debian: apt-get install librestinio-dev, then rebuild)");
#endif
}

}  // namespace durable_cli
