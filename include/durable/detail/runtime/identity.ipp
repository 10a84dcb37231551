// Who this executor is: its id, its host, and whether a process on this host is gone.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>

#include "durable/detail/utf8.hpp"

namespace durable::detail {

// ---- identities -----------------------------------------------------------------------------

inline std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !*host) return "localhost";
  return host;
}

/// Random hex digits straight from the system's source: a generator's state would be
/// shared by processes forked from one parent, and so would their "unique" tokens.
inline std::string random_hex(int digits) {
  std::random_device rd;
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < digits; ++i) out += hex[rd() % 16];
  return out;
}

/// $DURABLE_EXECUTOR_ID, else "<host>:<pid>:<random>": unique per process, so that two
/// processes on one host never share an id by accident.
inline std::string default_executor_id() {
  if (const char* e = std::getenv("DURABLE_EXECUTOR_ID"); e && *e) return e;
  return host_name() + ":" + std::to_string(::getpid()) + ":" + random_hex(6);
}

/// True if process `pid` on this host is known to be gone.
inline bool process_gone(int pid) {
  if (pid <= 0) return false;
  if (pid == ::getpid()) return true;  // this process: the engine that held it is gone
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

inline std::string describe(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return valid_utf8(x.what());
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

}  // namespace durable::detail
