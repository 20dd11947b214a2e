#pragma once
// Whole-network comparison of two backends across ReLU kinks.
//
// Two backends round every sum differently. Where a ReLU input lies within that
// difference of 0, one backend may pass it and the other zero it, and every
// gradient upstream of it then differs by O(1) of that element's share: a true
// property of the piecewise-linear function, not a bug. So the inputs within a
// tolerance of 0 on either backend are set to exactly 0 on both
// (net::ReluInputHook), which makes both compute the same function (those elements
// held at 0, on the kink's inactive side) and leaves their gradients comparable at
// the usual tolerance. Elements farther from 0 that still differ in sign are not
// touched: that is a real disagreement, and the gradients show it.
//
// Setting an element to 0 moves everything downstream by about the tolerance, which
// may bring another input near 0; so the passes repeat, both backends with the
// union of the elements found so far, until a pass finds no new one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "net/forward_context.hpp"
#include "tests/net/net_testing.hpp"

namespace bigtrain::net::testing {

// The k-th ReLU a forward runs through, as it arrived (after any zeroing).
struct ReluInput {
  std::string relu;
  Shape shape;
  std::vector<double> values;
};

// Flat indices to set to 0, per ReLU call of the forward (the k-th call's set at k).
using KinkZeroing = std::vector<std::set<std::int64_t>>;

class KinkZeroingHook final : public ReluInputHook {
 public:
  explicit KinkZeroingHook(const KinkZeroing& zeroing) : zeroing_(zeroing) {}

  void before_relu(const std::string& relu_name, Tensor& input) override {
    const std::size_t call = inputs_.size();
    std::vector<double> values = to_doubles(input);
    if (call < zeroing_.size() && !zeroing_[call].empty()) {
      for (std::int64_t index : zeroing_[call]) values[static_cast<std::size_t>(index)] = 0.0;
      input.copy_from(from_doubles(input.shape(), values, input.device()));
    }
    inputs_.push_back({relu_name, input.shape(), std::move(values)});
  }

  std::vector<ReluInput> take_inputs() { return std::move(inputs_); }

 private:
  const KinkZeroing& zeroing_;
  std::vector<ReluInput> inputs_;
};

struct KinkElement {
  std::string relu;
  Shape shape;
  std::int64_t index = 0;
  double expected = 0.0, actual = 0.0;  // the two backends' input before zeroing
  double rms = 0.0;                     // of the expected path's whole input tensor
};

struct KinkAgreedGradients {
  LayerGradients expected, actual;
  std::vector<KinkElement> zeroed;  // in the order found
  std::int64_t relu_elements = 0;   // ReLU inputs in one forward, all calls
  int passes = 0;  // the first one forward only
  // The largest |actual - expected| of a ReLU input over its tensor's rms: in the
  // last pass, and for the zeroed ones before zeroing. How wide the band near 0 must
  // be; and, being small, the proof that no zeroed input hid a real disagreement.
  double largest_difference = 0.0;
  std::string largest_difference_at;
};

inline void note_difference(KinkAgreedGradients& out, double difference, double rms, const std::string& relu,
                            const Shape& shape, std::int64_t index) {
  const double relative = rms > 0.0 ? std::abs(difference) / rms : std::abs(difference);
  if (relative <= out.largest_difference) return;
  out.largest_difference = relative;
  out.largest_difference_at = relu + " input " + index_str(shape, index);
}

// `run(backend_index, hook, backward)` runs the forward of backend 0 (the expected
// one) or 1 (the one checked) with `hook` in its ForwardContext, and the backward
// when asked. The first pass only looks for inputs near the kink (forward only);
// the passes after it are whole steps. An element is near the kink when
// |x| <= relative * rms(that ReLU input) on either backend.
inline KinkAgreedGradients gradients_with_agreed_kinks(
    const std::function<LayerGradients(int, ReluInputHook*, bool)>& run, double relative, int max_passes = 4) {
  KinkAgreedGradients out;
  KinkZeroing zeroing;
  for (out.passes = 1; out.passes <= max_passes; ++out.passes) {
    const bool backward = out.passes > 1;
    std::vector<ReluInput> inputs[2];
    LayerGradients* results[2] = {&out.expected, &out.actual};
    for (int i = 0; i < 2; ++i) {
      KinkZeroingHook hook(zeroing);
      *results[i] = run(i, &hook, backward);
      inputs[i] = hook.take_inputs();
    }
    const std::vector<ReluInput>& expected = inputs[0];
    const std::vector<ReluInput>& actual = inputs[1];
    EXPECT_EQ(actual.size(), expected.size()) << "both backends run through the same ReLUs";
    if (actual.size() != expected.size()) return out;
    zeroing.resize(expected.size());
    out.relu_elements = 0;
    out.largest_difference = 0.0;
    out.largest_difference_at.clear();
    std::size_t found = 0;
    for (std::size_t call = 0; call < expected.size(); ++call) {
      const ReluInput& e = expected[call];
      const ReluInput& a = actual[call];
      EXPECT_EQ(a.relu, e.relu);
      EXPECT_EQ(a.shape, e.shape) << e.relu;
      if (a.values.size() != e.values.size()) return out;
      out.relu_elements += static_cast<std::int64_t>(e.values.size());
      double sum = 0.0;
      for (double v : e.values) sum += v * v;
      const double rms = std::sqrt(sum / static_cast<double>(std::max<std::size_t>(e.values.size(), 1)));
      const double near = relative * rms;
      for (std::size_t i = 0; i < e.values.size(); ++i) {
        const auto index = static_cast<std::int64_t>(i);
        note_difference(out, a.values[i] - e.values[i], rms, e.relu, e.shape, index);
        if (std::abs(e.values[i]) > near && std::abs(a.values[i]) > near) continue;
        if (!zeroing[call].insert(index).second) continue;  // zeroed already: exactly 0 on both
        out.zeroed.push_back({e.relu, e.shape, index, e.values[i], a.values[i], rms});
        ++found;
      }
    }
    if (found == 0 && backward) {
      for (const KinkElement& k : out.zeroed)
        note_difference(out, k.actual - k.expected, k.rms, k.relu, k.shape, k.index);
      return out;
    }
  }
  out.passes = max_passes;
  ADD_FAILURE() << "ReLU inputs near the kink still appearing after " << max_passes << " passes ("
                << out.zeroed.size() << " zeroed)";
  return out;
}

// One line of figures, then one line per zeroed input: every one the backends put
// on opposite sides of the kink (the ones that matter), then others up to `shown`.
inline std::string describe_zeroed(const KinkAgreedGradients& run, double relative, const std::string& expected_name,
                                   const std::string& actual_name, std::size_t shown = 10) {
  auto opposite = [](const KinkElement& k) { return (k.expected > 0.0) != (k.actual > 0.0); };
  const auto flips = std::count_if(run.zeroed.begin(), run.zeroed.end(), opposite);
  std::string text = fmt::format(
      "ReLU inputs: largest difference {:.3g} x rms ({}); {} of {} within {:g} x rms of 0 on either backend, {} of "
      "them on opposite sides of the kink; all set to 0 on both ({} pass{})",
      run.largest_difference, run.largest_difference_at.empty() ? "all equal" : run.largest_difference_at,
      run.zeroed.size(), run.relu_elements, relative, flips, run.passes, run.passes == 1 ? "" : "es");
  std::size_t listed = 0;
  for (const bool flipped : {true, false})
    for (const KinkElement& k : run.zeroed) {
      if (opposite(k) != flipped || (!flipped && listed >= shown)) continue;
      text += fmt::format("\n  {} input {}: {} {:.3g}, {} {:.3g} (rms {:.3g}){}", k.relu, index_str(k.shape, k.index),
                          expected_name, k.expected, actual_name, k.actual, k.rms, flipped ? ", opposite sides" : "");
      ++listed;
    }
  if (run.zeroed.size() > listed) text += fmt::format("\n  ... and {} more", run.zeroed.size() - listed);
  return text;
}

}  // namespace bigtrain::net::testing
