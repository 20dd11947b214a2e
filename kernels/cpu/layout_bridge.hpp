#pragma once
// Between the backend's plain float32 tensors (NCHW, OIHW, NC) and the memory a
// oneDNN primitive chose (format_tag::any: usually blocked, e.g. nChw16c, and
// bf16 when the op computes in bfloat16). When the two differ, a reorder primitive
// (built once) converts into or out of a temporary; a float32 -> bf16 reorder
// rounds to nearest-even, as kernels/reference/round_to_dtype does.
//
// Where this costs: activations are reordered only when their tensor's layout is
// not the primitive's (blocked activations pass straight through), but the
// weights are reordered at every call, although they only change at optimizer
// steps (a weight cache would need a version counter on Tensor to be safe). Measured on a 2-core AVX2 machine,
// batch 8, ResNet-18 shapes: ~5-7% over the same primitives on blocked memory for
// 3x3 layers (weights included: 5% of the 512-channel layer), but 2x for the 1x1
// stride-2 downsample, whose input reorder is 4x its output. PyTorch's NCHW path
// pays the same reorders. The interface trades that for plain tensors everywhere
// else (reference, tests, checkpoints, other ops).
#include <array>
#include <cstddef>
#include <optional>

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

// The oneDNN descriptor of a tensor with `dims` in `layout` (float32): nchw or
// goihw for plain, nChw8c / nChw16c for the blocked ones, nhwc.
dnnl::memory::desc layout_desc(const dnnl::memory::dims& dims, Layout layout);

// `desc` with its trailing dimensions of size 1 dropped (at least two kept), where
// oneDNN can describe the same bytes so: a 1x1 convolution's O x I x 1 x 1 weights
// as O x I. Else `desc` itself.
dnnl::memory::desc without_trailing_unit_dims(const dnnl::memory::desc& desc);

// A reorder from a primitive's memory into a tensor's, run on both described
// without trailing unit dimensions. Why: oneDNN 2.6 writes blocked 1x1 weights
// (ABcd16b16a) into plain OIHW 5-7x slower than the same bytes described as 2D
// (measured, AVX-512, 2 threads: 512 x 2048 x 1 x 1 2.2 ms against 0.38 ms; with
// a sum post-op 3.4 against 0.49); every 1x1 layer's weight gradient takes this
// path: in a ResNet-50 training step at batch 8, ~11 ms before, 5.8 as 2D (bound
// by memory there). The other direction, plain into blocked, measured the same
// either way and is left alone.
class OutputReorder {
 public:
  OutputReorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                const dnnl::primitive_attr& attr = dnnl::primitive_attr());
  void execute(const dnnl::memory& from, const dnnl::memory& to);

 private:
  dnnl::memory from_, to_;
  dnnl::reorder reorder_;
};

// One tensor argument of a primitive. Inputs arrive in whatever layout their
// tensor holds (Tensor::layout) and are reordered only when the primitive chose
// another; an output is written in place when the primitive's choice is a layout a
// Tensor can hold (NCHW, nChw8c, nChw16c, nhwc) and the op was allowed to leave it
// so (Conv2dSpec::blocked_outputs), else through a temporary reordered into a
// blocked layout (when allowed and the channels divide) or NCHW.
class LayoutBridge {
 public:
  enum class Role { input, output };

  void init(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen, Role role,
            bool blocked_output = false);

  // The memory the primitive reads or writes; it stays the same object across calls.
  const dnnl::memory& primitive_memory() const { return inner_; }

  // Points the bridge at an input tensor for one call, reordering it right away
  // when its layout is not the primitive's.
  void bind_input(const Tensor& tensor, Tensor& temporary);
  // Points the bridge at an output tensor for one call; finish_output() after the
  // primitive ran reorders (when needed) and records the tensor's layout.
  void bind_output(Tensor& tensor, Tensor& temporary);
  // Points an input bridge at the memory `other` (same chosen descriptor) holds for
  // this call: one conversion read by two primitives. `other`'s temporary must
  // outlive both.
  void bind_same_as(const LayoutBridge& other);
  void finish_output(Tensor& tensor);
  // For a plain output that receives the result added to what it holds: the
  // primitive writes a temporary, finish_accumulating_output() adds it in while
  // reordering (a reorder with a sum post-op), one pass over the tensor.
  void bind_accumulating_output(Tensor& tensor, Tensor& temporary);
  void finish_accumulating_output();

 private:
  // The reorder between the primitive's memory and a tensor in `layout` (into the
  // primitive for an input bridge, out of it for an output one), built on first use
  // with the tensor-side memory that make_outer() describes.
  dnnl::reorder& input_reorder_for(Layout layout);
  OutputReorder& output_reorder_for(Layout layout);
  dnnl::memory& make_outer(Layout layout);
  dnnl::memory& outer_for(Layout layout) { return outer_[static_cast<int>(layout)]; }

  Role role_ = Role::input;
  bool blocked_output_ = false;
  dnnl::memory::dims dims_;
  dnnl::memory::desc plain_desc_;
  // The Tensor layout whose bytes equal the primitive's choice, if any.
  std::optional<Layout> chosen_layout_;
  // The layout an allowed-blocked output is written in: the choice itself when a
  // Tensor can hold it, else the widest block the channels allow.
  Layout writable_block_ = Layout::plain;
  dnnl::memory inner_;
  std::array<dnnl::memory, kLayoutCount> outer_;
  std::array<std::optional<dnnl::reorder>, kLayoutCount> input_reorders_;
  std::array<std::optional<OutputReorder>, kLayoutCount> output_reorders_;
  dnnl::memory accumulated_;
  std::optional<OutputReorder> accumulating_reorder_;
  std::size_t bytes_ = 0;
  bool direct_ = true;       // this call's tensor is the primitive's memory
  Layout output_layout_ = Layout::plain;
};

}  // namespace bigtrain::kernels::cpu
