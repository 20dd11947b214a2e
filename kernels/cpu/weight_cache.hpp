#pragma once
// Weights in the layouts oneDNN's primitives chose (blocked, bf16), kept between
// calls. A convolution's weights only change at optimizer steps, checkpoint loads
// and the like, yet every call reordered them from OIHW: ~28 ms of a ResNet-50
// training step at 224 in float32, ~57 ms in bf16, and a pass-1 forward of
// two-pass training pays it again for every tile batch of the image.
//
// A copy is valid while its tensor's storage is alive and its version
// (Tensor::version, moved by every declared write) is the one it was made from.
// One copy is kept per weight and chosen descriptor (the forward's and the
// backward-data's usually differ), allocated from the caching allocator so the
// memory plan and its tests see it (net/footprint.hpp, CachedWeights).
#include <cstddef>
#include <functional>

#include <dnnl.hpp>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels::cpu {

// The bytes of `weight` laid out as `chosen`: the kept copy when `weight` is
// unchanged since it was made, else `reorder(target)` fills the copy first
// (target: `chosen`'s size, reused across versions).
void* cached_weights(const Tensor& weight, const dnnl::memory::desc& chosen,
                     const std::function<void(void* target)>& reorder);

// Bytes of copies held, stale or not (tests; the memory plan predicts it).
std::size_t cached_weight_bytes();
// Drops every copy (tests that measure memory from a clean start).
void clear_weight_cache();

}  // namespace bigtrain::kernels::cpu
