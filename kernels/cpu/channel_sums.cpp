#include "kernels/cpu/channel_sums.hpp"

#include <algorithm>
#include <vector>

#include "kernels/core/error.hpp"
#include "kernels/cpu/moment_sums.hpp"

namespace bigtrain::kernels::cpu {

void channel_sums(const Tensor& x, Tensor& sums) {
  BT_CHECK(x.rank() == 4 && x.dtype() == DType::f32 && x.device().is_cpu(),
           "channel_sums: expects a 4-D float32 host tensor, got {}", x.describe());
  const std::int64_t batch = x.dim(0), channels = x.dim(1), rows = x.dim(2) * x.dim(3);
  // Every layout is panels of `rows` rows of `lanes` consecutive channels: NCHW one
  // channel per panel, nChwKc K channels, nhwc all of them.
  const Layout layout = x.layout();
  const std::int64_t lanes = layout == Layout::nhwc ? channels : (layout == Layout::plain ? 1 : layout_block(layout));
  const std::int64_t groups = channels / lanes, panels = batch * groups;
  const std::int64_t chunks = (rows + kMomentChunk - 1) / kMomentChunk;
  const auto* data = static_cast<const float*>(x.raw_data());
  std::vector<float> partials(static_cast<std::size_t>(panels * chunks * lanes), 0.0f);
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t panel = 0; panel < panels; ++panel)
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
      float* partial = partials.data() + (panel * chunks + chunk) * lanes;
      const std::int64_t end = std::min(rows, (chunk + 1) * kMomentChunk);
      for (std::int64_t row = chunk * kMomentChunk; row < end; ++row) {
        const float* values = data + (panel * rows + row) * lanes;
#pragma omp simd
        for (std::int64_t lane = 0; lane < lanes; ++lane) partial[lane] += values[lane];
      }
    }
  std::vector<double> totals(static_cast<std::size_t>(channels), 0.0);
  for (std::int64_t panel = 0; panel < panels; ++panel) {
    const std::int64_t first_channel = (panel % groups) * lanes;
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk)
      for (std::int64_t lane = 0; lane < lanes; ++lane)
        totals[static_cast<std::size_t>(first_channel + lane)] += partials[(panel * chunks + chunk) * lanes + lane];
  }
  float* out = sums.f32();
  for (std::int64_t c = 0; c < channels; ++c) out[c] = static_cast<float>(totals[static_cast<std::size_t>(c)]);
}

}  // namespace bigtrain::kernels::cpu
