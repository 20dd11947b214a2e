#include "net/model.hpp"

#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"

namespace bigtrain::net {

Model::Model(const ModelSpec& spec, std::uint64_t seed, bool initialise)
    : spec_(spec),
      seed_(seed),
      encoder_(std::make_unique<Encoder>(spec.encoder, initialise ? InitSeed(seed) : std::nullopt)),
      head_(std::make_unique<Linear>("fc", spec.encoder.feature_dim(), spec.num_classes,
                                     initialise ? InitSeed(seed) : std::nullopt)) {}

Tensor Model::forward(const Tensor& x, const ForwardContext& ctx) {
  const Tensor features = encoder_->forward(x, ctx);
  return head_->forward(features, ctx);
}

Tensor Model::backward(const Tensor& dlogits) { return encoder_->backward(head_->backward(dlogits)); }

StateRefs Model::state() {
  StateRefs refs;
  encoder_->collect_state(refs);
  head_->collect_state(refs);
  return refs;
}

std::vector<Parameter*> Model::parameters() { return state().parameters; }

std::int64_t Model::parameter_count() {
  std::int64_t count = 0;
  for (Parameter* parameter : parameters()) count += parameter->value.numel();
  return count;
}

void Model::zero_grad() {
  for (Parameter* parameter : parameters()) parameter->zero_grad();
}

void Model::clear_saved() {
  encoder_->clear_saved();
  head_->clear_saved();
}

void Model::to(Device device) {
  encoder_->to(device);
  head_->to(device);
}

StateDict Model::state_dict() {
  StateDict dict;
  StateRefs refs = state();
  for (Parameter* parameter : refs.parameters) dict[parameter->name] = StoredTensor::from_tensor(parameter->value);
  for (Buffer* buffer : refs.buffers) dict[buffer->name] = StoredTensor::from_tensor(buffer->value);
  for (Counter* counter : refs.counters) dict[counter->name] = StoredTensor::from_int64(counter->value);
  return dict;
}

namespace {

bool is_float(StoredDType dtype) {
  return dtype == StoredDType::F32 || dtype == StoredDType::F64 || dtype == StoredDType::F16 ||
         dtype == StoredDType::BF16;
}

// [O, C, kh, kw] -> [O, 1, kh, kw], summed over C (in double, then rounded once).
Tensor sum_input_channels(const Tensor& weight) {
  const std::int64_t out = weight.dim(0), channels = weight.dim(1), area = weight.dim(2) * weight.dim(3);
  Tensor summed = Tensor::empty({out, 1, weight.dim(2), weight.dim(3)});
  const float* in = weight.f32();
  float* result = summed.f32();
  for (std::int64_t o = 0; o < out; ++o)
    for (std::int64_t k = 0; k < area; ++k) {
      double total = 0.0;
      for (std::int64_t c = 0; c < channels; ++c) total += in[(o * channels + c) * area + k];
      result[o * area + k] = static_cast<float>(total);
    }
  return summed;
}

}  // namespace

LoadReport Model::load_state_dict(const StateDict& state, const LoadOptions& options, const std::string& source) {
  LoadReport report;
  std::vector<std::string> problems;
  std::set<std::string> used;
  StateRefs refs = this->state();
  const std::string stem_weight = encoder_->stem_conv().weight().name;

  // Head: a different class count (same feature size) is a new task, not an error.
  const Parameter& fc_weight = head_->weight();
  if (options.reinit_mismatched_head) {
    auto it = state.find(fc_weight.name);
    if (it != state.end() && it->second.shape.size() == 2 && it->second.shape[1] == fc_weight.value.dim(1) &&
        it->second.shape[0] != fc_weight.value.dim(0)) {
      const std::string bias_name = head_->bias() ? head_->bias()->name : std::string();
      auto bias = state.find(bias_name);
      if (bias_name.empty() || (bias != state.end() && bias->second.shape == Shape{it->second.shape[0]})) {
        report.head_reinitialised = true;
        report.notes.push_back(fmt::format("head `fc` has {} classes in {}, the model {}: re-initialised",
                                           it->second.shape[0], source, fc_weight.value.dim(0)));
        used.insert(fc_weight.name);
        if (!bias_name.empty()) used.insert(bias_name);
      }
    }
  }

  // Check everything first, assign only when all fits; convert one tensor at a time
  // then, so loading holds the checkpoint plus one tensor, not two copies of it.
  struct Assignment {
    Tensor* target;
    const StoredTensor* stored;
    bool sum_input_channels;
  };
  std::vector<Assignment> assignments;
  std::vector<std::pair<Counter*, std::int64_t>> counter_values;
  auto take_float = [&](const std::string& name, Tensor& target) {
    if (used.contains(name)) return;  // re-initialised head
    auto it = state.find(name);
    if (it == state.end()) {
      problems.push_back(fmt::format("missing: {} (model shape {})", name, shape_str(target.shape())));
      return;
    }
    used.insert(name);
    const StoredTensor& stored = it->second;
    if (!is_float(stored.dtype)) {
      problems.push_back(fmt::format("dtype: {} is {}, expected a floating-point type", name,
                                     stored_dtype_name(stored.dtype)));
      return;
    }
    const bool gray = name == stem_weight && options.grayscale_transfer && target.rank() == 4 &&
                      target.dim(1) == 1 && stored.shape.size() == 4 && stored.shape[1] == 3 &&
                      stored.shape[0] == target.dim(0) && stored.shape[2] == target.dim(2) &&
                      stored.shape[3] == target.dim(3);
    if (gray) {
      report.grayscale_transferred = true;
      report.notes.push_back(
          fmt::format("{} has 3 input channels in {}, the model 1: summed over input channels", name, source));
    } else if (stored.shape != target.shape()) {
      problems.push_back(fmt::format("shape: {} is {} in {}, the model has {}", name, shape_str(stored.shape), source,
                                     shape_str(target.shape())));
      return;
    }
    assignments.push_back({&target, &stored, gray});
  };
  for (Parameter* parameter : refs.parameters) take_float(parameter->name, parameter->value);
  for (Buffer* buffer : refs.buffers) take_float(buffer->name, buffer->value);
  for (Counter* counter : refs.counters) {
    auto it = state.find(counter->name);
    // PyTorch tolerates a missing num_batches_tracked (checkpoints from before 0.4.1)
    // and so do we: it only matters for BatchNorm with momentum=None.
    if (it == state.end()) continue;
    used.insert(counter->name);
    try {
      counter_values.emplace_back(counter, it->second.to_int64());
    } catch (const Error& error) {
      problems.push_back(fmt::format("dtype: {}: {}", counter->name, error.what()));
    }
  }
  for (const auto& [name, stored] : state)
    if (!used.contains(name))
      problems.push_back(fmt::format("unexpected: {} (shape {}) is not in the model", name, shape_str(stored.shape)));

  if (!problems.empty())
    throw Error(fmt::format("{} does not fit model '{}' ({} input channels, {} classes): {} problem(s):\n  {}", source,
                            spec_.encoder.preset, spec_.encoder.in_channels, spec_.num_classes, problems.size(),
                            fmt::join(problems, "\n  ")));

  for (const Assignment& assignment : assignments) {
    const Tensor value = assignment.stored->to_f32();
    assignment.target->copy_from(assignment.sum_input_channels ? sum_input_channels(value) : value);
  }
  for (auto& [counter, value] : counter_values) counter->value = value;
  if (report.head_reinitialised) head_->reset_parameters(seed_);
  for (const std::string& note : report.notes) spdlog::info("loading weights: {}", note);
  return report;
}

LoadReport Model::load_safetensors(const std::filesystem::path& path, const LoadOptions& options) {
  const SafetensorsFile file = read_safetensors(path);
  return load_state_dict(file.tensors, options, path.string());
}

}  // namespace bigtrain::net
