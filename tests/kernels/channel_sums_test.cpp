// kernels/cpu/channel_sums.hpp: per-channel sums of a tensor read in its own layout
// (NCHW, nChw8c, nChw16c, nhwc) equal the sums in double of its NCHW values, with and
// without runs longer than one 1024-pixel chunk.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/channel_sums.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels::cpu {
namespace {

using namespace bigtrain::testing;

TEST(ChannelSums, EveryLayoutSumsTheNchwValues) {
  for (const Shape& shape : {Shape{2, 32, 5, 7}, Shape{3, 16, 40, 41}}) {
    const Tensor x = random_tensor(shape, 7, -1.0f, 2.0f);
    std::vector<double> expected(static_cast<std::size_t>(shape[1]), 0.0);
    const std::int64_t plane = shape[2] * shape[3];
    for (std::int64_t n = 0; n < shape[0]; ++n)
      for (std::int64_t c = 0; c < shape[1]; ++c)
        for (std::int64_t p = 0; p < plane; ++p)
          expected[static_cast<std::size_t>(c)] += x.f32()[(n * shape[1] + c) * plane + p];
    for (const Layout layout : {Layout::plain, Layout::blocked8, Layout::blocked16, Layout::nhwc}) {
      SCOPED_TRACE(layout_name(layout));
      const Tensor laid_out = x.to_layout(layout);
      ASSERT_EQ(laid_out.layout(), layout);
      Tensor sums = nan_tensor({shape[1]}, Backend::cpu);
      channel_sums(laid_out, sums);
      // Float partials of at most 1024 values: ~1e-7 relative to the sum of |x|.
      expect_close(to_doubles(sums), expected, {shape[1]}, {0.0, 2e-7 * 1.5 * static_cast<double>(shape[0] * plane)},
                   "channel sums");
    }
  }
}

}  // namespace
}  // namespace bigtrain::kernels::cpu
