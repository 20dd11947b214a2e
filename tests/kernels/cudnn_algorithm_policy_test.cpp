// BIGTRAIN_CUDNN_ALGOS's values, as the CUDA context reads them: runs without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "kernels/core/cudnn_algorithm_policy.hpp"
#include "kernels/core/error.hpp"

namespace bigtrain {
namespace {

TEST(CudnnAlgorithmPolicy, DefaultIsPlainAndDeterministic) {
  for (const char* unset : {static_cast<const char*>(nullptr), ""}) {
    const CudnnAlgorithmPolicy policy = cudnn_algorithm_policy(unset);
    EXPECT_FALSE(policy.allow_transforms);
    EXPECT_TRUE(policy.prefer_deterministic);
  }
}

TEST(CudnnAlgorithmPolicy, AllAllowsTransformsFastestAlsoNonDeterministic) {
  const CudnnAlgorithmPolicy all = cudnn_algorithm_policy("all");
  EXPECT_TRUE(all.allow_transforms);
  EXPECT_TRUE(all.prefer_deterministic);
  const CudnnAlgorithmPolicy fastest = cudnn_algorithm_policy("fastest");
  EXPECT_TRUE(fastest.allow_transforms);
  EXPECT_FALSE(fastest.prefer_deterministic);
}

TEST(CudnnAlgorithmPolicy, AnUnknownValueIsAnErrorNamingTheVariable) {
  try {
    cudnn_algorithm_policy("fast");
    ADD_FAILURE() << "an unknown value was accepted";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("BIGTRAIN_CUDNN_ALGOS=fast"), std::string::npos) << message;
    EXPECT_NE(message.find("fastest"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace bigtrain
