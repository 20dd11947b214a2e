#pragma once
// Which cuDNN convolution algorithms the CUDA backend may choose, from the
// environment variable BIGTRAIN_CUDNN_ALGOS (read once per CUDA context). A pure
// function: tested on machines without a GPU.
//   unset or ""  plain float32 summations, deterministic where one fits (default:
//                results within float32 tolerances, a run repeats bit for bit)
//   "all"        also the transform algorithms (Winograd, FFT: rounded otherwise)
//   "fastest"    also non-deterministic ones (atomics in the backward passes), as
//                PyTorch with cudnn.deterministic off: what determinism costs
#include <string_view>

namespace bigtrain {

struct CudnnAlgorithmPolicy {
  bool allow_transforms = false;
  bool prefer_deterministic = true;
};

// Throws bigtrain::Error naming the variable and the accepted values otherwise.
CudnnAlgorithmPolicy cudnn_algorithm_policy(const char* value);

}  // namespace bigtrain
