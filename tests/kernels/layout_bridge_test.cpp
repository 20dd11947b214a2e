// The CPU layout bridge's output reorders (kernels/cpu/layout_bridge.hpp): a
// primitive's blocked weights written into a plain OIHW tensor, directly and added
// in, land at the index oneDNN's blocked format defines, also where the reorder
// runs on descriptors without the 1 x 1 spatial dimensions and where the channel
// counts leave the blocks padded; and activations a primitive chose nhwc for.
#include <gtest/gtest.h>

#include <dnnl.hpp>
#include <ostream>

#include "kernels/core/tensor.hpp"
#include "kernels/cpu/dnnl_context.hpp"
#include "kernels/cpu/layout_bridge.hpp"

namespace bigtrain::kernels::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct WeightShape {
  std::int64_t out, in, kernel;
};
void PrintTo(const WeightShape& s, std::ostream* os) { *os << s.out << "x" << s.in << "x" << s.kernel << "x" << s.kernel; }

// The value the test writes for element (o, i, k) of the weights.
float marker(std::int64_t o, std::int64_t i, std::int64_t k) { return static_cast<float>(o * 10000 + i * 10 + k); }

// Writes marker() into memory of format ABcd16b16a (OIhw16i16o) by its definition:
// blocks of 16 outputs x 16 inputs, outputs innermost, spatial between the blocks.
void fill_blocked(const WeightShape& shape, float* blocked) {
  const std::int64_t in_blocks = (shape.in + 15) / 16, area = shape.kernel * shape.kernel;
  for (std::int64_t o = 0; o < shape.out; ++o)
    for (std::int64_t i = 0; i < shape.in; ++i)
      for (std::int64_t k = 0; k < area; ++k)
        blocked[(((o / 16) * in_blocks + i / 16) * area + k) * 256 + (i % 16) * 16 + o % 16] = marker(o, i, k);
}

class OutputBridge : public ::testing::TestWithParam<WeightShape> {
 protected:
  void SetUp() override {
    const WeightShape s = GetParam();
    dims_ = {s.out, s.in, s.kernel, s.kernel};
    plain_ = memory::desc(dims_, memory::data_type::f32, tag::oihw);
    blocked_ = memory::desc(dims_, memory::data_type::f32, tag::ABcd16b16a);
    bridge_.init(plain_, blocked_, LayoutBridge::Role::output);
  }
  void expect_plain(const Tensor& weights, float offset) const {
    const WeightShape s = GetParam();
    const std::int64_t area = s.kernel * s.kernel;
    const float* values = weights.f32();
    for (std::int64_t o = 0; o < s.out; ++o)
      for (std::int64_t i = 0; i < s.in; ++i)
        for (std::int64_t k = 0; k < area; ++k)
          ASSERT_EQ(values[(o * s.in + i) * area + k], marker(o, i, k) + offset) << "o " << o << " i " << i;
  }
  Shape shape() const { return {dims_[0], dims_[1], dims_[2], dims_[3]}; }

  memory::dims dims_;
  memory::desc plain_, blocked_;
  LayoutBridge bridge_;
};

TEST_P(OutputBridge, WritesBlockedWeightsAtTheirPlainIndex) {
  Tensor weights = Tensor::empty(shape()), temporary;
  bridge_.bind_output(weights, temporary);
  fill_blocked(GetParam(), static_cast<float*>(bridge_.primitive_memory().get_data_handle()));
  bridge_.finish_output(weights);
  stream().wait();
  EXPECT_EQ(weights.layout(), Layout::plain);
  expect_plain(weights, 0.0f);
}

TEST_P(OutputBridge, AddsBlockedWeightsIntoWhatThePlainTensorHolds) {
  Tensor weights = Tensor::empty(shape()), temporary;
  weights.fill(0.5f);
  bridge_.bind_accumulating_output(weights, temporary);
  fill_blocked(GetParam(), static_cast<float*>(bridge_.primitive_memory().get_data_handle()));
  bridge_.finish_accumulating_output();
  stream().wait();
  expect_plain(weights, 0.5f);
}

// 1x1 weights take the 2D path; 40 x 72 pads both blocks; 3x3 keeps its four dimensions.
INSTANTIATE_TEST_SUITE_P(Weights, OutputBridge,
                         ::testing::Values(WeightShape{64, 256, 1}, WeightShape{40, 72, 1}, WeightShape{32, 48, 3},
                                           WeightShape{40, 24, 3}),
                         [](const auto& info) {
                           const WeightShape& s = info.param;
                           return "o" + std::to_string(s.out) + "_i" + std::to_string(s.in) + "_k" +
                                  std::to_string(s.kernel);
                         });

// An activation a primitive writes in nhwc (AMX's brgemm kernels take no other):
// written in place, the tensor then nhwc, where the op may leave its output in the
// primitive's layout, whatever the channel count; else reordered into NCHW. The
// values land at their NCHW index either way.
struct ActivationCase {
  std::int64_t channels;
  bool blocked_output;
  Layout expected;
};
void PrintTo(const ActivationCase& c, std::ostream* os) {
  *os << c.channels << " channels, blocked output " << (c.blocked_output ? "allowed" : "not allowed");
}

class NhwcOutput : public ::testing::TestWithParam<ActivationCase> {};

TEST_P(NhwcOutput, IsWrittenInPlaceWhereAllowedAndLandsAtItsPlainIndex) {
  const ActivationCase c = GetParam();
  const std::int64_t batch = 2, height = 3, width = 5;
  const memory::dims dims{batch, c.channels, height, width};
  LayoutBridge bridge;
  bridge.init(memory::desc(dims, memory::data_type::f32, tag::nchw),
              memory::desc(dims, memory::data_type::f32, tag::nhwc), LayoutBridge::Role::output, c.blocked_output);
  auto value = [](std::int64_t n, std::int64_t ch, std::int64_t h, std::int64_t w) {
    return static_cast<float>(n * 100000 + ch * 100 + h * 10 + w);
  };
  Tensor y = Tensor::empty({batch, c.channels, height, width}), temporary;
  bridge.bind_output(y, temporary);
  auto* nhwc = static_cast<float*>(bridge.primitive_memory().get_data_handle());
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t h = 0; h < height; ++h)
      for (std::int64_t w = 0; w < width; ++w)
        for (std::int64_t ch = 0; ch < c.channels; ++ch)
          nhwc[((n * height + h) * width + w) * c.channels + ch] = value(n, ch, h, w);
  EXPECT_EQ(bridge.primitive_memory().get_data_handle() == y.raw_data(), c.expected == Layout::nhwc)
      << "in place exactly when the tensor takes nhwc";
  bridge.finish_output(y);
  stream().wait();
  EXPECT_EQ(y.layout(), c.expected);
  const Tensor plain = y.to_plain();
  const float* values = plain.f32();
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t ch = 0; ch < c.channels; ++ch)
      for (std::int64_t h = 0; h < height; ++h)
        for (std::int64_t w = 0; w < width; ++w)
          ASSERT_EQ(values[((n * c.channels + ch) * height + h) * width + w], value(n, ch, h, w))
              << "n " << n << " c " << ch << " h " << h << " w " << w;
}

INSTANTIATE_TEST_SUITE_P(Activations, NhwcOutput,
                         ::testing::Values(ActivationCase{32, true, Layout::nhwc},
                                           ActivationCase{12, true, Layout::nhwc},
                                           ActivationCase{32, false, Layout::plain},
                                           ActivationCase{12, false, Layout::plain}),
                         [](const auto& info) {
                           const ActivationCase& c = info.param;
                           return "c" + std::to_string(c.channels) + (c.blocked_output ? "_blocked" : "_plain");
                         });

// A choice no Tensor layout holds (nChw4c here) lands, where allowed, in the
// widest block the channels allow, through the bridge's reorder.
TEST(OtherActivationFormat, LandsInTheWidestBlockAtItsPlainIndex) {
  const std::int64_t batch = 2, channels = 24, height = 3, width = 2, plane = height * width;
  const memory::dims dims{batch, channels, height, width};
  LayoutBridge bridge;
  bridge.init(memory::desc(dims, memory::data_type::f32, tag::nchw),
              memory::desc(dims, memory::data_type::f32, tag::nChw4c), LayoutBridge::Role::output, true);
  Tensor y = Tensor::empty({batch, channels, height, width}), temporary;
  bridge.bind_output(y, temporary);
  auto* chosen = static_cast<float*>(bridge.primitive_memory().get_data_handle());
  ASSERT_NE(chosen, y.raw_data());
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t i = 0; i < plane; ++i)
        chosen[((n * channels / 4 + c / 4) * plane + i) * 4 + c % 4] = static_cast<float>((n * channels + c) * plane + i);
  bridge.finish_output(y);
  stream().wait();
  EXPECT_EQ(y.layout(), Layout::blocked8);
  const std::vector<float> values = y.to_vector();
  for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], static_cast<float>(i));
}

TEST(WithoutTrailingUnitDims, DropsOnlyTrailingOnesAndKeepsTheBytes) {
  const memory::desc weights({256, 1024, 1, 1}, memory::data_type::f32, tag::ABcd16b16a);
  const memory::desc squeezed = without_trailing_unit_dims(weights);
  EXPECT_EQ(squeezed.dims(), (memory::dims{256, 1024}));
  EXPECT_EQ(squeezed.get_size(), weights.get_size());
  EXPECT_EQ(squeezed, memory::desc({256, 1024}, memory::data_type::f32, tag::AB16b16a));

  const memory::desc spatial({64, 64, 3, 3}, memory::data_type::f32, tag::ABcd16b16a);
  EXPECT_EQ(without_trailing_unit_dims(spatial), spatial);
  const memory::desc row({1, 1, 1, 1}, memory::data_type::f32, tag::abcd);
  EXPECT_EQ(without_trailing_unit_dims(row).dims(), (memory::dims{1, 1}));
  const memory::desc matrix({8, 2048}, memory::data_type::f32, tag::ab);
  EXPECT_EQ(without_trailing_unit_dims(matrix), matrix);
}

}  // namespace
}  // namespace bigtrain::kernels::cpu
