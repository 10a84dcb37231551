// Package smoke test: the public header compiles and links through durable::compiled from a
// vendored source tree, and the codec works without a database.
#include <cstdio>
#include <string>
#include <vector>

#include <durable.hpp>
#include <durable/store.hpp>  // not in the umbrella: the library's machinery

int main() {
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
  return 0;
}
