#include "kernels/cpu/linear.hpp"

#include <optional>
#include <unordered_map>

#include "kernels/core/error.hpp"
#include "kernels/cpu/dnnl_context.hpp"

namespace bigtrain::kernels::cpu {

namespace {

using dnnl::memory;
using Args = std::unordered_map<int, memory>;

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void bind(const memory& target, const Tensor& tensor) { target.set_data_handle(tensor.raw_data()); }

void bind_scratchpad(const memory& target, std::size_t bytes, Tensor& owner) {
  if (bytes == 0) return;
  owner = Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::u8);  // counted by the caching allocator
  target.set_data_handle(owner.raw_data());
}

// Plain row-major layouts throughout: the head and small layers are GEMMs that
// oneDNN runs on plain memory directly, so no reorders are worth their copies.
class DnnlLinear final : public Linear {
 public:
  explicit DnnlLinear(const LinearSpec& spec)
      : spec_(spec),
        src_desc_({spec.batch, spec.in_features}, memory::data_type::f32, memory::format_tag::nc),
        weights_desc_({spec.out_features, spec.in_features}, memory::data_type::f32, memory::format_tag::oi),
        bias_desc_(spec.bias ? memory::desc({spec.out_features}, memory::data_type::f32, memory::format_tag::x)
                             : memory::desc()),
        dst_desc_({spec.batch, spec.out_features}, memory::data_type::f32, memory::format_tag::nc) {
    src_ = memory(src_desc_, engine(), DNNL_MEMORY_NONE);
    weights_ = memory(weights_desc_, engine(), DNNL_MEMORY_NONE);
    bias_ = memory(bias_desc_, engine(), DNNL_MEMORY_NONE);
    dst_ = memory(dst_desc_, engine(), DNNL_MEMORY_NONE);

    dnnl::inner_product_forward::desc desc(dnnl::prop_kind::forward_training, src_desc_, weights_desc_, bias_desc_,
                                           dst_desc_);
    fwd_pd_ = dnnl::inner_product_forward::primitive_desc(desc, user_scratchpad(), engine());
    fwd_ = dnnl::inner_product_forward(fwd_pd_);
    fwd_scratch_ = memory(fwd_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    fwd_args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst_},
                 {DNNL_ARG_SCRATCHPAD, fwd_scratch_}};
    if (spec.bias) fwd_args_[DNNL_ARG_BIAS] = bias_;
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    Tensor scratch;
    bind(src_, x), bind(weights_, weight), bind(dst_, y);
    if (bias) bind(bias_, *bias);
    bind_scratchpad(fwd_scratch_, fwd_pd_.scratchpad_desc().get_size(), scratch);
    fwd_.execute(stream(), fwd_args_);
    stream().wait();
  }

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    if (!bwd_data_) {
      dnnl::inner_product_backward_data::desc desc(src_desc_, weights_desc_, dst_desc_);
      bwd_data_pd_ = dnnl::inner_product_backward_data::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd_);
      bwd_data_scratch_ = memory(bwd_data_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
      // diff_dst and diff_src reuse the dst/src memory objects: same shapes, one call at a time.
      bwd_data_args_ = {{DNNL_ARG_DIFF_DST, dst_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DIFF_SRC, src_},
                        {DNNL_ARG_SCRATCHPAD, bwd_data_scratch_}};
      bwd_data_.emplace(bwd_data_pd_);
    }
    Tensor scratch;
    bind(dst_, dy), bind(weights_, weight), bind(src_, dx);
    bind_scratchpad(bwd_data_scratch_, bwd_data_pd_.scratchpad_desc().get_size(), scratch);
    bwd_data_->execute(stream(), bwd_data_args_);
    stream().wait();
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    if (!bwd_weights_) {
      dnnl::inner_product_backward_weights::desc desc(src_desc_, weights_desc_, bias_desc_, dst_desc_);
      bwd_weights_pd_ =
          dnnl::inner_product_backward_weights::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd_);
      bwd_weights_scratch_ = memory(bwd_weights_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
      bwd_weights_args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_DST, dst_}, {DNNL_ARG_DIFF_WEIGHTS, weights_},
                           {DNNL_ARG_SCRATCHPAD, bwd_weights_scratch_}};
      if (spec_.bias) bwd_weights_args_[DNNL_ARG_DIFF_BIAS] = bias_;
      bwd_weights_.emplace(bwd_weights_pd_);
    }
    Tensor scratch;
    bind(src_, x), bind(dst_, dy), bind(weights_, dweight);
    if (dbias) bind(bias_, *dbias);
    bind_scratchpad(bwd_weights_scratch_, bwd_weights_pd_.scratchpad_desc().get_size(), scratch);
    bwd_weights_->execute(stream(), bwd_weights_args_);
    stream().wait();
  }

 private:
  LinearSpec spec_;
  memory::desc src_desc_, weights_desc_, bias_desc_, dst_desc_;
  memory src_, weights_, bias_, dst_;  // pointed at the caller's tensors on each call

  dnnl::inner_product_forward::primitive_desc fwd_pd_;
  dnnl::inner_product_forward fwd_;
  memory fwd_scratch_;
  Args fwd_args_;

  dnnl::inner_product_backward_data::primitive_desc bwd_data_pd_;
  std::optional<dnnl::inner_product_backward_data> bwd_data_;
  memory bwd_data_scratch_;
  Args bwd_data_args_;

  dnnl::inner_product_backward_weights::primitive_desc bwd_weights_pd_;
  std::optional<dnnl::inner_product_backward_weights> bwd_weights_;
  memory bwd_weights_scratch_;
  Args bwd_weights_args_;
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
