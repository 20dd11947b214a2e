#pragma once
// What a network costs before it runs: per layer the output shape, parameters,
// FLOPs and the bytes its forward keeps for backward, and the peak memory of a
// training step, predicted by replaying the step's allocations.
//
// The replay mirrors net/'s layers statement by statement: each simulated layer
// allocates what the real one allocates (outputs, input gradients, parameter
// gradients before they are accumulated, saved statistics, max-pool workspaces),
// keeps what the real one keeps when keep_activations is on (a convolution its
// input, a BatchNorm its input and statistics, an in-place ReLU its output, which is
// the same buffer as the BatchNorm's output), and frees at the same points, with
// the same lifetimes of C++ temporaries in nested backward calls. Buffers are
// reference counted as Tensors are, so a tensor kept by two layers counts once.
// Every block is rounded as CachingAllocator::rounded_size rounds it, so the
// simulated peak is the peak that allocator's counter reports.
//
// What the kernels allocate inside a call (KernelMemoryModel) is the one part that
// depends on the backend: oneDNN reorders plain NCHW tensors into its blocked
// layouts in temporaries (kernels/cpu/conv2d.cpp's LayoutBridge) and max pooling
// into NHWC; cuDNN shares one workspace that grows to the largest request.
//
// Knows networks and shapes only, nothing of images or tiles (pipeline/plan does).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kernels/conv2d.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/tensor.hpp"
#include "net/aggregator.hpp"
#include "net/model_spec.hpp"

namespace bigtrain::net {

// Bytes a kernel call allocates beyond its inputs and outputs, freed when it returns.
struct KernelMemoryModel {
  Backend backend = Backend::cpu;
  // oneDNN's blocked activation and weight layouts (nChw8c / nChw16c) pad channels
  // to this multiple: 8 with AVX2, 16 with AVX-512.
  int cpu_channel_block = 8;
  // The cuDNN workspace is shared by all layers and grows to the largest request,
  // at most the context's limit (kernels/cuda/context.hpp); cuDNN chooses per
  // layer, so the plan counts the limit: an upper bound.
  std::size_t cuda_workspace_limit = std::size_t{256} << 20;

  // The model of `backend` on this machine (its CPU's vector width).
  static KernelMemoryModel for_backend(Backend backend);
};

// One row of the per-layer table.
struct LayerPlan {
  std::string name;  // state_dict prefix ("layer1.0.conv1"); a block's add+ReLU row is named after the block
  std::string kind;  // "conv 7x7/2", "batchnorm", "relu", "maxpool 3x3/2", "add+relu", "avgpool", "linear"
  Shape output;
  std::int64_t parameters = 0;    // trainable elements
  std::size_t parameter_bytes = 0;  // as allocated (rounded), one tensor per parameter
  std::size_t buffer_bytes = 0;     // running statistics, as allocated
  std::size_t output_bytes = 0;     // the output activation, as allocated
  // What this layer's forward keeps for backward and no earlier layer already keeps
  // (an in-place ReLU keeps the buffer its BatchNorm wrote, the next convolution the
  // same buffer again: counted once, at the BatchNorm).
  std::size_t kept_bytes = 0;
  double forward_flops = 0.0;   // multiply-adds x2 of convolutions and linear layers
  double backward_flops = 0.0;  // backward-data (unless the input gradient is off) + backward-weights
};

// Replays allocations with the caching allocator's rounding; blocks are freed when
// the last SimTensor holding them goes, as Tensor storage is.
class MemoryTrace {
 public:
  struct Block;
  // The current phase, recorded with the peak ("backward layer1.0.conv2"), after
  // the prefix of the caller's stage ("pass 2 ").
  void set_phase(const std::string& phase) { phase_ = prefix_ + phase; }
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  const std::string& phase() const { return phase_; }
  std::size_t current() const { return current_; }
  std::size_t peak() const { return peak_; }
  const std::string& peak_phase() const { return peak_phase_; }
  // Starts a new peak at the current level (Allocator::reset_peak).
  void reset_peak();

  std::shared_ptr<Block> allocate(std::size_t bytes);

 private:
  friend struct Block;
  void release(std::size_t rounded);

  std::size_t current_ = 0, peak_ = 0;
  std::string prefix_, phase_, peak_phase_;
};

struct MemoryTrace::Block {
  MemoryTrace* trace;
  std::size_t rounded;
  Block(MemoryTrace* t, std::size_t r) : trace(t), rounded(r) {}
  ~Block() { trace->release(rounded); }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
};

// A tensor of the replay: shape and (shared) storage, no data.
struct SimTensor {
  Shape shape;
  std::shared_ptr<MemoryTrace::Block> block;

  bool defined() const { return block != nullptr; }
  std::size_t bytes() const { return block ? block->rounded : 0; }
  std::int64_t dim(int axis) const { return shape.at(static_cast<std::size_t>(axis)); }
  static SimTensor allocate(MemoryTrace& trace, Shape shape, DType dtype = DType::f32);
  static SimTensor allocate_bytes(MemoryTrace& trace, std::size_t bytes);
  // Same storage, another shape (Tensor::reshape, slice_rows views).
  SimTensor view(Shape new_shape) const { return {std::move(new_shape), block}; }
};

// How the replay runs: the net/ForwardContext flags that change what is allocated.
struct SimContext {
  MemoryTrace* trace = nullptr;
  const KernelMemoryModel* kernels = nullptr;
  bool training = true;
  bool keep_activations = true;
  bool freeze_bn = false;
  // Parameter gradients already exist (the optimizer zeroed them before the step),
  // so each backward's fresh gradient is a temporary added into them; otherwise the
  // first backward keeps it as the gradient (Parameter::accumulate_grad).
  bool gradients_exist = true;
  // Rows of the per-layer table are appended here by a forward when set.
  std::vector<LayerPlan>* table = nullptr;
  // Blocks some row already counted as kept, so a buffer kept by several layers counts once.
  std::set<const void*> kept_blocks{};
};

// A simulated layer tree built from a spec, mirroring net/'s classes.
class SimLayer {
 public:
  virtual ~SimLayer() = default;
  virtual SimTensor forward(const SimTensor& x, SimContext& ctx) = 0;
  virtual SimTensor backward(const SimTensor& dy, SimContext& ctx) = 0;
  // Shapes of the trainable parameters and of the buffers, in the model's state order.
  virtual void parameter_shapes(std::vector<Shape>& parameters, std::vector<Shape>& buffers) const = 0;
};

// The encoder of `spec` (net::Encoder's structure: stem, blocks, global average pool).
std::unique_ptr<SimLayer> make_sim_encoder(const EncoderSpec& spec);
// nn.Linear (the head, `fc`).
std::unique_ptr<SimLayer> make_sim_linear(std::string name, std::int64_t in_features, std::int64_t out_features,
                                          bool bias = true);
// The aggregator (mean, max, attention) over features of size `features`.
std::unique_ptr<SimLayer> make_sim_aggregator(const AggregatorSpec& spec, std::int64_t features);

// Parameters of a layer tree, each allocated as its own tensor.
struct ParameterMemory {
  std::int64_t count = 0;           // elements
  std::size_t values = 0;           // bytes as allocated
  std::size_t gradients = 0;        // one gradient tensor per parameter
  std::size_t buffers = 0;          // running statistics
  std::size_t optimizer_slot = 0;   // one optimizer state tensor per parameter (x slots per optimizer)
};
ParameterMemory parameter_memory(const SimLayer& layer);

// Optimizer state tensors per parameter: AdamW 2 (exp_avg, exp_avg_sq), SGD 1 with
// momentum (momentum_buffer), 0 without.
int optimizer_slots(const std::string& optimizer, double momentum);

// One forward (keeping activations) and backward of an input batch through the
// encoder, on top of whatever `trace` already holds.
struct EncoderPlan {
  Shape input;
  std::vector<LayerPlan> layers;
  ParameterMemory parameters;
  double forward_flops = 0.0, backward_flops = 0.0;
  std::size_t input_bytes = 0;
  std::size_t kept_bytes = 0;  // activations kept for backward when the forward ends (input included)
  // Most bytes live at once above the parameters, gradients and buffers during
  // forward + backward of the batch, its input included.
  std::size_t train_peak = 0;
  std::string train_peak_phase;
  // The same for a forward without kept activations (pass 1, inference).
  std::size_t inference_peak = 0;
};

// `input` is [N, in_channels, H, W]. Throws bigtrain::Error when the input is too
// small for a layer (a kernel larger than its padded input).
EncoderPlan plan_encoder(const EncoderSpec& spec, const Shape& input, const KernelMemoryModel& kernels,
                         bool freeze_bn = false);

}  // namespace bigtrain::net
