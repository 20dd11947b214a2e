#pragma once
// Host-side view of the CUDA runtime for code compiled without nvcc (tensor.cpp,
// allocator.cpp). Only built when BIGTRAIN_HAVE_CUDA is defined.
#include <cstddef>
#include <string>

#include "kernels/core/allocator.hpp"
#include "kernels/core/device.hpp"

namespace bigtrain::cuda {

// 0 when there is no driver or no device; never throws.
int device_count();
// Why device_count() is 0, for skip messages and errors ("no CUDA driver", ...).
const char* unavailable_reason();
// Why GPU `device_index` cannot run this binary (out of range, a compute capability
// without code in it), or empty. Needs device_count() > 0.
std::string device_unusable_reason(int device_index);
Allocator& device_allocator(int device_index);
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);
void zero_bytes(void* dst, Device device, std::size_t bytes);

}  // namespace bigtrain::cuda
