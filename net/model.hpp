#pragma once
// A classifier: encoder (features [N, D]) + linear head `fc` (logits [N, classes]).
// For whole-image training the two are used together; the tile trainer calls the
// encoder per tile batch and the head on aggregated features.
//
// state_dict() / load_state_dict() use torchvision's names and layouts (OIHW conv
// weights, [out, in] fc weight, I64 num_batches_tracked), so a torchvision ResNet's
// state_dict saved as safetensors loads as it is, and ours loads into torchvision:
//
//   import torchvision, safetensors.torch
//   m = torchvision.models.resnet50(weights="IMAGENET1K_V2")
//   safetensors.torch.save_file(m.state_dict(), "resnet50.safetensors")
//   # model: {preset: resnet50, in_channels: 1, num_classes: 2, pretrained: resnet50.safetensors}
//   # loads with conv1 summed to one channel and a new 2-class head (both logged).
//
//   m.load_state_dict(safetensors.torch.load_file("bigtrain.safetensors"), strict=False)
//   # the other way (strict=False only to skip entries a bigtrain checkpoint adds
//   # beside the model's, e.g. an aggregator's or optimizer state).
//
// tests/net/torchvision_oracle.py writes and reads the format with struct and json
// alone, for machines without the `safetensors` package.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/encoder.hpp"
#include "net/linear.hpp"
#include "net/model_spec.hpp"
#include "net/safetensors.hpp"

namespace bigtrain::net {

struct LoadOptions {
  // A 3-channel conv1 loads into a 1-channel model summed over its input channels
  // (a gray image read by an RGB network sees r = g = b = gray).
  bool grayscale_transfer = true;
  // A head with another class count is re-initialised instead of an error.
  bool reinit_mismatched_head = true;
};

struct LoadReport {
  bool grayscale_transferred = false;
  bool head_reinitialised = false;
  std::vector<std::string> notes;  // what was adapted, also logged
};

class Model {
 public:
  // `initialise` false leaves every parameter zero (weights about to be loaded);
  // `seed` still re-initialises a mismatched head on load.
  Model(const ModelSpec& spec, std::uint64_t seed, bool initialise = true);

  const ModelSpec& spec() const { return spec_; }
  std::uint64_t seed() const { return seed_; }
  Encoder& encoder() { return *encoder_; }
  Linear& head() { return *head_; }

  // [N, in_channels, H, W] -> logits [N, num_classes].
  Tensor forward(const Tensor& x, const ForwardContext& ctx);
  // Gradient of the input (undefined unless encoder().set_input_grad(true)).
  Tensor backward(const Tensor& dlogits);

  StateRefs state();
  std::vector<Parameter*> parameters();
  std::int64_t parameter_count();
  void zero_grad();
  void clear_saved();
  void to(Device device);

  StateDict state_dict();
  // Every tensor of the model must be in `state` and vice versa, with the same
  // shape, except the adaptations in `options` (logged and reported). All other
  // problems are collected and thrown as one Error listing each tensor; the model
  // is left unchanged then. `source` names the file in messages.
  LoadReport load_state_dict(const StateDict& state, const LoadOptions& options = {},
                             const std::string& source = "state_dict");
  LoadReport load_safetensors(const std::filesystem::path& path, const LoadOptions& options = {});

 private:
  ModelSpec spec_;
  std::uint64_t seed_;
  std::unique_ptr<Encoder> encoder_;
  std::unique_ptr<Linear> head_;
};

}  // namespace bigtrain::net
