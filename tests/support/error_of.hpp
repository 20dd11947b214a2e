#pragma once
// The message of the bigtrain::Error that `f` throws, for tests that check what an
// error names; records a failure (and returns "") when nothing is thrown.
#include <gtest/gtest.h>

#include <string>

#include "kernels/core/error.hpp"

namespace bigtrain::testing {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected a bigtrain::Error";
  return {};
}

}  // namespace bigtrain::testing
