#pragma once
// The backend seam: one table of functions per backend (after ggml's
// ggml-backend-impl.h). Each backend fills its table in its own folder
// (reference/backend_table.cpp, cpu/..., cuda/...), and the op files
// (kernels/<op>.cpp) check their arguments once, ask dispatch() for the table and
// call through it. Only kernels/backend.cpp names the backends, and only it knows
// whether the CUDA table was built, so a CPU-only build links without CUDA.
//
// Adding an op: one Op (backend.hpp), one entry here, one line in each backend's
// table and in its supports().
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/backend.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/frozen_norm_conv.hpp"
#include "kernels/group_norm.hpp"
#include "kernels/linear.hpp"
#include "kernels/optimizer_update.hpp"
#include "kernels/pooling.hpp"

namespace bigtrain::kernels {

struct BackendTable {
  // A function, not a constant table: the answer may depend on the machine (a CPU
  // with AVX-512 bf16 runs what another cannot).
  bool (*supports)(Op op, DType dtype);
  // Why supports(op, dtype) is false and what to do instead; ends the error message.
  std::string (*unsupported_reason)(Op op, DType dtype);

  std::unique_ptr<Conv2d> (*make_conv2d)(const Conv2dSpec& spec);
  // Null: the backend's convolutions take no per-call library memory.
  Conv2dLibraryScratch (*conv2d_library_scratch)(const Conv2dSpec& spec) = nullptr;
  std::unique_ptr<Linear> (*make_linear)(const LinearSpec& spec);
  std::unique_ptr<BatchNorm2d> (*make_batch_norm)(const BatchNormSpec& spec);
  // Whether make_batch_norm takes BatchNormSpec::relu; where not, kernels/batch_norm.cpp
  // runs the backend's BatchNorm and ReLU one after the other.
  bool batch_norm_fuses_relu = false;
  // Whether it takes BatchNormSpec::residual; where not, BatchNorm, add and ReLU in turn.
  bool batch_norm_fuses_residual = false;
  std::unique_ptr<GroupNorm> (*make_group_norm)(const GroupNormSpec& spec);
  std::unique_ptr<Pool2d> (*make_pool2d)(const Pool2dSpec& spec);
  void (*global_avg_pool_forward)(const Tensor& x, Tensor& y);
  void (*global_avg_pool_backward)(const Tensor& dy, Tensor& dx);

  void (*relu_forward)(const Tensor& x, Tensor& y);
  void (*relu_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);
  void (*add)(const Tensor& a, const Tensor& b, Tensor& out);
  void (*axpy)(float alpha, const Tensor& x, Tensor& y);
  void (*scale)(float alpha, Tensor& x);
  double (*sum_of_squares)(const Tensor& x);
  bool (*all_finite)(const Tensor& x);
  void (*dropout_forward)(const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset, Tensor& y,
                          Tensor& mask);
  void (*dropout_backward)(const Tensor& dy, const Tensor& mask, float p, Tensor& dx);

  void (*mean_rows_forward)(const Tensor& h, Tensor& z);
  void (*mean_rows_backward)(const Tensor& dz, Tensor& dh);
  void (*max_rows_forward)(const Tensor& h, Tensor& z, Tensor& argmax);
  void (*max_rows_backward)(const Tensor& dz, const Tensor& argmax, Tensor& dh);
  void (*tanh_forward)(const Tensor& x, Tensor& y);
  void (*tanh_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);
  void (*sigmoid_forward)(const Tensor& x, Tensor& y);
  void (*sigmoid_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);
  void (*multiply)(const Tensor& a, const Tensor& b, Tensor& out);
  void (*softmax_forward)(const Tensor& s, Tensor& a);
  void (*softmax_backward)(const Tensor& a, const Tensor& da, Tensor& ds);
  void (*weighted_sum_rows_forward)(const Tensor& a, const Tensor& h, Tensor& z);
  void (*weighted_sum_rows_backward)(const Tensor& a, const Tensor& h, const Tensor& dz, Tensor& da, Tensor& dh);

  float (*cross_entropy)(const Tensor& logits, const Tensor& targets, const Tensor* class_weights,
                         const CrossEntropyOptions& options, Tensor& dlogits, Tensor* probabilities);
  void (*sgd_update)(const SgdHyper& hyper, bool first_step, Tensor& param, const Tensor& grad,
                     Tensor& momentum_buffer);
  void (*adamw_update)(const AdamWHyper& hyper, std::int64_t step, Tensor& param, const Tensor& grad,
                       Tensor& exp_avg, Tensor& exp_avg_sq);
  void (*frozen_norm_scale_weights)(const FrozenNorm& norm, const Tensor& weight, Tensor& scaled_weight);
  void (*frozen_norm_gradients)(const FrozenNorm& norm, const Tensor& weight, const Tensor& raw_weight_grad,
                                const Tensor& output_grad_sum, Tensor& dweight, Tensor& dgamma, Tensor& dbeta,
                                bool accumulate);
};

// The table of `backend` after require_support(op, backend, dtype): an op the
// backend cannot run is an error naming op, backend and dtype, never a fallback.
const BackendTable& dispatch(Op op, Backend backend, DType dtype);

// Each backend's table, defined in its folder (cuda only in CUDA builds).
namespace reference {
const BackendTable& backend_table();
}
namespace cpu {
const BackendTable& backend_table();
}
namespace cuda {
const BackendTable& backend_table();
}

}  // namespace bigtrain::kernels
