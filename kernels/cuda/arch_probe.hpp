#pragma once
// What the fatbinary holds, asked from code nvcc compiled (no fmt: used by a .cu).
#include <string>

namespace bigtrain::cuda {

// nvcc's __CUDA_ARCH_LIST__ for this library ("750,800,860,890,900").
const char* nvcc_arch_list();
// Whether the runtime finds code for `device_index` in this binary: a cubin that
// matches or PTX it can JIT. False with the runtime's reason in `why` otherwise.
bool kernel_image_loads(int device_index, std::string& why);

}  // namespace bigtrain::cuda
