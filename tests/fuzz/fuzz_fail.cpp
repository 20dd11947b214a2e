#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/fuzz_target.hpp"

void bigtrain_fuzz_fail(const char* what, const char* detail) {
  std::fprintf(stderr, "fuzz target invariant broken: %s\n  %s\n", what, detail);
  std::fflush(stderr);
  std::abort();
}
