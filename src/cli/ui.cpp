// durable ui: the web console (durable/console.hpp, docs/console.md) served from this program
// with the session's engine, which is never opened: it runs no workflow, it only reads.
#include <asio/signal_set.hpp>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"

#if defined(DURABLE_HAS_CONSOLE)
#include "durable/console.hpp"
#endif

namespace durable_cli {

int cmd_ui(session& s, double lease_s, const std::string& listen,
           const std::vector<std::string>& allowed_hosts) {
#if defined(DURABLE_HAS_CONSOLE)
  const auto where = parse_listen(listen);
  // The database first: a wrong URL or a missing schema is said now, not on the first page.
  (void)s.rows(s.st().admin_stats(lease_s));
  durable::console_options o;
  o.address = where.address().to_string();
  o.port = where.port();
  o.allowed_hosts = allowed_hosts;
  o.lease_s = lease_s;
  durable::console c(s.io, s.eng, std::move(o));
  try {
    c.start();
  } catch (const std::exception& e) {
    throw failure(not_done, "--listen " + one_line(listen) + ": " + e.what());
  }
  // On stdout, flushed: scripts (and the browser tests) read the address from it, port 0 too.
  std::printf("durable: the console is at %s (read-only; Ctrl-C stops it)\n", c.url().c_str());
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
  (void)s, (void)lease_s, (void)listen, (void)allowed_hosts;
  throw failure(not_done,
                "this durable was built without the web console (CMake did not find RESTinio; "
                "Debian: apt-get install librestinio-dev, then rebuild)");
#endif
}

}  // namespace durable_cli
