#include "kernels/cpu/bias_gradient.hpp"

#include "kernels/cpu/dnnl_context.hpp"
#include "kernels/cpu/layout_bridge.hpp"

namespace bigtrain::kernels::cpu {

using dnnl::memory;

namespace {

memory::format_tag plain_tag(std::size_t rank) {
  return rank == 2 ? memory::format_tag::ab : rank == 3 ? memory::format_tag::abc : memory::format_tag::abcd;
}

}  // namespace

BiasGradient::BiasGradient(const memory::dims& gradient_dims) {
  memory::dims sums(gradient_dims.size(), 1);
  sums[1] = gradient_dims[1];
  const memory::format_tag tag = plain_tag(gradient_dims.size());
  const memory::desc src_desc(gradient_dims, memory::data_type::f32, tag),
      dst_desc(sums, memory::data_type::f32, tag);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  pd_ = dnnl::reduction::primitive_desc(
      dnnl::reduction::desc(dnnl::algorithm::reduction_sum, src_desc, dst_desc, 0.0f, 0.0f), attr, engine());
  reduction_ = dnnl::reduction(pd_);
  src_ = memory(src_desc, engine(), DNNL_MEMORY_NONE);
  dst_ = memory(dst_desc, engine(), DNNL_MEMORY_NONE);
  scratch_ = memory(pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
}

void BiasGradient::compute(const Tensor& dy, Tensor& dbias) {
  Tensor scratch;
  src_.set_data_handle(dy.raw_data());
  dst_.set_data_handle(dbias.raw_data());
  bind_buffer(scratch_, pd_.scratchpad_desc().get_size(), scratch);
  reduction_.execute(stream(), {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_SCRATCHPAD, scratch_}});
  stream().wait();
}

}  // namespace bigtrain::kernels::cpu
