// libFuzzer's entry point for whichever target this executable is linked with.
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return bigtrain_fuzz_one_input(data, size);
}
