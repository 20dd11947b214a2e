#pragma once
// What one call of a layer allocates, told by the layer itself for an input shape
// before anything runs, as Caffe's Layer::Reshape tells its net the shapes of its
// tops. The memory planner (net/memory_plan.hpp) walks the real model and asks each
// layer; it runs no kernel and keeps no second copy of the network.
//
// A layer describes only its own call: the output it allocates (or aliases), what
// its forward keeps for backward, and the most bytes of temporaries alive at once
// inside forward and backward (its kernels' reorders, statistics it does not keep,
// parameter gradients before they are added into the accumulated ones). Lifetimes
// between calls are the planner's: an input lives while its caller holds it, a
// kept tensor until the backward that pops it, a gradient until its consumer's
// backward has returned. A new layer overrides Layer::describe and nothing else.
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/conv2d.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/tensor.hpp"
#include "net/forward_context.hpp"

namespace bigtrain::net {

// Bytes a kernel call allocates beyond its inputs and outputs, freed when it returns.
struct KernelMemoryModel {
  Backend backend = Backend::cpu;
  // oneDNN's blocked activation and weight layouts (nChw8c / nChw16c) pad channels
  // to this multiple: 8 with AVX2, 16 with AVX-512.
  int cpu_channel_block = 8;
  // oneDNN 2.6's AMX kernels take bf16 operands and write float32 results in nhwc
  // (channels unpadded, results in place: Layout::nhwc); its avx512_core_bf16
  // ones use the blocked layouts above.
  bool cpu_bf16_channels_last = false;
  // The cuDNN workspace is shared by all layers and grows to the largest request,
  // at most the context's limit (kernels/cuda/context.hpp); cuDNN chooses per
  // layer, so the plan counts the limit once, outside the layers: an upper bound.
  std::size_t cuda_workspace_limit = std::size_t{256} << 20;

  // The model of `backend` on this machine (its CPU's vector width).
  static KernelMemoryModel for_backend(Backend backend);
};

// How the planned call runs: the ForwardContext flags that change what a layer
// allocates (training, keep_activations, freeze_bn, compute_dtype) and the kernels'
// own temporaries on the planned backend (forward.backend is kernels.backend).
struct PlanContext {
  ForwardContext forward;
  KernelMemoryModel kernels;
};

// Bytes of one allocation as the caching allocator hands it out (rounded), so
// planned figures are the figures its peak counter reports.
std::size_t allocation_bytes(const Shape& shape, DType dtype = DType::f32);

struct LayerFootprint {
  // The per-layer table's kind ("conv 7x7/2", "batchnorm"); empty: no row.
  std::string kind;
  Shape output;
  // The output is the input's storage: in place (ReLU), a view (flatten), or the
  // input itself (dropout outside training). Nothing is allocated for it.
  bool output_is_input = false;
  // Kept for backward when keep_activations is on: references to the input and
  // the output (a buffer several layers keep counts once), and tensors of the
  // layer's own (BatchNorm's batch statistics, max pooling's arg-max, a dropout
  // mask), bytes as requested (allocation_bytes rounds them).
  bool keeps_input = false, keeps_output = false;
  std::vector<std::size_t> kept;
  // Held by the layer after the call until the walk ends (its next forward would
  // replace it): the attention weights heatmaps read. Rounded.
  std::size_t retained = 0;
  // The most bytes of temporaries alive at once inside forward, beside the input,
  // the output and `kept`; already rounded.
  std::size_t forward_scratch = 0;

  enum class InputGradient {
    allocated,        // a new tensor of the input's shape
    output_gradient,  // the output gradient itself (views, identities)
    none              // not computed (a network's image input)
  };
  InputGradient input_gradient = InputGradient::allocated;
  // The most bytes of temporaries alive at once inside backward, beside the output
  // gradient, the input gradient and what the forward kept; already rounded.
  std::size_t backward_scratch = 0;

  double forward_flops = 0.0;   // multiply-adds x2 of convolutions and linear layers
  double backward_flops = 0.0;  // backward-data (unless the input gradient is off) + backward-weights
};

// What oneDNN allocates inside one convolution call on the CPU: it reorders plain
// NCHW tensors into its blocked layouts in temporaries (kernels/cpu/conv2d.cpp's
// LayoutBridge); other backends allocate nothing per call (cuDNN's workspace is
// the shared one KernelMemoryModel counts). Rounded, most bytes alive at once.
struct ConvScratch {
  std::size_t forward = 0, backward_data = 0, backward_weights = 0;
};
ConvScratch conv2d_scratch(const kernels::Conv2dSpec& spec, const KernelMemoryModel& kernels);

}  // namespace bigtrain::net
