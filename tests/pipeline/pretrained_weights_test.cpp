// model.pretrained from a bigtrain checkpoint: the encoder and head load, and the
// aggregator too when the configured one has exactly its tensors (continuing a run
// with a new schedule); a different aggregator starts fresh with a note, not an error.
#include <gtest/gtest.h>

#include <filesystem>

#include <yaml-cpp/yaml.h>

#include "net/model.hpp"
#include "pipeline/engine/checkpoint.hpp"

namespace bigtrain {
namespace {

net::ModelSpec small_model() {
  YAML::Node node = YAML::Load("{preset: small, in_channels: 1, width: 0.25, num_classes: 3}");
  return net::model_spec_from_yaml(node, "test");
}

std::unique_ptr<net::Aggregator> attention(std::int64_t features, std::int64_t hidden, std::uint64_t seed) {
  net::AggregatorSpec spec;
  spec.kind = net::AggregatorKind::attention;
  spec.hidden = hidden;
  return net::make_aggregator(spec, features, seed);
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    if (a.f32()[i] != b.f32()[i]) return false;
  return true;
}

class PretrainedWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() / ("pretrained_" + std::to_string(::getpid()) + ".safetensors")).string();
    net::Model trained(small_model(), 1);
    auto aggregator = attention(trained.encoder().feature_dim(), 8, 2);
    save_model_checkpoint(path_, trained, *aggregator, {});
    saved_ = read_back();
  }
  void TearDown() override { std::filesystem::remove(path_); }
  net::StateDict read_back() const { return net::read_safetensors(path_).tensors; }

  std::string path_;
  net::StateDict saved_;
};

TEST_F(PretrainedWeights, AMatchingAggregatorLoadsWithTheModel) {
  net::Model fresh(small_model(), 7);
  auto aggregator = attention(fresh.encoder().feature_dim(), 8, 9);
  const std::vector<std::string> notes = load_pretrained_weights(path_, fresh, *aggregator);
  for (net::Parameter* p : aggregator->parameters())
    EXPECT_TRUE(same_values(p->value, saved_.at(p->name).to_f32())) << p->name;
  for (auto& [name, tensor] : fresh.state_dict())
    EXPECT_EQ(tensor.bytes, saved_.at(name).bytes) << name;
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.back().find("aggregator"), std::string::npos) << notes.back();
}

TEST_F(PretrainedWeights, ADifferentAggregatorStartsFreshAndSaysWhy) {
  net::Model fresh(small_model(), 7);
  auto aggregator = attention(fresh.encoder().feature_dim(), 16, 9);  // another hidden size
  std::vector<Tensor> before;
  for (net::Parameter* p : aggregator->parameters()) before.push_back(p->value.clone());
  const std::vector<std::string> notes = load_pretrained_weights(path_, fresh, *aggregator);
  for (std::size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(same_values(aggregator->parameters()[i]->value, before[i])) << "left as initialised";
  for (auto& [name, tensor] : fresh.state_dict())
    EXPECT_EQ(tensor.bytes, saved_.at(name).bytes) << name << ": the model still loads";
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.back().find("starts fresh"), std::string::npos) << notes.back();
  EXPECT_NE(notes.back().find(path_), std::string::npos) << notes.back();
}

}  // namespace
}  // namespace bigtrain
