#include "kernels/cpu/conv2d.hpp"

#include <cmath>
#include <optional>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "kernels/cpu/channel_sums.hpp"
#include "kernels/cpu/conv2d_primitives.hpp"
#include "kernels/cpu/dnnl_context.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/layout_bridge.hpp"

namespace bigtrain::kernels::cpu {

namespace {

using dnnl::memory;
using Args = std::unordered_map<int, memory>;

using dt = memory::data_type;

// oneDNN silently falls back to its reference loops for shapes no optimised kernel
// takes (measured 100x slower); say so once per layer, so a slow run has a cause.
void warn_if_reference(const char* pass, const std::string& implementation, const Conv2dSpec& s) {
  if (implementation.rfind("ref", 0) != 0) return;
  spdlog::warn("conv2d (cpu) {}: oneDNN has no optimised kernel for input {} weight {} stride {}x{} padding {}x{} "
               "dilation {}x{} groups {}; its reference implementation ({}) will be slow",
               pass, shape_str(s.input_shape()), shape_str(s.weight_shape()), s.stride_h, s.stride_w, s.pad_h,
               s.pad_w, s.dilation_h, s.dilation_w, s.groups, implementation);
}

// y = relu?(y + residual) in one pass, as the CPU's add and ReLU compute it; in
// y's layout (the residual is normally in it already).
void add_residual(Tensor& y, const Tensor& residual, bool relu) {
  const Tensor aligned = residual.to_layout(y.layout());
  float* out = y.data<float>();
  const float* in = aligned.data<float>();
  const std::int64_t n = y.numel();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float sum = out[i] + in[i];
    out[i] = relu && sum < 0.0f ? 0.0f : sum;  // keeps NaN, as torch.relu
  }
}

class DnnlConv2d final : public Conv2d {
 public:
  explicit DnnlConv2d(const Conv2dSpec& spec) : geometry_(spec) {
    fwd_pd_ = training_forward_pd(geometry_);
    const memory::desc per_channel({1, spec.out_channels, 1, 1}, dt::f32, memory::format_tag::nchw);
    EpiloguePostOps post_ops;
    if (auto folded = folded_winograd_pd(geometry_, fwd_pd_)) {
      fwd_pd_ = *folded;
      build_folded_weights();
    } else if (spec.epilogue.any()) {
      post_ops = epilogue_post_ops(spec.epilogue, per_channel);
      if (spec.epilogue.residual && spec.blocked_outputs) build_residual_post_op(per_channel);
      fwd_pd_ = fused_forward_pd(geometry_, fwd_pd_, post_ops.attr);
    }
    fwd_ = dnnl::convolution_forward(fwd_pd_);
    warn_if_reference("forward", fwd_pd_.impl_info_str(), spec);
    fwd_src_.init(plain_desc(geometry_.src), fwd_pd_.src_desc(), LayoutBridge::Role::input);
    fwd_weights_.init(plain_desc(geometry_.weights), fwd_pd_.weights_desc(), LayoutBridge::Role::input);
    fwd_dst_.init(plain_desc(geometry_.dst), fwd_pd_.dst_desc(), LayoutBridge::Role::output, spec.blocked_outputs);
    fwd_bias_ = memory(geometry_.bias, engine(), DNNL_MEMORY_NONE);
    fwd_scratch_ = memory(fwd_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    fwd_args_ = {{DNNL_ARG_SRC, fwd_src_.primitive_memory()},
                 {DNNL_ARG_WEIGHTS, fwd_weights_.primitive_memory()},
                 {DNNL_ARG_DST, fwd_dst_.primitive_memory()},
                 {DNNL_ARG_SCRATCHPAD, fwd_scratch_}};
    if (spec.bias) fwd_args_[DNNL_ARG_BIAS] = fwd_bias_;
    if (spec.epilogue.batch_norm) {
      const auto channels = static_cast<std::size_t>(spec.out_channels);
      bn_scale_.resize(channels);
      bn_shift_.resize(channels);
    }
    if (folded_weights_reorder_) {
      fwd_bias_ = memory(fwd_pd_.bias_desc(), engine(), bn_shift_.data());
      fwd_args_[DNNL_ARG_BIAS] = fwd_bias_;
      fwd_args_[DNNL_ARG_WEIGHTS] = folded_weights_;
      folded_scales_ = memory({{spec.out_channels}, dt::f32, memory::format_tag::x}, engine(), bn_scale_.data());
    } else if (spec.epilogue.batch_norm) {
      fwd_args_[DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_ops.scale) | DNNL_ARG_SRC_1] =
          memory(per_channel, engine(), bn_scale_.data());
      fwd_args_[DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_ops.shift) | DNNL_ARG_SRC_1] =
          memory(per_channel, engine(), bn_shift_.data());
    }
    if (fwd_residual_) {
      for (const auto& [argument, value] : fwd_args_)
        if (argument != DNNL_ARG_SCRATCHPAD) fwd_residual_args_.emplace(argument, value);
      fwd_residual_args_[DNNL_ARG_SCRATCHPAD] = fwd_residual_scratch_;
      fwd_residual_args_[DNNL_ARG_ATTR_MULTIPLE_POST_OP(residual_post_op_) | DNNL_ARG_SRC_1] = fwd_residual_input_;
    }
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    run_forward(x, weight, bias, y);
  }

  void forward_fused(const Tensor& x, const Tensor& weight, const Tensor* bias, const ConvEpilogueInputs& epilogue,
                     Tensor& y) override {
    if (geometry_.spec.epilogue.batch_norm) fold_batch_norm(epilogue);
    if (folded_weights_reorder_) {
      run_folded(x, weight, bias, y);
      if (geometry_.spec.epilogue.residual) add_residual(y, *epilogue.residual, geometry_.spec.epilogue.relu);
      return;
    }
    if (fwd_residual_ && epilogue.residual->layout() == residual_layout_) {
      Tensor src_tmp, weights_tmp, dst_tmp, scratch;
      fwd_src_.bind_input(x, src_tmp);
      fwd_weights_.bind_input(weight, weights_tmp);
      fwd_dst_.bind_output(y, dst_tmp);
      if (bias) fwd_bias_.set_data_handle(bias->raw_data());
      fwd_residual_input_.set_data_handle(epilogue.residual->raw_data());
      bind_buffer(fwd_residual_scratch_, fwd_residual_pd_.scratchpad_desc().get_size(), scratch);
      fwd_residual_->execute(stream(), fwd_residual_args_);
      fwd_dst_.finish_output(y);
      stream().wait();
      return;
    }
    run_forward(x, weight, bias, y);
    if (geometry_.spec.epilogue.residual) add_residual(y, *epilogue.residual, geometry_.spec.epilogue.relu);
  }

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    ensure_backward_data();
    Tensor diff_dst_tmp;
    bwd_data_diff_dst_.bind_input(dy, diff_dst_tmp);
    run_backward_data(weight, dx);
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    ensure_backward_weights();
    Tensor diff_dst_tmp;
    bwd_weights_diff_dst_.bind_input(dy, diff_dst_tmp);
    run_backward_weights(x, dy, dweight, dbias);
  }

  // dy converted once when both primitives read it in the same layout and type
  // (bf16 operands, or plain activations into blocked primitives). Its temporary
  // then lives through the weight pass, in place of the one that pass would make.
  void backward(const Tensor& x, const Tensor& dy, const Tensor& weight, Tensor* dx, Tensor& dweight, Tensor* dbias,
                bool accumulate) override {
    ensure_backward_weights();
    Tensor diff_dst_tmp, weights_diff_dst_tmp;
    if (dx) {
      ensure_backward_data();
      bwd_data_diff_dst_.bind_input(dy, diff_dst_tmp);
      run_backward_data(weight, *dx);
    }
    if (dx && bwd_data_pd_.diff_dst_desc() == weights_pass_dy_desc_) {
      bwd_weights_diff_dst_.bind_same_as(bwd_data_diff_dst_);
    } else {
      diff_dst_tmp = Tensor();  // e.g. a narrow stem's weight pass reads dy in nhwc
      bwd_weights_diff_dst_.bind_input(dy, weights_diff_dst_tmp);
    }
    run_backward_weights(x, dy, dweight, dbias, accumulate);
  }
  bool adds_weight_gradients() const override { return true; }

 private:
  template <typename Build>
  void build_explained(const char* pass, Build&& build) {
    try {
      build();
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("conv2d (cpu): oneDNN cannot build the {} primitive for input {} weight {}: {}", pass,
                              shape_str(geometry_.spec.input_shape()), shape_str(geometry_.spec.weight_shape()),
                              e.what()));
    }
  }

  void ensure_backward_data() {
    if (!bwd_data_) build_explained("backward-data", [&] { build_backward_data(); });
  }
  void ensure_backward_weights() {
    if (!bwd_weights_ && !pointwise_) build_explained("backward-weights", [&] { build_backward_weights(); });
  }

  // With dy already bound to the primitive's diff_dst.
  void run_backward_data(const Tensor& weight, Tensor& dx) {
    Tensor weights_tmp, diff_src_tmp, scratch;
    bwd_data_weights_.bind_input(weight, weights_tmp);
    bwd_data_diff_src_.bind_output(dx, diff_src_tmp);
    bind_buffer(bwd_data_scratch_, bwd_data_pd_.scratchpad_desc().get_size(), scratch);
    bwd_data_->execute(stream(), bwd_data_args_);
    bwd_data_diff_src_.finish_output(dx);
    stream().wait();
  }

  void run_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias,
                            bool accumulate = false) {
    if (pointwise_) return run_pointwise_weights(x, dy, dweight, dbias, accumulate);
    Tensor src_tmp, diff_weights_tmp, scratch, fresh_bias;
    bwd_weights_src_.bind_input(x, src_tmp);
    if (accumulate)
      bwd_weights_diff_weights_.bind_accumulating_output(dweight, diff_weights_tmp);
    else
      bwd_weights_diff_weights_.bind_output(dweight, diff_weights_tmp);
    const bool bias_in_primitive = dbias && !sums_bias_gradient_;
    Tensor* bias_out = dbias;
    if (bias_in_primitive && accumulate) bias_out = &(fresh_bias = Tensor::empty(dbias->shape()));
    if (bias_in_primitive) bwd_weights_diff_bias_.set_data_handle(bias_out->raw_data());
    bind_buffer(bwd_weights_scratch_, bwd_weights_pd_.scratchpad_desc().get_size(), scratch);
    bwd_weights_->execute(stream(), bwd_weights_args_);
    if (accumulate)
      bwd_weights_diff_weights_.finish_accumulating_output();
    else
      bwd_weights_diff_weights_.finish_output(dweight);
    stream().wait();
    if (bias_in_primitive && accumulate) axpy(1.0f, fresh_bias, *dbias);
    if (dbias && sums_bias_gradient_) sum_bias_gradient(dy, *dbias, accumulate);
  }

  // The bias gradient of a weight pass that computes none (bf16 operands): the
  // channel sums of the float32 dy, written or added.
  static void sum_bias_gradient(const Tensor& dy, Tensor& dbias, bool accumulate) {
    if (!accumulate) return channel_sums(dy, dbias);
    Tensor fresh = Tensor::empty(dbias.shape());
    channel_sums(dy, fresh);
    axpy(1.0f, fresh, dbias);
  }

  // pointwise_weight_gradient(): the matmul writes (or adds into) the plain
  // gradient itself; the bias gradient is summed as the bf16 convolution's is.
  void run_pointwise_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias, bool accumulate) {
    BT_CHECK(dweight.layout() == Layout::plain && dweight.dtype() == DType::f32,
             "conv2d (cpu): a weight gradient must be a float32 OIHW tensor, got {}", dweight.describe());
    Tensor src_tmp, scratch;
    bwd_weights_src_.bind_input(x, src_tmp);
    pointwise_x_.set_data_handle(bwd_weights_src_.primitive_memory().get_data_handle());
    pointwise_dy_.set_data_handle(bwd_weights_diff_dst_.primitive_memory().get_data_handle());
    pointwise_dw_.set_data_handle(dweight.raw_data());
    dnnl::memory& scratch_memory = accumulate ? pointwise_accumulating_scratch_ : pointwise_fresh_scratch_;
    bind_buffer(scratch_memory, scratch_memory.get_desc().get_size(), scratch);
    (accumulate ? *pointwise_accumulating_ : *pointwise_fresh_)
        .execute(stream(), {{DNNL_ARG_SRC, pointwise_dy_},
                            {DNNL_ARG_WEIGHTS, pointwise_x_},
                            {DNNL_ARG_DST, pointwise_dw_},
                            {DNNL_ARG_SCRATCHPAD, scratch_memory}});
    stream().wait();
    if (dbias) sum_bias_gradient(dy, *dbias, accumulate);
  }

  void run_forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) {
    Tensor src_tmp, weights_tmp, dst_tmp, scratch;
    fwd_src_.bind_input(x, src_tmp);
    fwd_weights_.bind_input(weight, weights_tmp);
    fwd_dst_.bind_output(y, dst_tmp);
    if (bias) fwd_bias_.set_data_handle(bias->raw_data());
    bind_buffer(fwd_scratch_, fwd_pd_.scratchpad_desc().get_size(), scratch);
    fwd_.execute(stream(), fwd_args_);
    fwd_dst_.finish_output(y);
    stream().wait();
  }

  // The weight reorder of the folded Winograd op: plain OIHW in, scaled by the
  // BatchNorm's a per output channel (runtime output scales, mask 1 = dimension O).
  void build_folded_weights() {
    dnnl::primitive_attr attr;
    attr.set_output_scales(1, {DNNL_RUNTIME_F32_VAL});
    folded_weights_source_ = memory(plain_desc(geometry_.weights), engine(), DNNL_MEMORY_NONE);
    folded_weights_ = memory(fwd_pd_.weights_desc(), engine(), DNNL_MEMORY_NONE);
    folded_weights_reorder_.emplace(dnnl::reorder::primitive_desc(folded_weights_source_, folded_weights_, attr));
  }

  // bn_scale_ and bn_shift_ hold this call's a and b; the bias becomes b + a*bias.
  void run_folded(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) {
    BT_CHECK(weight.layout() == Layout::plain, "conv2d (cpu): weights must be plain OIHW");
    if (bias) {
      const float* conv_bias = bias->data<float>();
      for (std::size_t c = 0; c < bn_shift_.size(); ++c) bn_shift_[c] += bn_scale_[c] * conv_bias[c];
    }
    Tensor src_tmp, weights_tmp, dst_tmp, scratch;
    fwd_src_.bind_input(x, src_tmp);
    folded_weights_source_.set_data_handle(weight.raw_data());
    bind_buffer(folded_weights_, fwd_pd_.weights_desc().get_size(), weights_tmp);
    folded_weights_reorder_->execute(stream(), {{DNNL_ARG_FROM, folded_weights_source_},
                                                {DNNL_ARG_TO, folded_weights_},
                                                {DNNL_ARG_ATTR_OUTPUT_SCALES, folded_scales_}});
    fwd_dst_.bind_output(y, dst_tmp);
    bind_buffer(fwd_scratch_, fwd_pd_.scratchpad_desc().get_size(), scratch);
    fwd_.execute(stream(), fwd_args_);
    fwd_dst_.finish_output(y);
    stream().wait();
  }

  // A second fused primitive with the residual add (and ReLU) as post-ops, for a
  // residual already in the layout of the output (blocked activations): one pass
  // over the output instead of the primitive's plus add_residual's. Kept only where
  // oneDNN has an optimised kernel for it.
  void build_residual_post_op(const memory::desc& per_channel) {
    const dnnl::convolution_forward::desc fused =
        fused_forward_desc(geometry_, fwd_pd_, dnnl::algorithm::convolution_direct);
    const memory::desc output(fused.data.dst_desc);
    std::optional<Layout> layout;
    for (Layout candidate : {Layout::blocked8, Layout::blocked16, Layout::nhwc})
      if (geometry_.spec.out_channels % layout_block(candidate) == 0 &&
          same_bytes(layout_desc(geometry_.dst, candidate), output))
        layout = candidate;
    if (!layout) return;
    const EpiloguePostOps ops = epilogue_post_ops(geometry_.spec.epilogue, per_channel, &output);
    try {
      dnnl::convolution_forward::primitive_desc pd(fused, ops.attr, engine());
      if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return;
      fwd_residual_pd_ = pd;
    } catch (const dnnl::error&) {
      return;  // no kernel takes it: the add stays a loop
    }
    fwd_residual_.emplace(fwd_residual_pd_);
    residual_layout_ = *layout;
    residual_post_op_ = ops.residual;
    fwd_residual_input_ = memory(output, engine(), DNNL_MEMORY_NONE);
    fwd_residual_scratch_ = memory(fwd_residual_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
  }

  // BatchNorm with running statistics is y = a*x + b per channel; a and b as the CPU
  // BatchNorm computes them (kernels/cpu/batch_norm.cpp), in double then rounded.
  void fold_batch_norm(const ConvEpilogueInputs& epilogue) {
    const float *gamma = epilogue.gamma->f32(), *beta = epilogue.beta->f32();
    const float *mean = epilogue.running_mean->f32(), *var = epilogue.running_var->f32();
    for (std::size_t c = 0; c < bn_scale_.size(); ++c) {
      const double a = gamma[c] / std::sqrt(static_cast<double>(var[c]) + geometry_.spec.epilogue.bn_epsilon);
      bn_scale_[c] = static_cast<float>(a);
      bn_shift_[c] = static_cast<float>(beta[c] - mean[c] * a);
    }
  }

  // Backward primitives are built on first use: an inference-only layer never pays
  // for their JIT code and memory.
  void build_backward_data() {
    bwd_data_pd_ = backward_data_pd(geometry_, fwd_pd_);
    bwd_data_diff_dst_.init(plain_desc(geometry_.dst), bwd_data_pd_.diff_dst_desc(), LayoutBridge::Role::input);
    bwd_data_weights_.init(plain_desc(geometry_.weights), bwd_data_pd_.weights_desc(), LayoutBridge::Role::input);
    bwd_data_diff_src_.init(plain_desc(geometry_.src), bwd_data_pd_.diff_src_desc(), LayoutBridge::Role::output,
                            geometry_.spec.blocked_outputs);
    bwd_data_scratch_ = memory(bwd_data_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    bwd_data_args_ = {{DNNL_ARG_DIFF_DST, bwd_data_diff_dst_.primitive_memory()},
                      {DNNL_ARG_WEIGHTS, bwd_data_weights_.primitive_memory()},
                      {DNNL_ARG_DIFF_SRC, bwd_data_diff_src_.primitive_memory()},
                      {DNNL_ARG_SCRATCHPAD, bwd_data_scratch_}};
    bwd_data_.emplace(bwd_data_pd_);
    warn_if_reference("backward-data", bwd_data_pd_.impl_info_str(), geometry_.spec);
  }

  void build_backward_weights() {
    if (auto pointwise = pointwise_weight_gradient(geometry_)) return build_pointwise_weights(*pointwise);
    bwd_weights_pd_ = backward_weights_pd(geometry_, fwd_pd_);
    weights_pass_dy_desc_ = bwd_weights_pd_.diff_dst_desc();
    bwd_weights_src_.init(plain_desc(geometry_.src), bwd_weights_pd_.src_desc(), LayoutBridge::Role::input);
    bwd_weights_diff_dst_.init(plain_desc(geometry_.dst), bwd_weights_pd_.diff_dst_desc(), LayoutBridge::Role::input);
    bwd_weights_diff_weights_.init(plain_desc(geometry_.weights), bwd_weights_pd_.diff_weights_desc(),
                                   LayoutBridge::Role::output);
    bwd_weights_diff_bias_ = memory(geometry_.bias, engine(), DNNL_MEMORY_NONE);
    bwd_weights_scratch_ = memory(bwd_weights_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    bwd_weights_args_ = {{DNNL_ARG_SRC, bwd_weights_src_.primitive_memory()},
                         {DNNL_ARG_DIFF_DST, bwd_weights_diff_dst_.primitive_memory()},
                         {DNNL_ARG_DIFF_WEIGHTS, bwd_weights_diff_weights_.primitive_memory()},
                         {DNNL_ARG_SCRATCHPAD, bwd_weights_scratch_}};
    const bool bias_in_primitive = bias_in_backward_weights(geometry_);
    if (bias_in_primitive) bwd_weights_args_[DNNL_ARG_DIFF_BIAS] = bwd_weights_diff_bias_;
    sums_bias_gradient_ = geometry_.spec.bias && !bias_in_primitive;
    bwd_weights_.emplace(bwd_weights_pd_);
    warn_if_reference("backward-weights", bwd_weights_pd_.impl_info_str(), geometry_.spec);
  }

  void build_pointwise_weights(const PointwiseWeightGradient& pointwise) {
    bwd_weights_src_.init(plain_desc(geometry_.src), pointwise.x, LayoutBridge::Role::input);
    bwd_weights_diff_dst_.init(plain_desc(geometry_.dst), pointwise.dy, LayoutBridge::Role::input);
    weights_pass_dy_desc_ = pointwise.dy;
    pointwise_dy_ = memory(pointwise.fresh.src_desc(), engine(), DNNL_MEMORY_NONE);
    pointwise_x_ = memory(pointwise.fresh.weights_desc(), engine(), DNNL_MEMORY_NONE);
    pointwise_dw_ = memory(pointwise.fresh.dst_desc(), engine(), DNNL_MEMORY_NONE);
    pointwise_fresh_scratch_ = memory(pointwise.fresh.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    pointwise_accumulating_scratch_ = memory(pointwise.accumulating.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    pointwise_fresh_.emplace(pointwise.fresh);
    pointwise_accumulating_.emplace(pointwise.accumulating);
    pointwise_ = true;
  }

  ConvGeometry geometry_;  // holds the spec

  dnnl::convolution_forward::primitive_desc fwd_pd_;
  dnnl::convolution_forward fwd_;
  LayoutBridge fwd_src_, fwd_weights_, fwd_dst_;
  memory fwd_bias_, fwd_scratch_;
  Args fwd_args_;
  std::vector<float> bn_scale_, bn_shift_;  // the fused BatchNorm's a and b; sized once, bound in fwd_args_
  // BatchNorm folded into a Winograd op (folded_winograd_pd): its weight reorder.
  std::optional<dnnl::reorder> folded_weights_reorder_;
  memory folded_weights_source_, folded_weights_, folded_scales_;
  dnnl::convolution_forward::primitive_desc fwd_residual_pd_;
  std::optional<dnnl::convolution_forward> fwd_residual_;
  Layout residual_layout_ = Layout::plain;
  int residual_post_op_ = -1;
  memory fwd_residual_input_, fwd_residual_scratch_;
  Args fwd_residual_args_;

  dnnl::convolution_backward_data::primitive_desc bwd_data_pd_;
  std::optional<dnnl::convolution_backward_data> bwd_data_;
  LayoutBridge bwd_data_diff_dst_, bwd_data_weights_, bwd_data_diff_src_;
  memory bwd_data_scratch_;
  Args bwd_data_args_;

  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd_;
  std::optional<dnnl::convolution_backward_weights> bwd_weights_;
  LayoutBridge bwd_weights_src_, bwd_weights_diff_dst_, bwd_weights_diff_weights_;
  memory bwd_weights_diff_bias_, bwd_weights_scratch_;
  Args bwd_weights_args_;
  bool sums_bias_gradient_ = false;  // the primitive computes no bias gradient (bf16): channel_sums
  memory::desc weights_pass_dy_desc_;  // dy as the weight pass reads it (shared with backward-data when equal)

  // The weight pass as one matmul (pointwise_weight_gradient), built instead of bwd_weights_.
  bool pointwise_ = false;
  std::optional<dnnl::matmul> pointwise_fresh_, pointwise_accumulating_;
  memory pointwise_dy_, pointwise_x_, pointwise_dw_, pointwise_fresh_scratch_, pointwise_accumulating_scratch_;
};

}  // namespace

std::unique_ptr<Conv2d> make_conv2d(const Conv2dSpec& spec) {
  try {
    return std::make_unique<DnnlConv2d>(spec);
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("conv2d (cpu): oneDNN cannot build a convolution for input {} weight {} stride {}x{} "
                            "padding {}x{} dilation {}x{} groups {}: {}",
                            shape_str(spec.input_shape()), shape_str(spec.weight_shape()), spec.stride_h,
                            spec.stride_w, spec.pad_h, spec.pad_w, spec.dilation_h, spec.dilation_w, spec.groups,
                            e.what()));
  }
}

}  // namespace bigtrain::kernels::cpu
