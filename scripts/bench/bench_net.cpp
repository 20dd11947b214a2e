// The measuring half of scripts/bench_net (which runs it once per configuration, so
// each process's peak RSS belongs to one configuration, and compares with PyTorch):
//
//   bench_net_cpp ceiling [--iters N]
//       one large oneDNN 3x3 convolution (blocked layouts, the best oneDNN does on this
//       machine): the GFLOP/s ceiling the models are measured against.
//   bench_net_cpp norm-relu [--iters N]
//       BatchNorm (training) + ReLU, forward and backward, as one op against the two
//       ops, on ResNet-50's pairs at batch 8 and 224 (blocked, as in the network),
//       alternating per repetition.
//   bench_net_cpp model --preset resnet18 --tile 224 --batch 8 --mode train|infer
//       training steps (forward, cross-entropy, backward, SGD step) or inference
//       forwards of an encoder + 2-class head with 1 input channel; --precision bf16
//       computes the convolutions in bf16 (float32 master weights), as train.precision does.
//
// Prints one JSON object: median seconds per iteration after warm-up, tiles/s, GFLOP
// per iteration (convolutions and the head, counted analytically), allocator peak
// bytes and peak RSS.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <dnnl.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <spdlog/spdlog.h>

#include "kernels/batch_norm.hpp"
#include "kernels/core/allocator.hpp"
#include "kernels/core/error.hpp"
#include "kernels/cpu/dnnl_context.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "net/model.hpp"
#include "net/optimizer.hpp"

namespace bigtrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

template <typename F>
std::vector<double> time_iterations(int warmup, int iters, F&& body) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> seconds;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    body();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return seconds;
}

std::int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// ---- FLOP counting --------------------------------------------------------------

struct ConvFlops {
  double forward = 0.0;      // multiply-adds x 2 of every convolution and the head
  double stem_forward = 0.0;  // the first convolution's share (its input gradient is never computed)
};

std::int64_t conv_out(std::int64_t in, int kernel, int stride, int pad) { return (in + 2 * pad - kernel) / stride + 1; }

// torchvision's ResNet walked shape by shape (net/encoder.cpp builds the same layers).
ConvFlops resnet_flops(const net::ModelSpec& spec, std::int64_t batch, std::int64_t side) {
  const net::EncoderSpec& e = spec.encoder;
  BT_CHECK(e.family == net::EncoderFamily::resnet, "FLOP counting supports the torchvision ResNets, not '{}'",
           e.preset);
  ConvFlops flops;
  auto conv = [&](std::int64_t in_c, std::int64_t out_c, int k, std::int64_t out_h) {
    return 2.0 * batch * out_c * in_c * k * k * out_h * out_h;
  };
  std::int64_t h = conv_out(side, e.stem.kernel, e.stem.stride, e.stem.padding);
  std::int64_t channels = e.scaled(e.stem_channels);
  flops.stem_forward = conv(e.in_channels, channels, e.stem.kernel, h);
  flops.forward += flops.stem_forward;
  if (e.stem.maxpool) h = conv_out(h, 3, 2, 1);
  for (std::size_t stage = 0; stage < e.stage_blocks.size(); ++stage) {
    const std::int64_t planes = e.scaled(e.stage_planes[stage]);
    const std::int64_t out_c = planes * e.expansion();
    for (int block = 0; block < e.stage_blocks[stage]; ++block) {
      const int stride = (stage > 0 && block == 0) ? 2 : 1;
      const std::int64_t out_h = conv_out(h, 3, stride, 1);
      if (e.block == net::BlockType::bottleneck) {
        flops.forward += conv(channels, planes, 1, h) + conv(planes, planes, 3, out_h) + conv(planes, out_c, 1, out_h);
      } else {
        flops.forward += conv(channels, planes, 3, out_h) + conv(planes, planes, 3, out_h);
      }
      if (stride != 1 || channels != out_c) flops.forward += conv(channels, out_c, 1, out_h);
      channels = out_c;
      h = out_h;
    }
  }
  flops.forward += 2.0 * batch * channels * spec.num_classes;
  return flops;
}

// ---- the ceiling ----------------------------------------------------------------

nlohmann::json run_ceiling(int warmup, int iters) {
  using dnnl::memory;
  // A ResNet-sized 3x3 layer large enough to keep both cores' FMA units busy.
  const memory::dim n = 8, c = 256, k = 256, side = 56;
  auto& engine = kernels::cpu::engine();
  auto& stream = kernels::cpu::stream();
  const memory::desc src_any({n, c, side, side}, memory::data_type::f32, memory::format_tag::any);
  const memory::desc wei_any({k, c, 3, 3}, memory::data_type::f32, memory::format_tag::any);
  const memory::desc dst_any({n, k, side, side}, memory::data_type::f32, memory::format_tag::any);
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                             src_any, wei_any, dst_any, {1, 1}, {1, 1}, {1, 1});
  const dnnl::convolution_forward::primitive_desc pd(desc, engine);
  memory src(pd.src_desc(), engine), weights(pd.weights_desc(), engine), dst(pd.dst_desc(), engine);
  // Deterministic, non-denormal contents (zeros could hit fast paths).
  for (memory* m : {&src, &weights}) {
    float* data = static_cast<float*>(m->get_data_handle());
    const std::size_t count = m->get_desc().get_size() / sizeof(float);
    for (std::size_t i = 0; i < count; ++i) data[i] = 0.01f * static_cast<float>((i * 2654435761u) % 200) - 1.0f;
  }
  dnnl::convolution_forward conv(pd);
  const auto seconds = time_iterations(warmup, iters, [&] {
    conv.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
  });
  const double flops = 2.0 * n * k * c * 9 * side * side;
  const double t = median(seconds);
  return {{"kind", "ceiling"},
          {"shape", fmt::format("N{} C{} K{} {}x{} 3x3", n, c, k, side, side)},
          {"implementation", pd.impl_info_str()},
          {"gflop", flops / 1e9},
          {"median_s", t},
          {"gflops", flops / t / 1e9},
          {"iters", iters}};
}

// ---- BatchNorm + ReLU -------------------------------------------------------------

nlohmann::json run_norm_relu(int warmup, int iters) {
  struct Pair {
    std::int64_t channels, side, per_step;  // how many such pairs a ResNet-50 step at 224 runs
  };
  const std::vector<Pair> pairs = {{64, 112, 1}, {64, 56, 6},  {128, 56, 1}, {128, 28, 7},
                                   {256, 28, 1}, {256, 14, 11}, {512, 14, 1}, {512, 7, 5}};
  const Backend cpu = Backend::cpu;
  nlohmann::json rows = nlohmann::json::array();
  double fused_step = 0.0, separate_step = 0.0;
  for (const Pair& pair : pairs) {
    kernels::BatchNormSpec spec;
    spec.batch = 8, spec.channels = pair.channels, spec.height = spec.width = pair.side;
    kernels::BatchNormSpec fused_spec = spec;
    fused_spec.relu = true;
    auto separate = kernels::make_batch_norm(cpu, spec), fused = kernels::make_batch_norm(cpu, fused_spec);
    Tensor x = Tensor::empty(spec.input_shape());
    float* values = x.f32();
    for (std::int64_t i = 0; i < x.numel(); ++i)
      values[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    const Tensor dy = x.to_layout(Layout::blocked16).clone();
    x = x.to_layout(Layout::blocked16);
    Tensor gamma = Tensor::empty({pair.channels}), beta = Tensor::zeros({pair.channels});
    gamma.fill(1.0f);
    const auto step = [&](bool as_one) {
      const Shape shape = spec.input_shape(), channel = spec.channel_shape();
      Tensor y = Tensor::empty(shape), mean = Tensor::empty(channel), invstd = Tensor::empty(channel);
      Tensor dx = Tensor::empty(shape), dgamma = Tensor::empty(channel), dbeta = Tensor::empty(channel);
      if (as_one) {
        fused->forward_training(x, gamma, beta, y, mean, invstd, nullptr, nullptr, 0.1f);
        fused->backward_training(x, dy, gamma, mean, invstd, dx, dgamma, dbeta, &y);
        return;
      }
      separate->forward_training(x, gamma, beta, y, mean, invstd, nullptr, nullptr, 0.1f);
      kernels::relu_forward(cpu, y, y);  // in place, as the network's ReLU
      Tensor masked = Tensor::empty(shape);
      kernels::relu_backward(cpu, y, dy, masked);
      separate->backward_training(x, masked, gamma, mean, invstd, dx, dgamma, dbeta, nullptr);
    };
    for (int i = 0; i < warmup; ++i) step(true), step(false);
    std::vector<double> one, two;
    for (int i = 0; i < iters; ++i) {
      one.push_back(time_iterations(0, 1, [&] { step(true); })[0]);
      two.push_back(time_iterations(0, 1, [&] { step(false); })[0]);
    }
    const double t_one = median(one), t_two = median(two);
    fused_step += t_one * static_cast<double>(pair.per_step);
    separate_step += t_two * static_cast<double>(pair.per_step);
    rows.push_back({{"shape", fmt::format("8x{}x{}x{}", pair.channels, pair.side, pair.side)},
                    {"per_step", pair.per_step},
                    {"fused_ms", 1e3 * t_one},
                    {"separate_ms", 1e3 * t_two},
                    {"ratio", t_two / t_one}});
  }
  return {{"kind", "norm_relu"},
          {"pairs", rows},
          {"resnet50_step_fused_ms", 1e3 * fused_step},
          {"resnet50_step_separate_ms", 1e3 * separate_step},
          {"iters", iters}};
}

// ---- models ---------------------------------------------------------------------

struct ModelRun {
  std::string preset = "resnet18", mode = "train", precision = "fp32";
  std::int64_t tile = 224, batch = 8;
  // The encoder's shape beyond the preset: the seed-scale recipes' small encoders
  // (width 0.25, a 5x5 stride-2 stem without max pooling) on small tiles.
  double width = 1.0;
  int stem_kernel = 7, stem_stride = 2;
  bool maxpool = true;
  // Off: no fused ops (ForwardContext::fuse_conv_bn and fuse_norm_relu), to measure
  // what fusion saves.
  bool fused = true;
  // Off: every activation reordered into NCHW and back around each oneDNN op
  // (ForwardContext::blocked_activations), to measure what the blocked layout saves.
  bool blocked_activations = true;
};

nlohmann::json run_model(const ModelRun& run, int warmup, int iters) {
  const auto& [preset, mode, precision, tile, batch, width, stem_kernel, stem_stride, maxpool, fused,
               blocked_activations] = run;
  BT_CHECK(precision == "fp32" || precision == "bf16", "unknown precision '{}'; valid: fp32, bf16", precision);
  // train.precision bf16: the convolutions compute in bf16 with float32 master weights
  // (refused, naming the instruction set, on a CPU without AVX512_BF16).
  const DType compute_dtype = precision == "bf16" ? DType::bf16 : DType::f32;
  net::ModelSpec spec;
  spec.encoder = net::EncoderSpec::preset_spec(preset);
  spec.encoder.in_channels = 1;
  spec.encoder.width = width;
  spec.encoder.stem = {.kernel = stem_kernel, .stride = stem_stride, .padding = stem_kernel / 2, .maxpool = maxpool};
  spec.num_classes = 2;
  Allocator& allocator = allocator_for(Device::cpu());
  allocator.reset_peak();
  net::Model model(spec, /*seed=*/0);
  const Backend backend = Backend::cpu;

  Tensor images = Tensor::empty({batch, 1, tile, tile});
  float* x = images.f32();
  for (std::int64_t i = 0; i < images.numel(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  Tensor labels = Tensor::empty({batch}, DType::i32);
  for (std::int64_t i = 0; i < batch; ++i) labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 2);

  const ConvFlops flops = resnet_flops(spec, batch, tile);
  double flop_per_iter = flops.forward;
  std::vector<double> seconds;
  if (mode == "train") {
    // Forward, backward of weights and of data (not of the image: the stem's input
    // gradient is skipped, as in PyTorch when the input does not require grad).
    flop_per_iter = 3.0 * flops.forward - flops.stem_forward;
    auto optimizer = net::make_optimizer({.kind = net::OptimizerKind::sgd, .lr = 0.01, .weight_decay = 1e-4, .momentum = 0.9},
                                         model.parameters(), backend);
    auto ctx = net::ForwardContext::train(backend);
    ctx.compute_dtype = compute_dtype;
    ctx.blocked_activations = blocked_activations;
    ctx.fuse_norm_relu = fused;
    seconds = time_iterations(warmup, iters, [&] {
      optimizer->zero_grad();
      const Tensor logits = model.forward(images, ctx);
      Tensor dlogits = Tensor::empty(logits.shape());
      kernels::cross_entropy(backend, logits, labels, nullptr, {}, dlogits);
      model.backward(dlogits);
      optimizer->step();
    });
  } else {
    BT_CHECK(mode == "infer", "unknown mode '{}'; valid: train, infer", mode);
    auto ctx = net::ForwardContext::inference(backend);
    ctx.fuse_conv_bn = fused;
    ctx.compute_dtype = compute_dtype;
    ctx.blocked_activations = blocked_activations;
    ctx.fuse_norm_relu = fused;
    seconds = time_iterations(warmup, iters, [&] { model.forward(images, ctx); });
  }
  const double t = median(seconds);
  return {{"kind", "model"},
          {"framework", "bigtrain"},
          {"preset", preset},
          {"tile", tile},
          {"batch", batch},
          {"width", width},
          {"stem", fmt::format("{}/{}{}", stem_kernel, stem_stride, maxpool ? "" : " no maxpool")},
          {"mode", mode},
          {"fused", fused},
          {"blocked_activations", blocked_activations},
          {"precision", precision},
          {"median_s", t},
          {"seconds", seconds},
          {"tiles_per_s", static_cast<double>(batch) / t},
          {"gflop", flop_per_iter / 1e9},
          {"gflops", flop_per_iter / t / 1e9},
          {"peak_alloc_bytes", allocator.stats().peak_bytes},
          {"peak_rss_bytes", peak_rss_bytes()},
          {"threads", omp_get_max_threads()}};
}

}  // namespace
}  // namespace bigtrain::bench

int main(int argc, char** argv) {
  using namespace bigtrain::bench;
  CLI::App app("bigtrain network benchmark (run through scripts/bench_net)");
  app.require_subcommand(1);
  int warmup = 2, iters = 5, threads = 0;
  app.add_option("--warmup", warmup, "untimed iterations first")->capture_default_str();
  app.add_option("--iters", iters, "timed iterations (the median is reported)")->capture_default_str();
  app.add_option("--threads", threads, "OpenMP threads (0: the default)");
  auto* ceiling = app.add_subcommand("ceiling", "one large oneDNN 3x3 convolution");
  auto* model = app.add_subcommand("model", "training or inference of one model");
  auto* norm_relu = app.add_subcommand("norm-relu", "BatchNorm + ReLU as one op against two, ResNet-50's pairs");
  ModelRun run;
  model->add_option("--preset", run.preset)->capture_default_str();
  model->add_option("--tile", run.tile)->capture_default_str();
  model->add_option("--batch", run.batch)->capture_default_str();
  model->add_option("--mode", run.mode, "train | infer")->capture_default_str();
  model->add_option("--width", run.width, "channel multiplier")->capture_default_str();
  model->add_option("--stem-kernel", run.stem_kernel)->capture_default_str();
  model->add_option("--stem-stride", run.stem_stride)->capture_default_str();
  bool no_maxpool = false;
  model->add_flag("--no-maxpool", no_maxpool, "no 3x3 stride-2 max pooling after the stem");
  bool layer_by_layer = false, plain_activations = false;
  model->add_flag("--layer-by-layer", layer_by_layer,
                  "without fusion: inference without convolution+BatchNorm+ReLU as one op, neither pass with "
                  "BatchNorm+ReLU as one (the fusion's gain, measured in the same run)");
  model->add_flag("--plain-activations", plain_activations,
                  "activations reordered into NCHW around every oneDNN op (the blocked layout's gain)");
  model->add_option("--precision", run.precision, "fp32 | bf16 (the convolutions' compute type; bf16 needs AVX512_BF16)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  if (threads > 0) omp_set_num_threads(threads);
  try {
    run.fused = !layer_by_layer;
    run.maxpool = !no_maxpool;
    run.blocked_activations = !plain_activations;
    const auto result = ceiling->parsed()     ? run_ceiling(warmup, iters)
                        : norm_relu->parsed() ? run_norm_relu(warmup, iters)
                                              : run_model(run, warmup, iters);
    fmt::print("{}\n", result.dump());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_net: {}\n", e.what());
    return 1;
  }
  return 0;
}
