#pragma once
// Convolution through oneDNN primitives, built once per spec. An object binds the
// caller's buffers into cached oneDNN memory objects on each call, so it serves one
// call at a time (the flow graph's device step is serial); separate objects are
// independent.
#include <memory>
#include <string>

#include "kernels/conv2d.hpp"

namespace bigtrain::kernels::cpu {

std::unique_ptr<Conv2d> make_conv2d(const Conv2dSpec& spec);

// The scratchpads of the primitives make_conv2d(spec) builds, without building them.
Conv2dLibraryScratch conv2d_library_scratch(const Conv2dSpec& spec);

// oneDNN's names of the kernels make_conv2d(spec) runs, e.g. "jit_wino_4x3:avx512_core"
// or "jit:avx2"; the backward ones empty for a fused (forward-only) spec.
struct ConvImplementations {
  std::string forward, backward_data, backward_weights;
};
ConvImplementations conv2d_implementations(const Conv2dSpec& spec);

}  // namespace bigtrain::kernels::cpu
