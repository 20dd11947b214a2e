#pragma once
// Between the backend's plain float32 tensors (NCHW, OIHW, NC) and the memory a
// oneDNN primitive chose (format_tag::any: usually blocked, e.g. nChw16c, and
// bf16 when the op computes in bfloat16). When the two differ, a reorder primitive
// (built once) converts into or out of a temporary; a float32 -> bf16 reorder
// rounds to nearest-even, as kernels/reference/round_to_dtype does.
//
// Where this costs: every call reorders the activation in and the result out, and
// the weights, although they only change at optimizer steps (a weight cache would
// need a version counter on Tensor to be safe). Measured on a 2-core AVX2 machine,
// batch 8, ResNet-18 shapes: ~5-7% over the same primitives on blocked memory for
// 3x3 layers (weights included: 5% of the 512-channel layer), but 2x for the 1x1
// stride-2 downsample, whose input reorder is 4x its output. PyTorch's NCHW path
// pays the same reorders. The interface trades that for plain tensors everywhere
// else (reference, tests, checkpoints, other ops).
#include <cstddef>

#include <dnnl.hpp>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels::cpu {

// Points `target` at `bytes` from the caching allocator, held by `owner`: counted by
// its peak statistics and, after the first step, served from its cache. Buffers are
// taken per call rather than held by the op, so a network's dozens of layers do not
// each pin their largest temporaries between calls. No-op for 0 bytes.
void bind_buffer(dnnl::memory& target, std::size_t bytes, Tensor& owner);

// True when two descriptors place every element at the same offset with the same
// type, e.g. nchw and nhwc of a one-channel tensor: then no copy is needed.
bool same_bytes(const dnnl::memory::desc& a, const dnnl::memory::desc& b);

// One tensor argument of a primitive.
class LayoutBridge {
 public:
  enum class Role { input, output };

  void init(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen, Role role);

  // The memory the primitive reads or writes; it stays the same object across calls.
  const dnnl::memory& primitive_memory() const { return inner_; }
  bool reordered() const { return reordered_; }

  // Points the bridge at `data` for one call; an input is reordered right away.
  void bind(const void* data, Tensor& temporary);
  // After the primitive ran: an output is reordered back into the tensor.
  void finish();

 private:
  Role role_ = Role::input;
  dnnl::memory plain_, inner_;
  dnnl::reorder reorder_;
  bool reordered_ = false;
  std::size_t bytes_ = 0;
};

}  // namespace bigtrain::kernels::cpu
