#include "kernels/cpu/dnnl_context.hpp"

#include "kernels/core/error.hpp"

namespace bigtrain::kernels::cpu {

dnnl::engine& engine() {
  static dnnl::engine instance(dnnl::engine::kind::cpu, 0);
  return instance;
}

dnnl::stream& stream() {
  static dnnl::stream instance(engine());
  return instance;
}

dnnl::memory::dims to_dims(const Shape& shape) { return dnnl::memory::dims(shape.begin(), shape.end()); }

dnnl::memory plain_memory(const Tensor& tensor) {
  BT_CHECK(tensor.device().is_cpu(), "oneDNN CPU memory over a tensor on {}", tensor.device().str());
  using tag = dnnl::memory::format_tag;
  dnnl::memory::data_type type = tensor.dtype() == DType::f32    ? dnnl::memory::data_type::f32
                                 : tensor.dtype() == DType::bf16 ? dnnl::memory::data_type::bf16
                                                                 : dnnl::memory::data_type::f16;
  tag format = tag::undef;
  switch (tensor.rank()) {
    case 1: format = tag::a; break;
    case 2: format = tag::ab; break;
    case 3: format = tag::abc; break;
    case 4: format = tag::abcd; break;
    case 5: format = tag::abcde; break;
    default: BT_CHECK(false, "oneDNN memory for rank-{} tensor {}", tensor.rank(), tensor.describe());
  }
  return dnnl::memory({to_dims(tensor.shape()), type, format}, engine(), tensor.raw_data());
}

}  // namespace bigtrain::kernels::cpu
