#pragma once
// Whether a backend computes conv2d and linear in a mixed-precision type on this
// machine, for tests that skip where it cannot. The CPU's bf16 depends on the
// instruction set (kernels/cpu/isa.hpp): a hardware skip ("hardware: ...").
#include <optional>
#include <string>

#include "kernels/backend.hpp"
#include "kernels/cpu/isa.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::testing {

inline std::optional<std::string> compute_type_unavailable(Backend backend, DType compute_dtype) {
  if (auto why = backend_unavailable(backend)) return why;
  if (backend == Backend::cpu && compute_dtype == DType::bf16)
    if (auto why = kernels::cpu::bf16_unavailable_reason()) return "hardware: " + *why;
  if (!kernels::supports(kernels::Op::conv2d, backend, compute_dtype))
    return kernels::why_unsupported(kernels::Op::conv2d, backend, compute_dtype);
  return std::nullopt;
}

}  // namespace bigtrain::testing

#define BT_SKIP_UNLESS_COMPUTES(backend, compute_dtype)                                                   \
  do {                                                                                                     \
    if (auto bt_skip_reason = ::bigtrain::testing::compute_type_unavailable(backend, compute_dtype))       \
      GTEST_SKIP() << *bt_skip_reason;                                                                     \
  } while (0)
