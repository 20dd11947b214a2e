#include "net/training_ops.hpp"

#include <algorithm>

namespace bigtrain::net {

using kernels::Op;

std::vector<OpUse> training_ops(const ModelSpec& model, const AggregatorSpec& aggregator, OptimizerKind optimizer,
                                DType compute_dtype) {
  const EncoderSpec& encoder = model.encoder;
  std::vector<Op> ops{Op::conv2d, encoder.norm == NormKind::group ? Op::group_norm : Op::batch_norm, Op::relu};
  // Training through frozen BatchNorm inside the convolutions (net/conv_bn_fusion.hpp).
  if (encoder.norm != NormKind::group) ops.push_back(Op::frozen_norm_conv);
  if (encoder.stem.maxpool) ops.push_back(Op::pool2d);
  if (encoder.family != EncoderFamily::small) ops.push_back(Op::add);  // the residual blocks' sum
  ops.push_back(Op::global_avg_pool);
  switch (aggregator.kind) {
    case AggregatorKind::mean:
    case AggregatorKind::instance: ops.push_back(Op::mean_rows); break;  // the vote's layer is the mean
    case AggregatorKind::max: ops.push_back(Op::max_rows); break;
    case AggregatorKind::attention:
      ops.insert(ops.end(), {Op::linear, Op::tanh});
      if (aggregator.gated) ops.insert(ops.end(), {Op::sigmoid, Op::multiply});
      ops.insert(ops.end(), {Op::softmax, Op::weighted_sum_rows, Op::add});
      break;
  }
  if (aggregator.dropout > 0.0f) ops.push_back(Op::dropout);
  ops.insert(ops.end(), {Op::linear, Op::cross_entropy});
  ops.push_back(optimizer == OptimizerKind::sgd ? Op::sgd_update : Op::adamw_update);
  ops.insert(ops.end(), {Op::axpy, Op::scale, Op::sum_of_squares, Op::all_finite});

  std::vector<OpUse> uses;
  for (Op op : ops) {
    const OpUse use{op, kernels::op_dtype(op, compute_dtype)};
    if (std::find(uses.begin(), uses.end(), use) == uses.end()) uses.push_back(use);
  }
  return uses;
}

std::string why_backend_refuses(const std::vector<OpUse>& ops, Backend backend) {
  for (const OpUse& use : ops)
    if (std::string why = kernels::why_unsupported(use.op, backend, use.dtype); !why.empty()) return why;
  return {};
}

}  // namespace bigtrain::net
