// durable::compiled: the library's non-template functions, compiled once (see durable/src.hpp).
#include "durable/src.hpp"
