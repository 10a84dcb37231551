// Package smoke test through durable::compiled: the headers declare, libdurable.a defines.
#include "../checks.hpp"

int main() { return check_package(); }
