#pragma once
// What a network costs before it runs: per layer the output shape, parameters,
// FLOPs and the bytes its forward keeps for backward, and the peak memory of
// forwards and backwards, found by walking the real model (the objects training
// builds, whose activations are never allocated) and asking each layer for its
// footprint (net/footprint.hpp).
//
// The walk replays the allocations of the calls: a layer's output, its scratch at
// the call's peak, what it keeps, then on backward its input gradient and scratch.
// Blocks are reference counted as Tensor storage is, so a buffer kept by several
// layers (a BatchNorm output that an in-place ReLU and the next convolution keep)
// counts once and is freed with its last holder, and every block is rounded as
// HostAllocator::rounded_size rounds it. Composites (Sequential, the residual
// blocks) tell the walk which child runs on which tensor (Layer::plan_forward);
// backward is the recorded forward in reverse, gradients freed once their
// producer's backward has consumed them, as autograd does. Where the real code
// holds a temporary a little longer or shorter than that (a nested call's result
// living to the end of its statement) the walk differs from the allocator's
// counter; tests/pipeline/plan_test.cpp measures by how much.
//
// Knows networks and shapes only, nothing of images or tiles (pipeline/plan does).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/core/device.hpp"
#include "kernels/core/tensor.hpp"
#include "net/encoder.hpp"
#include "net/footprint.hpp"
#include "net/layer.hpp"
#include "net/model_spec.hpp"
#include "net/optimizer.hpp"

namespace bigtrain::net {

// One row of the per-layer table.
struct LayerPlan {
  std::string name;  // state_dict prefix ("layer1.0.conv1"); a block's add+ReLU row is named after the block
  std::string kind;  // "conv 7x7/2", "batchnorm", "relu", "maxpool 3x3/2", "add+relu", "avgpool", "linear"
  Shape output;
  std::int64_t parameters = 0;      // trainable elements
  std::size_t parameter_bytes = 0;  // as allocated (rounded), one tensor per parameter
  std::size_t buffer_bytes = 0;     // running statistics, as allocated
  std::size_t output_bytes = 0;     // the output activation, as allocated
  // What this layer's forward keeps for backward and no earlier layer already keeps
  // (an in-place ReLU keeps the buffer its BatchNorm wrote, the next convolution the
  // same buffer again: counted once, at the first of them with a row).
  std::size_t kept_bytes = 0;
  double forward_flops = 0.0;
  double backward_flops = 0.0;
};

// Bytes handed out at once, with the peak and where it was reached.
class MemoryTrace {
 public:
  struct Block;
  // The current phase, recorded with the peak ("backward layer1.0.conv2"), after
  // the prefix of the caller's stage ("pass 2 ").
  void set_phase(const std::string& phase) { phase_ = prefix_ + phase; }
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  std::size_t current() const { return current_; }
  std::size_t peak() const { return peak_; }
  const std::string& peak_phase() const { return peak_phase_; }
  // Starts a new peak at the current level (Allocator::reset_peak).
  void reset_peak();
  // `bytes` already rounded; freed when the last holder of the block lets go.
  std::shared_ptr<Block> allocate(std::size_t bytes);

 private:
  friend struct Block;
  std::size_t current_ = 0, peak_ = 0;
  std::string prefix_, phase_, peak_phase_;
};

struct MemoryTrace::Block {
  MemoryTrace* trace;
  std::size_t bytes;
  Block(MemoryTrace* t, std::size_t b) : trace(t), bytes(b) {}
  ~Block() { trace->current_ -= bytes; }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
};

// A tensor of the walk: a shape and (shared) storage, no data.
class PlannedTensor {
 public:
  PlannedTensor() = default;
  const Shape& shape() const { return shape_; }
  std::size_t bytes() const { return block_ ? block_->bytes : 0; }
  // The same storage under another shape (Tensor::reshape, slice_rows).
  PlannedTensor view(Shape shape) const;

 private:
  friend class MemoryWalk;
  Shape shape_;
  std::shared_ptr<MemoryTrace::Block> block_;
  int node_ = -1;  // which forward produced it, to route its gradient
};

// Walks layers over planned tensors on one trace. The trace must outlive every
// PlannedTensor the walk hands out.
class MemoryWalk {
 public:
  explicit MemoryWalk(MemoryTrace& trace, const KernelMemoryModel& kernels);
  ~MemoryWalk();

  MemoryTrace& trace() { return trace_; }
  // A tensor of the caller's own (an input batch, tile features H, targets).
  PlannedTensor allocate(const Shape& shape, DType dtype = DType::f32);
  // Rows of the per-layer table are appended here by forwards while set.
  void record_table(std::vector<LayerPlan>* table) { table_ = table; }

  // One forward of `layer` as `ctx` runs it. With ctx.keep_activations, what it
  // keeps stays held until run_backward pops it (several forwards may be held,
  // popped last first, as the layers' saved stacks).
  PlannedTensor run_forward(const Layer& layer, const PlannedTensor& x, const ForwardContext& ctx);
  // Backward of the most recent kept run_forward from the output gradient `dy`
  // (a tensor of the caller's, possibly without storage of its own); returns the
  // input gradient, undefined when the network computes none.
  PlannedTensor run_backward(const PlannedTensor& dy);

  // ---- for Layer::plan_forward -------------------------------------------------
  const PlanContext& context() const { return context_; }
  // A child's forward, as the composite's forward calls it; `row` false leaves it
  // out of the table (a residual block's ReLUs: the block's "add+relu" row shows them).
  PlannedTensor forward(const Layer& child, const PlannedTensor& x, bool row = true);
  // The default plan_forward: one call described by layer.describe().
  PlannedTensor leaf(const Layer& layer, const PlannedTensor& x);
  // One call of `layer` described by `fp` instead: a composite that runs a child
  // other than its forward does (net/conv_bn_fusion.hpp's fused layers).
  PlannedTensor leaf(const Layer& layer, const PlannedTensor& x, const LayerFootprint& fp, bool row = true);
  // kernels::add(into, other, into): `into` then holds the sum; backward hands the
  // sum's gradient to both.
  PlannedTensor add_in_place(const PlannedTensor& into, const PlannedTensor& other);
  // A table row for a composite's own step (a residual block's "add+relu"): `y`'s
  // storage counts as kept there if a layer keeps it and no row counted it yet.
  void row(const std::string& name, const std::string& kind, const PlannedTensor& y);

 private:
  struct Tape;
  PlannedTensor forward_child(const Layer& child, const PlannedTensor& x);
  PlannedTensor described_call(const Layer& layer, const PlannedTensor& x, const LayerFootprint& fp);
  void backward_entry(struct TapeEntry& entry);
  void deposit_gradient(int node, PlannedTensor gradient);
  std::size_t count_kept(const std::shared_ptr<MemoryTrace::Block>& block);

  MemoryTrace& trace_;
  KernelMemoryModel kernels_;
  PlanContext context_;
  std::vector<LayerPlan>* table_ = nullptr;
  bool rows_ = true;
  std::set<const void*> counted_kept_;
  std::vector<std::unique_ptr<Tape>> tapes_;
  std::unordered_map<int, PlannedTensor> gradients_;
  std::vector<PlannedTensor> held_gradients_;
  std::vector<std::shared_ptr<MemoryTrace::Block>> retained_;
  int next_node_ = 0;
};

// The summary a composite gives as its own describe(): its children walked on a
// scratch trace (output shape, kept bytes, FLOPs, peaks of its calls as scratch).
LayerFootprint describe_by_walking(const Layer& layer, const Shape& input, const PlanContext& ctx);

// Parameters of a layer tree, each allocated as its own tensor.
struct ParameterMemory {
  std::int64_t count = 0;          // elements
  std::size_t values = 0;          // bytes as allocated
  std::size_t gradients = 0;       // one gradient tensor per parameter
  std::size_t buffers = 0;         // running statistics
  std::size_t optimizer_slot = 0;  // one optimizer state tensor per parameter (x slots per optimizer)
};
ParameterMemory parameter_memory(Layer& layer);

// Optimizer state tensors per parameter: AdamW 2 (exp_avg, exp_avg_sq), SGD 1 with
// momentum (momentum_buffer), 0 without.
int optimizer_slots(OptimizerKind optimizer, double momentum);

// One forward (keeping activations) and backward of an input batch through the
// encoder.
struct EncoderPlan {
  Shape input;
  std::vector<LayerPlan> layers;
  ParameterMemory parameters;
  double forward_flops = 0.0, backward_flops = 0.0;
  std::size_t input_bytes = 0;
  // Activations one batch keeps for backward when its forward ends (input
  // included): what each tile batch would hold if pass 1 kept its activations
  // instead of pass 2 recomputing them.
  std::size_t kept_bytes = 0;
  // Most bytes live at once above the parameters, gradients and buffers during
  // forward + backward of the batch, its input included.
  std::size_t train_peak = 0;
  std::string train_peak_phase;
  // The same for a forward that keeps nothing: training BatchNorm statistics
  // (pass 1), running statistics (inference, evaluation).
  std::size_t pass1_peak = 0;
  std::size_t inference_peak = 0;
  // Pass 1 keeping only the encoder's last children of a batch (a two-pass step's
  // kept tail, pipeline/engine/two_pass.hpp): one entry per child the encoder may
  // be split before, the shortest tail first. kept_bytes is what the tail keeps of
  // one batch, its input included (at most one activation more than it holds where
  // its first child keeps no input); forward_flops what pass 2 then need not recompute.
  struct Tail {
    std::size_t children = 0;  // the last `children` of the encoder's top-level layers
    std::string first;         // the first of them ("layer4.0")
    std::size_t kept_bytes = 0;
    double forward_flops = 0.0;
  };
  std::vector<Tail> tails;
};

// `input` is [N, in_channels, H, W]. Throws bigtrain::Error when the input is too
// small for a layer (a kernel larger than its padded input).
// compute_dtype: train.precision, the convolutions' operands (ForwardContext's).
EncoderPlan plan_encoder(Encoder& encoder, const Shape& input, const KernelMemoryModel& kernels,
                         bool freeze_bn = false, DType compute_dtype = DType::f32);
// The same on an encoder built from `spec` (parameters allocated, not initialised).
EncoderPlan plan_encoder(const EncoderSpec& spec, const Shape& input, const KernelMemoryModel& kernels,
                         bool freeze_bn = false, DType compute_dtype = DType::f32);

}  // namespace bigtrain::net
