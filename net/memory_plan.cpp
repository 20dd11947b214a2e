#include "net/memory_plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/core/error.hpp"

namespace bigtrain::net {

// ---- trace ----------------------------------------------------------------------

std::shared_ptr<MemoryTrace::Block> MemoryTrace::allocate(std::size_t bytes) {
  current_ += bytes;
  if (current_ > peak_) {
    peak_ = current_;
    peak_phase_ = phase_;
  }
  return std::make_shared<Block>(this, bytes);
}

void MemoryTrace::reset_peak() {
  peak_ = current_;
  peak_phase_ = phase_;
}

PlannedTensor PlannedTensor::view(Shape shape) const {
  PlannedTensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

// ---- walk -----------------------------------------------------------------------

// What one kept call needs at its backward: the footprint's backward half, the
// blocks its forward keeps, and which tensors its input and output were.
struct TapeEntry {
  enum class Kind {
    call,     // a leaf's forward
    add,      // add_in_place
    hold,     // a composite's end: its caller holds the output gradient until
    release,  // the composite's backward returns, at its start
  };
  Kind kind = Kind::call;
  std::string name{};
  LayerFootprint::InputGradient input_gradient = LayerFootprint::InputGradient::allocated;
  std::size_t backward_scratch = 0;
  Shape input_shape{};
  int input = -1, other_input = -1, output = -1;  // other_input: an add's second operand
  std::vector<std::shared_ptr<MemoryTrace::Block>> kept{};
};

struct MemoryWalk::Tape {
  int input = -1, output = -1;
  std::vector<TapeEntry> entries;
};

MemoryWalk::MemoryWalk(MemoryTrace& trace, const KernelMemoryModel& kernels) : trace_(trace), kernels_(kernels) {}

MemoryWalk::~MemoryWalk() = default;

PlannedTensor MemoryWalk::allocate(const Shape& shape, DType dtype) {
  PlannedTensor t;
  t.shape_ = shape;
  t.block_ = trace_.allocate(allocation_bytes(shape, dtype));
  t.node_ = next_node_++;
  return t;
}

PlannedTensor MemoryWalk::run_forward(const Layer& layer, const PlannedTensor& x, const ForwardContext& ctx) {
  context_.forward = ctx;
  context_.forward.backend = kernels_.backend;
  context_.kernels = kernels_;
  auto tape = std::make_unique<Tape>();
  tape->input = x.node_;
  tapes_.push_back(std::move(tape));
  PlannedTensor y = layer.plan_forward(*this, x);
  if (!ctx.keep_activations) {
    tapes_.pop_back();
  } else {
    tapes_.back()->output = y.node_;
  }
  return y;
}

std::size_t MemoryWalk::count_kept(const std::shared_ptr<MemoryTrace::Block>& block) {
  if (!block || !context_.forward.keep_activations || !counted_kept_.insert(block.get()).second) return 0;
  return block->bytes;
}

PlannedTensor MemoryWalk::forward(const Layer& child, const PlannedTensor& x, bool row) {
  const bool rows = rows_;
  rows_ = rows_ && row;
  PlannedTensor y = forward_child(child, x);
  rows_ = rows;
  return y;
}

PlannedTensor MemoryWalk::forward_child(const Layer& child, const PlannedTensor& x) {
  if (!context_.forward.keep_activations) return child.plan_forward(*this, x);
  std::vector<TapeEntry>& entries = tapes_.back()->entries;
  const std::size_t begin = entries.size();
  entries.push_back({.kind = TapeEntry::Kind::release});
  PlannedTensor y = child.plan_forward(*this, x);
  if (entries.size() - begin <= 2)
    entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(begin));  // a leaf holds its dy itself
  else
    entries.push_back({.kind = TapeEntry::Kind::hold, .output = y.node_});
  return y;
}

PlannedTensor MemoryWalk::leaf(const Layer& layer, const PlannedTensor& x) {
  return leaf(layer, x, layer.describe(x.shape(), context_));
}

PlannedTensor MemoryWalk::leaf(const Layer& layer, const PlannedTensor& x, const LayerFootprint& fp, bool row) {
  const bool rows = rows_;
  rows_ = rows_ && row;
  PlannedTensor y = described_call(layer, x, fp);
  rows_ = rows;
  return y;
}

PlannedTensor MemoryWalk::described_call(const Layer& layer, const PlannedTensor& x, const LayerFootprint& fp) {
  const bool keep = context_.forward.keep_activations;
  trace_.set_phase("forward " + layer.name());
  if (fp.retained > 0) retained_.push_back(trace_.allocate(fp.retained));
  PlannedTensor y;
  if (fp.output_is_input) {
    y = x.view(fp.output);
  } else {
    y.shape_ = fp.output;
    y.block_ = trace_.allocate(allocation_bytes(fp.output));
  }
  y.node_ = next_node_++;
  // Kept tensors of the layer's own are allocated with the output, before the
  // call's scratch peaks; without keep_activations they die with the call.
  std::vector<std::shared_ptr<MemoryTrace::Block>> own;
  for (std::size_t bytes : fp.kept) own.push_back(trace_.allocate(allocation_bytes({static_cast<std::int64_t>(bytes)},
                                                                                   DType::u8)));
  if (fp.forward_scratch > 0) trace_.allocate(fp.forward_scratch);  // freed at once

  if (table_ && rows_ && !layer.name().empty() && !fp.kind.empty()) {
    LayerPlan row;
    row.name = layer.name();
    row.kind = fp.kind;
    row.output = y.shape();
    row.output_bytes = y.bytes();
    if (fp.keeps_input) row.kept_bytes += count_kept(x.block_);
    if (fp.keeps_output) row.kept_bytes += count_kept(y.block_);
    for (const auto& block : own) row.kept_bytes += count_kept(block);
    // state() is not const only because its pointers may be written through; these are read.
    const StateRefs refs = const_cast<Layer&>(layer).state();
    for (const Parameter* p : refs.parameters) {
      row.parameters += p->value.numel();
      row.parameter_bytes += allocation_bytes(p->value.shape(), p->value.dtype());
    }
    for (const Buffer* b : refs.buffers) row.buffer_bytes += allocation_bytes(b->value.shape(), b->value.dtype());
    row.forward_flops = fp.forward_flops;
    row.backward_flops = fp.backward_flops;
    table_->push_back(std::move(row));
  }
  if (keep) {
    TapeEntry entry{.name = layer.name(),
                    .input_gradient = fp.input_gradient,
                    .backward_scratch = fp.backward_scratch,
                    .input_shape = x.shape(),
                    .input = x.node_,
                    .output = y.node_,
                    .kept = std::move(own)};
    if (fp.keeps_input && x.block_) entry.kept.push_back(x.block_);
    if (fp.keeps_output && y.block_) entry.kept.push_back(y.block_);
    tapes_.back()->entries.push_back(std::move(entry));
  }
  return y;
}

PlannedTensor MemoryWalk::add_in_place(const PlannedTensor& into, const PlannedTensor& other) {
  BT_CHECK(into.shape() == other.shape(), "memory plan: adding {} into {}", shape_str(other.shape()),
           shape_str(into.shape()));
  PlannedTensor sum = into;
  sum.node_ = next_node_++;
  if (context_.forward.keep_activations)
    tapes_.back()->entries.push_back(
        {.kind = TapeEntry::Kind::add, .name = "add", .input = into.node_, .other_input = other.node_, .output = sum.node_});
  return sum;
}

void MemoryWalk::row(const std::string& name, const std::string& kind, const PlannedTensor& y) {
  if (!table_) return;
  LayerPlan row;
  row.name = name;
  row.kind = kind;
  row.output = y.shape();
  row.output_bytes = y.bytes();
  // Kept if some tape entry holds the block beyond the caller's own reference.
  bool held = false;
  for (const TapeEntry& entry : tapes_.back()->entries)
    held = held || std::any_of(entry.kept.begin(), entry.kept.end(), [&](const auto& b) { return b == y.block_; });
  if (held) row.kept_bytes = count_kept(y.block_);
  table_->push_back(std::move(row));
}

void MemoryWalk::deposit_gradient(int node, PlannedTensor gradient) {
  // A tensor read by two consumers (a block's input: main branch and shortcut)
  // gets the second gradient added into the first, which then is dropped.
  gradients_.try_emplace(node, std::move(gradient));
}

void MemoryWalk::backward_entry(TapeEntry& entry) {
  if (entry.kind == TapeEntry::Kind::hold) {
    const auto it = gradients_.find(entry.output);
    held_gradients_.push_back(it == gradients_.end() ? PlannedTensor() : it->second);
    return;
  }
  if (entry.kind == TapeEntry::Kind::release) {
    held_gradients_.pop_back();
    return;
  }
  auto it = gradients_.find(entry.output);
  BT_CHECK(it != gradients_.end(), "memory plan: no gradient reaches `{}`", entry.name);
  PlannedTensor dy = std::move(it->second);
  gradients_.erase(it);
  if (entry.kind == TapeEntry::Kind::add) {
    deposit_gradient(entry.input, dy);
    deposit_gradient(entry.other_input, dy);
    return;
  }
  trace_.set_phase("backward " + entry.name);
  using InputGradient = LayerFootprint::InputGradient;
  PlannedTensor dx;
  if (entry.input_gradient == InputGradient::allocated) {
    dx.shape_ = entry.input_shape;
    dx.block_ = trace_.allocate(allocation_bytes(entry.input_shape));
  } else if (entry.input_gradient == InputGradient::output_gradient) {
    dx = dy.view(entry.input_shape);
  }
  if (entry.backward_scratch > 0) trace_.allocate(entry.backward_scratch);  // freed at once
  entry.kept.clear();  // what the forward kept goes with its backward
  if (entry.input_gradient != InputGradient::none) deposit_gradient(entry.input, std::move(dx));
}

PlannedTensor MemoryWalk::run_backward(const PlannedTensor& dy) {
  BT_CHECK(!tapes_.empty(), "memory plan: backward without a kept forward");
  std::unique_ptr<Tape> tape = std::move(tapes_.back());
  tapes_.pop_back();
  gradients_.clear();
  gradients_.emplace(tape->output, dy);
  for (auto it = tape->entries.rbegin(); it != tape->entries.rend(); ++it) backward_entry(*it);
  PlannedTensor dx;
  if (auto it = gradients_.find(tape->input); it != gradients_.end()) dx = std::move(it->second);
  gradients_.clear();
  return dx;
}

// ---- summaries ------------------------------------------------------------------

LayerFootprint describe_by_walking(const Layer& layer, const Shape& input, const PlanContext& ctx) {
  MemoryTrace trace;
  MemoryWalk walk(trace, ctx.kernels);
  LayerFootprint fp;
  std::vector<LayerPlan> rows;
  walk.record_table(&rows);
  {
    const PlannedTensor x = walk.allocate(input);
    const std::size_t start = trace.current();
    trace.reset_peak();
    PlannedTensor y = walk.run_forward(layer, x, ctx.forward);
    fp.output = y.shape();
    const std::size_t end = trace.current();
    fp.forward_scratch = trace.peak() - end;
    if (end > start + y.bytes()) fp.kept.push_back(end - start - y.bytes());
    if (ctx.forward.keep_activations) {
      PlannedTensor dy = walk.allocate(y.shape());
      y = {};
      const std::size_t before = trace.current();
      trace.reset_peak();
      const PlannedTensor dx = walk.run_backward(dy);
      fp.input_gradient = dx.bytes() > 0 ? LayerFootprint::InputGradient::allocated : LayerFootprint::InputGradient::none;
      fp.backward_scratch = trace.peak() - before;
    }
  }
  for (const LayerPlan& row : rows) {
    fp.forward_flops += row.forward_flops;
    fp.backward_flops += row.backward_flops;
  }
  return fp;
}

ParameterMemory parameter_memory(Layer& layer) {
  const StateRefs refs = layer.state();
  ParameterMemory memory;
  for (const Parameter* p : refs.parameters) {
    memory.count += p->value.numel();
    memory.values += allocation_bytes(p->value.shape(), p->value.dtype());
  }
  memory.gradients = memory.values;
  memory.optimizer_slot = memory.values;
  for (const Buffer* b : refs.buffers) memory.buffers += allocation_bytes(b->value.shape(), b->value.dtype());
  return memory;
}

int optimizer_slots(OptimizerKind optimizer, double momentum) {
  switch (optimizer) {
    case OptimizerKind::adamw: return 2;
    case OptimizerKind::sgd: return momentum != 0.0 ? 1 : 0;
  }
  return 0;
}

namespace {

bool row_of_child(const LayerPlan& row, const std::string& child) {
  return row.name == child || row.name.starts_with(child + ".");
}

// Every tail the encoder can be split before: its FLOPs summed from the table's rows
// (grouped by the encoder's top-level children: rows are named after the layers that
// made them, a block's add+ReLU after the block), its kept bytes from a walk of the
// tail alone, so that its input counts once, kept by whichever of its layers keeps
// it first, or not at all.
std::vector<EncoderPlan::Tail> plan_tails(Encoder& encoder, const std::vector<LayerPlan>& rows,
                                          const KernelMemoryModel& kernels, const ForwardContext& ctx) {
  const std::size_t children = encoder.size();
  std::vector<std::size_t> first_row(children + 1, rows.size());
  std::size_t row = 0;
  for (std::size_t c = 0; c < children; ++c) {
    first_row[c] = row;
    while (row < rows.size() && row_of_child(rows[row], encoder.at(c).name())) ++row;
  }
  if (row != rows.size()) return {};  // a row no child claims: no tail figures rather than wrong ones
  std::vector<EncoderPlan::Tail> tails;
  double flops = 0.0;
  for (std::size_t c = children; c-- > 1;) {
    for (std::size_t r = first_row[c]; r < first_row[c + 1]; ++r) flops += rows[r].forward_flops;
    if (!encoder.splits_at(c) || first_row[c] == 0) continue;
    MemoryTrace trace;
    MemoryWalk walk(trace, kernels);
    std::vector<LayerPlan> tail_rows;
    walk.record_table(&tail_rows);
    PlannedTensor h = walk.allocate(rows[first_row[c] - 1].output);
    for (std::size_t t = c; t < children; ++t) h = walk.run_forward(encoder.at(t), h, ctx);
    std::size_t kept = 0;
    for (const LayerPlan& tail_row : tail_rows) kept += tail_row.kept_bytes;
    tails.push_back({.children = children - c, .first = encoder.at(c).name(), .kept_bytes = kept, .forward_flops = flops});
  }
  return tails;
}

}  // namespace

EncoderPlan plan_encoder(Encoder& encoder, const Shape& input, const KernelMemoryModel& kernels, bool freeze_bn,
                         DType compute_dtype) {
  const EncoderSpec& spec = encoder.spec();
  BT_CHECK(input.size() == 4 && input[1] == spec.in_channels && input[0] > 0 && input[2] > 0 && input[3] > 0,
           "plan of encoder '{}': input must be [N>0, {}, H>0, W>0], got {}", spec.preset, spec.in_channels,
           shape_str(input));
  EncoderPlan plan;
  plan.input = input;
  plan.parameters = parameter_memory(encoder);
  ForwardContext ctx = ForwardContext::train(kernels.backend);
  ctx.freeze_bn = freeze_bn;
  ctx.compute_dtype = compute_dtype;
  ForwardContext inference = ForwardContext::inference(kernels.backend);
  inference.compute_dtype = compute_dtype;  // evaluation computes as training does
  auto forward_peak = [&](const ForwardContext& forward) {
    MemoryTrace trace;
    MemoryWalk walk(trace, kernels);
    const PlannedTensor x = walk.allocate(input);
    const PlannedTensor features = walk.run_forward(encoder, x, forward);
    return trace.peak();
  };
  ctx.keep_activations = false;
  plan.pass1_peak = forward_peak(ctx);
  plan.inference_peak = forward_peak(inference);
  MemoryTrace trace;
  MemoryWalk walk(trace, kernels);
  {
    const PlannedTensor x = walk.allocate(input);
    plan.input_bytes = x.bytes();
    walk.record_table(&plan.layers);
    ctx.keep_activations = true;
    const PlannedTensor features = walk.run_forward(encoder, x, ctx);
    walk.record_table(nullptr);
    for (const LayerPlan& row : plan.layers) plan.kept_bytes += row.kept_bytes;
    // The upstream gradient is a view of rows the caller holds (dL/dH): no allocation.
    walk.run_backward(PlannedTensor().view(features.shape()));
  }
  plan.train_peak = trace.peak();
  plan.train_peak_phase = trace.peak_phase();
  for (const LayerPlan& row : plan.layers) {
    plan.forward_flops += row.forward_flops;
    plan.backward_flops += row.backward_flops;
  }
  plan.tails = plan_tails(encoder, plan.layers, kernels, ctx);
  return plan;
}

EncoderPlan plan_encoder(const EncoderSpec& spec, const Shape& input, const KernelMemoryModel& kernels,
                         bool freeze_bn, DType compute_dtype) {
  Encoder encoder(spec, std::nullopt);
  return plan_encoder(encoder, input, kernels, freeze_bn, compute_dtype);
}

}  // namespace bigtrain::net
