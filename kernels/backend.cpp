#include "kernels/backend.hpp"

#include <array>

#include <fmt/format.h>

#include "kernels/backend_table.hpp"
#include "kernels/core/error.hpp"

namespace bigtrain::kernels {
namespace {

constexpr std::array kAllOps{
    Op::conv2d,         Op::linear,         Op::batch_norm,   Op::group_norm,   Op::pool2d,         Op::global_avg_pool,
    Op::relu,           Op::add,            Op::axpy,         Op::scale,          Op::sum_of_squares,
    Op::all_finite,     Op::dropout,        Op::mean_rows,    Op::max_rows,       Op::tanh,
    Op::sigmoid,        Op::multiply,       Op::softmax,      Op::weighted_sum_rows, Op::cross_entropy,
    Op::sgd_update,     Op::adamw_update,   Op::frozen_norm_conv,
};

// The one place that knows which backends this build contains.
const BackendTable* table_of(Backend backend) {
  switch (backend) {
    case Backend::reference: return &reference::backend_table();
    case Backend::cpu: return &cpu::backend_table();
    case Backend::cuda:
#ifdef BIGTRAIN_HAVE_CUDA
      return &cuda::backend_table();
#else
      return nullptr;
#endif
  }
  return nullptr;
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::conv2d: return "conv2d";
    case Op::linear: return "linear";
    case Op::batch_norm: return "batch_norm";
    case Op::group_norm: return "group_norm";
    case Op::pool2d: return "pool2d";
    case Op::global_avg_pool: return "global_avg_pool";
    case Op::relu: return "relu";
    case Op::add: return "add";
    case Op::axpy: return "axpy";
    case Op::scale: return "scale";
    case Op::sum_of_squares: return "sum_of_squares";
    case Op::all_finite: return "all_finite";
    case Op::dropout: return "dropout";
    case Op::mean_rows: return "mean_rows";
    case Op::max_rows: return "max_rows";
    case Op::tanh: return "tanh";
    case Op::sigmoid: return "sigmoid";
    case Op::multiply: return "multiply";
    case Op::softmax: return "softmax";
    case Op::weighted_sum_rows: return "weighted_sum_rows";
    case Op::cross_entropy: return "cross_entropy";
    case Op::sgd_update: return "sgd_update";
    case Op::adamw_update: return "adamw_update";
    case Op::frozen_norm_conv: return "frozen_norm_conv";
  }
  return "unknown op";
}

std::span<const Op> all_ops() { return kAllOps; }

bool supports(Op op, Backend backend, DType dtype) {
  const BackendTable* table = table_of(backend);
  return table != nullptr && table->supports(op, dtype);
}

std::string why_unsupported(Op op, Backend backend, DType dtype) {
  if (supports(op, backend, dtype)) return {};
  const BackendTable* table = table_of(backend);
  const std::string reason =
      table != nullptr ? table->unsupported_reason(op, dtype)
                       : std::string("this build has no CUDA backend (configure with -DBIGTRAIN_CUDA=ON where the "
                                     "CUDA toolkit and cuDNN are installed)");
  return fmt::format("{} in {} is not supported by the {} backend: {}", op_name(op), dtype_name(dtype),
                     backend_name(backend), reason);
}

void require_support(Op op, Backend backend, DType dtype, std::string_view context) {
  const std::string why = why_unsupported(op, backend, dtype);
  if (why.empty()) return;
  throw Error(context.empty() ? why : fmt::format("{}: {}", context, why));
}

DType op_dtype(Op op, DType compute_dtype) {
  return op == Op::conv2d || op == Op::linear ? compute_dtype : DType::f32;
}

std::string why_backend_cannot_run(Backend backend, DType compute_dtype) {
  for (Op op : all_ops()) {
    std::string why = why_unsupported(op, backend, op_dtype(op, compute_dtype));
    if (!why.empty()) return why;
  }
  return {};
}

const BackendTable& dispatch(Op op, Backend backend, DType dtype) {
  const BackendTable* table = table_of(backend);
  if (table == nullptr || !table->supports(op, dtype)) require_support(op, backend, dtype);  // throws
  return *table;
}

}  // namespace bigtrain::kernels
