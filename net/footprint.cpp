#include "net/footprint.hpp"

#include "kernels/backend.hpp"
#include "kernels/core/allocator.hpp"
#include "kernels/core/host_allocator.hpp"
#include "kernels/cpu/conv_algorithm.hpp"
#include "kernels/cpu/isa.hpp"

namespace bigtrain::net {

KernelMemoryModel KernelMemoryModel::for_backend(Backend backend) {
  KernelMemoryModel model;
  model.backend = backend;
#if defined(__x86_64__) || defined(__i386__)
  // oneDNN's AVX-512 kernels block channels by 16, its AVX2 ones by 8.
  if (__builtin_cpu_supports("avx512f")) model.cpu_channel_block = 16;
#endif
  model.cpu_bf16_channels_last = kernels::cpu::amx_available();
  return model;
}

std::size_t allocation_bytes(const Shape& shape, DType dtype) {
  return HostAllocator::rounded_size(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
}

namespace {

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

std::size_t rounded(std::size_t bytes) { return bytes == 0 ? 0 : HostAllocator::rounded_size(bytes); }

// The reorder temporaries of one oneDNN convolution: a grayscale or RGB input
// (fewer than 8 channels) runs in NHWC, which for one channel is the NCHW tensor
// itself; wider ones in the blocked layout. A tensor not already in the layout
// the primitive uses is reordered into a temporary of its (channel-padded) size;
// weights always are. With blocked activations (Conv2dSpec::blocked_outputs)
// inputs and outputs whose channels fill whole blocks are in that layout already.
struct CpuLayouts {
  std::size_t src = 0, weights = 0, dst = 0;
};

enum class ConvPass { forward, backward_data, backward_weights };

// bf16 (Conv2dSpec::compute_dtype): the operands a pass reads (x, the weights, dy)
// enter its primitive as bf16 temporaries whatever their layout, half a float32
// temporary's size; its results (y, dx, dw) stay float32. x is converted without
// padding (nhwc, or NCHW where its channels fill no whole blocks); dy into the
// blocked layout, padded, except on AMX, whose kernels take every activation in
// nhwc and write y and dx there in place (and a pointwise layer's weight gradient
// into the gradient itself). Without AMX a narrow stem writes a padded
// blocked y, reordered out unless its channels fill whole blocks (ONEDNN_VERBOSE).
void with_bf16_operands(const kernels::Conv2dSpec& s, const KernelMemoryModel& kernels, ConvPass pass, bool narrow,
                        CpuLayouts& layouts) {
  constexpr std::size_t kBf16 = 2;
  const bool channels_last = kernels.cpu_bf16_channels_last;
  const std::int64_t block = kernels.cpu_channel_block;
  auto activation = [&](std::int64_t channels, std::int64_t h, std::int64_t w, std::size_t element) {
    return rounded(static_cast<std::size_t>(s.batch * channels * h * w) * element);
  };
  const std::size_t x = activation(s.in_channels, s.in_h, s.in_w, kBf16);
  const std::size_t dy =
      activation(channels_last ? s.out_channels : round_up(s.out_channels, block), s.out_h(), s.out_w(), kBf16);
  // AMX's weights pair input channels (AcdB16a2b); blocked ones pad both sides.
  const std::int64_t in_stored = channels_last ? round_up(s.in_channels, 2)
                                 : narrow      ? s.in_channels
                                               : round_up(s.in_channels, block);
  const std::size_t weights =
      rounded(static_cast<std::size_t>(round_up(s.out_channels, block) * in_stored * s.kernel_h * s.kernel_w) * kBf16);
  const bool results_in_place = channels_last && s.blocked_outputs;
  const bool output_blocked = s.blocked_outputs && s.out_channels % block == 0;
  switch (pass) {
    case ConvPass::forward:
      layouts.src = x, layouts.weights = weights;
      if (results_in_place || (narrow && output_blocked))
        layouts.dst = 0;
      else if (narrow)
        layouts.dst = activation(round_up(s.out_channels, block), s.out_h(), s.out_w(), sizeof(float));
      break;
    case ConvPass::backward_data:
      layouts.dst = dy, layouts.weights = weights;
      if (results_in_place) layouts.src = 0;
      break;
    case ConvPass::backward_weights:
      layouts.src = x, layouts.dst = dy;
      // A pointwise layer's weight gradient on AMX is a matmul writing (or adding
      // into) the float32 OIHW gradient itself (kernels/cpu/conv2d_primitives.hpp).
      if (kernels::cpu::weight_gradient_as_matmul(s, channels_last)) layouts.weights = 0;
      break;
  }
}

CpuLayouts cpu_layouts(const kernels::Conv2dSpec& s, const KernelMemoryModel& kernels, ConvPass pass) {
  const std::int64_t block = kernels.cpu_channel_block;
  const bool narrow = s.groups == 1 && s.in_channels < 8 && pass != ConvPass::backward_data;
  const bool input_blocked = s.blocked_outputs && s.in_channels % block == 0;
  const bool output_blocked = s.blocked_outputs && s.out_channels % block == 0;
  auto blocked = [&](std::int64_t channels, std::int64_t h, std::int64_t w) {
    return rounded(static_cast<std::size_t>(s.batch * round_up(channels, block) * h * w) * sizeof(float));
  };
  CpuLayouts layouts;
  if (narrow) {
    // oneDNN 2.6's AVX2 forward (blocks of 8) reads a narrow source in plain NCHW as
    // it is and writes the blocked layout, whole blocks of 8 (ONEDNN_VERBOSE: src
    // abcd, dst aBcd8b); the AVX-512 one reads NHWC.
    const bool plain_source = block == 8 && pass == ConvPass::forward;
    layouts.src = s.in_channels == 1 || plain_source ? 0 : allocation_bytes(s.input_shape());
    // Forward writes the blocked layout; the weight gradient reads dy in NHWC.
    const bool dst_in_place = pass == ConvPass::forward && output_blocked;
    layouts.dst = dst_in_place ? 0
                  : plain_source ? blocked(s.out_channels, s.out_h(), s.out_w())
                                 : allocation_bytes(s.output_shape());
    layouts.weights = rounded(static_cast<std::size_t>(round_up(s.out_channels, block) * s.in_channels * s.kernel_h *
                                                       s.kernel_w) * sizeof(float));
  } else {
    layouts.src = input_blocked ? 0 : blocked(s.in_channels, s.in_h, s.in_w);
    layouts.dst = output_blocked ? 0 : blocked(s.out_channels, s.out_h(), s.out_w());
    layouts.weights = rounded(static_cast<std::size_t>(round_up(s.out_channels, block) *
                                                       round_up(s.in_channels, block) * s.kernel_h * s.kernel_w) *
                              sizeof(float));
  }
  if (s.compute_dtype == DType::bf16) with_bf16_operands(s, kernels, pass, narrow, layouts);
  return layouts;
}

}  // namespace

ConvScratch conv2d_scratch(const kernels::Conv2dSpec& spec, const KernelMemoryModel& kernels) {
  if (kernels.backend != Backend::cpu) return {};
  const CpuLayouts forward = cpu_layouts(spec, kernels, ConvPass::forward);
  const CpuLayouts data = cpu_layouts(spec, kernels, ConvPass::backward_data);
  const CpuLayouts weights = cpu_layouts(spec, kernels, ConvPass::backward_weights);
  // oneDNN's scratchpads (Winograd's are large), where this machine can build the
  // layer; a plan for a precision it cannot run counts the layouts alone.
  kernels::Conv2dLibraryScratch library;
  if (kernels::supports(kernels::Op::conv2d, Backend::cpu, spec.compute_dtype))
    library = kernels::conv2d_library_scratch(Backend::cpu, spec);
  // Every temporary of a call is alive until the call returns.
  return {.forward = forward.src + forward.weights + forward.dst + rounded(library.forward),
          .backward_data = data.dst + data.weights + data.src + rounded(library.backward_data),
          .backward_weights = weights.src + weights.dst + weights.weights + rounded(library.backward_weights)};
}

}  // namespace bigtrain::net
