#pragma once
// Shared harness for op tests (every backend checked against the reference, the
// reference checked against double-precision finite differences).
//
//   random_tensor(shape, seed)            seeded uniform values, same on every platform
//   expect_close(actual, expected, tol, what)
//                                          fails with the worst element, its index and values
//   check_gradients(f, inputs, analytic, options, what)
//                                          central differences of a scalar function; kinks
//                                          (ReLU, max-pool) skipped by a caller predicate (as
//                                          Caffe's GradientChecker kink/kink_range) or detected
//                                          by disagreeing one-sided differences
//   backend_unavailable(backend)          why a backend cannot run here (for GTEST_SKIP)
//
// Header-only, so any test suite can include it without linking a support library.
//
// Typical backend-parameterised test:
//   class MyOpTest : public ::testing::TestWithParam<Backend> {};
//   TEST_P(MyOpTest, Forward) { BT_SKIP_UNLESS_AVAILABLE(GetParam()); ... }
//   INSTANTIATE_TEST_SUITE_P(Backends, MyOpTest, ::testing::ValuesIn(bigtrain::testing::all_backends()),
//                            bigtrain::testing::backend_param_name);
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/core/device.hpp"
#include "kernels/core/tensor.hpp"

namespace bigtrain::testing {

// ---- random data ---------------------------------------------------------------

// A splitmix64 stream: unlike std::uniform_real_distribution its values are the same
// with every standard library, so a failing seed reproduces anywhere.
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next_u64();
  double uniform(double lo = 0.0, double hi = 1.0);  // [lo, hi)

 private:
  std::uint64_t state_;
};

// Host float32 tensor with values uniform in [lo, hi), moved to `device`.
Tensor random_tensor(const Shape& shape, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f,
                     Device device = Device::cpu());
std::vector<double> random_doubles(std::size_t count, std::uint64_t seed, double lo = -1.0, double hi = 1.0);

std::vector<double> to_doubles(const Tensor& tensor);  // copies to host first
Tensor from_doubles(const Shape& shape, const std::vector<double>& values, Device device = Device::cpu());

// ---- comparison ----------------------------------------------------------------

// An element passes when |actual - expected| <= absolute + relative * max(|expected_i|, rms(expected)).
// The rms term scales the bound to the tensor's magnitude: an output that is a sum of
// many terms can cancel to near zero, and its rounding error is then proportional to
// the size of the terms, not to the tiny result.
struct Tolerance {
  double relative = 0.0;
  double absolute = 0.0;
};

struct CloseReport {
  bool ok = true;
  std::int64_t mismatches = 0;
  std::int64_t worst_index = -1;  // flat index of the element with the largest error/allowed ratio
  double worst_actual = 0.0, worst_expected = 0.0, worst_ratio = 0.0, magnitude = 0.0;
  std::string message;  // empty when ok
};

CloseReport compare(std::span<const double> actual, std::span<const double> expected, const Shape& shape,
                    Tolerance tolerance, std::string_view what);
// Records a gtest failure (non-fatal) naming `what`, the worst element's index, both
// values and the bound; returns whether all elements passed.
bool expect_close(const Tensor& actual, const Tensor& expected, Tolerance tolerance, std::string_view what);
bool expect_close(std::span<const double> actual, std::span<const double> expected, const Shape& shape,
                  Tolerance tolerance, std::string_view what);

// "[n,c,h,w]" of a flat index into a contiguous tensor of `shape`.
std::string index_str(const Shape& shape, std::int64_t flat_index);

// ---- finite-difference gradients -------------------------------------------------

// The precision the checked function evaluates in; it sets the default step: the
// step that balances truncation error (~h^2 f''') against rounding (~eps f / h) is
// about eps^(1/3) times the input scale.
enum class Precision { f64, f32 };

struct GradCheckOptions {
  Precision precision = Precision::f64;
  double step = 0.0;  // 0: 1e-5 for f64, 5e-3 for f32 (times max(1, |x|))
  Tolerance tolerance{1e-6, 1e-9};
  // Kink detection: the stencil [x-h, x+h] crosses a kink when the two one-sided
  // differences disagree by more than kink_relative * (|forward| + |backward|) +
  // kink_absolute; smooth curvature makes them differ only by ~h f''. At a kink the
  // analytic gradient is accepted when it matches either one-sided difference (it is
  // the derivative on x's own side); otherwise the element is skipped and counted.
  bool detect_kinks = false;
  double kink_relative = 0.1;
  double kink_absolute = 1e-6;
  // Caller-known kinks: return true to skip element `element` of input `input`.
  std::function<bool(std::size_t input, std::size_t element)> skip;
  // Check at most this many elements per input (a seeded, evenly spread subset) to keep tests fast.
  std::size_t max_elements_per_input = 0;  // 0: all
  std::uint64_t sample_seed = 1;
};

struct GradCheckReport {
  std::size_t checked = 0;          // compared against central differences
  std::size_t kinks_one_sided = 0;  // at a kink, matched a one-sided difference
  std::size_t skipped = 0;          // by `skip`, or at a kink matching neither side
  bool ok = true;
};

// f evaluates the scalar loss at `inputs`. `analytic[i]` holds dLoss/d(inputs[i]).
// `inputs` is perturbed in place and restored. Records gtest failures per input
// (worst element named) and prints the counts of kinks and skips.
using ScalarFunction = std::function<double(const std::vector<std::vector<double>>& inputs)>;
GradCheckReport check_gradients(const ScalarFunction& f, std::vector<std::vector<double>>& inputs,
                                const std::vector<std::vector<double>>& analytic, const GradCheckOptions& options,
                                const std::vector<std::string>& input_names, std::string_view what);

// ---- backends ----------------------------------------------------------------

// Every backend a test body should run on; unavailable ones skip at run time, so
// the test list is the same on every machine and a CI log shows what was skipped.
std::vector<Backend> all_backends();
// Why `backend` cannot run in this process, or nullopt when it can.
std::optional<std::string> backend_unavailable(Backend backend);
std::string backend_param_name(const ::testing::TestParamInfo<Backend>& info);
// A host tensor copied to the backend's device (a no-op share for host backends).
Tensor on_backend(const Tensor& host, Backend backend);

// ==== implementation (header-only: every test suite can include it without linking a support library) ====


// ---- random data ---------------------------------------------------------------

inline std::uint64_t Random::next_u64() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline double Random::uniform(double lo, double hi) {
  const double unit = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;  // 53 random mantissa bits
  return lo + (hi - lo) * unit;
}

inline std::vector<double> random_doubles(std::size_t count, std::uint64_t seed, double lo, double hi) {
  Random random(seed);
  std::vector<double> values(count);
  for (double& v : values) v = random.uniform(lo, hi);
  return values;
}

inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, float lo, float hi, Device device) {
  Tensor host = Tensor::empty(shape);
  Random random(seed);
  float* data = host.f32();
  for (std::int64_t i = 0; i < host.numel(); ++i) data[i] = static_cast<float>(random.uniform(lo, hi));
  return device.is_cpu() ? host : host.to(device);
}

inline std::vector<double> to_doubles(const Tensor& tensor) {
  const std::vector<float> values = tensor.to_vector();
  return std::vector<double>(values.begin(), values.end());
}

inline Tensor from_doubles(const Shape& shape, const std::vector<double>& values, Device device) {
  std::vector<float> narrowed(values.begin(), values.end());
  Tensor host = Tensor::from_vector(shape, narrowed);
  return device.is_cpu() ? host : host.to(device);
}

// ---- comparison ----------------------------------------------------------------

inline std::string index_str(const Shape& shape, std::int64_t flat_index) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    const std::int64_t extent = std::max<std::int64_t>(shape[d], 1);
    index[d] = flat_index % extent;
    flat_index /= extent;
  }
  return fmt::format("[{}]", fmt::join(index, ","));
}

namespace detail {

inline double rms(std::span<const double> values) {
  if (values.empty()) return 0.0;
  double sum = 0.0;
  for (double v : values) sum += v * v;
  return std::sqrt(sum / static_cast<double>(values.size()));
}

}  // namespace detail

inline CloseReport compare(std::span<const double> actual, std::span<const double> expected, const Shape& shape,
                    Tolerance tolerance, std::string_view what) {
  CloseReport report;
  if (actual.size() != expected.size()) {
    report.ok = false;
    report.message = fmt::format("{}: {} values, expected {}", what, actual.size(), expected.size());
    return report;
  }
  report.magnitude = detail::rms(expected);
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(actual[i] - expected[i]);
    const double allowed = tolerance.absolute + tolerance.relative * std::max(std::abs(expected[i]), report.magnitude);
    const double ratio = allowed > 0.0 ? error / allowed : (error == 0.0 ? 0.0 : INFINITY);
    if (!(error <= allowed)) ++report.mismatches;  // NaN fails too
    const double ordered = std::isnan(ratio) ? INFINITY : ratio;
    if (report.worst_index < 0 || ordered > report.worst_ratio) {
      report.worst_ratio = ordered;
      report.worst_index = static_cast<std::int64_t>(i);
      report.worst_actual = actual[i];
      report.worst_expected = expected[i];
    }
  }
  if (report.mismatches > 0) {
    report.ok = false;
    const double allowed_worst =
        tolerance.absolute + tolerance.relative * std::max(std::abs(report.worst_expected), report.magnitude);
    report.message = fmt::format(
        "{}: {} of {} elements differ; worst at {} (flat {}): actual {:.9g}, expected {:.9g}, |diff| {:.3g} > "
        "allowed {:.3g} (relative {:g}, absolute {:g}, rms(expected) {:.3g})",
        what, report.mismatches, actual.size(), index_str(shape, report.worst_index), report.worst_index,
        report.worst_actual, report.worst_expected, std::abs(report.worst_actual - report.worst_expected),
        allowed_worst, tolerance.relative, tolerance.absolute, report.magnitude);
  }
  return report;
}

inline bool expect_close(std::span<const double> actual, std::span<const double> expected, const Shape& shape,
                  Tolerance tolerance, std::string_view what) {
  const CloseReport report = compare(actual, expected, shape, tolerance, what);
  if (!report.ok) ADD_FAILURE() << report.message;
  return report.ok;
}

inline bool expect_close(const Tensor& actual, const Tensor& expected, Tolerance tolerance, std::string_view what) {
  if (actual.shape() != expected.shape()) {
    ADD_FAILURE() << what << ": shape " << shape_str(actual.shape()) << ", expected " << shape_str(expected.shape());
    return false;
  }
  const std::vector<double> a = to_doubles(actual), e = to_doubles(expected);
  return expect_close(a, e, actual.shape(), tolerance, what);
}

// ---- finite differences ----------------------------------------------------------

namespace detail {

inline std::vector<std::size_t> elements_to_check(std::size_t count, const GradCheckOptions& options) {
  std::vector<std::size_t> elements(count);
  std::iota(elements.begin(), elements.end(), std::size_t{0});
  if (options.max_elements_per_input == 0 || count <= options.max_elements_per_input) return elements;
  // Evenly spread with a seeded start, so every region (borders included) is sampled.
  const std::size_t wanted = options.max_elements_per_input;
  Random random(options.sample_seed);
  const double stride = static_cast<double>(count) / static_cast<double>(wanted);
  const double start = random.uniform(0.0, stride);
  std::vector<std::size_t> sampled;
  for (std::size_t k = 0; k < wanted; ++k)
    sampled.push_back(std::min(count - 1, static_cast<std::size_t>(start + stride * static_cast<double>(k))));
  return sampled;
}

// The perturbed value the function actually sees: an f32 function rounds its inputs.
inline double as_evaluated(double value, Precision precision) {
  return precision == Precision::f32 ? static_cast<double>(static_cast<float>(value)) : value;
}

}  // namespace detail

inline GradCheckReport check_gradients(const ScalarFunction& f, std::vector<std::vector<double>>& inputs,
                                const std::vector<std::vector<double>>& analytic, const GradCheckOptions& options,
                                const std::vector<std::string>& input_names, std::string_view what) {
  GradCheckReport report;
  if (analytic.size() != inputs.size()) {
    ADD_FAILURE() << what << ": " << analytic.size() << " analytic gradients for " << inputs.size() << " inputs";
    report.ok = false;
    return report;
  }
  const double base_step = options.step > 0.0 ? options.step : (options.precision == Precision::f64 ? 1e-5 : 5e-3);
  const double f0 = f(inputs);

  for (std::size_t input = 0; input < inputs.size(); ++input) {
    std::vector<double>& values = inputs[input];
    const std::string name = input < input_names.size() ? input_names[input] : fmt::format("input {}", input);
    if (analytic[input].size() != values.size()) {
      ADD_FAILURE() << what << ": gradient of " << name << " has " << analytic[input].size() << " elements, input has "
                    << values.size();
      report.ok = false;
      continue;
    }
    std::vector<std::size_t> compared_elements;
    std::vector<double> compared_analytic, compared_numeric;
    struct Kink {
      std::size_t element;
      double forward, backward;
    };
    std::vector<Kink> kinks;
    for (std::size_t element : detail::elements_to_check(values.size(), options)) {
      if (options.skip && options.skip(input, element)) {
        ++report.skipped;
        continue;
      }
      const double x = values[element];
      const double h = base_step * std::max(1.0, std::abs(x));
      const double x_plus = detail::as_evaluated(x + h, options.precision), x_minus = detail::as_evaluated(x - h, options.precision);
      values[element] = x_plus;
      const double f_plus = f(inputs);
      values[element] = x_minus;
      const double f_minus = f(inputs);
      values[element] = x;
      const double central = (f_plus - f_minus) / (x_plus - x_minus);
      if (options.detect_kinks) {
        const double forward = (f_plus - f0) / (x_plus - x), backward = (f0 - f_minus) / (x - x_minus);
        if (std::abs(forward - backward) >
            options.kink_relative * (std::abs(forward) + std::abs(backward)) + options.kink_absolute) {
          kinks.push_back({element, forward, backward});
          continue;
        }
      }
      compared_elements.push_back(element);
      compared_analytic.push_back(analytic[input][element]);
      compared_numeric.push_back(central);
    }

    // Bounds are scaled to the rms of this input's numeric gradient.
    const double magnitude = detail::rms(compared_numeric);
    auto allowed = [&](double numeric) {
      return options.tolerance.absolute + options.tolerance.relative * std::max(std::abs(numeric), magnitude);
    };
    std::size_t mismatches = 0, worst = 0;
    double worst_ratio = -1.0;
    for (std::size_t k = 0; k < compared_elements.size(); ++k) {
      const double error = std::abs(compared_analytic[k] - compared_numeric[k]);
      const double ratio = error / allowed(compared_numeric[k]);
      if (!(error <= allowed(compared_numeric[k]))) ++mismatches;
      if (std::isnan(ratio) || ratio > worst_ratio) {
        worst_ratio = std::isnan(ratio) ? INFINITY : ratio;
        worst = k;
      }
    }
    report.checked += compared_elements.size();
    if (mismatches > 0) {
      report.ok = false;
      ADD_FAILURE() << fmt::format(
          "{}: d/d{}: {} of {} elements differ from central differences; worst element {}: analytic {:.9g}, "
          "numeric {:.9g}, |diff| {:.3g} > allowed {:.3g} (rms of numeric gradient {:.3g}, step {:g})",
          what, name, mismatches, compared_elements.size(), compared_elements[worst], compared_analytic[worst],
          compared_numeric[worst], std::abs(compared_analytic[worst] - compared_numeric[worst]),
          allowed(compared_numeric[worst]), magnitude, base_step);
    }
    // At a kink the analytic gradient is the derivative on one side of it.
    for (const Kink& kink : kinks) {
      const double a = analytic[input][kink.element];
      if (std::abs(a - kink.forward) <= allowed(kink.forward) || std::abs(a - kink.backward) <= allowed(kink.backward))
        ++report.kinks_one_sided;
      else
        ++report.skipped;
    }
    if (!kinks.empty() || report.skipped > 0)
      std::printf("[ gradcheck] %.*s d/d%s: %zu checked, %zu kinks (%zu matched one side), %zu skipped so far\n",
                  static_cast<int>(what.size()), what.data(), name.c_str(), compared_elements.size(), kinks.size(),
                  report.kinks_one_sided, report.skipped);
  }
  if (report.checked == 0) {
    ADD_FAILURE() << what << ": no element was compared with finite differences (all skipped)";
    report.ok = false;
  }
  return report;
}

// ---- backends ----------------------------------------------------------------

inline std::vector<Backend> all_backends() { return {Backend::reference, Backend::cpu, Backend::cuda}; }

inline std::optional<std::string> backend_unavailable(Backend backend) {
  if (backend != Backend::cuda) return std::nullopt;
  if (!cuda_compiled()) return std::string("this build has no CUDA backend (configured without the CUDA toolkit/cuDNN)");
  if (cuda_device_count() == 0) return std::string("hardware: no CUDA device is present on this machine");
  return std::nullopt;
}

inline std::string backend_param_name(const ::testing::TestParamInfo<Backend>& info) { return backend_name(info.param); }

inline Tensor on_backend(const Tensor& host, Backend backend) {
  const Device device = backend_device(backend);
  return host.device() == device ? host : host.to(device);
}

// An output tensor filled with NaN on `backend`: an op must overwrite its outputs,
// and one that accumulates into them (or skips an element) shows as NaN.
inline Tensor nan_tensor(const Shape& shape, Backend backend) {
  Tensor t = Tensor::empty(shape);
  t.fill(std::numeric_limits<float>::quiet_NaN());
  return on_backend(t, backend);
}

inline std::size_t numel(const Shape& shape) { return static_cast<std::size_t>(shape_numel(shape)); }

}  // namespace bigtrain::testing

#define BT_SKIP_UNLESS_AVAILABLE(backend)                                              \
  do {                                                                                \
    if (auto bt_skip_reason = ::bigtrain::testing::backend_unavailable(backend))      \
      GTEST_SKIP() << *bt_skip_reason;                                                \
  } while (0)
