// safetensors IO and Model::load_state_dict: round trips, corrupt files, grayscale
// transfer, head re-initialisation and the one error listing every mismatch.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/core/error.hpp"
#include "net/model.hpp"
#include "tests/net/net_testing.hpp"
#include "tests/support/error_of.hpp"

namespace bigtrain::net {
namespace {

using namespace bigtrain::net::testing;
namespace fs = std::filesystem;
using bigtrain::testing::error_of;

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bigtrain_checkpoint_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path path(const std::string& name) const { return dir_ / name; }

  fs::path dir_;
};

ModelSpec small_spec(std::int64_t in_channels, std::int64_t classes) {
  ModelSpec spec;
  spec.encoder = EncoderSpec::preset_spec("small");
  spec.encoder.in_channels = in_channels;
  spec.num_classes = classes;
  return spec;
}

std::vector<std::byte> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

void write_bytes(const fs::path& p, const std::vector<std::byte>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST_F(Checkpoint, SafetensorsRoundTrip) {
  SafetensorsFile file;
  file.tensors["a.weight"] = StoredTensor::from_tensor(random_tensor({3, 2, 1, 4}, 1));
  file.tensors["scalar"] = StoredTensor::from_int64(-123456789012345);
  Tensor labels = Tensor::empty({5}, DType::i32);
  for (int i = 0; i < 5; ++i) labels.data<std::int32_t>()[i] = i * 7 - 3;
  file.tensors["labels"] = StoredTensor::from_tensor(labels);
  file.tensors["empty"] = StoredTensor::from_tensor(Tensor::empty({0, 3}));
  file.metadata["config"] = "model:\n  preset: small\n";
  file.metadata["classes"] = R"(["cat","dog"])";
  write_safetensors(path("x.safetensors"), file);
  EXPECT_FALSE(fs::exists(path("x.safetensors.tmp")));

  const std::vector<std::byte> bytes = file_bytes(path("x.safetensors"));
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ(header % 8, 0u) << "data section aligned to 8 bytes";
  EXPECT_EQ(static_cast<char>(bytes[8]), '{');

  const SafetensorsFile back = read_safetensors(path("x.safetensors"));
  EXPECT_EQ(back.metadata, file.metadata);
  ASSERT_EQ(back.tensors.size(), file.tensors.size());
  for (const auto& [name, tensor] : file.tensors) {
    const StoredTensor& read = back.tensors.at(name);
    EXPECT_EQ(read.dtype, tensor.dtype) << name;
    EXPECT_EQ(read.shape, tensor.shape) << name;
    EXPECT_EQ(read.bytes, tensor.bytes) << name;
  }
  EXPECT_EQ(back.tensors.at("scalar").to_int64(), -123456789012345);
  // The in-memory parser reads the same.
  const SafetensorsFile parsed = parse_safetensors(bytes, "memory");
  EXPECT_EQ(parsed.metadata, file.metadata);
  for (const auto& [name, tensor] : file.tensors) EXPECT_EQ(parsed.tensors.at(name).bytes, tensor.bytes) << name;
  EXPECT_THROW(parse_safetensors(std::span(bytes).first(bytes.size() - 4), "memory"), Error);
  EXPECT_EQ(back.tensors.at("labels").dtype, StoredDType::I32);
}

// PyTorch checkpoints saved in half precision load into float32 models.
TEST_F(Checkpoint, HalfPrecisionConvertsToFloat) {
  StoredTensor half;
  half.dtype = StoredDType::F16;
  half.shape = {4};
  const std::uint16_t values[4] = {0x3C00, 0xC000, 0x3555, 0x0001};  // 1, -2, 0.333252, smallest subnormal
  half.bytes.resize(8);
  std::memcpy(half.bytes.data(), values, 8);
  const std::vector<float> f = half.to_f32().to_vector();
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], 0.333251953125f);
  EXPECT_EQ(f[3], std::ldexp(1.0f, -24));
  StoredTensor bf16;
  bf16.dtype = StoredDType::BF16;
  bf16.shape = {1};
  const std::uint16_t b = 0x4049;  // 3.140625
  bf16.bytes.resize(2);
  std::memcpy(bf16.bytes.data(), &b, 2);
  EXPECT_EQ(bf16.to_f32().to_vector()[0], 3.140625f);
}

TEST_F(Checkpoint, ModelRoundTripRestoresWeightsAndOutputs) {
  Model original(small_spec(1, 5), 1);
  // Move the running statistics off their defaults so they are checked too.
  original.forward(random_tensor({4, 1, 32, 32}, 2), ForwardContext::train(Backend::cpu));
  original.clear_saved();
  write_safetensors(path("model.safetensors"), {original.state_dict(), {{"epoch", "3"}}});

  Model restored(small_spec(1, 5), 99);
  const LoadReport report = restored.load_safetensors(path("model.safetensors"));
  EXPECT_FALSE(report.grayscale_transferred);
  EXPECT_FALSE(report.head_reinitialised);
  const StateDict a = original.state_dict(), b = restored.state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : a) EXPECT_EQ(b.at(name).bytes, tensor.bytes) << name;
  EXPECT_EQ(b.at("bn1.num_batches_tracked").to_int64(), 1);
  const Tensor x = random_tensor({2, 1, 32, 32}, 3);
  const ForwardContext eval = ForwardContext::inference(Backend::cpu);
  EXPECT_EQ(original.forward(x, eval).to_vector(), restored.forward(x, eval).to_vector());
}

TEST_F(Checkpoint, CorruptFilesAreErrorsNamingTheFile) {
  Model model(small_spec(1, 2), 1);
  write_safetensors(path("good.safetensors"), {model.state_dict(), {}});
  const std::vector<std::byte> good = file_bytes(path("good.safetensors"));
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, good.data(), 8);

  auto expect_error = [&](const std::string& name, const std::vector<std::byte>& bytes, const std::string& words) {
    write_bytes(path(name), bytes);
    const std::string message = error_of([&] { read_safetensors(path(name)); });
    EXPECT_NE(message.find(path(name).string()), std::string::npos) << message;
    EXPECT_NE(message.find(words), std::string::npos) << name << ": " << message;
  };
  expect_error("empty.safetensors", {}, "not a safetensors file");
  expect_error("truncated.safetensors", std::vector<std::byte>(good.begin(), good.end() - 100), "truncated");
  std::vector<std::byte> huge = good;
  const std::uint64_t too_long = good.size();
  std::memcpy(huge.data(), &too_long, 8);
  expect_error("header_length.safetensors", huge, "header length");
  std::vector<std::byte> not_json = good;
  not_json[8] = std::byte{'['};
  not_json[9] = std::byte{'x'};
  expect_error("not_json.safetensors", not_json, "not valid JSON");

  auto with_header = [&](const std::string& header) {
    std::vector<std::byte> bytes(8 + header.size());
    const std::uint64_t length = header.size();
    std::memcpy(bytes.data(), &length, 8);
    std::memcpy(bytes.data() + 8, header.data(), header.size());
    bytes.resize(bytes.size() + 16);
    return bytes;
  };
  expect_error("dtype.safetensors", with_header(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})"),
               "unknown dtype");
  expect_error("size.safetensors", with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"),
               "needs 12 bytes");
  expect_error("offsets.safetensors", with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})"),
               "spans bytes");
  expect_error("fields.safetensors", with_header(R"({"w":{"dtype":"F32","shape":[2]}})"), "data_offsets");
  expect_error("shape.safetensors", with_header(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})"),
               "negative");
  expect_error("metadata.safetensors", with_header(R"({"__metadata__":{"epoch":3}})"), "not a string");

  const std::string missing = error_of([&] { read_safetensors(path("missing.safetensors")); });
  EXPECT_NE(missing.find("missing.safetensors"), std::string::npos) << missing;
  EXPECT_THROW(write_safetensors(path("no/such/dir/x.safetensors"), {}), Error);
}

// A 3-channel conv1 loads into a 1-channel model summed over input channels, so the
// gray model on image g computes what the RGB model computes on (g, g, g).
TEST_F(Checkpoint, GrayscaleTransferSumsConv1OverInputChannels) {
  Model rgb(small_spec(3, 4), 1);
  Model gray(small_spec(1, 4), 2);
  const LoadReport report = gray.load_state_dict(rgb.state_dict(), {}, "rgb.safetensors");
  EXPECT_TRUE(report.grayscale_transferred);
  EXPECT_FALSE(report.head_reinitialised);
  ASSERT_FALSE(report.notes.empty());
  EXPECT_NE(report.notes[0].find("conv1.weight"), std::string::npos);

  const Tensor g = random_tensor({2, 1, 32, 32}, 3);
  Tensor ggg = Tensor::empty({2, 3, 32, 32});
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      std::memcpy(ggg.f32() + (n * 3 + c) * 1024, g.f32() + n * 1024, 1024 * sizeof(float));
  const ForwardContext eval = ForwardContext::inference(Backend::cpu);
  // The summed filter rounds once per weight where the RGB model rounds three
  // products per pixel: float32 differences of ~1e-6 relative to the logits' rms.
  expect_close(gray.forward(g, eval), rgb.forward(ggg, eval), {1e-5, 1e-7}, "gray vs rgb logits");

  LoadOptions strict;
  strict.grayscale_transfer = false;
  Model other(small_spec(1, 4), 2);
  EXPECT_NE(error_of([&] { other.load_state_dict(rgb.state_dict(), strict); }).find("conv1.weight"),
            std::string::npos);
}

// A checkpoint with another class count keeps its encoder; the head is re-initialised.
TEST_F(Checkpoint, HeadWithOtherClassCountIsReinitialised) {
  Model ten(small_spec(1, 10), 1);
  Model three(small_spec(1, 3), 5);
  const LoadReport report = three.load_state_dict(ten.state_dict());
  EXPECT_TRUE(report.head_reinitialised);
  const StateDict loaded = three.state_dict(), source = ten.state_dict(), fresh = Model(small_spec(1, 3), 5).state_dict();
  EXPECT_EQ(loaded.at("layer3.conv.weight").bytes, source.at("layer3.conv.weight").bytes);
  EXPECT_EQ(loaded.at("fc.weight").shape, (Shape{3, 64}));
  EXPECT_EQ(loaded.at("fc.weight").bytes, fresh.at("fc.weight").bytes) << "re-initialised from the model's seed";
  EXPECT_EQ(loaded.at("fc.bias").bytes, fresh.at("fc.bias").bytes);

  LoadOptions strict;
  strict.reinit_mismatched_head = false;
  EXPECT_NE(error_of([&] { Model(small_spec(1, 3), 5).load_state_dict(ten.state_dict(), strict); }).find("fc.weight"),
            std::string::npos);
}

// Every problem in one message; the model is unchanged when loading fails.
TEST_F(Checkpoint, MismatchListsEveryOffendingTensor) {
  Model source(small_spec(1, 4), 1);
  StateDict state = source.state_dict();
  state.erase("layer2.bn.running_var");
  state["layer9.conv.weight"] = StoredTensor::from_tensor(Tensor::zeros({2, 2}));
  state["layer1.conv.weight"] = StoredTensor::from_tensor(Tensor::zeros({32, 16, 5, 5}));
  state["bn1.weight"] = StoredTensor::from_int64(1);

  Model target(small_spec(1, 4), 2);
  const StateDict before = target.state_dict();
  const std::string message = error_of([&] { target.load_state_dict(state, {}, "broken.safetensors"); });
  EXPECT_NE(message.find("broken.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("4 problem(s)"), std::string::npos) << message;
  EXPECT_NE(message.find("missing: layer2.bn.running_var"), std::string::npos) << message;
  EXPECT_NE(message.find("unexpected: layer9.conv.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("shape: layer1.conv.weight is [32,16,5,5]"), std::string::npos) << message;
  EXPECT_NE(message.find("dtype: bn1.weight is I64"), std::string::npos) << message;
  const StateDict after = target.state_dict();
  for (const auto& [name, tensor] : before) EXPECT_EQ(after.at(name).bytes, tensor.bytes) << name;

  // A ResNet-18 checkpoint does not load into the small encoder at all.
  ModelSpec resnet;
  resnet.encoder = EncoderSpec::preset_spec("resnet18");
  resnet.encoder.in_channels = 1;
  resnet.encoder.width = 0.25;
  resnet.num_classes = 4;
  EXPECT_NE(error_of([&] { target.load_state_dict(Model(resnet, 1).state_dict()); }).find("unexpected: layer1.0.conv1"),
            std::string::npos);
}

}  // namespace
}  // namespace bigtrain::net
