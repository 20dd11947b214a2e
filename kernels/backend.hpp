#pragma once
// What each backend can run. Every op of kernels/ is one Op; supports() answers
// whether a backend runs it in a dtype on this machine and this build, so callers
// (the trainer, `bigtrain plan`) can refuse a configuration before building
// anything, and every op's dispatch asks the same question before it runs.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kernels/core/device.hpp"

namespace bigtrain::kernels {

// One entry per op family (an op's forward and backward share it).
enum class Op : std::uint8_t {
  conv2d,
  linear,
  batch_norm,
  group_norm,
  pool2d,
  global_avg_pool,
  relu,
  add,
  axpy,
  scale,
  sum_of_squares,
  all_finite,
  dropout,
  mean_rows,
  max_rows,
  tanh,
  sigmoid,
  multiply,
  softmax,
  weighted_sum_rows,
  cross_entropy,
  sgd_update,
  adamw_update,
  frozen_norm_conv,
};

const char* op_name(Op op);
std::span<const Op> all_ops();

// The dtype an op computes in: for conv2d and linear the spec's compute_dtype
// (their tensors stay float32, see Conv2dSpec::compute_dtype); for every other op
// the dtype of its floating-point tensors. The answer may depend on the machine
// (a CPU instruction set, a build without CUDA); it does not say whether a GPU is
// present: select_backend() (kernels/device_select.hpp) answers that.
bool supports(Op op, Backend backend, DType dtype);

// Empty when supports() is true, else a sentence naming op, dtype and backend and
// the backend's reason: "conv2d in float16 is not supported by the cpu backend: ...".
std::string why_unsupported(Op op, Backend backend, DType dtype);

// Throws bigtrain::Error with why_unsupported() when supports() is false;
// `context` (e.g. "run.yaml: train.precision bf16") starts the message when given.
void require_support(Op op, Backend backend, DType dtype, std::string_view context = {});

// A run with compute type `compute_dtype` (train.precision): conv2d and linear take
// it (Conv2dSpec::compute_dtype), every other op computes in float32.
DType op_dtype(Op op, DType compute_dtype);

// Empty when `backend` runs every op in op_dtype(op, compute_dtype), else the first
// refusal (why_unsupported). Asked for every op, not one model's: the layers,
// aggregators, loss and optimizers use them all between them, and a model built
// later (a resumed run, another aggregator) must not find a gap.
std::string why_backend_cannot_run(Backend backend, DType compute_dtype);

}  // namespace bigtrain::kernels
