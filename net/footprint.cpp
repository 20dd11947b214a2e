#include "net/footprint.hpp"

#include "kernels/core/allocator.hpp"

namespace bigtrain::net {

KernelMemoryModel KernelMemoryModel::for_backend(Backend backend) {
  KernelMemoryModel model;
  model.backend = backend;
#if defined(__x86_64__) || defined(__i386__)
  // oneDNN's AVX-512 kernels block channels by 16, its AVX2 ones by 8.
  if (__builtin_cpu_supports("avx512f")) model.cpu_channel_block = 16;
#endif
  return model;
}

std::size_t allocation_bytes(const Shape& shape, DType dtype) {
  return CachingAllocator::rounded_size(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
}

namespace {

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

std::size_t rounded(std::size_t bytes) { return bytes == 0 ? 0 : CachingAllocator::rounded_size(bytes); }

// The reorder temporaries of one oneDNN convolution: a grayscale or RGB input
// (fewer than 8 channels) runs in NHWC, which for one channel is the NCHW tensor
// itself; wider ones in the blocked layout. Each tensor whose layout differs is
// reordered into a temporary of its (channel-padded) size; weights always are.
struct CpuLayouts {
  std::size_t src = 0, weights = 0, dst = 0;
};

CpuLayouts cpu_layouts(const kernels::Conv2dSpec& s, std::int64_t block, bool backward_data) {
  const bool narrow = s.groups == 1 && s.in_channels < 8 && !backward_data;
  auto blocked = [&](std::int64_t channels, std::int64_t h, std::int64_t w) {
    return rounded(static_cast<std::size_t>(s.batch * round_up(channels, block) * h * w) * sizeof(float));
  };
  CpuLayouts layouts;
  if (narrow) {
    layouts.src = s.in_channels == 1 ? 0 : allocation_bytes(s.input_shape());
    layouts.dst = allocation_bytes(s.output_shape());
    layouts.weights = rounded(static_cast<std::size_t>(round_up(s.out_channels, block) * s.in_channels * s.kernel_h *
                                                       s.kernel_w) * sizeof(float));
  } else {
    layouts.src = blocked(s.in_channels, s.in_h, s.in_w);
    layouts.dst = blocked(s.out_channels, s.out_h(), s.out_w());
    layouts.weights = rounded(static_cast<std::size_t>(round_up(s.out_channels, block) *
                                                       round_up(s.in_channels, block) * s.kernel_h * s.kernel_w) *
                              sizeof(float));
  }
  return layouts;
}

}  // namespace

ConvScratch conv2d_scratch(const kernels::Conv2dSpec& spec, const KernelMemoryModel& kernels) {
  if (kernels.backend != Backend::cpu) return {};
  const CpuLayouts forward = cpu_layouts(spec, kernels.cpu_channel_block, false);
  const CpuLayouts backward = cpu_layouts(spec, kernels.cpu_channel_block, true);
  // Every temporary of a call is alive until the call returns.
  return {.forward = forward.src + forward.weights + forward.dst,
          .backward_data = backward.dst + backward.weights + backward.src,
          .backward_weights = forward.src + forward.dst + forward.weights};
}

}  // namespace bigtrain::net
