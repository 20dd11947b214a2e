// The GPU keys of the run config (issue 18), read and checked without a GPU:
// device.memory_limit and train.cudnn_workspace as memory sizes, device.index's
// range, errors naming the file and the key; and what `bigtrain plan` makes of them
// (the workspace it counts, the CUDA context and handles beside the allocator's peak).
#include <gtest/gtest.h>

#include <string>

#include "kernels/core/memory_size.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/plan/plan.hpp"
#include "tests/support/error_of.hpp"

namespace bigtrain {
namespace {

using testing::error_of;

constexpr std::size_t MiB = std::size_t{1} << 20;
const std::string kData = "data:\n  train: /data/train.csv\n";

std::string config_error(const std::string& yaml) {
  return error_of([&] { parse_config(yaml, "gpu.yaml"); });
}

TEST(CudaConfig, DefaultsAreNoCapAndA256MiBWorkspace) {
  const Config c = parse_config(kData, "gpu.yaml");
  EXPECT_EQ(c.device.memory_limit, "");
  EXPECT_EQ(c.device.memory_limit_bytes, 0u);
  EXPECT_EQ(c.device.index, 0);
  EXPECT_EQ(c.train.cudnn_workspace, "256MiB");
  EXPECT_EQ(c.train.cudnn_workspace_bytes, 256 * MiB);
  // The resolved config reads back to the same values.
  const Config again = parse_config(config_to_yaml(c), "saved.yaml");
  EXPECT_EQ(again.device.memory_limit_bytes, 0u);
  EXPECT_EQ(again.train.cudnn_workspace_bytes, 256 * MiB);
}

TEST(CudaConfig, ReadsSizesAndIndexAndWritesThemBack) {
  const Config c = parse_config(
      kData + "device: {type: cuda, index: 1, memory_limit: 2GiB}\ntrain: {cudnn_workspace: 64MiB}\n", "gpu.yaml");
  EXPECT_EQ(c.device.index, 1);
  EXPECT_EQ(c.device.memory_limit_bytes, std::size_t{2} << 30);
  EXPECT_EQ(c.train.cudnn_workspace_bytes, 64 * MiB);
  const Config again = parse_config(config_to_yaml(c), "saved.yaml");
  EXPECT_EQ(again.device.memory_limit, "2GiB");
  EXPECT_EQ(again.device.memory_limit_bytes, c.device.memory_limit_bytes);
  EXPECT_EQ(again.train.cudnn_workspace, "64MiB");
  EXPECT_EQ(again.train.cudnn_workspace_bytes, c.train.cudnn_workspace_bytes);
  EXPECT_EQ(again.device.index, 1);
  // Decimal units, fractions and --set overrides.
  EXPECT_EQ(parse_config(kData, "gpu.yaml", {"device.memory_limit=3GB"}).device.memory_limit_bytes,
            std::size_t{3'000'000'000});
  EXPECT_EQ(parse_config(kData, "gpu.yaml", {"device.memory_limit=1.5GiB"}).device.memory_limit_bytes,
            std::size_t{3} << 29);
  // A workspace of 0: only the convolution algorithms that need no scratch.
  EXPECT_EQ(parse_config(kData, "gpu.yaml", {"train.cudnn_workspace=0"}).train.cudnn_workspace_bytes, 0u);
}

TEST(CudaConfig, BadValuesNameTheFileAndTheKey) {
  std::string message = config_error(kData + "device: {memory_limit: lots}\n");
  EXPECT_NE(message.find("gpu.yaml"), std::string::npos) << message;
  EXPECT_NE(message.find("device.memory_limit"), std::string::npos) << message;
  EXPECT_NE(message.find("memory size 'lots'"), std::string::npos) << message;
  EXPECT_NE(message.find("2GiB"), std::string::npos) << message;  // the valid forms
  message = config_error(kData + "device: {memory_limit: 16MiB}\n");
  EXPECT_NE(message.find("device.memory_limit"), std::string::npos) << message;
  EXPECT_NE(message.find("below 64MiB"), std::string::npos) << message;
  message = config_error(kData + "device: {memory_limit: -2GiB}\n");
  EXPECT_NE(message.find("device.memory_limit"), std::string::npos) << message;
  message = config_error(kData + "train: {cudnn_workspace: -1}\n");
  EXPECT_NE(message.find("train.cudnn_workspace"), std::string::npos) << message;
  message = config_error(kData + "train: {cudnn_workspace: 256 MB of it}\n");
  EXPECT_NE(message.find("train.cudnn_workspace"), std::string::npos) << message;
  message = error_of([] { parse_config(kData, "gpu.yaml", {"device.memory_limit=2GiBs"}); });
  EXPECT_NE(message.find("device.memory_limit"), std::string::npos) << message;
  EXPECT_NE(message.find("2GiBs"), std::string::npos) << message;
  for (const char* index : {"-1", "2000", "one"}) {
    message = config_error(kData + "device: {index: " + index + "}\n");
    EXPECT_NE(message.find("device.index"), std::string::npos) << index << ": " << message;
  }
}

TEST(CudaConfig, MemorySizesReadAsUsersWriteThem) {
  EXPECT_EQ(parse_memory_size("2GiB"), std::size_t{2} << 30);
  EXPECT_EQ(parse_memory_size("2 gib"), std::size_t{2} << 30);
  EXPECT_EQ(parse_memory_size("512MiB"), 512 * MiB);
  EXPECT_EQ(parse_memory_size("2G"), std::size_t{2} << 30);
  EXPECT_EQ(parse_memory_size("2GB"), std::size_t{2'000'000'000});
  EXPECT_EQ(parse_memory_size("65536"), 65536u);
  for (const char* bad : {"", "GiB", "0", "-1GiB", "2XB", "1e3GiB", "2GiB2"})
    EXPECT_NE(error_of([&] { parse_memory_size(bad); }).find("memory size"), std::string::npos) << bad;
}

// The plan counts the configured workspace once, and on CUDA the context and
// library handles beside the allocator's peak (a documented constant without a GPU).
TEST(CudaConfig, PlanCountsTheWorkspaceAndTheCudaRuntime) {
  const std::string yaml = kData + "model: {preset: resnet18, width: 0.25}\ntrain: {tile_batch: 2}\n";
  const Config wide = parse_config(yaml, "gpu.yaml");
  const Config narrow = parse_config(yaml, "gpu.yaml", {"train.cudnn_workspace=32MiB"});
  const TrainingPlan a = plan_training(plan_inputs_from_config(wide, Backend::cuda));
  const TrainingPlan b = plan_training(plan_inputs_from_config(narrow, Backend::cuda));
  EXPECT_EQ(a.step.workspace, 256 * MiB);
  EXPECT_EQ(b.step.workspace, 32 * MiB);
  EXPECT_EQ(a.step.peak - b.step.peak, 224 * MiB);
  EXPECT_EQ(a.cuda_runtime, kCudaRuntimeBytes);
  const nlohmann::json json = to_json(a);
  EXPECT_EQ(json["cuda_runtime"]["bytes"].get<std::size_t>(), kCudaRuntimeBytes);
  EXPECT_EQ(json["cuda_runtime"]["source"], "constant");
  EXPECT_EQ(json["cuda_runtime"]["device_total_bytes"].get<std::size_t>(), a.step.peak + kCudaRuntimeBytes);
  EXPECT_NE(format_plan(a).find("plus the CUDA context and cuDNN/cuBLAS handles"), std::string::npos);
  // The CPU has neither.
  const TrainingPlan cpu = plan_training(plan_inputs_from_config(wide, Backend::cpu));
  EXPECT_EQ(cpu.step.workspace, 0u);
  EXPECT_EQ(cpu.cuda_runtime, 0u);
  EXPECT_FALSE(to_json(cpu).contains("cuda_runtime"));
  EXPECT_EQ(format_plan(cpu).find("CUDA context"), std::string::npos);
}

}  // namespace
}  // namespace bigtrain
