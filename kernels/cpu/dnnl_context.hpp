#pragma once
// The oneDNN engine and stream of the CPU backend. Ops run from one thread at a
// time per device (the flow graph's compute node is serial), so one stream serves.
#include <dnnl.hpp>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels::cpu {

dnnl::engine& engine();
dnnl::stream& stream();

// A oneDNN memory object over a host tensor's buffer in plain (nchw/oihw/nc/x) layout.
dnnl::memory plain_memory(const Tensor& tensor);
dnnl::memory::dims to_dims(const Shape& shape);

}  // namespace bigtrain::kernels::cpu
