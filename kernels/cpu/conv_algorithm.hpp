#pragma once
// Which oneDNN algorithm a CPU convolution asks for first. A pure function of the
// spec and of BIGTRAIN_CPU_CONV_ALGOS (read once per process): tested on any CPU.
//   unset or ""  Winograd (jit_wino_4x3, AVX-512 float32) for the 3x3 stride-1
//                layers where it measured faster, direct elsewhere (default)
//   "direct"     direct everywhere: plain float32 sums, as PyTorch's CPU path
// Winograd's transforms round differently from direct sums: measured within 4x
// sqrt(K)*eps of a double reference (direct: within 2x), inside the float32
// tolerances the op tests use. oneDNN has no Winograd kernel on AVX2, for bf16, or
// with binary post-ops; the convolution then builds the direct one, so the choice
// here is a preference, never an error.
#include "kernels/conv2d.hpp"

namespace bigtrain::kernels::cpu {

enum class ConvAlgorithms { winograd_where_faster, direct_only };

// Throws bigtrain::Error naming the variable and the accepted values otherwise.
ConvAlgorithms conv_algorithms_from(const char* value);

// The process's choice, from the environment on first use.
ConvAlgorithms conv_algorithms();

bool prefers_winograd(const Conv2dSpec& spec, ConvAlgorithms algorithms);

// Whether a layer's weight gradient is one matmul instead of the convolution's own
// kernel (kernels/cpu/conv2d_primitives.hpp, pointwise_weight_gradient): pointwise
// bf16 layers on AMX (`amx`: kernels/cpu/isa.hpp, amx_available()) with at least
// 64x64 channels. Also what the memory plan counts (net/footprint.cpp).
bool weight_gradient_as_matmul(const Conv2dSpec& spec, bool amx);

}  // namespace bigtrain::kernels::cpu
