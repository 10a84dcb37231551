// What every package consumer (find_package_consumer/, subdirectory_consumer/) checks: the public
// header compiles and links, the codec works without a database, and (when the build says which)
// the package's version is the headers'.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <durable.hpp>
#include <durable/store.hpp>  // not in the umbrella: the library's machinery

inline int check_package() {
  const std::string got = durable::encode(std::vector<int>{1, 2, 3}).dump();
  const std::string want = "[1,2,3]";
  std::printf("%s\n", got.c_str());
  if (got != want) {
    std::fprintf(stderr, "durable::encode(std::vector<int>{1, 2, 3}).dump() gave %s, expected %s\n",
                 got.c_str(), want.c_str());
    return 1;
  }
  // Defined in durable::compiled when DURABLE_SEPARATE_COMPILATION is set: this links only if
  // the library does.
  if (durable::store::latest_version() < 1) {
    std::fprintf(stderr, "durable::store::latest_version() gave %d\n",
                 durable::store::latest_version());
    return 1;
  }
#ifdef DURABLE_PACKAGE_VERSION
  // The installed package's version (find_package) is the one the headers state.
  const std::string header_version = std::to_string(DURABLE_VERSION_MAJOR) + "." +
                                     std::to_string(DURABLE_VERSION_MINOR) + "." +
                                     std::to_string(DURABLE_VERSION_PATCH);
  if (header_version != DURABLE_PACKAGE_VERSION) {
    std::fprintf(stderr, "durable/version.hpp says %s, the package says %s\n",
                 header_version.c_str(), DURABLE_PACKAGE_VERSION);
    return 1;
  }
#endif
  return 0;
}
