// train.precision: the configuration's checks, and fp16 dynamic loss scaling in a
// real training run. The run uses the reference backend, which computes fp16 as
// the GPU does (operands rounded to float16, float32 accumulation) but needs no GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/device_select.hpp"
#include "net/safetensors.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/config/specs.hpp"
#include "pipeline/data/demo_data.hpp"
#include "pipeline/train/trainer.hpp"
#include "tests/support/compute_type.hpp"
#include "tests/support/demo_dataset.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

const char* kMinimal = "data: {train: t.csv}\n";

TEST(PrecisionConfig, DefaultsAndValues) {
  const Config c = parse_config(kMinimal, "p.yaml");
  EXPECT_EQ(c.train.precision, DType::f32);
  EXPECT_EQ(c.train.loss_scale.init, 65536.0);
  EXPECT_EQ(c.train.loss_scale.growth_interval, 2000);
  const Config bf16 = parse_config(kMinimal, "p.yaml", {"train.precision=bf16", "device.type=cuda"});
  EXPECT_EQ(bf16.train.precision, DType::bf16);
  // The resolved config written into a run reads back the same.
  const Config again = parse_config(config_to_yaml(bf16), "config.yaml");
  EXPECT_EQ(again.train.precision, DType::bf16);
  const Config scaled = parse_config(kMinimal, "p.yaml",
                                     {"train.precision=fp16", "train.loss_scale.init=1024", "train.loss_scale.growth_interval=7"});
  const Config scaled_again = parse_config(config_to_yaml(scaled), "config.yaml");
  EXPECT_EQ(scaled_again.train.loss_scale.init, 1024.0);
  EXPECT_EQ(scaled_again.train.loss_scale.growth_interval, 7);
}

TEST(PrecisionConfig, BadValuesNameTheKey) {
  std::string message = error_of([] { parse_config("data: {train: t.csv}\ntrain: {precision: fp8}\n", "p.yaml"); });
  EXPECT_NE(message.find("train.precision"), std::string::npos) << message;
  EXPECT_NE(message.find("p.yaml"), std::string::npos) << message;
  EXPECT_NE(message.find("fp8"), std::string::npos) << message;
  // bf16 with device: cpu depends on the CPU: the trainer decides (tests below).
  EXPECT_EQ(error_of([] { parse_config(kMinimal, "p.yaml", {"train.precision=bf16", "device.type=cpu"}); }), "");
  message = error_of([] { parse_config(kMinimal, "p.yaml", {"train.precision=fp16", "device.type=cpu"}); });
  EXPECT_NE(message.find("train.precision"), std::string::npos) << message;
  EXPECT_NE(message.find("device: cuda"), std::string::npos) << message;
  message = error_of([] { parse_config(kMinimal, "p.yaml", {"train.loss_scale.init=0"}); });
  EXPECT_NE(message.find("train.loss_scale.init"), std::string::npos) << message;
  message = error_of([] { parse_config(kMinimal, "p.yaml", {"train.loss_scale.growth_interval=0"}); });
  EXPECT_NE(message.find("train.loss_scale.growth_interval"), std::string::npos) << message;
}

class MixedPrecisionTrainer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = testing::fresh_scratch_dir("bigtrain_mixed_precision_test");
    testing::make_test_demo_data({.out = (root_ / "data").string(), .size = 96, .classes = {0, 1},
                                  .train = 12, .val = 4, .test = 0,
                                  .label_digits = 2, .other_digits = 0, .clutter_lines = 0,
                                  .block_size = 48, .seed = 5});
  }
  static void TearDownTestSuite() { if (!std::getenv("BIGTRAIN_KEEP_TEST_RUNS")) fs::remove_all(root_); }

  static Config config(const std::string& run, const std::vector<std::string>& extra = {}) {
    const std::string text = fmt::format(R"(data:
  train: {0}/train.csv
  val: {0}/val.csv
  mean: [0.1]
  std: [0.3]
tiler: {{tile: 48, overlap: 0, border: shift}}
model:
  preset: small
  in_channels: 1
  width: 0.25
  stem: {{kernel: 5, stride: 2, maxpool: false}}
aggregator: {{kind: mean}}
train:
  epochs: 6
  images_per_step: 1
  tile_batch: 4
  optimizer: adamw
  lr: 0.005
  freeze_bn: true
  schedule: constant
  seed: 4
device: {{type: auto, threads: 2}}
output: {{dir: {1}}}
)",
                                         (root_ / "data").string(), (root_ / run).string());
    return parse_config(text, "mixed_precision_test.yaml", extra);
  }

  static fs::path root_;
};
fs::path MixedPrecisionTrainer::root_;

// A scale of 2^30 makes the encoder's float16 gradients overflow: those steps must
// be skipped (no optimizer step), each halving the scale and logging a warning
// naming epoch, step and scale, until the gradients fit; training then proceeds
// and the loss falls. The checkpoint carries the scale reached.
TEST_F(MixedPrecisionTrainer, Fp16OverflowSkipsStepsLowersTheScaleThenLearns) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  spdlog::default_logger()->sinks().push_back(sink);
  const spdlog::level::level_enum level = spdlog::get_level();
  spdlog::set_level(spdlog::level::info);  // the precision line is info
  const double init = std::ldexp(1.0, 30);
  TrainOutcome outcome;
  {
    Trainer trainer(config("fp16", {"train.precision=fp16", "train.loss_scale.init=1073741824"}), false,
                    Backend::reference);
    outcome = trainer.run();
  }
  spdlog::set_level(level);
  spdlog::default_logger()->sinks().pop_back();
  const std::vector<std::string> lines = sink->last_formatted();

  int skipped_logged = 0;
  bool precision_logged = false;
  const std::regex skip_line(R"(non-finite gradients at epoch (\d+), optimizer step (\d+) of (\d+) .* step skipped, loss scale ([0-9.e+-]+) -> ([0-9.e+-]+))");
  double expected_scale = init;
  for (const std::string& line : lines) {
    precision_logged |= line.find("precision: fp16") != std::string::npos;
    std::smatch m;
    if (!std::regex_search(line, m, skip_line)) continue;
    ++skipped_logged;
    // Logged as floats in their shortest exact form.
    EXPECT_EQ(std::stof(m[4]), static_cast<float>(expected_scale)) << line;
    expected_scale /= 2;
    EXPECT_EQ(std::stof(m[5]), static_cast<float>(expected_scale)) << line;
  }
  EXPECT_TRUE(precision_logged);
  ASSERT_GE(skipped_logged, 1) << "a 2^30 loss scale overflowed no float16 gradient";

  // 12 images, one per step, 6 epochs: every step not skipped was taken.
  const auto training = net::read_safetensors(root_ / "fp16" / "checkpoints" / "last.training.safetensors").metadata;
  const std::string position = training.at("bigtrain.checkpoint");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(position, m, std::regex(R"(optimizer step (\d+) of the run)"))) << position;
  EXPECT_EQ(std::stoi(m[1]), 72 - skipped_logged) << position;
  const nlohmann::json scaler = nlohmann::json::parse(training.at("loss_scaler"));
  EXPECT_EQ(scaler.at("scale").get<double>(), expected_scale);
  EXPECT_LT(expected_scale, init);
  EXPECT_GT(72 - skipped_logged, 36) << "most steps must be taken once the scale fits";

  // Training loss of the first and last epochs (rows: train, val per epoch).
  ASSERT_EQ(outcome.rows.size(), 12u);
  ASSERT_EQ(outcome.rows.front().split, "train");
  std::printf("fp16 run: %d steps skipped, scale %g -> %g, train loss %.4f -> %.4f\n", skipped_logged, init,
              expected_scale, outcome.rows[0].metrics.loss, outcome.rows[10].metrics.loss);
  EXPECT_TRUE(std::isfinite(outcome.rows[10].metrics.loss));
  // Measured 0.71 -> 0.54 (chance is ln 2 = 0.69); 10% lower is the bar.
  EXPECT_LT(outcome.rows[10].metrics.loss, 0.9 * outcome.rows[0].metrics.loss);
}

// fp16 never runs on the CPU; bf16 only where the CPU has AVX512_BF16, and the
// refusal elsewhere names the missing instruction set (tests/cli/train_cpu_bf16_refused.sh
// sees it on any CPU by capping oneDNN's instruction set).
TEST_F(MixedPrecisionTrainer, HalfPrecisionOnTheCpuIsRefusedNamingTheSetting) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "hardware: a GPU is present, so device: auto selects it";
  std::string message = error_of([] { Trainer(config("refused", {"train.precision=fp16"}), false); });
  EXPECT_NE(message.find("train.precision fp16"), std::string::npos) << message;
  EXPECT_NE(message.find("mixed_precision_test.yaml"), std::string::npos) << message;
  message = error_of([] { Trainer(config("refused_bf16", {"train.precision=bf16"}), false); });
  if (kernels::cpu::bf16_unavailable_reason()) {
    EXPECT_NE(message.find("train.precision bf16"), std::string::npos) << message;
    EXPECT_NE(message.find("AVX512_BF16"), std::string::npos) << message;
  } else {
    EXPECT_EQ(message, "") << "bf16 refused on a CPU with AVX512_BF16";
  }
}

// A run its backend cannot train stops before anything is built, naming the file,
// the setting, and the op, dtype and backend refused (the ops of this config asked of
// the backend table: pipeline/config/specs.hpp). fp16 with device: cuda is a valid
// config; the CPU backend has no float16 convolution.
TEST_F(MixedPrecisionTrainer, AnOpTheBackendCannotRunIsRefusedBeforeAnythingIsBuilt) {
  const Config fp16 = config("refused_op", {"train.precision=fp16", "device.type=cuda"});
  const std::string message = error_of([&] { Trainer(fp16, false, Backend::cpu); });
  EXPECT_NE(message.find("mixed_precision_test.yaml: train.precision fp16 with device: cuda"), std::string::npos)
      << message;
  EXPECT_NE(message.find("conv2d in float16 is not supported by the cpu backend"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(fp16.output.dir)) << "the run directory was made before the refusal";
  EXPECT_EQ(why_backend_cannot_train(fp16, Backend::reference, "reference"), "");
}

// bf16 on a CPU with AVX512_BF16: the encoder's convolutions run oneDNN's bf16
// kernels (float32 master weights) and the model learns; the run is not the float32
// run (the precision reached the layers).
TEST_F(MixedPrecisionTrainer, Bf16OnTheCpuLearns) {
  BT_SKIP_UNLESS_COMPUTES(Backend::cpu, DType::bf16);
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  spdlog::default_logger()->sinks().push_back(sink);
  const spdlog::level::level_enum level = spdlog::get_level();
  spdlog::set_level(spdlog::level::info);  // the precision line is info
  TrainOutcome bf16, fp32;
  {
    Trainer trainer(config("bf16_cpu", {"train.precision=bf16", "device.type=cpu"}), false, Backend::cpu);
    bf16 = trainer.run();
  }
  spdlog::set_level(level);
  spdlog::default_logger()->sinks().pop_back();
  {
    Trainer trainer(config("fp32_cpu", {"device.type=cpu"}), false, Backend::cpu);
    fp32 = trainer.run();
  }
  bool precision_logged = false;
  for (const std::string& line : sink->last_formatted())
    precision_logged |= line.find("precision: bf16 (encoder convolutions in bfloat16") != std::string::npos;
  EXPECT_TRUE(precision_logged);

  // Rows: train, val per epoch.
  ASSERT_EQ(bf16.rows.size(), 12u);
  ASSERT_EQ(fp32.rows.size(), 12u);
  const double first = bf16.rows[0].metrics.loss, last = bf16.rows[10].metrics.loss;
  std::printf("bf16 on the cpu: train loss %.4f -> %.4f (fp32 %.4f -> %.4f)\n", first, last, fp32.rows[0].metrics.loss,
              fp32.rows[10].metrics.loss);
  EXPECT_TRUE(std::isfinite(last));
  // Measured 0.711 -> 0.507 (float32: 0.711 -> 0.511; chance is ln 2 = 0.69); 10% lower is the bar.
  EXPECT_LT(last, 0.9 * first);
  EXPECT_NE(last, fp32.rows[10].metrics.loss) << "the bf16 run computed exactly the float32 run";
}

}  // namespace
}  // namespace bigtrain
