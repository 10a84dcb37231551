// Package smoke test: the public header compiles and links through durable::compiled from a
// vendored source tree, and the codec works without a database.
#include "../checks.hpp"

int main() { return check_package(); }
