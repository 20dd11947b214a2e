#pragma once
// The kernels ops one training run calls, each in the dtype it computes in, from the
// specs alone: the trainer and `bigtrain plan` ask the backend about each
// (kernels::supports) before anything is built, so a combination the backend cannot
// run is refused when the config is read, naming op, backend and dtype.
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "net/aggregator.hpp"
#include "net/model_spec.hpp"
#include "net/optimizer.hpp"

namespace bigtrain::net {

struct OpUse {
  kernels::Op op;
  DType dtype;
  friend bool operator==(const OpUse&, const OpUse&) = default;
};

// Each op once, in the order a step first calls it: the encoder's layers (the stem's
// max-pool, the residual blocks' add only where the spec has them), the aggregator
// `aggregator.kind` builds, the classifier, the loss, the optimizer's update and the
// step's gradient arithmetic (accumulation, scaling, clipping and the finite check).
// `compute_dtype` (train.precision) is what conv2d and linear compute in
// (kernels::op_dtype).
std::vector<OpUse> training_ops(const ModelSpec& model, const AggregatorSpec& aggregator, OptimizerKind optimizer,
                                DType compute_dtype);

// Empty when `backend` runs every op of `ops`, else the first refusal
// (kernels::why_unsupported: "conv2d in bfloat16 is not supported by the cpu backend: ...").
std::string why_backend_refuses(const std::vector<OpUse>& ops, Backend backend);

}  // namespace bigtrain::net
