#include "kernels/cpu/linear.hpp"

#include <optional>
#include <unordered_map>

#include "kernels/core/error.hpp"
#include "kernels/cpu/bias_gradient.hpp"
#include "kernels/cpu/dnnl_context.hpp"
#include "kernels/cpu/layout_bridge.hpp"

namespace bigtrain::kernels::cpu {

namespace {

using dnnl::memory;
using Args = std::unordered_map<int, memory>;
using dt = memory::data_type;

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Plain row-major layouts throughout: the head and small layers are GEMMs that
// oneDNN runs on plain memory directly, so no reorders are worth their copies.
// Mixed precision (LinearSpec::compute_dtype bf16): the operands x, weight and dy
// enter as bf16 copies (rounded to nearest-even by the layout bridges' reorders);
// oneDNN's bf16 GEMM accumulates in float32 and writes float32 y, dx and dw; the
// bias and its gradient stay float32.
class DnnlLinear final : public Linear {
 public:
  explicit DnnlLinear(const LinearSpec& spec)
      : spec_(spec),
        src_dims_{spec.batch, spec.in_features},
        weights_dims_{spec.out_features, spec.in_features},
        dst_dims_{spec.batch, spec.out_features},
        bias_desc_(spec.bias ? memory::desc({spec.out_features}, dt::f32, memory::format_tag::x) : memory::desc()),
        operand_type_(spec.compute_dtype == DType::bf16 ? dt::bf16 : dt::f32) {
    dnnl::inner_product_forward::desc desc(dnnl::prop_kind::forward_training, operand(src_dims_),
                                           operand(weights_dims_), bias_desc_, plain(dst_dims_));
    fwd_pd_ = dnnl::inner_product_forward::primitive_desc(desc, user_scratchpad(), engine());
    fwd_ = dnnl::inner_product_forward(fwd_pd_);
    fwd_src_.init(plain(src_dims_), fwd_pd_.src_desc(), LayoutBridge::Role::input);
    fwd_weights_.init(plain(weights_dims_), fwd_pd_.weights_desc(), LayoutBridge::Role::input);
    fwd_dst_.init(plain(dst_dims_), fwd_pd_.dst_desc(), LayoutBridge::Role::output);
    fwd_bias_ = memory(bias_desc_, engine(), DNNL_MEMORY_NONE);
    fwd_scratch_ = memory(fwd_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    fwd_args_ = {{DNNL_ARG_SRC, fwd_src_.primitive_memory()},
                 {DNNL_ARG_WEIGHTS, fwd_weights_.primitive_memory()},
                 {DNNL_ARG_DST, fwd_dst_.primitive_memory()},
                 {DNNL_ARG_SCRATCHPAD, fwd_scratch_}};
    if (spec.bias) fwd_args_[DNNL_ARG_BIAS] = fwd_bias_;
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
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

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    if (!bwd_data_) build_backward_data();
    Tensor diff_dst_tmp, weights_tmp, diff_src_tmp, scratch;
    bwd_data_diff_dst_.bind_input(dy, diff_dst_tmp);
    bwd_data_weights_.bind_input(weight, weights_tmp);
    bwd_data_diff_src_.bind_output(dx, diff_src_tmp);
    bind_buffer(bwd_data_scratch_, bwd_data_pd_.scratchpad_desc().get_size(), scratch);
    bwd_data_->execute(stream(), bwd_data_args_);
    bwd_data_diff_src_.finish_output(dx);
    stream().wait();
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    if (!bwd_weights_) build_backward_weights();
    Tensor src_tmp, diff_dst_tmp, diff_weights_tmp, scratch;
    bwd_weights_src_.bind_input(x, src_tmp);
    bwd_weights_diff_dst_.bind_input(dy, diff_dst_tmp);
    bwd_weights_diff_weights_.bind_output(dweight, diff_weights_tmp);
    if (dbias) bwd_weights_diff_bias_.set_data_handle(dbias->raw_data());
    bind_buffer(bwd_weights_scratch_, bwd_weights_pd_.scratchpad_desc().get_size(), scratch);
    bwd_weights_->execute(stream(), bwd_weights_args_);
    bwd_weights_diff_weights_.finish_output(dweight);
    stream().wait();
    if (dbias && bias_gradient_) bias_gradient_->compute(dy, *dbias);
  }

 private:
  static memory::desc plain(const memory::dims& dims) { return {dims, dt::f32, memory::format_tag::ab}; }
  memory::desc operand(const memory::dims& dims) const { return {dims, operand_type_, memory::format_tag::ab}; }

  // Backward primitives are built on first use: an inference-only layer never pays for them.
  void build_backward_data() {
    dnnl::inner_product_backward_data::desc desc(plain(src_dims_), operand(weights_dims_), operand(dst_dims_));
    bwd_data_pd_ = dnnl::inner_product_backward_data::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd_);
    bwd_data_diff_dst_.init(plain(dst_dims_), bwd_data_pd_.diff_dst_desc(), LayoutBridge::Role::input);
    bwd_data_weights_.init(plain(weights_dims_), bwd_data_pd_.weights_desc(), LayoutBridge::Role::input);
    bwd_data_diff_src_.init(plain(src_dims_), bwd_data_pd_.diff_src_desc(), LayoutBridge::Role::output);
    bwd_data_scratch_ = memory(bwd_data_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    bwd_data_args_ = {{DNNL_ARG_DIFF_DST, bwd_data_diff_dst_.primitive_memory()},
                      {DNNL_ARG_WEIGHTS, bwd_data_weights_.primitive_memory()},
                      {DNNL_ARG_DIFF_SRC, bwd_data_diff_src_.primitive_memory()},
                      {DNNL_ARG_SCRATCHPAD, bwd_data_scratch_}};
    bwd_data_.emplace(bwd_data_pd_);
  }

  void build_backward_weights() {
    // In bf16 the bias gradient is summed apart, from the float32 dy (bias_gradient.hpp).
    const bool bias_in_primitive = spec_.bias && operand_type_ == dt::f32;
    dnnl::inner_product_backward_weights::desc desc(operand(src_dims_), plain(weights_dims_),
                                                    bias_in_primitive ? bias_desc_ : memory::desc(),
                                                    operand(dst_dims_));
    bwd_weights_pd_ =
        dnnl::inner_product_backward_weights::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd_);
    bwd_weights_src_.init(plain(src_dims_), bwd_weights_pd_.src_desc(), LayoutBridge::Role::input);
    bwd_weights_diff_dst_.init(plain(dst_dims_), bwd_weights_pd_.diff_dst_desc(), LayoutBridge::Role::input);
    bwd_weights_diff_weights_.init(plain(weights_dims_), bwd_weights_pd_.diff_weights_desc(),
                                   LayoutBridge::Role::output);
    bwd_weights_diff_bias_ = memory(bias_desc_, engine(), DNNL_MEMORY_NONE);
    bwd_weights_scratch_ = memory(bwd_weights_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    bwd_weights_args_ = {{DNNL_ARG_SRC, bwd_weights_src_.primitive_memory()},
                         {DNNL_ARG_DIFF_DST, bwd_weights_diff_dst_.primitive_memory()},
                         {DNNL_ARG_DIFF_WEIGHTS, bwd_weights_diff_weights_.primitive_memory()},
                         {DNNL_ARG_SCRATCHPAD, bwd_weights_scratch_}};
    if (bias_in_primitive) bwd_weights_args_[DNNL_ARG_DIFF_BIAS] = bwd_weights_diff_bias_;
    if (spec_.bias && !bias_in_primitive) bias_gradient_.emplace(dst_dims_);
    bwd_weights_.emplace(bwd_weights_pd_);
  }

  LinearSpec spec_;
  memory::dims src_dims_, weights_dims_, dst_dims_;
  memory::desc bias_desc_;
  dt operand_type_;

  dnnl::inner_product_forward::primitive_desc fwd_pd_;
  dnnl::inner_product_forward fwd_;
  LayoutBridge fwd_src_, fwd_weights_, fwd_dst_;
  memory fwd_bias_, fwd_scratch_;
  Args fwd_args_;

  dnnl::inner_product_backward_data::primitive_desc bwd_data_pd_;
  std::optional<dnnl::inner_product_backward_data> bwd_data_;
  LayoutBridge bwd_data_diff_dst_, bwd_data_weights_, bwd_data_diff_src_;
  memory bwd_data_scratch_;
  Args bwd_data_args_;

  dnnl::inner_product_backward_weights::primitive_desc bwd_weights_pd_;
  std::optional<dnnl::inner_product_backward_weights> bwd_weights_;
  LayoutBridge bwd_weights_src_, bwd_weights_diff_dst_, bwd_weights_diff_weights_;
  memory bwd_weights_diff_bias_, bwd_weights_scratch_;
  Args bwd_weights_args_;
  std::optional<BiasGradient> bias_gradient_;
};

}  // namespace

std::unique_ptr<Linear> make_linear(const LinearSpec& spec) {
  try {
    return std::make_unique<DnnlLinear>(spec);
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("linear (cpu): oneDNN cannot build an inner product for input {} weight {}: {}",
                            shape_str(spec.input_shape()), shape_str(spec.weight_shape()), e.what()));
  }
}

}  // namespace bigtrain::kernels::cpu
