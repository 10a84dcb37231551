// Helpers of the chaos cases (test_failover.cpp, test_diskfull.cpp): sizes from the environment,
// durations, shell commands run while the event loop goes on, and the figures' report.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "support/workflows.hpp"

namespace test {

/// The integer in environment variable `name`, or `fallback` when it is unset or empty.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

inline double seconds_between(std::chrono::steady_clock::time_point a,
                              std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// Runs a shell command on a thread while the event loop goes on; returns its exit status.
inline asio::awaitable<int> run_command(const char* command) {
  std::atomic<int> code{-1};
  std::thread th([&] { code = std::system(command); });
  while (code < 0) co_await test::sleep_ms(5);
  th.join();
  co_return code.load();
}

/// Prints a case's figures and appends them to $DURABLE_CHAOS_REPORT when set (scripts/chaos
/// prints that file after the table).
inline void publish_figures(const std::string& figures) {
  std::fputs(figures.c_str(), stdout);
  std::fflush(stdout);
  if (const char* file = std::getenv("DURABLE_CHAOS_REPORT"); file && *file)
    std::ofstream(file, std::ios::app) << figures;
}

}  // namespace test
