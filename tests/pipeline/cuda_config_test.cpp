// The GPU keys of the run config (issue 18), read and checked without a GPU:
// device.memory_limit and train.cudnn_workspace as memory sizes, device.index's
// range, errors naming the file and the key.
#include <gtest/gtest.h>

#include <string>

#include "kernels/core/memory_size.hpp"
#include "pipeline/config/config.hpp"
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

}  // namespace
}  // namespace bigtrain
