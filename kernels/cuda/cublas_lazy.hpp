#pragma once
// cuBLAS is loaded when the first cuBLAS handle is made (a GPU run), not at process
// start. Why: libcublas needs libcublasLt, whose loading alone makes 148 MiB of the
// process resident (its relocations); linked directly, every CPU run paid that, a
// twelfth of the seeds' step's 2 GiB budget. kernels/cuda/cublas_lazy.cpp defines the
// cuBLAS functions bigtrain calls, each forwarding to the library's own.
#include <string>
#include <vector>

namespace bigtrain::cuda {

// The shared object loaded (its soname, from the toolkit bigtrain was built with).
const char* cublas_library_name();

// The functions bigtrain calls that the library does not export (empty when all
// resolve); loads the library. Throws when it cannot be loaded, naming the cause.
std::vector<std::string> unresolved_cublas_functions();

}  // namespace bigtrain::cuda
