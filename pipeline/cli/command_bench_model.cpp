// `bigtrain bench-model`: training and inference tiles per second of one encoder
// preset at one tile size on one device, with the achieved FLOP rate and the
// device allocator's peak memory. scripts/bench_gpu drives it (and the PyTorch
// peer) and prints the ratios; it prints one JSON line with --json.
//
// A training step is what the two-pass trainer's pass 2 does per tile batch plus
// the update: forward with activations kept, cross-entropy on a linear head,
// backward, SGD step. Inference is the encoder's forward only. The batch lives on
// the device before timing: this measures compute, not the upload (which the
// pipeline overlaps with compute).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/allocator.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/device_select.hpp"
#include "net/model.hpp"
#include "net/optimizer.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/config/specs.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/device_info.hpp"
#endif

namespace bigtrain::cli {
namespace {

struct BenchOptions {
  std::string preset = "resnet50";
  std::string device = "auto";
  std::int64_t tile = 512;
  std::int64_t batch = 16;
  std::int64_t in_channels = 1;
  int warmup = 3;
  int steps = 10;
  std::string mode = "both";  // train | infer | both
  // The convolutions' compute type (train.precision); the benchmark's whole model
  // runs in it, head included, as torch.autocast does in the PyTorch peer. No loss
  // scaling: it costs one check per step, nothing a per-step timing would show.
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  bool json = false;
};

// Multiply-adds counted as two flops, convolutions and the head only (BatchNorm,
// ReLU and adds are a few percent and memory-bound): the usual convention, the
// same the PyTorch peer's figure uses.
struct FlopCounter {
  double flops = 0.0;
  std::int64_t h, w;
  void conv(std::int64_t in, std::int64_t out, int kernel, int stride, int pad) {
    const std::int64_t oh = (h + 2 * pad - kernel) / stride + 1, ow = (w + 2 * pad - kernel) / stride + 1;
    flops += 2.0 * static_cast<double>(in * out * kernel * kernel) * static_cast<double>(oh * ow);
    h = oh, w = ow;
  }
};

// Forward flops per tile of a torchvision-structured ResNet (stride on the 3x3 of
// a bottleneck, 1x1 projection shortcuts where the shape changes).
double resnet_forward_flops(const net::EncoderSpec& spec, std::int64_t tile, std::int64_t classes) {
  FlopCounter count{0.0, tile, tile};
  const std::int64_t stem = spec.scaled(spec.stem_channels);
  count.conv(spec.in_channels, stem, spec.stem.kernel, spec.stem.stride, spec.stem.padding);
  if (spec.stem.maxpool) count.h = (count.h + 2 - 3) / 2 + 1, count.w = (count.w + 2 - 3) / 2 + 1;
  std::int64_t in = stem;
  for (std::size_t stage = 0; stage < spec.stage_planes.size(); ++stage) {
    const std::int64_t planes = spec.scaled(spec.stage_planes[stage]), out = planes * spec.expansion();
    for (int block = 0; block < spec.stage_blocks[stage]; ++block) {
      const int stride = (stage > 0 && block == 0) ? 2 : 1;
      const std::int64_t h0 = count.h, w0 = count.w;
      if (in != out || stride != 1) {
        FlopCounter shortcut{0.0, h0, w0};
        shortcut.conv(in, out, 1, stride, 0);
        count.flops += shortcut.flops;
      }
      if (spec.block == net::BlockType::bottleneck) {
        count.conv(in, planes, 1, 1, 0);
        count.conv(planes, planes, 3, stride, 1);
        count.conv(planes, out, 1, 1, 0);
      } else {
        count.conv(in, planes, 3, stride, 1);
        count.conv(planes, planes, 3, 1, 1);
      }
      in = out;
    }
  }
  return count.flops + 2.0 * static_cast<double>(in * classes);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int run(const BenchOptions& options) {
  const Backend backend = kernels::select_backend(options.device);
  const Device device = backend_device(backend);
  net::ModelSpec spec;
  spec.encoder = net::EncoderSpec::preset_spec(options.preset);
  spec.encoder.in_channels = options.in_channels;
  spec.num_classes = 2;
  net::Model model(spec, 1);
  model.to(device);
  net::SgdOptions sgd;
  sgd.lr = 1e-3, sgd.momentum = 0.9, sgd.weight_decay = 1e-4;
  net::Sgd optimizer(net::split_decay_groups(model.parameters()), sgd, backend);

  const Shape input_shape{options.batch, options.in_channels, options.tile, options.tile};
  Tensor host_x = Tensor::empty(input_shape);
  for (std::int64_t i = 0; i < host_x.numel(); ++i) host_x.f32()[i] = static_cast<float>((i * 7919) % 255) / 255.0f;
  const Tensor x = host_x.to(device);
  Tensor host_targets = Tensor::empty({options.batch}, DType::i32);
  for (std::int64_t i = 0; i < options.batch; ++i) host_targets.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 2);
  const Tensor targets = host_targets.to(device);
  Allocator& allocator = allocator_for(device);

  nlohmann::json result = {{"preset", options.preset}, {"device", backend_name(backend)}, {"tile", options.tile},
                           {"batch", options.batch}, {"in_channels", options.in_channels}, {"steps", options.steps},
                           {"precision", options.precision}};
  const DType compute_dtype = precision_dtype(options.precision);
  net::ForwardContext train_ctx = net::ForwardContext::train(backend);
  net::ForwardContext infer_ctx = net::ForwardContext::inference(backend);
  train_ctx.compute_dtype = infer_ctx.compute_dtype = compute_dtype;
  // Counted for the ResNet families only (the small demo encoder is not a ResNet).
  const bool counted = spec.encoder.family != net::EncoderFamily::small;
  const double forward_flops = counted ? resnet_forward_flops(spec.encoder, options.tile, spec.num_classes) : 0.0;
  if (counted) result["forward_gflop_per_tile"] = forward_flops / 1e9;
#ifdef BIGTRAIN_HAVE_CUDA
  if (backend == Backend::cuda) {
    const cuda::DeviceInfo info = cuda::device_info(0);
    result["gpu"] = info.name;
    result["fp32_peak_tflops"] = info.fp32_peak_tflops;
  }
#endif

  // Each step ends with a value read on the host (the loss, or the features),
  // which waits for the device, so host clocks time the device's work.
  auto train_step = [&] {
    model.zero_grad();
    const Tensor logits = model.forward(x, train_ctx);
    Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, device);
    const float loss = kernels::cross_entropy(backend, logits, targets, nullptr, {}, dlogits);
    model.backward(dlogits);
    optimizer.step();
    return loss;
  };
  auto infer_step = [&] {
    const Tensor features = model.encoder().forward(x, infer_ctx);
    return features.to_vector().front();
  };
  auto measure = [&](const char* name, auto&& step, double flops_per_tile) {
    for (int i = 0; i < options.warmup; ++i) step();
    allocator.reset_peak();
    std::vector<double> times;
    for (int i = 0; i < options.steps; ++i) {
      const auto start = Clock::now();
      step();
      times.push_back(seconds_since(start));
    }
    const double step_seconds = median(times);
    const double tiles_per_second = static_cast<double>(options.batch) / step_seconds;
    result[name] = {{"median_step_ms", step_seconds * 1e3},
                    {"tiles_per_second", tiles_per_second},
                    {"peak_bytes", allocator.stats().peak_bytes}};
    if (!counted) return;
    result[name]["tflops"] = tiles_per_second * flops_per_tile / 1e12;
    if (result.contains("fp32_peak_tflops"))
      result[name]["fraction_of_fp32_peak"] = result[name]["tflops"].get<double>() / result["fp32_peak_tflops"].get<double>();
  };
  // Training costs about three forwards (forward, backward-data, backward-weights);
  // the stem's backward-data is skipped (no input gradient) but counted, as usual.
  if (options.mode != "infer") measure("train", train_step, 3.0 * forward_flops);
  if (options.mode != "train") measure("infer", infer_step, forward_flops);

  if (options.json) {
    fmt::print("{}\n", result.dump());
  } else {
    fmt::print("{} {}x{} batch {} on {}\n", options.preset, options.tile, options.tile, options.batch,
               result.value("gpu", std::string(backend_name(backend))));
    for (const char* name : {"train", "infer"}) {
      if (!result.contains(name)) continue;
      const auto& r = result[name];
      fmt::print("  {:5}  {:8.2f} tiles/s  {}  peak {:.2f} GiB\n", name, r["tiles_per_second"].get<double>(),
                 r.contains("tflops") ? fmt::format("{:7.2f} TFLOP/s", r["tflops"].get<double>()) : std::string("(flops not counted)"),
                 static_cast<double>(r["peak_bytes"].get<std::size_t>()) / (1 << 30));
    }
  }
  return 0;
}

RegisterCommand bench_model("bench-model", [](CLI::App& app) {
  app.description("Measure training and inference tiles/s, FLOP rate and peak memory of an encoder preset");
  auto options = std::make_shared<BenchOptions>();
  app.add_option("--preset", options->preset, "encoder preset (resnet18, resnet50, ...)")->capture_default_str();
  app.add_option("--device", options->device, "cpu, cuda or auto")->capture_default_str();
  app.add_option("--tile", options->tile, "tile edge in pixels")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch", options->batch, "tiles per batch")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--in-channels", options->in_channels, "image channels")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--warmup", options->warmup, "untimed steps first")->capture_default_str();
  app.add_option("--steps", options->steps, "timed steps (the median is reported)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--mode", options->mode, "train, infer or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"train", "infer", "both"}));
  app.add_option("--precision", options->precision, "compute type of convolutions and linear layers")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_flag("--json", options->json, "print one JSON object");
  return std::function<int()>([options] { return run(*options); });
});

}  // namespace
}  // namespace bigtrain::cli
