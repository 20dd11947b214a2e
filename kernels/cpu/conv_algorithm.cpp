#include "kernels/cpu/conv_algorithm.hpp"

#include <cstdlib>
#include <string_view>

#include "kernels/core/error.hpp"

namespace bigtrain::kernels::cpu {

ConvAlgorithms conv_algorithms_from(const char* value) {
  const std::string_view choice = value != nullptr ? value : "";
  if (choice.empty()) return ConvAlgorithms::winograd_where_faster;
  if (choice == "direct") return ConvAlgorithms::direct_only;
  throw Error(fmt::format("BIGTRAIN_CPU_CONV_ALGOS={}: expected `direct` (no Winograd), or unset (Winograd for the "
                          "3x3 layers where it is faster)",
                          choice));
}

ConvAlgorithms conv_algorithms() {
  static const ConvAlgorithms algorithms = conv_algorithms_from(std::getenv("BIGTRAIN_CPU_CONV_ALGOS"));
  return algorithms;
}

bool prefers_winograd(const Conv2dSpec& spec, ConvAlgorithms algorithms) {
  if (algorithms == ConvAlgorithms::direct_only || spec.compute_dtype != DType::f32) return false;
  const bool three_by_three = spec.kernel_h == 3 && spec.kernel_w == 3 && spec.stride_h == 1 &&
                              spec.stride_w == 1 && spec.dilation_h == 1 && spec.dilation_w == 1 && spec.groups == 1;
  // oneDNN 2.6, 2 threads, AVX-512, against direct: 64 to 512 channels at 56x56 to
  // 14x14, batch 8, and 64 to 512 at 128x128 to 16x16, batch 2, ran 1.4x to 2.7x
  // faster; 32 channels at 16x16 (batch 32) 1.4x. It lost where its 4x4 output
  // tiles are few or its transforms outweigh the products: 512 channels at 7x7 ran
  // 1.0x at batch 8 (with 126 MB of scratchpad) and 0.45x at batch 2; 16 input
  // channels 0.83x.
  const std::int64_t output_pixels = spec.batch * spec.out_h() * spec.out_w();
  return three_by_three && spec.in_channels >= 32 && spec.out_channels >= 32 && output_pixels >= 512;
}

bool weight_gradient_as_matmul(const Conv2dSpec& spec, bool amx) {
  // oneDNN 2.6, 2 threads, AMX, batch 8 (2 at 128x128): the matmul ran 1.1x to 4x
  // faster from 64x64 channels up (ResNet-50's 1x1 layers, 2048x512 at 7x7 most),
  // but 0.7x for 32x32 and 16x64 at 56x56, where the products are too few for the
  // matmul's blocking; those layers cost little either way.
  return amx && spec.compute_dtype == DType::bf16 && spec.is_pointwise() &&
         spec.in_channels * spec.out_channels >= 64 * 64;
}

}  // namespace bigtrain::kernels::cpu
