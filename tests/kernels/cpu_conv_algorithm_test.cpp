// Which algorithm the CPU convolutions choose (kernels/cpu/conv_algorithm.hpp), and
// that the Winograd kernels are the ones running where that rule and the CPU say so:
// otherwise the op tests' Winograd cases would pass on direct kernels unnoticed.
#include <gtest/gtest.h>

#include <string>

#include "kernels/core/error.hpp"
#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/conv_algorithm.hpp"
#include "kernels/cpu/isa.hpp"

namespace bigtrain::kernels::cpu {
namespace {

Conv2dSpec three_by_three(std::int64_t batch, std::int64_t channels, std::int64_t size) {
  Conv2dSpec s;
  s.batch = batch, s.in_channels = s.out_channels = channels, s.in_h = s.in_w = size;
  s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = 1;
  return s;
}

TEST(CpuConvAlgorithms, DefaultPrefersWinogradDirectOptsOut) {
  for (const char* unset : {static_cast<const char*>(nullptr), ""})
    EXPECT_EQ(conv_algorithms_from(unset), ConvAlgorithms::winograd_where_faster);
  EXPECT_EQ(conv_algorithms_from("direct"), ConvAlgorithms::direct_only);
}

TEST(CpuConvAlgorithms, AnUnknownValueIsAnErrorNamingTheVariable) {
  try {
    conv_algorithms_from("winograd");
    ADD_FAILURE() << "an unknown value was accepted";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("BIGTRAIN_CPU_CONV_ALGOS=winograd"), std::string::npos) << message;
    EXPECT_NE(message.find("direct"), std::string::npos) << message;
  }
}

TEST(CpuConvAlgorithms, WinogradOnlyForWideFloat32ThreeByThreeLayersWithManyOutputs) {
  const ConvAlgorithms preferred = ConvAlgorithms::winograd_where_faster;
  EXPECT_TRUE(prefers_winograd(three_by_three(8, 64, 56), preferred));
  EXPECT_TRUE(prefers_winograd(three_by_three(2, 512, 16), preferred));  // 512 outputs: the threshold
  EXPECT_FALSE(prefers_winograd(three_by_three(8, 64, 56), ConvAlgorithms::direct_only));
  EXPECT_FALSE(prefers_winograd(three_by_three(8, 512, 7), preferred));   // 392 outputs
  EXPECT_FALSE(prefers_winograd(three_by_three(32, 16, 32), preferred));  // 16 channels

  Conv2dSpec bf16 = three_by_three(8, 64, 56);
  bf16.compute_dtype = DType::bf16;
  Conv2dSpec strided = three_by_three(8, 64, 56);
  strided.stride_h = strided.stride_w = 2;
  Conv2dSpec one_by_one = three_by_three(8, 64, 56);
  one_by_one.kernel_h = one_by_one.kernel_w = 1, one_by_one.pad_h = one_by_one.pad_w = 0;
  Conv2dSpec dilated = three_by_three(8, 64, 56);
  dilated.dilation_h = dilated.dilation_w = 2;
  Conv2dSpec grouped = three_by_three(8, 64, 56);
  grouped.groups = 2;
  Conv2dSpec narrow_output = three_by_three(8, 64, 56);
  narrow_output.out_channels = 16;
  for (const Conv2dSpec& s : {bf16, strided, one_by_one, dilated, grouped, narrow_output})
    EXPECT_FALSE(prefers_winograd(s, preferred)) << shape_str(s.weight_shape()) << " stride " << s.stride_h;
}

// The rule alone, on any CPU: AMX, bf16, pointwise, 64x64 channels or more.
TEST(CpuConvAlgorithms, WeightGradientAsMatmulOnlyForWidePointwiseBfloatLayersOnAmx) {
  Conv2dSpec pointwise;
  pointwise.batch = 8, pointwise.in_channels = 64, pointwise.out_channels = 64, pointwise.in_h = pointwise.in_w = 56;
  pointwise.compute_dtype = DType::bf16;
  EXPECT_TRUE(weight_gradient_as_matmul(pointwise, true));
  EXPECT_FALSE(weight_gradient_as_matmul(pointwise, false));
  Conv2dSpec narrow = pointwise;
  narrow.out_channels = 63;
  Conv2dSpec float32 = pointwise;
  float32.compute_dtype = DType::f32;
  Conv2dSpec strided = pointwise;
  strided.stride_w = 2;
  Conv2dSpec padded = pointwise;
  padded.pad_h = 1;
  Conv2dSpec grouped = pointwise;
  grouped.groups = 2;
  Conv2dSpec three = three_by_three(8, 64, 56);
  three.compute_dtype = DType::bf16;
  for (const Conv2dSpec& s : {narrow, float32, strided, padded, grouped, three})
    EXPECT_FALSE(weight_gradient_as_matmul(s, true)) << shape_str(s.weight_shape()) << " stride " << s.stride_w
                                                     << " pad " << s.pad_h << " groups " << s.groups;
}

// oneDNN 2.6 has Winograd kernels for float32 on AVX-512 only.
bool winograd_kernels_here() { return effective_isa_name().rfind("avx512_core", 0) == 0; }

TEST(CpuConvAlgorithms, PreferredLayersRunWinogradKernelsWhereTheCpuHasThem) {
  if (conv_algorithms() != ConvAlgorithms::winograd_where_faster)
    GTEST_SKIP() << "BIGTRAIN_CPU_CONV_ALGOS is set to direct in this environment";
  if (!winograd_kernels_here())
    GTEST_SKIP() << "oneDNN's Winograd kernels need AVX-512 (avx512_core); this CPU runs " << effective_isa_name();
  const Conv2dSpec preferred = three_by_three(8, 32, 8);
  const ConvImplementations plain = conv2d_implementations(preferred);
  for (const std::string& kernel : {plain.forward, plain.backward_data, plain.backward_weights})
    EXPECT_NE(kernel.find("wino"), std::string::npos) << kernel;
  // BatchNorm with running statistics folds into the Winograd op's weights and bias.
  Conv2dSpec fused = preferred;
  fused.epilogue = {.batch_norm = true, .bn_epsilon = 1e-5f, .residual = true, .relu = true};
  EXPECT_NE(conv2d_implementations(fused).forward.find("wino"), std::string::npos);
  // And large scratchpads come with them, which the memory plan counts.
  EXPECT_GT(conv2d_library_scratch(preferred).forward, std::size_t{0});

  const ConvImplementations small = conv2d_implementations(three_by_three(8, 512, 7));
  EXPECT_EQ(small.forward.find("wino"), std::string::npos) << small.forward;
}

TEST(CpuConvAlgorithms, BfloatLayersStayDirect) {
  if (const auto reason = bf16_unavailable_reason()) GTEST_SKIP() << *reason;
  Conv2dSpec s = three_by_three(8, 64, 16);
  s.compute_dtype = DType::bf16;
  const ConvImplementations kernels = conv2d_implementations(s);
  for (const std::string& kernel : {kernels.forward, kernels.backward_data, kernels.backward_weights})
    EXPECT_EQ(kernel.find("wino"), std::string::npos) << kernel;
}

// On AMX a pointwise bf16 layer's weight gradient is one matmul; its other passes,
// other layers, narrow ones, float32 and pre-AMX bf16 keep the convolution's kernels.
TEST(CpuConvAlgorithms, PointwiseBfloatWeightGradientsAreAMatmulOnAmx) {
  if (const auto reason = bf16_unavailable_reason()) GTEST_SKIP() << *reason;
  if (!amx_available())
    GTEST_SKIP() << "the matmul replaces the convolution's weight pass on AMX only; this CPU runs "
                 << effective_isa_name();
  Conv2dSpec pointwise = three_by_three(8, 64, 14);
  pointwise.kernel_h = pointwise.kernel_w = 1, pointwise.pad_h = pointwise.pad_w = 0, pointwise.out_channels = 256;
  pointwise.compute_dtype = DType::bf16;
  const ConvImplementations kernels = conv2d_implementations(pointwise);
  EXPECT_EQ(kernels.backward_weights.rfind("matmul", 0), 0u) << kernels.backward_weights;
  EXPECT_NE(kernels.backward_weights.find("amx"), std::string::npos) << kernels.backward_weights;
  EXPECT_EQ(kernels.backward_data.find("matmul"), std::string::npos) << kernels.backward_data;

  Conv2dSpec strided = pointwise;
  strided.stride_h = strided.stride_w = 2;
  Conv2dSpec float32 = pointwise;
  float32.compute_dtype = DType::f32;
  Conv2dSpec three = three_by_three(8, 64, 14);
  three.compute_dtype = DType::bf16;
  Conv2dSpec narrow = pointwise;
  narrow.in_channels = narrow.out_channels = 32;
  for (const Conv2dSpec& s : {strided, float32, three, narrow})
    EXPECT_EQ(conv2d_implementations(s).backward_weights.find("matmul"), std::string::npos)
        << shape_str(s.weight_shape()) << " stride " << s.stride_h << " " << dtype_name(s.compute_dtype);
}

}  // namespace
}  // namespace bigtrain::kernels::cpu
