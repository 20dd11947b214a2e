#include "kernels/cpu/conv2d_primitives.hpp"

#include <algorithm>
#include <string>

#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/conv_algorithm.hpp"
#include "kernels/cpu/dnnl_context.hpp"
#include "kernels/cpu/isa.hpp"

namespace bigtrain::kernels::cpu {

using dnnl::memory;
using dt = memory::data_type;

namespace {

memory::desc nhwc_desc(const memory::dims& dims, dt type) { return {dims, type, memory::format_tag::nhwc}; }

}  // namespace

memory::desc plain_desc(const memory::dims& dims) {
  return {dims, dt::f32, dims.size() == 5 ? memory::format_tag::goihw : memory::format_tag::nchw};
}
memory::desc any_desc(const memory::dims& dims, dt type) { return {dims, type, memory::format_tag::any}; }

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

EpiloguePostOps epilogue_post_ops(const ConvEpilogue& epilogue, const memory::desc& per_channel,
                                  const memory::desc* residual) {
  EpiloguePostOps result{user_scratchpad()};
  dnnl::post_ops ops;
  if (epilogue.batch_norm) {
    result.scale = ops.len();
    ops.append_binary(dnnl::algorithm::binary_mul, per_channel);
    result.shift = ops.len();
    ops.append_binary(dnnl::algorithm::binary_add, per_channel);
  }
  if (residual) {
    result.residual = ops.len();
    ops.append_binary(dnnl::algorithm::binary_add, *residual);
  }
  if (epilogue.relu && (!epilogue.residual || residual))
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  result.attr.set_post_ops(ops);
  return result;
}

dnnl::convolution_forward::primitive_desc training_forward_pd(const ConvGeometry& g) {
  return g.build([&](dnnl::algorithm algorithm) {
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, algorithm,
                                         any_desc(g.src, g.operand_type), any_desc(g.weights, g.operand_type),
                                         g.bias, any_desc(g.dst, dt::f32), g.strides, g.dilates, g.padding_l,
                                         g.padding_r);
    return dnnl::convolution_forward::primitive_desc(desc, user_scratchpad(), engine());
  });
}

// The fused op takes the layouts the plain convolution chose. Left to format
// `any`, oneDNN 2.6 answers post-ops with its brgemm kernels on nhwc, whose
// reorders from and to NCHW measured 4-6x slower than those to nChw16c
// (ResNet-18 inference at 224, batch 8: 0.85x the unfused network's speed).
// A fused op never runs backward, so it takes the inference kernels.
dnnl::convolution_forward::desc fused_forward_desc(const ConvGeometry& g,
                                                   const dnnl::convolution_forward::primitive_desc& plain,
                                                   dnnl::algorithm algorithm) {
  return dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algorithm, plain.src_desc(),
                                         plain.weights_desc(), g.bias, plain.dst_desc(), g.strides, g.dilates,
                                         g.padding_l, g.padding_r);
}

dnnl::convolution_forward::primitive_desc fused_forward_pd(const ConvGeometry& g,
                                                           const dnnl::convolution_forward::primitive_desc& plain,
                                                           const dnnl::primitive_attr& post_ops) {
  return g.build([&](dnnl::algorithm algorithm) {
    return dnnl::convolution_forward::primitive_desc(fused_forward_desc(g, plain, algorithm), post_ops, engine());
  });
}

// BatchNorm folded into a Winograd convolution, whose kernels take no binary
// post-ops: the weights scaled per output channel while they are reordered (a
// reorder with runtime output scales), the shift as the bias, then ReLU as a
// post-op unless a residual comes first. Training-kind: oneDNN 2.6's reorder into
// the inference kind's pre-transformed weights ignores output scales (measured:
// results off by up to 0.9 for weights scaled by 0.5-2.4). None where Winograd is
// not preferred or not built here.
std::optional<dnnl::convolution_forward::primitive_desc> folded_winograd_pd(
    const ConvGeometry& g, const dnnl::convolution_forward::primitive_desc& plain) {
  const ConvEpilogue& epilogue = g.spec.epilogue;
  if (!g.winograd || !epilogue.batch_norm) return std::nullopt;
  dnnl::primitive_attr attr = user_scratchpad();
  dnnl::post_ops ops;
  if (epilogue.relu && !epilogue.residual) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  attr.set_post_ops(ops);
  const memory::desc bias({g.spec.out_channels}, dt::f32, memory::format_tag::a);
  try {
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_winograd,
                                         plain.src_desc(), any_desc(g.weights, dt::f32), bias, plain.dst_desc(),
                                         g.strides, g.dilates, g.padding_l, g.padding_r);
    return dnnl::convolution_forward::primitive_desc(desc, attr, engine());
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

// Backward-data stays on format_tag::any even for narrow inputs: there nhwc
// measured 2x slower than the GEMM path oneDNN picks for a 3-channel stem.
dnnl::convolution_backward_data::primitive_desc backward_data_pd(
    const ConvGeometry& g, const dnnl::convolution_forward::primitive_desc& forward) {
  return g.build([&](dnnl::algorithm algorithm) {
    dnnl::convolution_backward_data::desc desc(algorithm, any_desc(g.src, dt::f32),
                                               any_desc(g.weights, g.operand_type),
                                               any_desc(g.dst, g.operand_type), g.strides, g.dilates, g.padding_l,
                                               g.padding_r);
    return dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad(), engine(), forward);
  });
}

bool bias_in_backward_weights(const ConvGeometry& g) { return g.spec.bias && g.operand_type == dt::f32; }

dnnl::convolution_backward_weights::primitive_desc backward_weights_pd(
    const ConvGeometry& g, const dnnl::convolution_forward::primitive_desc& forward) {
  // Inputs with few channels (a grayscale or RGB stem) would be padded to the
  // 8-channel block of nChw8c: 8x the memory and 8x the work for the weight
  // gradient (1-channel 7x7 stride-2 stem, batch 8: 34 ms at 224, 176 ms at 512,
  // against 10 ms and 85 ms in nhwc). oneDNN's AVX2 kernels take such layers in
  // nhwc, which for one channel is the very same bytes as NCHW: no input reorder.
  // The forward pass keeps format_tag::any: it reads NCHW directly there and was
  // 20-30% faster than nhwc (the 11x11 stride-4 stem: equal).
  const bool narrow_input = g.spec.groups == 1 && g.spec.in_channels < 8;
  auto activation_desc = [&](const memory::dims& dims) {
    return narrow_input ? nhwc_desc(dims, g.operand_type) : any_desc(dims, g.operand_type);
  };
  return g.build([&](dnnl::algorithm algorithm) {
    dnnl::convolution_backward_weights::desc desc(algorithm, activation_desc(g.src), any_desc(g.weights, dt::f32),
                                                  bias_in_backward_weights(g) ? g.bias : memory::desc(),
                                                  activation_desc(g.dst), g.strides, g.dilates, g.padding_l,
                                                  g.padding_r);
    return dnnl::convolution_backward_weights::primitive_desc(desc, user_scratchpad(), engine(), forward);
  });
}

std::size_t PointwiseWeightGradient::scratchpad_bytes() const {
  return std::max(fresh.scratchpad_desc().get_size(), accumulating.scratchpad_desc().get_size());
}

std::optional<PointwiseWeightGradient> pointwise_weight_gradient(const ConvGeometry& g) {
  if (!weight_gradient_as_matmul(g.spec, amx_available())) return std::nullopt;
  const memory::dim pixels = g.spec.batch * g.spec.in_h * g.spec.in_w;
  const memory::dim in = g.spec.in_channels, out = g.spec.out_channels;
  // The same bytes as the nhwc operands: dy read transposed (its column stride is a
  // row of channels), x as it lies, dW as OIHW with its unit dimensions dropped.
  const memory::desc dy_transposed({out, pixels}, dt::bf16, memory::dims{1, out});
  const memory::desc x_rows({pixels, in}, dt::bf16, memory::dims{in, 1});
  const memory::desc weight_gradient({out, in}, dt::f32, memory::dims{in, 1});
  const dnnl::matmul::desc desc(dy_transposed, x_rows, weight_gradient);
  dnnl::primitive_attr adding = user_scratchpad();
  dnnl::post_ops sum;
  sum.append_sum(1.0f);
  adding.set_post_ops(sum);
  try {
    return PointwiseWeightGradient{.x = nhwc_desc(g.src, dt::bf16),
                                   .dy = nhwc_desc(g.dst, dt::bf16),
                                   .fresh = dnnl::matmul::primitive_desc(desc, user_scratchpad(), engine()),
                                   .accumulating = dnnl::matmul::primitive_desc(desc, adding, engine())};
  } catch (const dnnl::error&) {
    return std::nullopt;  // the convolution's own backward-weights kernel takes it
  }
}

ConvGeometry::ConvGeometry(const Conv2dSpec& spec) : spec(spec) {
  const memory::dim g = spec.groups;
  src = {spec.batch, spec.in_channels, spec.in_h, spec.in_w};
  dst = {spec.batch, spec.out_channels, spec.out_h(), spec.out_w()};
  // A grouped OIHW tensor is goihw in memory: [G][O/G][I/G][KH][KW].
  weights = g == 1 ? memory::dims{spec.out_channels, spec.in_channels, spec.kernel_h, spec.kernel_w}
                   : memory::dims{g, spec.out_channels / g, spec.in_channels / g, spec.kernel_h, spec.kernel_w};
  bias = spec.bias ? memory::desc({spec.out_channels}, dt::f32, memory::format_tag::a) : memory::desc();
  strides = {spec.stride_h, spec.stride_w};
  dilates = {spec.dilation_h - 1, spec.dilation_w - 1};  // oneDNN counts the gaps: 0 = dense
  padding_l = {spec.pad_h, spec.pad_w};
  // PyTorch floors the output size; with symmetric padding oneDNN's size formula
  // floors the same way, so unused bottom/right rows are simply not read.
  padding_r = {spec.pad_h, spec.pad_w};
  // Mixed precision (Conv2dSpec::compute_dtype): the operands x, weight and dy
  // enter the primitives as bf16 (the layout bridges round them), while y, dx, dw,
  // the bias and its gradient stay float32. oneDNN's avx512_core_bf16 kernels
  // accumulate bf16 products in float32 (vdpbf16ps) and write float32 results
  // directly: no rounding of the results, unlike cuDNN's pseudo-bf16.
  operand_type = spec.compute_dtype == DType::bf16 ? dt::bf16 : dt::f32;
  winograd = prefers_winograd(spec, conv_algorithms());
}

namespace {

// The primitive descriptors make_conv2d(spec) builds, without their primitives
// (no JIT code); no backward ones for a fused, forward-only spec.
struct ConvPrimitiveDescs {
  dnnl::convolution_forward::primitive_desc forward;
  std::optional<dnnl::convolution_backward_data::primitive_desc> backward_data;
  std::optional<dnnl::convolution_backward_weights::primitive_desc> backward_weights;
  std::optional<PointwiseWeightGradient> pointwise;  // in place of backward_weights
};

ConvPrimitiveDescs primitive_descs(const Conv2dSpec& spec) {
  const ConvGeometry geometry(spec);
  const dnnl::convolution_forward::primitive_desc forward = training_forward_pd(geometry);
  if (auto folded = folded_winograd_pd(geometry, forward)) return {*folded, std::nullopt, std::nullopt, std::nullopt};
  if (spec.epilogue.any()) {
    // Its residual variant (build_residual_post_op) is a direct kernel on the same
    // layouts, with the same scratchpad or none.
    const memory::desc per_channel({1, spec.out_channels, 1, 1}, dt::f32, memory::format_tag::nchw);
    return {fused_forward_pd(geometry, forward, epilogue_post_ops(spec.epilogue, per_channel).attr), std::nullopt,
            std::nullopt, std::nullopt};
  }
  if (auto pointwise = pointwise_weight_gradient(geometry))
    return {forward, backward_data_pd(geometry, forward), std::nullopt, std::move(pointwise)};
  return {forward, backward_data_pd(geometry, forward), backward_weights_pd(geometry, forward), std::nullopt};
}

}  // namespace

Conv2dLibraryScratch conv2d_library_scratch(const Conv2dSpec& spec) {
  try {
    const ConvPrimitiveDescs descs = primitive_descs(spec);
    return {.forward = descs.forward.scratchpad_desc().get_size(),
            .backward_data = descs.backward_data ? descs.backward_data->scratchpad_desc().get_size() : 0,
            .backward_weights = descs.pointwise          ? descs.pointwise->scratchpad_bytes()
                                : descs.backward_weights ? descs.backward_weights->scratchpad_desc().get_size()
                                                         : 0};
  } catch (const dnnl::error&) {
    return {};  // make_conv2d reports the error when the layer is built
  }
}

ConvImplementations conv2d_implementations(const Conv2dSpec& spec) {
  const ConvPrimitiveDescs descs = primitive_descs(spec);
  return {.forward = descs.forward.impl_info_str(),
          .backward_data = descs.backward_data ? descs.backward_data->impl_info_str() : "",
          .backward_weights = descs.pointwise ? std::string("matmul ") + descs.pointwise->fresh.impl_info_str()
                              : descs.backward_weights ? descs.backward_weights->impl_info_str()
                                                       : ""};
}

}  // namespace bigtrain::kernels::cpu
