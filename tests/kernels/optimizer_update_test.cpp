// SGD and AdamW updates: several steps on every backend against the reference, and
// both against torch.optim.SGD / torch.optim.AdamW driven by the same gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "kernels/optimizer_update.hpp"
#include "tests/net/optimizer_torch_oracle.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using testing::on_backend;
using testing::random_tensor;

constexpr int kSteps = 5;

struct SgdCase {
  SgdHyper hyper;
  const char* name;
};
const SgdCase kSgdCases[] = {
    {{0.1, 0.0, 0.0, 0.0, false}, "plain"},
    {{0.05, 0.9, 0.0, 0.0, false}, "momentum"},
    {{0.05, 0.9, 0.1, 0.0, false}, "momentum+dampening"},
    {{0.05, 0.9, 0.0, 0.0, true}, "nesterov"},
    {{0.1, 0.0, 0.0, 1e-2, false}, "weight decay"},
    {{0.02, 0.8, 0.2, 5e-4, false}, "momentum+dampening+weight decay"},
    {{0.02, 0.9, 0.0, 1e-3, true}, "nesterov+weight decay"},
};

struct AdamWCase {
  AdamWHyper hyper;
  const char* name;
};
const AdamWCase kAdamWCases[] = {
    {{1e-3, 0.9, 0.999, 1e-8, 1e-2}, "defaults"},
    {{3e-2, 0.8, 0.99, 1e-6, 0.1}, "large lr and decay"},
    {{1e-2, 0.0, 0.5, 1e-3, 0.0}, "no momentum, no decay"},
};

// Element counts: odd, and past the CPU's parallel threshold (2^15).
const std::int64_t kSizes[] = {257, 40003};

// The gradient fed at `step` (1-based), the same for every backend and for torch.
Tensor gradient_at(std::int64_t n, int step) { return random_tensor({n}, 1000 + step, -2.0f, 2.0f); }

struct State {
  Tensor param, first, second;  // SGD: first = momentum buffer
};

State initial_state(std::int64_t n, Backend backend) {
  return {on_backend(random_tensor({n}, 7), backend).clone(), on_backend(Tensor::zeros({n}), backend).clone(),
          on_backend(Tensor::zeros({n}), backend).clone()};
}

void run_sgd(Backend backend, const SgdHyper& hyper, State& state, int steps) {
  const std::int64_t n = state.param.numel();
  for (int step = 1; step <= steps; ++step)
    sgd_update(backend, hyper, step == 1, state.param, on_backend(gradient_at(n, step), backend), state.first);
}

void run_adamw(Backend backend, const AdamWHyper& hyper, State& state, int steps) {
  const std::int64_t n = state.param.numel();
  for (int step = 1; step <= steps; ++step)
    adamw_update(backend, hyper, step, state.param, on_backend(gradient_at(n, step), backend), state.first,
                 state.second);
}

// Float updates against the double reference: each step adds a few ulps of the
// parameter's size; over 5 steps 1e-6 of the tensor's rms leaves room.
constexpr testing::Tolerance kStepTolerance{1e-6, 1e-9};

class OptimizerBackend : public ::testing::TestWithParam<Backend> {};

TEST_P(OptimizerBackend, SgdMatchesReferenceOverSteps) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  for (std::int64_t n : kSizes) {
    for (const SgdCase& c : kSgdCases) {
      SCOPED_TRACE(::testing::Message() << c.name << " n=" << n);
      State reference = initial_state(n, Backend::reference), actual = initial_state(n, backend);
      run_sgd(Backend::reference, c.hyper, reference, kSteps);
      run_sgd(backend, c.hyper, actual, kSteps);
      testing::expect_close(actual.param.to(Device::cpu()), reference.param, kStepTolerance, "param");
      if (c.hyper.momentum != 0.0)
        testing::expect_close(actual.first.to(Device::cpu()), reference.first, kStepTolerance, "momentum buffer");
    }
  }
}

// The momentum buffer of a first step is fresh memory, possibly a recycled block
// holding NaN bit patterns: the first step must not read it (0 * NaN is NaN).
TEST_P(OptimizerBackend, SgdFirstStepIgnoresTheBuffersOldContents) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const std::int64_t n = 1000;
  SgdHyper hyper;
  hyper.lr = 0.1;
  hyper.momentum = 0.9;
  Tensor param = testing::on_backend(testing::random_tensor({n}, 11), backend);
  const Tensor grad = testing::on_backend(testing::random_tensor({n}, 12), backend);
  Tensor buffer = testing::on_backend(Tensor::empty({n}), backend);
  buffer.fill(std::nanf(""));
  sgd_update(backend, hyper, /*first_step=*/true, param, grad, buffer);
  const std::vector<float> p = param.to_vector(), b = buffer.to_vector(), g = grad.to_vector();
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(p[i])) << "parameter " << i << " became " << p[i];
    ASSERT_EQ(b[i], g[i]) << "the first step's buffer is the gradient, element " << i;
  }
}

TEST_P(OptimizerBackend, AdamWMatchesReferenceOverSteps) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  for (std::int64_t n : kSizes) {
    for (const AdamWCase& c : kAdamWCases) {
      SCOPED_TRACE(::testing::Message() << c.name << " n=" << n);
      State reference = initial_state(n, Backend::reference), actual = initial_state(n, backend);
      run_adamw(Backend::reference, c.hyper, reference, kSteps);
      run_adamw(backend, c.hyper, actual, kSteps);
      // The update divides by sqrt(v_hat) + eps, so its relative error is a few
      // ulps; the parameter moves by ~lr per step: bounded by 1e-6 of its rms.
      testing::expect_close(actual.param.to(Device::cpu()), reference.param, kStepTolerance, "param");
      testing::expect_close(actual.first.to(Device::cpu()), reference.first, kStepTolerance, "exp_avg");
      testing::expect_close(actual.second.to(Device::cpu()), reference.second, kStepTolerance, "exp_avg_sq");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, OptimizerBackend, ::testing::Values(Backend::cpu, Backend::cuda),
                         testing::backend_param_name);

std::string python_bool(bool value) { return value ? "True" : "False"; }

std::string torch_constructor(const SgdHyper& h) {
  return fmt::format("lambda p: torch.optim.SGD([p], lr={}, momentum={}, dampening={}, weight_decay={}, nesterov={})",
                     h.lr, h.momentum, h.dampening, h.weight_decay, python_bool(h.nesterov));
}

std::string torch_constructor(const AdamWHyper& h) {
  return fmt::format("lambda p: torch.optim.AdamW([p], lr={}, betas=({}, {}), eps={}, weight_decay={})", h.lr,
                     h.beta1, h.beta2, h.epsilon, h.weight_decay);
}

constexpr std::int64_t kTorchSize = 257;

// torch.optim stepping the same parameter with the same gradients, every SGD case
// then every AdamW case, from one script run (starting Python with torch costs
// seconds). Each line: the final parameter, then each state tensor.
const std::vector<std::vector<double>>& torch_results() {
  static const std::vector<std::vector<double>> results = [] {
    std::string gradients, optimizers;
    for (int step = 1; step <= kSteps; ++step)
      gradients += testing::python_list(gradient_at(kTorchSize, step).to_vector()) + ",\n";
    for (const SgdCase& c : kSgdCases) optimizers += torch_constructor(c.hyper) + ",\n";
    for (const AdamWCase& c : kAdamWCases) optimizers += torch_constructor(c.hyper) + ",\n";
    const std::string script = fmt::format(R"(
import torch
initial = {initial}
gradients = [{gradients}]
for make in [{optimizers}]:
    p = torch.nn.Parameter(torch.tensor(initial, dtype=torch.float32))
    optimizer = make(p)
    for g in gradients:
        p.grad = torch.tensor(g, dtype=torch.float32)
        optimizer.step()
    state = optimizer.state[p]
    out = p.detach().tolist()
    for key in ('momentum_buffer', 'exp_avg', 'exp_avg_sq'):
        if key in state and state[key] is not None:
            out += state[key].tolist()
    print(' '.join(repr(v) for v in out))
)",
                                           fmt::arg("initial", testing::python_list(random_tensor({kTorchSize}, 7).to_vector())),
                                           fmt::arg("gradients", gradients), fmt::arg("optimizers", optimizers));
    std::vector<std::vector<double>> parsed;
    std::istringstream lines(testing::run_torch_script(script));
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) parsed.push_back(testing::parse_numbers(line));
    return parsed;
  }();
  return results;
}

// torch keeps its state in float32 like the CPU backend, the reference in double
// per element: a few float ulps per step of the values' size, over 5 steps.
constexpr testing::Tolerance kTorchTolerance{2e-6, 1e-9};

void expect_slice(const Tensor& actual, const std::vector<double>& expected, int slice, const char* what) {
  const auto begin = expected.begin() + slice * kTorchSize;
  testing::expect_close(testing::to_doubles(actual), {begin, begin + kTorchSize}, {kTorchSize}, kTorchTolerance, what);
}

TEST(OptimizerTorch, SgdMatchesTorchOverSteps) {
  if (auto reason = testing::torch_unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const auto& results = torch_results();
  ASSERT_EQ(results.size(), std::size(kSgdCases) + std::size(kAdamWCases));
  for (std::size_t k = 0; k < std::size(kSgdCases); ++k) {
    const SgdCase& c = kSgdCases[k];
    SCOPED_TRACE(c.name);
    const std::size_t tensors = c.hyper.momentum != 0.0 ? 2 : 1;
    ASSERT_EQ(results[k].size(), tensors * kTorchSize);
    for (Backend backend : {Backend::reference, Backend::cpu}) {
      SCOPED_TRACE(backend_name(backend));
      State state = initial_state(kTorchSize, backend);
      run_sgd(backend, c.hyper, state, kSteps);
      expect_slice(state.param, results[k], 0, "param vs torch");
      if (tensors == 2) expect_slice(state.first, results[k], 1, "momentum buffer vs torch");
    }
  }
}

TEST(OptimizerTorch, AdamWMatchesTorchOverSteps) {
  if (auto reason = testing::torch_unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const auto& results = torch_results();
  ASSERT_EQ(results.size(), std::size(kSgdCases) + std::size(kAdamWCases));
  for (std::size_t k = 0; k < std::size(kAdamWCases); ++k) {
    const AdamWCase& c = kAdamWCases[k];
    SCOPED_TRACE(c.name);
    const std::vector<double>& expected = results[std::size(kSgdCases) + k];
    ASSERT_EQ(expected.size(), 3u * kTorchSize);
    for (Backend backend : {Backend::reference, Backend::cpu}) {
      SCOPED_TRACE(backend_name(backend));
      State state = initial_state(kTorchSize, backend);
      run_adamw(backend, c.hyper, state, kSteps);
      expect_slice(state.param, expected, 0, "param vs torch");
      expect_slice(state.first, expected, 1, "exp_avg vs torch");
      expect_slice(state.second, expected, 2, "exp_avg_sq vs torch");
    }
  }
}

TEST(OptimizerValidation, BadArgumentsAreClearErrors) {
  for (Backend backend : {Backend::reference, Backend::cpu}) {
    SCOPED_TRACE(backend_name(backend));
    Tensor param = random_tensor({10}, 1), grad = random_tensor({10}, 2), buffer = Tensor::zeros({10});
    Tensor second = Tensor::zeros({10}), short_grad = random_tensor({9}, 3);
    EXPECT_THROW(sgd_update(backend, {0.1, 0.9, 0.1, 0.0, true}, true, param, grad, buffer), Error);  // nesterov+dampening
    EXPECT_THROW(sgd_update(backend, {-0.1, 0.0, 0.0, 0.0, false}, true, param, grad, buffer), Error);
    Tensor no_buffer;
    EXPECT_THROW(sgd_update(backend, {0.1, 0.9, 0.0, 0.0, false}, true, param, grad, no_buffer), Error);
    sgd_update(backend, {0.1, 0.0, 0.0, 0.0, false}, true, param, grad, no_buffer);  // no momentum: no buffer needed
    EXPECT_THROW(sgd_update(backend, {}, true, param, short_grad, buffer), Error);
    EXPECT_THROW(adamw_update(backend, {}, 0, param, grad, buffer, second), Error);  // steps count from 1
    EXPECT_THROW(adamw_update(backend, {1e-3, 1.0, 0.999, 1e-8, 0.0}, 1, param, grad, buffer, second), Error);
    EXPECT_THROW(adamw_update(backend, {}, 1, param, short_grad, buffer, second), Error);
  }
}

}  // namespace
}  // namespace bigtrain::kernels
