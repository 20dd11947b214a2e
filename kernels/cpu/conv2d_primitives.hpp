#pragma once
// The oneDNN primitive descriptors of a CPU convolution: what kernels/cpu/conv2d.cpp
// builds its primitives from, and what the memory plan and the tests ask about
// without building them (conv2d_library_scratch, conv2d_implementations).
#include <optional>

#include <dnnl.hpp>

#include "kernels/conv2d.hpp"

namespace bigtrain::kernels::cpu {

// The tensors' own layout: float32, NCHW / OIHW (goihw when grouped).
dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims);
dnnl::memory::desc any_desc(const dnnl::memory::dims& dims, dnnl::memory::data_type type);

// Scratchpad in user mode: oneDNN would otherwise malloc it inside every call.
dnnl::primitive_attr user_scratchpad();

// BatchNorm of the epilogue as oneDNN post-ops on the convolution's output: a
// per-channel multiply and add (computed from the statistics at each call, so an
// optimizer step or a checkpoint load needs no invalidation), then ReLU unless a
// residual comes first. The residual is added in a loop after the primitive
// (add_residual, in the output's layout), not as a post-op: a `sum` post-op after
// the BatchNorm's sent oneDNN 2.6 to its reference kernel (ref:any, thousands of
// times slower), and a binary add needed the NCHW residual reordered into the
// output's blocked layout, which cost more than the add (ResNet-18 inference at 224,
// batch 8: 0.88x the unfused network, against 1.04x with the add apart; measured
// before activations stayed blocked, when the residual was still NCHW).
struct EpiloguePostOps {
  dnnl::primitive_attr attr;
  int scale = -1, shift = -1;  // post-op positions of the BatchNorm's operands
  int residual = -1;            // and of the residual, when it is a post-op
};

// With `residual` (the output's own descriptor), the residual add is a post-op too,
// then ReLU: for a residual already in the output's blocked layout (see
// DnnlConv2d::fwd_residual_).
EpiloguePostOps epilogue_post_ops(const ConvEpilogue& epilogue, const dnnl::memory::desc& per_channel,
                                  const dnnl::memory::desc* residual = nullptr);

// A spec in oneDNN's terms, shared by the op and by the scratchpad query.
struct ConvGeometry {
  explicit ConvGeometry(const Conv2dSpec& spec);

  // Winograd first where conv_algorithm.hpp prefers it; direct where oneDNN has no
  // Winograd kernel for the pass, shape, ISA or post-ops.
  template <typename Build>
  auto build(Build&& build_with) const {
    if (winograd) {
      try {
        return build_with(dnnl::algorithm::convolution_winograd);
      } catch (const dnnl::error&) {
      }
    }
    return build_with(dnnl::algorithm::convolution_direct);
  }

  Conv2dSpec spec;
  dnnl::memory::dims src, dst, weights, strides, dilates, padding_l, padding_r;
  dnnl::memory::desc bias;
  dnnl::memory::data_type operand_type = dnnl::memory::data_type::f32;
  bool winograd = false;
};

dnnl::convolution_forward::primitive_desc training_forward_pd(const ConvGeometry& g);

// The fused (forward-only) op on the layouts `plain` chose.
dnnl::convolution_forward::desc fused_forward_desc(const ConvGeometry& g,
                                                   const dnnl::convolution_forward::primitive_desc& plain,
                                                   dnnl::algorithm algorithm);
dnnl::convolution_forward::primitive_desc fused_forward_pd(const ConvGeometry& g,
                                                           const dnnl::convolution_forward::primitive_desc& plain,
                                                           const dnnl::primitive_attr& post_ops);

// BatchNorm folded into a Winograd op's weights and bias; none where Winograd is
// not preferred or not built here (conv2d_primitives.cpp says why this way).
std::optional<dnnl::convolution_forward::primitive_desc> folded_winograd_pd(
    const ConvGeometry& g, const dnnl::convolution_forward::primitive_desc& plain);

dnnl::convolution_backward_data::primitive_desc backward_data_pd(
    const ConvGeometry& g, const dnnl::convolution_forward::primitive_desc& forward);

// In bf16 the bias gradient is summed apart, from the float32 dy (bias_gradient.hpp).
bool bias_in_backward_weights(const ConvGeometry& g);

dnnl::convolution_backward_weights::primitive_desc backward_weights_pd(
    const ConvGeometry& g, const dnnl::convolution_forward::primitive_desc& forward);

// The weight gradient of a pointwise layer (Conv2dSpec::is_pointwise) in bf16 on AMX,
// where weight_gradient_as_matmul (kernels/cpu/conv_algorithm.hpp) says so, as one
// matrix product over its channels-last operands: dW[O][I] = dy^T[O][N*H*W]
// x[N*H*W][I]. oneDNN 2.6's AMX convolution kernel for this pass
// transposes its operands first and measured 1.5-4x slower than its AMX matmul on
// ResNet-50's 1x1 shapes (batch 8, 2 threads: 245-620 GFLOP/s against 670-1240,
// the widest layers gaining most); the matmul also writes float32 OIHW itself, so
// no reorder of the gradient follows, and adds into it with a sum post-op. Without
// AMX the two ran at the same speed (avx512_core_bf16: ~185 GFLOP/s each), and
// there the convolution keeps the blocked layout its other passes share. None where
// the rule says no or oneDNN builds no matmul for it.
struct PointwiseWeightGradient {
  dnnl::memory::desc x, dy;  // the operands as the matmul reads them: nhwc, bf16
  dnnl::matmul::primitive_desc fresh, accumulating;
  std::size_t scratchpad_bytes() const;
};
std::optional<PointwiseWeightGradient> pointwise_weight_gradient(const ConvGeometry& g);

}  // namespace bigtrain::kernels::cpu
