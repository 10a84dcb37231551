// Running test code in several real processes that start at the same moment.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace test {

/// The exit code of `pid`, 128 + signal if killed, or -1 (after killing it) if it runs longer
/// than `seconds`.
inline int wait_exit(pid_t pid, int seconds) {
  int status = 0;
  for (int i = 0; i < seconds * 100; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ::usleep(10000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

/// Runs `body()` (which returns an exit code) in a child process of its own and returns the
/// child's pid to the parent. An exception leaves the child with exit code 1 and its message on
/// standard error after `who`.
template <class Body>
pid_t spawn_process(const std::string& who, Body body) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int code = 1;
  try {
    code = body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
  }
  ::_exit(code);
}

/// Lets a child block until the parent releases every child at once.
struct start_gate {
  int fd;
  [[nodiscard]] bool wait() const {
    char byte;
    return ::read(fd, &byte, 1) == 1;
  }
};

/// Forks `n` children running `child(index, gate) -> exit code`, releases them together, and
/// returns their exit codes (128 + signal for a child that was killed).
template <class Child>
std::vector<int> run_together(int n, Child child) {
  int go[2];
  if (::pipe(go) != 0) return {};
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      int code = 1;
      try {
        code = child(i, start_gate{go[0]});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d failed: %s\n", i, e.what());
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  for (int i = 0; i < n; ++i) (void)!::write(go[1], "g", 1);
  ::close(go[1]);
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid)
      codes.push_back(-1);
    else
      codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

}  // namespace test
