// The capability query (kernels/backend.hpp) against what actually runs: for every
// op, backend and dtype, a combination supports() accepts runs and agrees with the
// reference backend (which also proves each backend's table routes every op to the
// right function), and one it refuses throws an Error naming op, backend and dtype
// before touching any data.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "kernels/aggregation.hpp"
#include "kernels/backend.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/frozen_norm_conv.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/group_norm.hpp"
#include "kernels/linear.hpp"
#include "kernels/optimizer_update.hpp"
#include "kernels/pooling.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using testing::random_tensor;
using testing::to_doubles;

const DType kAllDtypes[] = {DType::f32, DType::bf16, DType::f16, DType::u8, DType::i32};
const Backend kAllBackends[] = {Backend::reference, Backend::cpu, Backend::cuda};

// The CPU backend computes conv2d and linear in bf16 where the CPU has the AVX-512
// bf16 instructions (or AMX's): asked of the kernel's own CPU flags, not of oneDNN.
bool cpu_backend_computes_bf16() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" avx512_bf16 ") != std::string::npos ||
                                            (line + " ").find(" amx_bf16 ") != std::string::npos;
  return false;
}

// What each backend is documented to run; the test's own statement, not a copy of
// the tables it checks.
bool expected_support(Op op, Backend backend, DType dtype) {
  if (backend == Backend::cuda && !cuda_compiled()) return false;
  if (dtype == DType::f32) return true;
  if (dtype != DType::bf16 && dtype != DType::f16) return false;  // no op computes in integers
  if (op != Op::conv2d && op != Op::linear) return false;         // 16-bit compute is for these two only
  if (backend == Backend::cpu) return dtype == DType::bf16 && cpu_backend_computes_bf16();
  return true;  // the reference (the oracle) and cuDNN/cuBLAS
}

// Arguments of one op call: the floating tensors in `dtype` (data only for float32:
// other dtypes are refused before any element is read), on `device`.
struct Args {
  DType dtype;
  Device device;
  std::uint64_t seed = 1;

  Tensor floating(const Shape& shape) {
    if (dtype != DType::f32) return Tensor::zeros(shape, dtype, device);
    return random_tensor(shape, seed++, -1.0f, 1.0f, device);
  }
  Tensor f32(const Shape& shape, float lo = -1.0f, float hi = 1.0f) {
    return random_tensor(shape, seed++, lo, hi, device);
  }
  Tensor empty(const Shape& shape, DType type) const { return Tensor::zeros(shape, type, device); }
  Tensor targets(std::vector<std::int32_t> values) const {
    Tensor host = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::i32);
    std::copy(values.begin(), values.end(), host.data<std::int32_t>());
    return device.is_cpu() ? host : host.to(device);
  }
};

// One small call of an op on a backend; returns its output on the host.
using Runner = std::function<std::vector<double>(Backend, Args&)>;

struct OpCase {
  Op op;
  Runner run;
  // batch_norm and pool2d take their dtype from each call's tensors, so a refusal
  // comes after the backend built the op object, which on CUDA needs the device.
  bool refused_after_build = false;
};

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  cases.push_back({Op::conv2d, [](Backend b, Args& a) {
                     Conv2dSpec spec;
                     spec.in_channels = 2, spec.out_channels = 3, spec.in_h = 5, spec.in_w = 5;
                     spec.kernel_h = spec.kernel_w = 3, spec.bias = true, spec.compute_dtype = a.dtype;
                     auto conv = make_conv2d(b, spec);
                     Tensor y = a.empty(spec.output_shape(), DType::f32);
                     const Tensor bias = a.f32({spec.out_channels});
                     conv->forward(a.f32(spec.input_shape()), a.f32(spec.weight_shape()), &bias, y);
                     return to_doubles(y);
                   }});
  cases.push_back({Op::linear, [](Backend b, Args& a) {
                     LinearSpec spec{.batch = 2, .in_features = 4, .out_features = 3, .bias = true,
                                     .compute_dtype = a.dtype};
                     auto linear = make_linear(b, spec);
                     Tensor y = a.empty(spec.output_shape(), DType::f32);
                     const Tensor bias = a.f32({spec.out_features});
                     linear->forward(a.f32(spec.input_shape()), a.f32(spec.weight_shape()), &bias, y);
                     return to_doubles(y);
                   }});
  cases.push_back({Op::batch_norm, [](Backend b, Args& a) {
                     BatchNormSpec spec{.batch = 2, .channels = 3, .height = 4, .width = 4};
                     auto bn = make_batch_norm(b, spec);
                     Tensor y = a.empty(spec.input_shape(), DType::f32);
                     Tensor mean = a.empty({3}, DType::f32), invstd = a.empty({3}, DType::f32);
                     bn->forward_training(a.floating(spec.input_shape()), a.f32({3}), a.f32({3}), y, mean, invstd,
                                          nullptr, nullptr, 0.1f);
                     return to_doubles(y);
                   },
                   true});
  cases.push_back({Op::group_norm, [](Backend b, Args& a) {
                     GroupNormSpec spec{.batch = 2, .channels = 4, .height = 3, .width = 3, .groups = 2};
                     auto gn = make_group_norm(b, spec);
                     Tensor y = a.empty(spec.input_shape(), DType::f32);
                     Tensor mean = a.empty({2, 2}, DType::f32), invstd = a.empty({2, 2}, DType::f32);
                     gn->forward(a.floating(spec.input_shape()), a.f32({4}), a.f32({4}), y, mean, invstd);
                     return to_doubles(y);
                   },
                   true});
  cases.push_back({Op::pool2d, [](Backend b, Args& a) {
                     Pool2dSpec spec{.kind = PoolKind::max, .channels = 2, .in_h = 4, .in_w = 4, .kernel_h = 2,
                                     .kernel_w = 2, .stride_h = 2, .stride_w = 2};
                     auto pool = make_pool2d(b, spec);
                     Tensor y = a.empty(spec.output_shape(), DType::f32);
                     pool->forward(a.floating(spec.input_shape()), y, true);
                     return to_doubles(y);
                   },
                   true});
  cases.push_back({Op::global_avg_pool, [](Backend b, Args& a) {
                     Tensor y = a.empty({2, 3}, a.dtype);
                     global_avg_pool_forward(b, a.floating({2, 3, 4, 4}), y);
                     return to_doubles(y);
                   }});
  cases.push_back({Op::relu, [](Backend b, Args& a) {
                     Tensor y = a.empty({9}, a.dtype);
                     relu_forward(b, a.floating({9}), y);
                     return to_doubles(y);
                   }});
  cases.push_back({Op::add, [](Backend b, Args& a) {
                     Tensor out = a.empty({9}, a.dtype);
                     add(b, a.floating({9}), a.floating({9}), out);
                     return to_doubles(out);
                   }});
  cases.push_back({Op::axpy, [](Backend b, Args& a) {
                     Tensor y = a.floating({9});
                     axpy(b, 0.5f, a.floating({9}), y);
                     return to_doubles(y);
                   }});
  cases.push_back({Op::scale, [](Backend b, Args& a) {
                     Tensor x = a.floating({9});
                     scale(b, -2.0f, x);
                     return to_doubles(x);
                   }});
  cases.push_back({Op::sum_of_squares,
                   [](Backend b, Args& a) { return std::vector<double>{sum_of_squares(b, a.floating({9}))}; }});
  cases.push_back({Op::all_finite, [](Backend b, Args& a) {
                     return std::vector<double>{all_finite(b, a.floating({9})) ? 1.0 : 0.0};
                   }});
  cases.push_back({Op::dropout, [](Backend b, Args& a) {
                     Tensor y = a.empty({64}, a.dtype), mask = a.empty({64}, DType::u8);
                     dropout_forward(b, a.floating({64}), 0.5f, 7, 0, y, mask);
                     return to_doubles(y);
                   }});
  cases.push_back({Op::mean_rows, [](Backend b, Args& a) {
                     Tensor z = a.empty({4}, a.dtype);
                     mean_rows_forward(b, a.floating({3, 4}), z);
                     return to_doubles(z);
                   }});
  cases.push_back({Op::max_rows, [](Backend b, Args& a) {
                     Tensor z = a.empty({4}, a.dtype), argmax = a.empty({4}, DType::i32);
                     max_rows_forward(b, a.floating({3, 4}), z, argmax);
                     return to_doubles(z);
                   }});
  cases.push_back({Op::tanh, [](Backend b, Args& a) {
                     Tensor y = a.empty({9}, a.dtype);
                     tanh_forward(b, a.floating({9}), y);
                     return to_doubles(y);
                   }});
  cases.push_back({Op::sigmoid, [](Backend b, Args& a) {
                     Tensor y = a.empty({9}, a.dtype);
                     sigmoid_forward(b, a.floating({9}), y);
                     return to_doubles(y);
                   }});
  cases.push_back({Op::multiply, [](Backend b, Args& a) {
                     Tensor out = a.empty({9}, a.dtype);
                     multiply(b, a.floating({9}), a.floating({9}), out);
                     return to_doubles(out);
                   }});
  cases.push_back({Op::softmax, [](Backend b, Args& a) {
                     Tensor out = a.empty({5}, a.dtype);
                     softmax_forward(b, a.floating({5}), out);
                     return to_doubles(out);
                   }});
  cases.push_back({Op::weighted_sum_rows, [](Backend b, Args& a) {
                     Tensor z = a.empty({4}, a.dtype);
                     const Tensor h = a.floating({3, 4});
                     weighted_sum_rows_forward(b, a.floating({3}), h, z);
                     return to_doubles(z);
                   }});
  cases.push_back({Op::cross_entropy, [](Backend b, Args& a) {
                     Tensor dlogits = a.empty({2, 3}, a.dtype);
                     const Tensor logits = a.floating({2, 3});
                     const float loss = cross_entropy(b, logits, a.targets({0, 2}), nullptr, {}, dlogits);
                     std::vector<double> out = to_doubles(dlogits);
                     out.push_back(loss);
                     return out;
                   }});
  cases.push_back({Op::sgd_update, [](Backend b, Args& a) {
                     Tensor param = a.floating({9}), buffer = a.empty({9}, a.dtype);
                     sgd_update(b, SgdHyper{.lr = 0.1, .momentum = 0.9}, true, param, a.floating({9}), buffer);
                     return to_doubles(param);
                   }});
  cases.push_back({Op::adamw_update, [](Backend b, Args& a) {
                     Tensor param = a.floating({9}), m = a.empty({9}, a.dtype), v = a.empty({9}, a.dtype);
                     adamw_update(b, AdamWHyper{}, 1, param, a.floating({9}), m, v);
                     return to_doubles(param);
                   }});
  cases.push_back({Op::frozen_norm_conv, [](Backend b, Args& a) {
                     const Tensor gamma = a.f32({3}), mean = a.f32({3}), var = a.f32({3}, 0.5f, 2.0f);
                     const FrozenNorm norm{&gamma, &mean, &var};
                     Tensor scaled = a.empty({3, 2, 1, 1}, a.dtype);
                     frozen_norm_scale_weights(b, norm, a.floating({3, 2, 1, 1}), scaled);
                     return to_doubles(scaled);
                   }});
  return cases;
}

std::string combination(Op op, Backend backend, DType dtype) {
  return fmt::format("{} on {} in {}", op_name(op), backend_name(backend), dtype_name(dtype));
}

TEST(BackendSupports, EveryOpHasOneNameAndOneCase) {
  std::set<std::string> names;
  for (Op op : all_ops()) {
    EXPECT_STRNE(op_name(op), "unknown op");
    EXPECT_TRUE(names.insert(op_name(op)).second) << op_name(op) << " is listed twice";
  }
  std::set<std::string> covered;
  for (const OpCase& c : op_cases()) covered.insert(op_name(c.op));
  EXPECT_EQ(covered, names) << "every op needs one case in op_cases()";
}

TEST(BackendSupports, AnswersAsDocumentedForEveryOpBackendAndDtype) {
  for (Op op : all_ops())
    for (Backend backend : kAllBackends)
      for (DType dtype : kAllDtypes)
        EXPECT_EQ(supports(op, backend, dtype), expected_support(op, backend, dtype))
            << combination(op, backend, dtype);
}

TEST(BackendSupports, TheRefusalNamesOpBackendDtypeAndTheContext) {
  try {
    require_support(Op::conv2d, Backend::cpu, DType::f16, "run.yaml: train.precision fp16");
    FAIL() << "conv2d in float16 on the cpu backend was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "run.yaml: train.precision fp16: conv2d in float16 is not supported by the cpu backend: the CPU "
                 "backend computes in float32, or bf16 on CPUs with AVX512_BF16 (train.precision fp16 on the CPU); "
                 "use device: cuda, or train.precision fp32 or bf16");
  }
  EXPECT_NO_THROW(require_support(Op::conv2d, Backend::reference, DType::bf16));
}

TEST(BackendSupports, ARunAsksEveryOpInTheDtypeItComputesIn) {
  EXPECT_EQ(op_dtype(Op::conv2d, DType::bf16), DType::bf16);
  EXPECT_EQ(op_dtype(Op::linear, DType::f16), DType::f16);
  EXPECT_EQ(op_dtype(Op::batch_norm, DType::bf16), DType::f32);
  EXPECT_EQ(op_dtype(Op::softmax, DType::f16), DType::f32);
  for (Backend backend : kAllBackends)
    for (DType compute : {DType::f32, DType::bf16, DType::f16}) {
      bool all = true;
      for (Op op : all_ops()) all = all && supports(op, backend, op_dtype(op, compute));
      const std::string why = why_backend_cannot_run(backend, compute);
      EXPECT_EQ(why.empty(), all) << backend_name(backend) << " " << dtype_name(compute) << ": " << why;
    }
  EXPECT_EQ(why_backend_cannot_run(Backend::cpu, DType::f16),
            why_unsupported(Op::conv2d, Backend::cpu, DType::f16));  // the first op refused
}

// Whether `backend` can run here; the reason starts with "hardware: " when only
// missing hardware stops it (a build without CUDA runs nothing on it: every cuda
// combination is unsupported and checked as such).
std::optional<std::string> cannot_run(Backend backend) {
  if (backend == Backend::cuda && cuda_compiled() && cuda_device_count() == 0)
    return std::string("hardware: no CUDA device is present");
  return std::nullopt;
}

class BackendSupportsMatchesWhatRuns : public ::testing::TestWithParam<Backend> {};

TEST_P(BackendSupportsMatchesWhatRuns, SupportedRunsAndAgreesWithTheReferenceUnsupportedThrowsNamingIt) {
  const Backend backend = GetParam();
  const std::optional<std::string> not_here = cannot_run(backend);
  // Arguments of refused combinations stay on the host when the backend's device is
  // missing: the refusal must come before any argument is looked at.
  const bool no_device = not_here || (backend == Backend::cuda && !cuda_compiled());
  const Device device = no_device ? Device::cpu() : backend_device(backend);
  int not_run = 0;
  for (const OpCase& c : op_cases()) {
    for (DType dtype : kAllDtypes) {
      SCOPED_TRACE(combination(c.op, backend, dtype));
      Args args{.dtype = dtype, .device = device};
      const bool supported = supports(c.op, backend, dtype);
      if (not_here && (supported || c.refused_after_build)) {
        ++not_run;
        continue;
      }
      if (!supported) {
        try {
          c.run(backend, args);
          ADD_FAILURE() << "an unsupported combination ran";
        } catch (const Error& e) {
          const std::string message = e.what();
          const auto names = [&](DType named_dtype) {
            return message.find(fmt::format("{} in {} is not supported by the {} backend", op_name(c.op),
                                            dtype_name(named_dtype), backend_name(backend))) != std::string::npos;
          };
          // batch_norm and pool2d are refused by the dtype of the tensors they get; a build
          // without CUDA refuses them when the op is made, before any tensor: as float32.
          EXPECT_TRUE(names(dtype) || (c.refused_after_build && !cuda_compiled() && names(DType::f32))) << message;
        }
        continue;
      }
      std::vector<double> actual;
      ASSERT_NO_THROW(actual = c.run(backend, args));
      Args reference_args{.dtype = dtype, .device = Device::cpu()};
      const std::vector<double> expected = c.run(Backend::reference, reference_args);
      // Same seeded inputs on both backends. The op tests hold each backend to tight,
      // reasoned bounds; here 1e-4 of the output's scale is far below what calling the
      // wrong function of a table (tanh for sigmoid, forward for backward) would change.
      // cuDNN's 16-bit convolutions also round their results to the 16-bit type (2u
      // relative and absolute, as MixedBackend.Conv2dMatchesTheOracleOnRoundedOperands
      // allows; seen on an H200: bf16 0.0067 at 1.85, fp16 3.7e-4 at 1.15).
      const bool rounds_result = backend == Backend::cuda && c.op == Op::conv2d && dtype != DType::f32;
      const double result_u = !rounds_result ? 0.0 : dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
      testing::expect_close(actual, expected, {static_cast<std::int64_t>(actual.size())},
                            {1e-4 + 2 * result_u, 1e-6 + 2 * result_u}, combination(c.op, backend, dtype));
    }
  }
  if (not_run > 0)
    GTEST_SKIP() << *not_here << ": " << not_run
                 << " combinations not run (the supported ones, and batch_norm/pool2d, built on the device); every "
                    "other refusal was checked";
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendSupportsMatchesWhatRuns, ::testing::ValuesIn(kAllBackends),
                         testing::backend_param_name);

}  // namespace
}  // namespace bigtrain::kernels
