#include "net/streaming.hpp"

#include "net/conv_bn_fusion.hpp"

#include <algorithm>
#include <utility>

#include "kernels/core/allocator.hpp"
#include "kernels/core/error.hpp"
#include "net/conv_bn_fusion.hpp"
#include "net/encoder.hpp"
#include "net/global_avg_pool.hpp"

namespace bigtrain::net {

TensorRegionReader::TensorRegionReader(Tensor image) : image_(std::move(image)) {
  BT_CHECK(image_.rank() == 4, "streaming: the image must be [N, C, H, W], got {}", image_.describe());
}

Tensor TensorRegionReader::read(const Window& region) {
  Tensor pixels = Tensor::empty({image_.dim(0), image_.dim(1), region.height, region.width}, image_.dtype(),
                                image_.device());
  copy_window(image_, region, pixels, 0, 0);
  return pixels;
}

namespace {

struct AxisTile {
  std::int64_t cells_begin, cells_end;  // own cells of the map
  std::int64_t input_begin, input_end;  // pixels read
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// One axis of the grid: cells [k*c, (k+1)*c) per tile, c = tile / stride; the input
// is the cells' field [S*begin - before, S*(end-1) + after], its origin floored to a
// multiple of S (the field's own origin S*begin - before may fall between strides),
// clipped to the image.
std::vector<AxisTile> axis_tiles(const AxisField& field, std::int64_t pixels, std::int64_t cells,
                                 std::int64_t tile) {
  const std::int64_t per_tile = tile / field.stride;
  std::vector<AxisTile> tiles;
  for (std::int64_t begin = 0; begin < cells; begin += per_tile) {
    AxisTile t;
    t.cells_begin = begin;
    t.cells_end = std::min(begin + per_tile, cells);
    t.input_begin = field.stride * std::max<std::int64_t>(0, begin - ceil_div(field.before, field.stride));
    t.input_end = std::min(pixels, field.stride * (t.cells_end - 1) + field.after + 1);
    BT_CHECK(t.input_begin < t.input_end, "streaming: tile of cells [{}, {}) reads no pixels of {}", t.cells_begin,
             t.cells_end, pixels);
    tiles.push_back(t);
  }
  return tiles;
}

}  // namespace

StreamPlan make_stream_plan(const ReceptiveField& field, const Shape& image, const Shape& feature_map,
                            std::int64_t tile) {
  BT_CHECK(image.size() == 4 && feature_map.size() == 4 && image[0] == feature_map[0],
           "streaming: image {} and feature map {} are not [N, C, H, W] of one batch", shape_str(image),
           shape_str(feature_map));
  BT_CHECK(field.y.stride >= 1 && field.x.stride >= 1 && field.y.before >= 0 && field.x.before >= 0,
           "streaming: invalid receptive field (stride {}x{}, before {}x{})", field.y.stride, field.x.stride,
           field.y.before, field.x.before);
  BT_CHECK(tile >= 1, "streaming: the tile size must be positive, got {}", tile);
  StreamPlan plan;
  plan.field = field;
  plan.image = image;
  plan.feature_map = feature_map;
  // The smaller stride's multiple would leave the other axis's tiles unaligned.
  const std::int64_t stride = std::max(field.y.stride, field.x.stride);
  BT_CHECK(stride % field.y.stride == 0 && stride % field.x.stride == 0,
           "streaming: strides {}x{} do not divide each other", field.y.stride, field.x.stride);
  plan.tile = std::max(stride, tile / stride * stride);
  const std::vector<AxisTile> rows = axis_tiles(field.y, image[2], feature_map[2], plan.tile);
  const std::vector<AxisTile> columns = axis_tiles(field.x, image[3], feature_map[3], plan.tile);
  for (const AxisTile& row : rows)
    for (const AxisTile& column : columns) {
      StreamTile t;
      t.input = {row.input_begin, column.input_begin, row.input_end - row.input_begin,
                 column.input_end - column.input_begin};
      t.cells = {row.cells_begin, column.cells_begin, row.cells_end - row.cells_begin,
                 column.cells_end - column.cells_begin};
      t.output_y = row.cells_begin - row.input_begin / field.y.stride;
      t.output_x = column.cells_begin - column.input_begin / field.x.stride;
      plan.tiles.push_back(t);
    }
  // Tiles of one input shape run one after the other (at most nine shapes: first,
  // inner and last row and column): the caching allocator reuses blocks of equal
  // size only, so the trunk releases its cache when the shape changes (below) and
  // this order makes that happen a few times per pass, not at almost every tile.
  std::stable_sort(plan.tiles.begin(), plan.tiles.end(), [](const StreamTile& a, const StreamTile& b) {
    return std::pair(a.input.height, a.input.width) < std::pair(b.input.height, b.input.width);
  });
  return plan;
}

double StreamPlan::halo_overhead() const {
  double read = 0.0;
  for (const StreamTile& t : tiles) read += static_cast<double>(t.input.height * t.input.width);
  return read / static_cast<double>(image.at(2) * image.at(3));
}

Shape StreamPlan::largest_input() const {
  Shape largest{image.at(0), image.at(1), 0, 0};
  for (const StreamTile& t : tiles)
    if (t.input.height * t.input.width > largest[2] * largest[3]) largest = {image[0], image[1], t.input.height, t.input.width};
  return largest;
}

StreamingTrunk::StreamingTrunk(std::vector<Layer*> layers) : layers_(std::move(layers)) {
  BT_CHECK(!layers_.empty(), "streaming: the trunk has no layers");
}

namespace {

std::vector<Layer*> trunk_of(Encoder& encoder) {
  std::vector<Layer*> layers;
  for (std::size_t i = 0; i < encoder.size(); ++i) layers.push_back(&encoder.at(i));
  // The encoder ends with global average pooling, the head's business.
  if (!layers.empty() && dynamic_cast<GlobalAvgPool*>(layers.back()) != nullptr) layers.pop_back();
  return layers;
}

}  // namespace

StreamingTrunk::StreamingTrunk(Encoder& encoder) : StreamingTrunk(trunk_of(encoder)) {}

ReceptiveField StreamingTrunk::receptive_field(const ForwardContext& ctx) const {
  ReceptiveField field = ReceptiveField::identity();
  for (const Layer* layer : layers_) field = field.then(layer->receptive_field(ctx));
  return field;
}

Shape StreamingTrunk::output_shape(const Shape& image, const ForwardContext& ctx) const {
  const PlanContext plan_ctx{ctx, KernelMemoryModel::for_backend(ctx.backend)};
  Shape shape = image;
  for (const Layer* layer : layers_) shape = layer->describe(shape, plan_ctx).output;
  return shape;
}

StreamPlan StreamingTrunk::plan(const Shape& image, std::int64_t tile, const ForwardContext& ctx) const {
  const ReceptiveField field = receptive_field(ctx);
  return make_stream_plan(field, image, output_shape(image, ctx), tile);
}

Tensor StreamingTrunk::run_tile(RegionReader& image, const StreamTile& tile, const StreamPlan& plan,
                                const ForwardContext& ctx) {
  Tensor h = image.read(tile.input);
  const Device device = backend_device(ctx.backend);
  if (h.device() != device) h = h.to(device);
  for (const FusedStep& step : fused_steps(layers_, ctx)) h = forward_step(layers_, step, h, ctx);
  BT_CHECK(h.rank() == 4 && h.dim(1) == plan.feature_map[1] && tile.output_y + tile.cells.height <= h.dim(2) &&
               tile.output_x + tile.cells.width <= h.dim(3),
           "streaming: the tile read from {}x{} at ({}, {}) gave output {}, which lacks its cells {}x{} at ({}, {})",
           tile.input.height, tile.input.width, tile.input.y, tile.input.x, h.describe(), tile.cells.height,
           tile.cells.width, tile.output_y, tile.output_x);
  return h;
}

namespace {

// Every tile shape leaves its own sizes of blocks in the allocator: without a release
// at each change of shape the process kept every shape's activations when the host
// cached exact sizes (5.7 GiB resident and growing for ResNet-50 on 2435x2435 at tile
// 512, whose step peaks at 1.5 GiB); segments split and merged reuse more, but a
// shape's leftover free segments are still returned here.
void release_cache_between_shapes(const StreamTile* previous, const StreamTile& next, Backend backend) {
  if (previous == nullptr ||
      (previous->input.height == next.input.height && previous->input.width == next.input.width))
    return;
  allocator_for(backend_device(backend)).release_cached();
}

// Within one tile's backward, memory would sit free beside what the step needs: the
// kept forward's temporaries (layout reorders, scratchpads) at the backward's start,
// where everything is kept; and, from the map's stride down to the image's, each
// finished stage's gradients and freed activations. Measured when the host cached
// exact sizes (ResNet-50 on a 918x918 tile, first step): reserved at most 1.96 GiB
// for 1.58 GiB of tensors without these releases, 1.69 GiB with them. The host now
// carves blocks from segments (kernels/core/host_allocator.hpp), which reuses more,
// yet returning the wholly free segments still holds the resident set down: on a
// 1400x1400 image, 1.99 GiB with them against 2.02 without, for 7% more time (the
// pages come back at 1 s/GiB in huge pages). The device allocator is left alone.
void release_host_cache(Device device) {
  if (device.is_cpu()) allocator_for(device).release_cached();
}

void release_cache_at_stage_change(const Shape& output, const Shape& input, Device device) {
  if (output != input) release_host_cache(device);
}

void check_plan(const StreamPlan& plan, RegionReader& image) {
  BT_CHECK(image.image_shape() == plan.image, "streaming: the plan is for an image {}, the reader has {}",
           shape_str(plan.image), shape_str(image.image_shape()));
}

}  // namespace

Tensor StreamingTrunk::forward(RegionReader& image, const StreamPlan& plan, const ForwardContext& ctx) {
  receptive_field(ctx);  // refuses a context the trunk cannot stream in
  check_plan(plan, image);
  ForwardContext pass = ctx;
  pass.keep_activations = false;
  Tensor map = Tensor::empty(plan.feature_map, DType::f32, backend_device(ctx.backend));
  const StreamTile* previous = nullptr;
  for (const StreamTile& tile : plan.tiles) {
    release_cache_between_shapes(previous, tile, ctx.backend);
    previous = &tile;
    const Tensor y = run_tile(image, tile, plan, pass);
    copy_window(y, {tile.output_y, tile.output_x, tile.cells.height, tile.cells.width}, map, tile.cells.y,
                tile.cells.x);
  }
  return map;
}

void StreamingTrunk::backward(RegionReader& image, const StreamPlan& plan, const Tensor& dmap,
                              const ForwardContext& ctx) {
  receptive_field(ctx);
  check_plan(plan, image);
  BT_CHECK(dmap.shape() == plan.feature_map, "streaming: the feature map's gradient is {}, the map is {}",
           dmap.describe(), shape_str(plan.feature_map));
  ForwardContext kept = ctx;
  kept.keep_activations = true;
  const Device device = backend_device(ctx.backend);
  const Tensor dmap_here = dmap.device() == device ? dmap : dmap.to(device);
  const StreamTile* previous = nullptr;
  for (const StreamTile& tile : plan.tiles) {
    release_cache_between_shapes(previous, tile, ctx.backend);
    previous = &tile;
    const Tensor y = run_tile(image, tile, plan, kept);
    release_host_cache(device);  // the forward's temporaries, beside everything kept at the backward's start
    Tensor d = Tensor::zeros(y.shape(), DType::f32, device);
    copy_window(dmap_here, tile.cells, d, tile.output_y, tile.output_x);
    const std::vector<FusedStep> steps = fused_steps(layers_, kept);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      BT_CHECK(d.defined(), "streaming: layer `{}` returned no input gradient inside the trunk",
               layers_[std::prev(it)->begin]->name());
      const Shape output = d.shape();
      d = backward_step(layers_, *it, d);
      if (d.defined()) release_cache_at_stage_change(output, d.shape(), device);
    }
  }
}

}  // namespace bigtrain::net
