// Streaming the trunk (net/streaming.hpp) equals the untiled network: the feature
// map, every parameter gradient, the logits and the loss of a global-average-pooling
// head, on images that are not multiples of the tile, through ResNet-18, ResNet-50,
// ResNet-18 with an 11x11 stride-4 stem (cumulative stride 64) and a CIFAR
// ResNet-20, on the reference and CPU backends. A halo one pixel short breaks the
// equality; layers that cannot be streamed are refused by name.
//
// Sizes: the CPU backend runs the 1000x1100 grey image with tiles of 256
// and 320 pixels; the reference backend (plain loops) runs 300x350 with tiles of 96
// and 128 (192 for the stride-64 stem); the CIFAR ResNet, whose cumulative stride is
// 4 and whose maps stay large, runs 300x330 (tiles 64, 96) and 90x110 (32, 48).
// Encoders are at width 1/8 (1/2 for the CIFAR ResNet): the geometry under test is
// the layers' kernels, strides and paddings, which width does not change, and full
// width would cost minutes per case on this machine's shared cores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "kernels/cross_entropy.hpp"
#include "net/aggregator.hpp"
#include "net/global_avg_pool.hpp"
#include "net/map_cells.hpp"
#include "net/model.hpp"
#include "net/streaming.hpp"
#include "net/streaming_memory.hpp"
#include "tests/net/net_testing.hpp"

namespace bigtrain::net {
namespace {

using namespace bigtrain::net::testing;

ModelSpec model_spec(const std::string& preset, double width, std::int64_t classes = 3) {
  ModelSpec spec;
  spec.encoder = EncoderSpec::preset_spec(preset);
  spec.encoder.in_channels = 1;
  spec.encoder.width = width;
  spec.num_classes = classes;
  return spec;
}

// Frozen BatchNorm that is not the identity: running statistics and affine
// parameters drawn per layer, so a misplaced pixel shows in every channel.
void randomise_batch_norms(Model& model, std::uint64_t seed) {
  StateRefs refs = model.state();
  std::uint64_t stream = seed;
  for (Buffer* buffer : refs.buffers) {
    const bool variance = buffer->name.ends_with("running_var");
    buffer->value.copy_from(
        random_tensor(buffer->value.shape(), ++stream, variance ? 0.5f : -0.2f, variance ? 2.0f : 0.2f));
  }
  for (Parameter* parameter : refs.parameters) {
    if (parameter->value.rank() != 1 || parameter->name.starts_with("fc")) continue;
    const bool scale = parameter->name.ends_with("weight");
    parameter->value.copy_from(
        random_tensor(parameter->value.shape(), ++stream, scale ? 0.5f : -0.2f, scale ? 1.5f : 0.2f));
  }
}

ForwardContext frozen_training(Backend backend) {
  ForwardContext ctx = ForwardContext::train(backend);
  ctx.freeze_bn = true;
  return ctx;
}

// oneDNN rounds a position's sums differently for a tile's shape and the whole
// image's, so a ReLU input within that rounding of 0 may pass in one run and not the
// other, and every gradient upstream then differs by that element's whole share: a
// property of the piecewise-linear function, not of streaming (tests/net/relu_kinks.hpp
// says the same of two backends). The whole-image run sets its ReLU inputs within
// kBand x rms of 0 to exactly 0 and records where; the streamed run sets the same
// image positions to 0 in every tile that holds them, so both compute one function.
// The reference backend sums each position in one order at any shape and runs
// without it.
class KinkSnap final : public ReluInputHook {
 public:
  static constexpr double kBand = 1e-4;

  void before_relu(const std::string& relu_name, Tensor& input) override {
    // A device or blocked tensor is edited in a plain host copy and written back
    // in its own layout.
    const bool in_place = input.device().is_cpu() && input.layout() == Layout::plain;
    Tensor host = in_place ? input : input.to(Device::cpu()).to_plain();
    snap(relu_name, host);
    if (!in_place) input.copy_from(host.to_layout(input.layout()));
  }

  void snap(const std::string& relu_name, Tensor& input) {
    float* x = input.f32();
    const std::int64_t n = input.numel();
    if (plan_ == nullptr) {  // recording, on the whole image
      double squares = 0.0;
      for (std::int64_t i = 0; i < n; ++i) squares += static_cast<double>(x[i]) * x[i];
      const double band = kBand * std::sqrt(squares / static_cast<double>(std::max<std::int64_t>(n, 1)));
      Relu& relu = relus_[relu_name];
      relu.whole = input.shape();
      for (std::int64_t i = 0; i < n; ++i)
        if (std::abs(x[i]) <= band) x[i] = 0.0f, relu.snapped.push_back(i);
      snapped_ += relu.snapped.size();
      return;
    }
    if (first_relu_.empty()) first_relu_ = relu_name;
    if (relu_name == first_relu_) ++tiles_started_;  // each tile's forward starts at the stem's ReLU
    const StreamTile& tile = plan_->tiles.at(static_cast<std::size_t>(tiles_started_ - 1) % plan_->tiles.size());
    const Relu& relu = relus_.at(relu_name);
    const std::int64_t stride = stride_of(relu.whole);
    const std::int64_t oy = tile.input.y / stride, ox = tile.input.x / stride;
    const Shape& whole = relu.whole;
    const std::int64_t h = input.dim(2), w = input.dim(3);
    for (const std::int64_t index : relu.snapped) {
      const std::int64_t wx = index % whole[3], wy = index / whole[3] % whole[2], plane = index / (whole[2] * whole[3]);
      const std::int64_t ty = wy - oy, tx = wx - ox;
      if (ty >= 0 && ty < h && tx >= 0 && tx < w) x[(plane * h + ty) * w + tx] = 0.0f;
    }
  }

  // Switches from recording to replaying over the tiles of `plan`.
  void replay(const StreamPlan& plan) {
    plan_ = &plan;
    tiles_started_ = 0;
    first_relu_.clear();
  }
  std::size_t snapped() const { return snapped_; }

 private:
  struct Relu {
    Shape whole;
    std::vector<std::int64_t> snapped;
  };
  // The cumulative stride at a ReLU: its whole map is ceil(image / stride) a side
  // in these networks (every strided layer pads to keep ceil).
  std::int64_t stride_of(const Shape& whole) const {
    for (std::int64_t stride = 1; stride <= 1024; stride *= 2)
      if ((plan_->image[2] + stride - 1) / stride == whole[2] && (plan_->image[3] + stride - 1) / stride == whole[3])
        return stride;
    throw Error(fmt::format("KinkSnap: no power-of-two stride maps the image {} to {}", shape_str(plan_->image),
                            shape_str(whole)));
  }

  std::map<std::string, Relu> relus_;
  const StreamPlan* plan_ = nullptr;
  std::int64_t tiles_started_ = 0;
  std::string first_relu_;
  std::size_t snapped_ = 0;
};

struct Outcome {
  std::vector<double> feature_map, logits;
  double loss = 0.0;
  std::map<std::string, std::vector<double>> gradients;
};

Tensor targets_for(std::int64_t batch) {
  Tensor targets = Tensor::empty({batch}, DType::i32);
  for (std::int64_t i = 0; i < batch; ++i) targets.data<std::int32_t>()[i] = static_cast<std::int32_t>((i + 1) % 3);
  return targets;
}

std::map<std::string, std::vector<double>> gradients_of(Model& model) {
  std::map<std::string, std::vector<double>> gradients;
  for (Parameter* parameter : model.parameters()) gradients[parameter->name] = to_doubles(parameter->grad);
  return gradients;
}

// The untiled network: one forward and backward of the whole image through the
// encoder's own layers (global average pooling included) and the head.
Outcome whole_image(Model& model, const Tensor& image, Backend backend, ReluInputHook* hook) {
  ForwardContext ctx = frozen_training(backend);
  ctx.relu_input_hook = hook;
  Encoder& encoder = model.encoder();
  Outcome out;
  model.zero_grad();
  Tensor h = image;
  for (std::size_t i = 0; i + 1 < encoder.size(); ++i) h = encoder.at(i).forward(h, ctx);
  out.feature_map = to_doubles(h);
  Layer& pool = encoder.at(encoder.size() - 1);
  const Tensor logits = model.head().forward(pool.forward(h, ctx), ctx);
  h = {};
  out.logits = to_doubles(logits);
  Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, logits.device());
  out.loss = kernels::cross_entropy(backend, logits, targets_for(image.dim(0)).to(logits.device()), nullptr, {},
                                    dlogits);
  encoder.backward(model.head().backward(dlogits));
  EXPECT_EQ(encoder.saved_count(), 0u);
  out.gradients = gradients_of(model);
  return out;
}

// The trunk streamed tile by tile, the head (global average pooling + fc) on the
// whole feature map.
Outcome streamed(Model& model, const Tensor& image, Backend backend, const StreamPlan& plan, KinkSnap* kinks) {
  ForwardContext ctx = frozen_training(backend);
  if (kinks) kinks->replay(plan);
  ctx.relu_input_hook = kinks;
  StreamingTrunk trunk(model.encoder());
  TensorRegionReader reader(image);
  Outcome out;
  model.zero_grad();
  const Tensor map = trunk.forward(reader, plan, ctx);
  out.feature_map = to_doubles(map);
  GlobalAvgPool pool("avgpool");
  const Tensor logits = model.head().forward(pool.forward(map, ctx), ctx);
  out.logits = to_doubles(logits);
  Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, logits.device());
  out.loss = kernels::cross_entropy(backend, logits, targets_for(image.dim(0)).to(logits.device()), nullptr, {},
                                    dlogits);
  const Tensor dmap = pool.backward(model.head().backward(dlogits));
  trunk.backward(reader, plan, dmap, ctx);
  EXPECT_EQ(model.encoder().saved_count(), 0u);
  out.gradients = gradients_of(model);
  return out;
}

// One streamed training step, nothing read back.
void streamed_step(Model& model, const Tensor& image, Backend backend, const StreamPlan& plan) {
  const ForwardContext ctx = frozen_training(backend);
  StreamingTrunk trunk(model.encoder());
  TensorRegionReader reader(image);
  Tensor map = trunk.forward(reader, plan, ctx);
  GlobalAvgPool pool("avgpool");
  const Tensor logits = model.head().forward(pool.forward(map, ctx), ctx);
  map = {};
  Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, logits.device());
  kernels::cross_entropy(backend, logits, targets_for(image.dim(0)).to(logits.device()), nullptr, {}, dlogits);
  const Tensor dmap = pool.backward(model.head().backward(dlogits));
  trunk.backward(reader, plan, dmap, ctx);
}

struct StreamCase {
  std::string name;
  std::string preset;
  double width;
  StemSpec stem;  // kernel 0: the preset's
  std::int64_t height, width_px;
  std::vector<std::int64_t> tiles;
};

StreamCase stream_case(const std::string& name, Backend backend) {
  const bool cpu = backend != Backend::reference;
  const std::int64_t h = cpu ? 1000 : 300, w = cpu ? 1100 : 350;
  const std::vector<std::int64_t> tiles = cpu ? std::vector<std::int64_t>{256, 320} : std::vector<std::int64_t>{96, 128};
  const StemSpec preset_stem{0, 0, 0, false};
  if (name == "resnet18") return {name, "resnet18", 0.125, preset_stem, h, w, tiles};
  if (name == "resnet50") return {name, "resnet50", 0.125, preset_stem, h, w, tiles};
  // 11x11 stride 4 + max pool: a cumulative stride of 64.
  if (name == "resnet18_stem11s4")
    return {name, "resnet18", 0.125, {11, 4, 5, true}, h, w, cpu ? tiles : std::vector<std::int64_t>{128, 192}};
  // Width 1/2: at width 1/4 (4-channel layers) Debian's oneDNN 2.6 dies of SIGILL
  // inside its JIT backward-weights kernel on the whole 300x330 image, streaming
  // or not.
  if (name == "resnet20_cifar")
    return {name, "resnet20", 0.5, preset_stem, cpu ? 300 : 90, cpu ? 330 : 110,
            cpu ? std::vector<std::int64_t>{64, 96} : std::vector<std::int64_t>{32, 48}};
  throw Error("no stream case " + name);
}

// Largest difference over the largest magnitude, and the difference's norm over
// the norm, of the whole-image tensor.
struct RelativeErrors {
  double max = 0.0, norm = 0.0;
};

RelativeErrors relative_errors(const std::vector<double>& actual, const std::vector<double>& expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double difference = 0.0, magnitude = 0.0, difference_squares = 0.0, squares = 0.0;
  for (std::size_t i = 0; i < actual.size() && i < expected.size(); ++i) {
    const double d = std::abs(actual[i] - expected[i]);
    difference = std::max(difference, d);
    magnitude = std::max(magnitude, std::abs(expected[i]));
    difference_squares += d * d;
    squares += expected[i] * expected[i];
  }
  return {magnitude > 0.0 ? difference / magnitude : difference,
          squares > 0.0 ? std::sqrt(difference_squares / squares) : std::sqrt(difference_squares)};
}

class StreamingExact : public ::testing::TestWithParam<std::tuple<Backend, std::string>> {};

// The reference backend sums every position and every gradient in double: all
// errors within 1e-5 (seen: at most 3.5e-7), and its forward equals the whole
// image's bit for bit. The CPU backend (oneDNN) sums in float32 in an order that
// depends on the shape: its map, logits and loss are within 1e-5 (seen: 1.4e-6);
// its weight gradients, sums over 10^5 to 10^6 positions that cancel to a small
// result, are within 1e-5 normwise and 2e-5 of the tensor's largest element (seen:
// 9.6e-6), the rounding of float32 sums, not a missing or doubled term (one such
// term moves a gradient by ~1e-3, as the ReLU kinks did before KinkSnap).
// CUDA (cuDNN with FMA math, plain float32, algorithms chosen per shape) is held
// to the CPU backend's bounds.
TEST_P(StreamingExact, FeatureMapGradientsLogitsAndLossEqualTheWholeImage) {
  const auto& [backend, name] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const StreamCase c = stream_case(name, backend);
  ModelSpec spec = model_spec(c.preset, c.width);
  if (c.stem.kernel != 0) spec.encoder.stem = c.stem;
  Model model(spec, 7);
  randomise_batch_norms(model, 11);
  model.to(backend_device(backend));
  const Tensor image = random_tensor({1, 1, c.height, c.width_px}, 5, -1.0f, 1.0f, backend_device(backend));
  KinkSnap kinks;
  KinkSnap* snap = backend == Backend::reference ? nullptr : &kinks;
  const Outcome whole = whole_image(model, image, backend, snap);
  StreamingTrunk trunk(model.encoder());
  const double gradient_max_bound = backend == Backend::reference ? 1e-5 : 2e-5;
  for (const std::int64_t tile : c.tiles) {
    SCOPED_TRACE(fmt::format("{} {}x{} tile {}", c.name, c.height, c.width_px, tile));
    const StreamPlan plan = trunk.plan(image.shape(), tile, frozen_training(backend));
    ASSERT_GT(plan.tiles.size(), 1u);
    const Outcome s = streamed(model, image, backend, plan, snap);
    const RelativeErrors map = relative_errors(s.feature_map, whole.feature_map);
    const RelativeErrors logits = relative_errors(s.logits, whole.logits);
    const double loss = std::abs(s.loss - whole.loss) / std::abs(whole.loss);
    RelativeErrors gradient;
    std::string worst;
    EXPECT_EQ(s.gradients.size(), whole.gradients.size());
    for (const auto& [parameter, expected] : whole.gradients) {
      const auto found = s.gradients.find(parameter);
      if (found == s.gradients.end()) {
        ADD_FAILURE() << "no streamed gradient for " << parameter;
        continue;
      }
      const RelativeErrors e = relative_errors(found->second, expected);
      if (e.max >= gradient.max) gradient.max = e.max, worst = parameter;
      gradient.norm = std::max(gradient.norm, e.norm);
    }
    std::cout << fmt::format(
        "[stream] {} {} {}x{} tile {} ({} tiles, halo overhead {:.2f}): relative error map {:.2e} logits {:.2e} "
        "loss {:.2e} gradients {:.2e} max ({}), {:.2e} norm; {} ReLU inputs held at 0\n",
        backend_name(backend), c.name, c.height, c.width_px, plan.tile, plan.tiles.size(), plan.halo_overhead(),
        map.max, logits.max, loss, gradient.max, worst, gradient.norm, kinks.snapped());
    EXPECT_LE(map.max, 1e-5);
    EXPECT_LE(logits.max, 1e-5);
    EXPECT_LE(loss, 1e-5);
    EXPECT_LE(gradient.norm, 1e-5);
    EXPECT_LE(gradient.max, gradient_max_bound) << worst;
    if (backend == Backend::reference) {
      // One summation order per position at any shape: the forward is the whole
      // image's bit for bit; only the gradients' sums over positions regroup.
      EXPECT_EQ(map.max, 0.0);
      EXPECT_EQ(logits.max, 0.0);
      EXPECT_EQ(loss, 0.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, StreamingExact,
    ::testing::Combine(::testing::Values(Backend::reference, Backend::cpu, Backend::cuda),
                       ::testing::Values("resnet18", "resnet50", "resnet18_stem11s4", "resnet20_cifar")),
    [](const ::testing::TestParamInfo<std::tuple<Backend, std::string>>& info) {
      return std::string(backend_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param);
    });

// torchvision's ResNet-18 trunk by hand, per side: stem 7x7/2 pad 3 reads 3
// pixels; max pool 3x3/2 pad 1 one stem cell = 2 pixels; layer1's four 3x3 at
// stride 4: 4 x 4; layer2: its strided 3x3 at 4, three at 8 (the 1x1 shortcut reads
// no neighbours): 28; layer3: 8 + 3 x 16 = 56; layer4: 16 + 3 x 32 = 112. 217 in all.
TEST(StreamingGeometry, ResNet18FieldIsTheSumOfItsLayersReach) {
  Model model(model_spec("resnet18", 0.125), 1, false);
  const ReceptiveField field = StreamingTrunk(model.encoder()).receptive_field(frozen_training(Backend::cpu));
  EXPECT_EQ(field.y, (AxisField{32, 217, 217}));
  EXPECT_EQ(field.x, (AxisField{32, 217, 217}));
  // The bottleneck's 1x1 convolutions read no neighbours and its stride sits on the
  // 3x3: 3 + 2 + 3 x 4 + (4 + 3 x 8) + (8 + 5 x 16) + (16 + 2 x 32) = 213.
  Model resnet50(model_spec("resnet50", 0.125), 1, false);
  EXPECT_EQ(StreamingTrunk(resnet50.encoder()).receptive_field(frozen_training(Backend::cpu)).y,
            (AxisField{32, 213, 213}));
}

TEST(StreamingGeometry, TilesPartitionTheMapAndReadAlignedClippedFields) {
  const ReceptiveField field{{32, 217, 217}, {32, 217, 217}};
  // A 1000x1100 image: ResNet-18's map is 32x35 (ceil of size / 32).
  const StreamPlan plan = make_stream_plan(field, {1, 1, 1000, 1100}, {1, 8, 32, 35}, 250);
  EXPECT_EQ(plan.tile, 224);  // rounded down to the stride
  std::vector<int> covered(32 * 35, 0);
  for (const StreamTile& t : plan.tiles) {
    EXPECT_EQ(t.input.y % 32, 0);
    EXPECT_EQ(t.input.x % 32, 0);
    EXPECT_GE(t.input.y, 0);
    EXPECT_LE(t.input.y + t.input.height, 1000);
    EXPECT_LE(t.input.x + t.input.width, 1100);
    // The own cells' field, [32*begin - 217, 32*(end-1) + 217], lies inside the read
    // pixels wherever the image has pixels.
    EXPECT_LE(t.input.y, std::max<std::int64_t>(0, 32 * t.cells.y - 217));
    EXPECT_GE(t.input.y + t.input.height, std::min<std::int64_t>(1000, 32 * (t.cells.y + t.cells.height - 1) + 218));
    EXPECT_EQ(t.output_y, t.cells.y - t.input.y / 32);
    for (std::int64_t y = t.cells.y; y < t.cells.y + t.cells.height; ++y)
      for (std::int64_t x = t.cells.x; x < t.cells.x + t.cells.width; ++x) ++covered[static_cast<std::size_t>(y * 35 + x)];
  }
  EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }));
  EXPECT_GT(plan.halo_overhead(), 1.0);
}

// The derived halo is the least that works: one pixel less on the far side of
// either axis and the streamed map no longer equals the whole image's. On the
// reference backend, whose sums run in one order at any shape, the exact halo
// gives the whole image's map bit for bit, so any missing pixel shows. (On the CPU
// backend a pixel at the field's very edge moves the map by ~4e-6 of its largest
// value, within oneDNN's rounding differences between shapes: only the reference
// can show it.)
TEST(StreamingExactness, AHaloOnePixelShortChangesTheFeatureMap) {
  const Backend backend = Backend::reference;
  Model model(model_spec("resnet18", 0.125), 7);
  randomise_batch_norms(model, 11);
  const Tensor image = random_tensor({1, 1, 300, 350}, 5);
  const Outcome whole = whole_image(model, image, backend, nullptr);
  StreamingTrunk trunk(model.encoder());
  const ForwardContext ctx = frozen_training(backend);
  const StreamPlan exact = trunk.plan(image.shape(), 96, ctx);
  TensorRegionReader reader(image);
  const double exact_error = relative_errors(to_doubles(trunk.forward(reader, exact, ctx)), whole.feature_map).max;
  EXPECT_EQ(exact_error, 0.0);
  for (const bool rows : {true, false}) {
    ReceptiveField short_field = exact.field;
    (rows ? short_field.y : short_field.x).after -= 1;
    const StreamPlan short_plan = make_stream_plan(short_field, exact.image, exact.feature_map, 96);
    const double short_error =
        relative_errors(to_doubles(trunk.forward(reader, short_plan, ctx)), whole.feature_map).max;
    std::cout << fmt::format("[stream] reference halo exact: relative error {:.2e}; one {} short: {:.2e}\n",
                             exact_error, rows ? "row" : "column", short_error);
    EXPECT_GT(short_error, 0.0) << (rows ? "rows" : "columns");
  }
}

TEST(StreamingRefusal, BatchNormWithBatchStatisticsIsRefusedByName) {
  Model model(model_spec("resnet18", 0.125), 1);
  StreamingTrunk trunk(model.encoder());
  ForwardContext ctx = ForwardContext::train(Backend::cpu);  // freeze_bn off
  try {
    trunk.plan({1, 1, 200, 200}, 64, ctx);
    FAIL() << "a trunk with training BatchNorm was streamed";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("batch norm `bn1`"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("freeze"), std::string::npos) << error.what();
  }
  ctx.freeze_bn = true;
  EXPECT_NO_THROW(trunk.plan({1, 1, 200, 200}, 64, ctx));
  EXPECT_NO_THROW(trunk.plan({1, 1, 200, 200}, 64, ForwardContext::inference(Backend::cpu)));
}

TEST(StreamingRefusal, ALayerMixingTheWholeMapIsRefusedByName) {
  Model model(model_spec("resnet18", 0.125), 1);
  std::vector<Layer*> layers;
  for (std::size_t i = 0; i < model.encoder().size(); ++i) layers.push_back(&model.encoder().at(i));
  StreamingTrunk with_pooling(layers);  // global average pooling left in the trunk
  try {
    with_pooling.receptive_field(ForwardContext::inference(Backend::cpu));
    FAIL() << "global average pooling was streamed";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("layer `avgpool` cannot be streamed"), std::string::npos) << error.what();
  }
}

// One streamed training step holds one tile's activations, the feature map and its
// gradient: measured by the allocator, it is what the planner says (within 20%) and
// a fraction of the whole image's step.
TEST(StreamingMemory, AStepHoldsOneTileAndTheMapAsPlanned) {
  const Backend backend = Backend::cpu;
  Model model(model_spec("resnet18", 0.125), 7);
  const Tensor image = random_tensor({1, 1, 1000, 1100}, 5);
  const ForwardContext ctx = frozen_training(backend);
  Allocator& host = allocator_for(Device::cpu());
  auto step_peak = [&](const std::function<void()>& step) {
    model.zero_grad();
    step();  // first: the parameters' gradients are allocated
    model.zero_grad();
    host.reset_peak();
    const std::size_t before = host.stats().current_bytes;
    step();
    return host.stats().peak_bytes - before;
  };
  const std::size_t whole = step_peak([&] { whole_image(model, image, backend, nullptr); });
  StreamingTrunk trunk(model.encoder());
  const StreamPlan plan = trunk.plan(image.shape(), 256, ctx);
  const std::size_t streamed = step_peak([&] { streamed_step(model, image, backend, plan); });
  const StreamMemory planned = plan_stream_memory(model.encoder(), plan, KernelMemoryModel::for_backend(backend));
  std::cout << fmt::format(
      "[stream] memory, resnet18/8 1000x1100 tile 256: whole-image step {:.1f} MiB, streamed {:.1f} MiB (planned "
      "{:.1f}: tile {:.1f} + map {:.2f} x 2), halo overhead {:.2f}\n",
      whole / 1048576.0, streamed / 1048576.0, planned.step_peak / 1048576.0, planned.tile_step / 1048576.0,
      planned.feature_map / 1048576.0, planned.halo_overhead);
  EXPECT_NEAR(static_cast<double>(streamed), static_cast<double>(planned.step_peak), 0.2 * planned.step_peak);
  EXPECT_LT(streamed, whole / 2);
}

// The attention aggregator over the map's cells (each cell an instance, as
// StreamingCLAM) as the head: with the trunk streamed, the logits, the loss and
// every gradient (trunk, aggregator, fc) are the whole image's; and the mean over the
// cells is the global average pooling of the encoder.
TEST(StreamingHead, AttentionOverTheMapsCellsEqualsTheWholeImage) {
  const Backend backend = Backend::reference;
  Model model(model_spec("resnet18", 0.125), 7);
  randomise_batch_norms(model, 11);
  const std::unique_ptr<Aggregator> attention =
      make_aggregator({AggregatorKind::attention, 16, true, 0.0f}, model.encoder().feature_dim(), 3);
  const Tensor image = random_tensor({1, 1, 300, 350}, 5);
  const ForwardContext ctx = frozen_training(backend);
  StreamingTrunk trunk(model.encoder());
  const StreamPlan plan = trunk.plan(image.shape(), 96, ctx);
  TensorRegionReader reader(image);
  auto run = [&](bool stream) {
    model.zero_grad();
    attention->zero_grad();
    Tensor map = image;
    if (stream)
      map = trunk.forward(reader, plan, ctx);
    else
      for (Layer* layer : trunk.layers()) map = layer->forward(map, ctx);
    const Shape map_shape = map.shape();
    const Tensor logits = model.head().forward(attention->forward(map_cells(map), ctx), ctx);
    map = {};
    Outcome out;
    out.logits = to_doubles(logits);
    Tensor dlogits = Tensor::empty(logits.shape());
    out.loss = kernels::cross_entropy(backend, logits, targets_for(1), nullptr, {}, dlogits);
    Tensor dmap = map_from_cells(attention->backward(model.head().backward(dlogits)), map_shape);
    if (stream) {
      trunk.backward(reader, plan, dmap, ctx);
    } else {
      for (auto it = trunk.layers().rbegin(); it != trunk.layers().rend(); ++it) dmap = (*it)->backward(dmap);
    }
    out.gradients = gradients_of(model);
    for (Parameter* parameter : attention->parameters()) out.gradients[parameter->name] = to_doubles(parameter->grad);
    return out;
  };
  const Outcome whole = run(false);
  const Outcome streamed_out = run(true);
  EXPECT_EQ(relative_errors(streamed_out.logits, whole.logits).max, 0.0);
  EXPECT_EQ(streamed_out.loss, whole.loss);
  double worst = 0.0;
  std::string worst_name;
  for (const auto& [name, expected] : whole.gradients) {
    const double error = relative_errors(streamed_out.gradients.at(name), expected).max;
    if (error >= worst) worst = error, worst_name = name;
  }
  std::cout << fmt::format("[stream] attention over cells, reference: gradients {:.2e} ({})\n", worst, worst_name);
  EXPECT_LE(worst, 1e-5) << worst_name;
  EXPECT_TRUE(whole.gradients.contains("aggregator.attention_V.weight"));

  // Mean over the cells = global average pooling.
  const std::unique_ptr<Aggregator> mean = make_aggregator({AggregatorKind::mean}, model.encoder().feature_dim(), 3);
  const ForwardContext inference = ForwardContext::inference(backend);
  const Tensor map = trunk.forward(reader, plan, inference);
  GlobalAvgPool pool("avgpool");
  EXPECT_LE(relative_errors(to_doubles(mean->forward(map_cells(map), inference)),
                            to_doubles(pool.forward(map, inference)))
                .max,
            1e-6);
}

}  // namespace
}  // namespace bigtrain::net
