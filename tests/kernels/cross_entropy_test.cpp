// Softmax cross-entropy: every backend against the reference, the reference against
// finite differences, and both against torch.nn.functional.cross_entropy (class
// weights and label smoothing combined as PyTorch combines them).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <omp.h>

#include "kernels/core/error.hpp"
#include "kernels/cross_entropy.hpp"
#include "tests/net/optimizer_torch_oracle.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using testing::on_backend;
using testing::random_tensor;

struct Case {
  std::int64_t rows, classes;
  bool weighted;
  float smoothing;
  float logit_scale;  // logits uniform in [-scale, scale)
};

// Binary and many-class, batch 1 and larger, weights and smoothing alone and
// together, and logits large enough that an unstabilised softmax would overflow.
const Case kCases[] = {
    {1, 2, false, 0.0f, 1.0f},   {4, 10, false, 0.0f, 3.0f},   {7, 3, true, 0.0f, 2.0f},
    {5, 1000, false, 0.1f, 4.0f}, {3, 5, true, 0.2f, 1.0f},     {64, 37, true, 0.05f, 5.0f},
    {9, 6, false, 1.0f, 2.0f},   {6, 4, true, 0.3f, 80.0f},    {300, 150, false, 0.0f, 2.0f},
};

std::string describe(const Case& c) {
  return fmt::format("N={} C={} weights={} smoothing={} scale={}", c.rows, c.classes, c.weighted, c.smoothing,
                     c.logit_scale);
}

struct Inputs {
  Tensor logits, targets, weights;  // weights undefined when unweighted
};

Inputs make_inputs(const Case& c, std::uint64_t seed) {
  Inputs in;
  in.logits = random_tensor({c.rows, c.classes}, seed, -c.logit_scale, c.logit_scale);
  in.targets = Tensor::empty({c.rows}, DType::i32);
  testing::Random random(seed + 1);
  for (std::int64_t n = 0; n < c.rows; ++n)
    in.targets.data<std::int32_t>()[n] = static_cast<std::int32_t>(random.next_u64() % c.classes);
  if (c.weighted) in.weights = random_tensor({c.classes}, seed + 2, 0.2f, 2.0f);
  return in;
}

Tensor to_host(const Tensor& tensor) { return tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu()); }

class CrossEntropyBackend : public ::testing::TestWithParam<Backend> {};

TEST_P(CrossEntropyBackend, MatchesReference) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  std::uint64_t seed = 10;
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    const Inputs in = make_inputs(c, seed += 3);
    const Tensor* weights = c.weighted ? &in.weights : nullptr;
    Tensor grad_ref = Tensor::empty(in.logits.shape()), probs_ref = Tensor::empty(in.logits.shape());
    const float loss_ref = cross_entropy(Backend::reference, in.logits, in.targets, weights, {c.smoothing}, grad_ref,
                                         &probs_ref);
    const Device device = backend_device(backend);
    Tensor grad = Tensor::empty(in.logits.shape(), DType::f32, device);
    Tensor probs = Tensor::empty(in.logits.shape(), DType::f32, device);
    const Tensor weights_on = c.weighted ? on_backend(in.weights, backend) : Tensor();
    const float loss = cross_entropy(backend, on_backend(in.logits, backend), on_backend(in.targets, backend),
                                     c.weighted ? &weights_on : nullptr, {c.smoothing}, grad, &probs);
    // Float exp/log per logit against the reference's double: a few ulps of the
    // log-sum-exp, whose size is about the logit scale, relative to a loss of ~1-10.
    EXPECT_NEAR(loss, loss_ref, 2e-6 * (std::abs(loss_ref) + c.logit_scale));
    // Probabilities and gradients carry exp's relative error (a few ulps) times the
    // exponent's size (up to 2 * scale): bounded relative to the tensor's rms.
    const double relative = 4e-7 * (1.0 + 2.0 * c.logit_scale);
    testing::expect_close(to_host(probs), probs_ref, {relative, 1e-9}, "probabilities");
    testing::expect_close(to_host(grad), grad_ref, {relative, 1e-9}, "dlogits");
    // Without the optional output the result is the same.
    Tensor grad_only = Tensor::empty(in.logits.shape(), DType::f32, device);
    EXPECT_EQ(cross_entropy(backend, on_backend(in.logits, backend), on_backend(in.targets, backend),
                            c.weighted ? &weights_on : nullptr, {c.smoothing}, grad_only),
              loss);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CrossEntropyBackend, ::testing::Values(Backend::cpu, Backend::cuda),
                         testing::backend_param_name);

TEST(CrossEntropyReference, GradientMatchesFiniteDifferences) {
  std::uint64_t seed = 200;
  for (const Case& c : kCases) {
    if (c.rows * c.classes > 400 || c.logit_scale > 10) continue;  // O(n^2) check; keep it quick
    SCOPED_TRACE(describe(c));
    const Inputs in = make_inputs(c, seed += 3);
    const Tensor* weights = c.weighted ? &in.weights : nullptr;
    Tensor grad = Tensor::empty(in.logits.shape());
    cross_entropy(Backend::reference, in.logits, in.targets, weights, {c.smoothing}, grad);
    auto loss = [&](const std::vector<std::vector<double>>& x) {
      Tensor scratch = Tensor::empty(in.logits.shape());
      return static_cast<double>(cross_entropy(Backend::reference, testing::from_doubles(in.logits.shape(), x[0]),
                                               in.targets, weights, {c.smoothing}, scratch));
    };
    std::vector<std::vector<double>> inputs{testing::to_doubles(in.logits)};
    testing::GradCheckOptions options;
    // Inputs and the returned loss are float: step 5e-3 gives truncation ~h^2 f'''
    // ~ 2.5e-5 (softmax derivatives are O(1)) and rounding ~6e-8 * loss / h ~ 1e-5:
    // allow 2e-3 of the gradient's rms.
    options.precision = testing::Precision::f32;
    options.tolerance = {2e-3, 1e-6};
    EXPECT_TRUE(testing::check_gradients(loss, inputs, {testing::to_doubles(grad)}, options, {"logits"}, describe(c)).ok);
  }
}

constexpr std::uint64_t kTorchSeed = 400;
constexpr std::int64_t kTorchMaxLogits = 10000;  // the values travel through a script's text

// One Python expression per case, evaluating to [loss, dlogits...] from torch.
std::string torch_case(const Case& c, const Inputs& in) {
  std::vector<float> targets(in.targets.data<std::int32_t>(), in.targets.data<std::int32_t>() + c.rows);
  return fmt::format(
      "case(torch.tensor({}).reshape({}, {}), torch.tensor({}), {}, {})",
      testing::python_list(in.logits.to_vector()), c.rows, c.classes, testing::python_list(targets),
      c.weighted ? fmt::format("torch.tensor({})", testing::python_list(in.weights.to_vector())) : std::string("None"),
      c.smoothing);
}

// Every case's torch result, from one script run (starting Python with torch costs
// seconds): one line [loss, dlogits...] per case that fits kTorchMaxLogits.
const std::vector<std::vector<double>>& torch_results() {
  static const std::vector<std::vector<double>> results = [] {
    std::string cases;
    std::uint64_t seed = kTorchSeed;
    for (const Case& c : kCases) {
      seed += 3;
      if (c.rows * c.classes <= kTorchMaxLogits) cases += torch_case(c, make_inputs(c, seed)) + "\n";
    }
    const std::string script = fmt::format(R"(
import torch
def case(logits, targets, weight, smoothing):
    logits = logits.to(torch.float32).requires_grad_()
    if weight is not None:
        weight = weight.to(torch.float32)
    loss = torch.nn.functional.cross_entropy(logits, targets.to(torch.int64), weight=weight, reduction='mean',
                                             label_smoothing=smoothing)
    loss.backward()
    print(' '.join(repr(v) for v in [loss.item()] + logits.grad.flatten().tolist()))
{})",
                                           cases);
    std::vector<std::vector<double>> parsed;
    std::istringstream lines(testing::run_torch_script(script));
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) parsed.push_back(testing::parse_numbers(line));
    return parsed;
  }();
  return results;
}

TEST(CrossEntropyTorch, ReferenceAndCpuMatchTorch) {
  if (auto reason = testing::torch_unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const auto& results = torch_results();
  std::uint64_t seed = kTorchSeed;
  std::size_t next = 0;
  for (const Case& c : kCases) {
    seed += 3;
    if (c.rows * c.classes > kTorchMaxLogits) continue;
    SCOPED_TRACE(describe(c));
    const Inputs in = make_inputs(c, seed);
    ASSERT_LT(next, results.size());
    const std::vector<double>& expected = results[next++];
    ASSERT_EQ(expected.size(), static_cast<std::size_t>(1 + c.rows * c.classes));
    const std::vector<double> expected_grad(expected.begin() + 1, expected.end());
    for (Backend backend : {Backend::reference, Backend::cpu}) {
      SCOPED_TRACE(backend_name(backend));
      Tensor grad = Tensor::empty(in.logits.shape());
      const float loss =
          cross_entropy(backend, in.logits, in.targets, c.weighted ? &in.weights : nullptr, {c.smoothing}, grad);
      // torch computes in float32: a few ulps of the log-sum-exp (~ the logit scale).
      EXPECT_NEAR(loss, expected[0], 2e-6 * (std::abs(expected[0]) + c.logit_scale));
      // Same error model as between backends: exp's ulps times the exponent's size.
      testing::expect_close(testing::to_doubles(grad), expected_grad, in.logits.shape(),
                            {4e-7 * (1.0 + 2.0 * c.logit_scale), 1e-9}, "dlogits vs torch");
    }
  }
  EXPECT_EQ(next, results.size());
}

// The loss sums rows in parallel; it must be the same bits for any thread count,
// so a run's logged losses reproduce exactly.
TEST(CrossEntropyCpu, LossIsTheSameBitsForAnyThreadCount) {
  const Case c{4096, 40, true, 0.1f, 3.0f};
  const Inputs in = make_inputs(c, 91);
  Tensor grad = Tensor::empty(in.logits.shape());
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const float serial = cross_entropy(Backend::cpu, in.logits, in.targets, &in.weights, {c.smoothing}, grad);
  const std::vector<float> serial_grad = grad.to_vector();
  for (int count : {2, 3, 4}) {
    omp_set_num_threads(count);
    EXPECT_EQ(cross_entropy(Backend::cpu, in.logits, in.targets, &in.weights, {c.smoothing}, grad), serial) << count;
    EXPECT_EQ(grad.to_vector(), serial_grad) << count;
  }
  omp_set_num_threads(threads);
}

TEST(CrossEntropyValidation, BadArgumentsAreClearErrors) {
  for (Backend backend : {Backend::reference, Backend::cpu}) {
    SCOPED_TRACE(backend_name(backend));
    const Case c{4, 3, true, 0.0f, 1.0f};
    Inputs in = make_inputs(c, 1);
    Tensor grad = Tensor::empty({4, 3});
    in.targets.data<std::int32_t>()[2] = 3;
    try {
      cross_entropy(backend, in.logits, in.targets, nullptr, {}, grad);
      ADD_FAILURE() << "expected an error for a target out of range";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("target 3 of sample 2 is outside [0, 3)"), std::string::npos)
          << error.what();
    }
    in.targets.data<std::int32_t>()[2] = 0;
    Tensor zero_weights = Tensor::zeros({3});
    EXPECT_THROW(cross_entropy(backend, in.logits, in.targets, &zero_weights, {}, grad), Error);
    Tensor float_targets = Tensor::zeros({4});
    EXPECT_THROW(cross_entropy(backend, in.logits, float_targets, nullptr, {}, grad), Error);
    Tensor short_weights = Tensor::zeros({2});
    EXPECT_THROW(cross_entropy(backend, in.logits, in.targets, &short_weights, {}, grad), Error);
    EXPECT_THROW(cross_entropy(backend, in.logits, in.targets, nullptr, {1.5f}, grad), Error);
    Tensor wrong_grad = Tensor::empty({3, 4});
    EXPECT_THROW(cross_entropy(backend, in.logits, in.targets, nullptr, {}, wrong_grad), Error);
  }
}

}  // namespace
}  // namespace bigtrain::kernels
