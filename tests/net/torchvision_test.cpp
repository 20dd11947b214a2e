// Weights move both ways between bigtrain and PyTorch without conversion: a
// torchvision ResNet's state_dict saved as safetensors loads into bigtrain and gives
// PyTorch's logits, and bigtrain's state_dict loads into torchvision with
// strict=True and gives bigtrain's. Runs when Debian's /usr/bin/python3 has torch
// and torchvision (python3-torch, python3-torchvision); skips saying so otherwise.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "net/model.hpp"
#include "tests/net/net_testing.hpp"

namespace bigtrain::net {
namespace {

using namespace bigtrain::net::testing;
namespace fs = std::filesystem;

const char* kPython = "/usr/bin/python3";

// Why torch cannot serve as the oracle here, or empty when it can. find_spec does
// not import (importing torch costs seconds; the oracle run itself does that once).
std::string torch_unavailable() {
  if (!fs::exists(kPython)) return "/usr/bin/python3 is not installed";
  const std::string probe = fmt::format(
      "{} -c 'import importlib.util as u, sys; sys.exit(0 if u.find_spec(\"torch\") and u.find_spec(\"torchvision\") "
      "else 1)' >/dev/null 2>&1",
      kPython);
  if (std::system(probe.c_str()) != 0)
    return "/usr/bin/python3 has no torch/torchvision (install Debian's python3-torch and python3-torchvision; see "
           "/tmp/apt-torch.log)";
  return {};
}

struct Case {
  std::string arch;
  int in_channels, classes, batch, size;
  // "+gn": torchvision's norm_layer=GroupNorm(gcd(32, C), C), bigtrain's model.norm: group.
  bool group_norm() const { return arch.ends_with("+gn"); }
  std::string preset() const { return group_norm() ? arch.substr(0, arch.size() - 3) : arch; }
  std::string tag() const {
    return fmt::format("{}{}_{}ch", preset(), group_norm() ? "_gn" : "", in_channels);
  }
  ModelSpec spec(int channels) const {
    ModelSpec spec;
    spec.encoder = EncoderSpec::preset_spec(preset());
    if (group_norm()) spec.encoder.norm = NormKind::group;
    spec.encoder.in_channels = channels;
    spec.num_classes = classes;
    return spec;
  }
};

// Both sides compute in float32 with their own summation orders (oneDNN here,
// PyTorch's own kernels there). Each conv output differs by ~sqrt(K) eps_f32
// ~ 1e-6..1e-5 of its rms; in eval mode BatchNorm is affine and ReLU/pooling pass
// differences through; over ~20-50 layers they add up to a few 1e-6 of the
// logits' rms (measured: at most 4e-6, ResNet-50). 1e-4 of the rms leaves a 25x
// margin; a wrongly loaded tensor (transposed filter, swapped running mean/var,
// misplaced stride) changes logits by O(1).
const Tolerance kLogitTolerance{1e-4, 1e-6};

TEST(Torchvision, WeightsMoveBothWaysWithEqualLogits) {
  if (const std::string reason = torch_unavailable(); !reason.empty()) GTEST_SKIP() << reason;
  const std::vector<Case> cases{{"resnet18", 1, 5, 2, 64},
                                {"resnet18", 3, 4, 1, 48},  // and grayscale transfer
                                // The stride on a Bottleneck's 3x3 conv (v1.5) only shows in values.
                                {"resnet50", 1, 3, 1, 64},
                                {"resnet18+gn", 1, 4, 2, 64}};
  const fs::path dir = fs::temp_directory_path() / fmt::format("bigtrain_torchvision_{}", ::getpid());
  fs::create_directories(dir);
  auto python = [&](const std::string& arguments) {
    const std::string command =
        fmt::format("{} {}/tests/net/torchvision_oracle.py {}", kPython, BIGTRAIN_SOURCE_DIR, arguments);
    return std::system(command.c_str()) == 0;
  };
  std::vector<std::string> export_args, import_args;
  for (const Case& c : cases) {
    export_args.push_back(fmt::format("{},{},{},{},{}", c.arch, c.in_channels, c.classes, c.batch, c.size));
    import_args.push_back(fmt::format("{},{},{}", c.arch, c.in_channels, c.classes));
  }
  ASSERT_TRUE(python(fmt::format("export {} 5 {}", dir.string(), fmt::join(export_args, " "))));

  const ForwardContext eval = ForwardContext::inference(Backend::cpu);
  std::vector<Tensor> own_logits;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tag());
    const SafetensorsFile io = read_safetensors(dir / (c.tag() + "_io.safetensors"));
    const fs::path weights = dir / (c.tag() + "_model.safetensors");
    // Strict: every name, shape and dtype of torchvision's state_dict, no adaptation.
    Model model(c.spec(c.in_channels), 1, false);
    EXPECT_TRUE(model.load_safetensors(weights, {false, false}).notes.empty());
    if (!c.group_norm()) EXPECT_EQ(model.state_dict().at("bn1.num_batches_tracked").to_int64(), 17);
    expect_close(model.forward(io.tensors.at("input").to_f32(), eval), io.tensors.at("logits").to_f32(),
                 kLogitTolerance, c.tag() + " logits vs torchvision");
    if (c.in_channels == 3) {
      // A 1-channel model on g equals torchvision on (g, g, g).
      Model gray(c.spec(1), 1, false);
      EXPECT_TRUE(gray.load_safetensors(weights).grayscale_transferred);
      expect_close(gray.forward(io.tensors.at("gray_input").to_f32(), eval), io.tensors.at("gray_logits").to_f32(),
                   kLogitTolerance, c.tag() + " grayscale transfer vs torchvision on (g, g, g)");
    }
    // And back: bigtrain's own initial weights, for torchvision to load.
    Model own(c.spec(c.in_channels), 77);
    write_safetensors(dir / (c.tag() + "_ours.safetensors"), {own.state_dict(), {{"format", "pt"}}});
    own_logits.push_back(own.forward(io.tensors.at("input").to_f32(), eval));
  }

  ASSERT_TRUE(python(fmt::format("import {} {}", dir.string(), fmt::join(import_args, " "))))
      << "torchvision's load_state_dict(strict=True) rejected bigtrain's state_dict (see its message above)";
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const SafetensorsFile torch_logits = read_safetensors(dir / (cases[i].tag() + "_torch_logits.safetensors"));
    expect_close(torch_logits.tensors.at("logits").to_f32(), own_logits[i], kLogitTolerance,
                 cases[i].tag() + " torchvision with bigtrain's weights");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bigtrain::net
