// durable's version, as in CMakeLists.txt's project() (CMake checks at configure time that they
// agree). DURABLE_VERSION is one number, major * 10000 + minor * 100 + patch (as fmt's
// FMT_VERSION): 0.1.0 is 100, 1.2.3 is 10203; compare it with #if DURABLE_VERSION >= 10203.
#pragma once

#define DURABLE_VERSION_MAJOR 0
#define DURABLE_VERSION_MINOR 1
#define DURABLE_VERSION_PATCH 0
#define DURABLE_VERSION \
  (DURABLE_VERSION_MAJOR * 10000 + DURABLE_VERSION_MINOR * 100 + DURABLE_VERSION_PATCH)
