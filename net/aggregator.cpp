#include "net/aggregator.hpp"

#include <algorithm>

#include "kernels/aggregation.hpp"
#include "kernels/core/error.hpp"
#include "kernels/elementwise.hpp"
#include "net/memory_plan.hpp"

namespace bigtrain::net {
namespace {

Tensor like(const Shape& shape, Backend backend, DType dtype = DType::f32) {
  return Tensor::empty(shape, dtype, backend_device(backend));
}

class MeanAggregator : public Aggregator {
 public:
  using Aggregator::Aggregator;
  AggregatorKind kind() const override { return AggregatorKind::mean; }

 protected:
  Tensor pool(const Tensor& h, const ForwardContext& ctx) override {
    Tensor z = like({h.dim(1)}, ctx.backend);
    kernels::mean_rows_forward(ctx.backend, h, z);
    if (ctx.keep_activations) saved_.push_back({ctx.backend, h.dim(0)});
    return z;
  }
  Tensor pool_backward(const Tensor& dz) override {
    BT_CHECK(!saved_.empty(), "aggregator `{}`: backward without a kept forward", name());
    const Saved saved = saved_.back();
    saved_.pop_back();
    Tensor dh = like({saved.tiles, features()}, saved.backend);
    kernels::mean_rows_backward(saved.backend, dz, dh);
    return dh;
  }
  LayerFootprint pool_describe(const Shape& h, const PlanContext&) const override {
    LayerFootprint fp;
    fp.kind = aggregator_kind_name(kind());
    fp.output = {h[1]};
    return fp;
  }
  void clear_pool_saved() override { saved_.clear(); }
  std::size_t pool_saved_count() const override { return saved_.size(); }

 private:
  struct Saved {
    Backend backend;
    std::int64_t tiles;
  };
  std::vector<Saved> saved_;
};

// The instance vote pools log-probabilities, after the head (pipeline/two_pass.cpp);
// as a layer it is the mean, which is what it costs and keeps.
class InstanceAggregator final : public MeanAggregator {
 public:
  using MeanAggregator::MeanAggregator;
  AggregatorKind kind() const override { return AggregatorKind::instance; }
};

class MaxAggregator final : public Aggregator {
 public:
  using Aggregator::Aggregator;
  AggregatorKind kind() const override { return AggregatorKind::max; }

 protected:
  Tensor pool(const Tensor& h, const ForwardContext& ctx) override {
    Tensor z = like({h.dim(1)}, ctx.backend);
    Tensor argmax = like({h.dim(1)}, ctx.backend, DType::i32);
    kernels::max_rows_forward(ctx.backend, h, z, argmax);
    if (ctx.keep_activations) saved_.push_back({ctx.backend, h.dim(0), std::move(argmax)});
    return z;
  }
  Tensor pool_backward(const Tensor& dz) override {
    BT_CHECK(!saved_.empty(), "aggregator `{}`: backward without a kept forward", name());
    Saved saved = std::move(saved_.back());
    saved_.pop_back();
    Tensor dh = like({saved.tiles, features()}, saved.backend);
    kernels::max_rows_backward(saved.backend, dz, saved.argmax, dh);
    return dh;
  }
  LayerFootprint pool_describe(const Shape& h, const PlanContext& ctx) const override {
    LayerFootprint fp;
    fp.kind = "max";
    fp.output = {h[1]};
    const Shape argmax{h[1]};
    if (ctx.forward.keep_activations)
      fp.kept = {static_cast<std::size_t>(h[1]) * sizeof(std::int32_t)};
    else
      fp.forward_scratch = allocation_bytes(argmax, DType::i32);
    return fp;
  }
  void clear_pool_saved() override { saved_.clear(); }
  std::size_t pool_saved_count() const override { return saved_.size(); }

 private:
  struct Saved {
    Backend backend;
    std::int64_t tiles;
    Tensor argmax;
  };
  std::vector<Saved> saved_;
};

class AttentionAggregator final : public Aggregator {
 public:
  AttentionAggregator(std::string name, std::int64_t features, const AggregatorSpec& spec, std::uint64_t seed)
      : Aggregator(std::move(name), features, spec.dropout),
        gated_(spec.gated),
        v_(child_name(*this, "attention_V"), features, spec.hidden, seed),
        u_(child_name(*this, "attention_U"), features, gated_ ? spec.hidden : 1, seed),
        w_(child_name(*this, "attention_w"), spec.hidden, 1, seed, /*bias=*/false) {
    BT_CHECK(spec.hidden > 0, "aggregator `{}`: attention needs a positive hidden size, got {}", this->name(),
             spec.hidden);
  }
  AggregatorKind kind() const override { return AggregatorKind::attention; }

 protected:
  Tensor pool(const Tensor& h, const ForwardContext& ctx) override {
    const Backend b = ctx.backend;
    const std::int64_t n = h.dim(0);
    Tensor tanh_v = v_.forward(h, ctx);  // [N, L], V's pre-activation
    kernels::tanh_forward(b, tanh_v, tanh_v);
    Tensor gate, hidden = tanh_v;
    if (gated_) {
      gate = u_.forward(h, ctx);
      kernels::sigmoid_forward(b, gate, gate);
      hidden = like(tanh_v.shape(), b);
      kernels::multiply(b, tanh_v, gate, hidden);
    }
    Tensor scores = w_.forward(hidden, ctx).reshape({n});
    Tensor a = like({n}, b);
    kernels::softmax_forward(b, scores, a);
    Tensor z = like({h.dim(1)}, b);
    kernels::weighted_sum_rows_forward(b, a, h, z);
    attention_ = a;
    if (ctx.keep_activations) saved_.push_back({b, h, a, tanh_v, gate});
    return z;
  }

  Tensor pool_backward(const Tensor& dz) override {
    BT_CHECK(!saved_.empty(), "aggregator `{}`: backward without a kept forward", name());
    Saved s = std::move(saved_.back());
    saved_.pop_back();
    const Backend b = s.backend;
    const std::int64_t n = s.h.dim(0);
    Tensor da = like({n}, b), dh = like(s.h.shape(), b);
    kernels::weighted_sum_rows_backward(b, s.a, s.h, dz, da, dh);
    Tensor dscores = like({n}, b);
    kernels::softmax_backward(b, s.a, da, dscores);
    Tensor dhidden = w_.backward(dscores.reshape({n, 1}));  // [N, L]
    Tensor dtanh = dhidden;
    if (gated_) {
      dtanh = like(dhidden.shape(), b);
      kernels::multiply(b, dhidden, s.gate, dtanh);
      Tensor dgate = like(dhidden.shape(), b);
      kernels::multiply(b, dhidden, s.tanh_v, dgate);
      kernels::sigmoid_backward(b, s.gate, dgate, dgate);
      Tensor dh_u = u_.backward(dgate);
      kernels::add(b, dh, dh_u, dh);
    }
    kernels::tanh_backward(b, s.tanh_v, dtanh, dtanh);
    Tensor dh_v = v_.backward(dtanh);
    kernels::add(b, dh, dh_v, dh);
    return dh;
  }

  // pool() and pool_backward() allocation by allocation.
  LayerFootprint pool_describe(const Shape& h, const PlanContext& ctx) const override {
    const std::int64_t n = h[0], hidden = v_.out_features();
    const std::size_t rows = allocation_bytes({n}), h_sized = allocation_bytes(h);
    const std::size_t tanh_v = allocation_bytes({n, hidden});
    const std::size_t gate = gated_ ? allocation_bytes({n, u_.out_features()}) : 0;
    const std::size_t product = gated_ ? tanh_v : 0;  // tanh_v * gate, w's input when gated
    const std::size_t scores = allocation_bytes({n, 1});
    LayerFootprint fp;
    fp.kind = "attention";
    fp.output = {h[1]};
    fp.keeps_input = true;
    fp.retained = rows;  // a: attention_ for heatmaps, also what backward reads
    if (ctx.forward.keep_activations) {
      // tanh(V h), the gate and their product (w's kept input).
      for (std::size_t bytes : {tanh_v, gate, product})
        if (bytes > 0) fp.kept.push_back(bytes);
      fp.forward_scratch = scores;
    } else {
      fp.forward_scratch = tanh_v + gate + product + scores;
    }
    // Beside dH: da and dscores throughout, w's, U's and V's backward in turn.
    const std::size_t dhidden = tanh_v, dtanh = gated_ ? tanh_v : 0;
    const std::size_t w_backward = w_.describe({n, hidden}, ctx).backward_scratch;
    const std::size_t u_backward = gated_ ? tanh_v + h_sized + u_.describe(h, ctx).backward_scratch : 0;  // dgate, dH_u
    const std::size_t v_backward = h_sized + v_.describe(h, ctx).backward_scratch;                       // dH_v
    fp.backward_scratch = 2 * rows + dhidden + std::max({w_backward, dtanh + u_backward, dtanh + v_backward});
    return fp;
  }

  void clear_pool_saved() override {
    saved_.clear();
    v_.clear_saved();
    u_.clear_saved();
    w_.clear_saved();
  }
  std::size_t pool_saved_count() const override { return saved_.size(); }
  void collect_pool_state(StateRefs& refs) override {
    v_.collect_state(refs);
    if (gated_) u_.collect_state(refs);
    w_.collect_state(refs);
  }

 private:
  struct Saved {
    Backend backend;
    Tensor h, a, tanh_v, gate;  // gate undefined when not gated
  };
  bool gated_;
  // U is built even when not gated (with one output) so the members stay simple; it
  // is neither run nor listed in the state then.
  Linear v_, u_, w_;
  std::vector<Saved> saved_;
};

}  // namespace

AggregatorKind parse_aggregator_kind(const std::string& name) {
  if (name == "mean") return AggregatorKind::mean;
  if (name == "max") return AggregatorKind::max;
  if (name == "attention") return AggregatorKind::attention;
  if (name == "instance") return AggregatorKind::instance;
  throw Error(fmt::format("unknown aggregator '{}': expected mean, max, attention or instance", name));
}

const char* aggregator_kind_name(AggregatorKind kind) {
  switch (kind) {
    case AggregatorKind::mean: return "mean";
    case AggregatorKind::max: return "max";
    case AggregatorKind::attention: return "attention";
    case AggregatorKind::instance: return "instance";
  }
  return "?";
}

Aggregator::Aggregator(std::string name, std::int64_t features, float dropout)
    : Layer(std::move(name)), features_(features), dropout_(child_name(*this, "dropout"), dropout) {
  BT_CHECK(features > 0, "aggregator `{}`: needs a positive feature size, got {}", this->name(), features);
}

Tensor Aggregator::forward(const Tensor& h, const ForwardContext& ctx) {
  BT_CHECK(h.defined() && h.rank() == 2 && h.dim(1) == features_ && h.dim(0) > 0,
           "aggregator `{}` expects tile features [N>0, {}], got {}", name(), features_,
           h.defined() ? h.describe() : std::string("undefined"));
  Tensor z = pool(h, ctx).reshape({1, features_});
  return dropout_.forward(z, ctx);
}

Tensor Aggregator::backward(const Tensor& dz) {
  BT_CHECK(dz.defined() && dz.numel() == features_, "aggregator `{}`: gradient must hold {} values, got {}", name(),
           features_, dz.defined() ? dz.describe() : std::string("undefined"));
  Tensor g = dropout_.backward(dz.reshape({1, features_}));
  return pool_backward(g.reshape({features_}));
}

LayerFootprint Aggregator::describe(const Shape& h, const PlanContext& ctx) const {
  BT_CHECK(h.size() == 2 && h[1] == features_ && h[0] > 0, "aggregator `{}` expects tile features [N>0, {}], got {}",
           name(), features_, shape_str(h));
  return pool_describe(h, ctx);
}

PlannedTensor Aggregator::plan_forward(MemoryWalk& walk, const PlannedTensor& h) const {
  const PlannedTensor z = walk.leaf(*this, h);
  return walk.forward(dropout_, z.view({1, features_}));
}

void Aggregator::clear_saved() {
  dropout_.clear_saved();
  clear_pool_saved();
}

std::size_t Aggregator::saved_count() const { return pool_saved_count(); }

void Aggregator::collect_state(StateRefs& refs) { collect_pool_state(refs); }

std::unique_ptr<Aggregator> make_aggregator(const AggregatorSpec& spec, std::int64_t features, std::uint64_t seed,
                                            std::string name) {
  switch (spec.kind) {
    case AggregatorKind::mean: return std::make_unique<MeanAggregator>(std::move(name), features, spec.dropout);
    case AggregatorKind::max: return std::make_unique<MaxAggregator>(std::move(name), features, spec.dropout);
    case AggregatorKind::attention:
      return std::make_unique<AttentionAggregator>(std::move(name), features, spec, seed);
    case AggregatorKind::instance: return std::make_unique<InstanceAggregator>(std::move(name), features, spec.dropout);
  }
  throw Error("make_aggregator: unknown kind");
}

}  // namespace bigtrain::net
