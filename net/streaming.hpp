#pragma once
// StreamingCNN (Pinckaers, Bulten, van der Laak, Litjens, IEEE TPAMI 2020): the
// convolutional trunk of an encoder computed over a whole image one tile at a time,
// with the feature map and every parameter gradient those of the untiled network.
//
// Geometry. Each trunk layer tells its receptive field (Layer::receptive_field):
// output o reads input [S*o - before, S*o + after] per axis, S the cumulative
// stride. The feature map is cut into tiles of tile/S cells a side; a tile's input
// is the receptive field of its own cells, clipped at the image's true border, its
// origin rounded down to a multiple of S, so every layer of the tile sees the
// whole image's grid (a layer of stride s meets a tile origin that is a multiple
// of s) and pads only where the tile touches the image's border.
//
// Why the forward is exact: an output position is computed from the same inputs as
// in the whole image when its receptive field lies inside the tile's input (or
// beyond the image's border on a side where the tile reaches it). The receptive
// field of a position inside a cell's field lies inside the cell's field, so every
// position any own cell depends on, at every layer, is computed exactly; positions
// near the tile's cut edges are not, and are never read for the own cells.
//
// Why the gradients are exact (a simpler scheme than the paper's per-layer crop,
// same result): the whole-image backward is linear in dL/dmap, so its parameter
// gradients are the sum over tiles of the backward of dL/dmap restricted to the
// tile's own cells. Each tile recomputes its forward keeping activations and
// backpropagates exactly that restriction (zero elsewhere in the tile's output).
// That gradient is nonzero, at every layer, only on positions the own cells depend
// on, all computed exactly (above); each parameter gradient term is a product of
// such a gradient and an exact activation (or the zero padding at the true border),
// and a term with a zero gradient adds nothing, so the tile's backward adds
// exactly the whole image's terms for its cells, and the tiles partition the map:
// every term is counted once. Only the summation order differs (rounding).
//
// BatchNorm must use running statistics (frozen or not training) and dropout must
// be off: batch statistics and per-element masks are not local. A layer whose
// output depends on the whole map is refused naming the layer.
#include <cstdint>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "net/forward_context.hpp"
#include "net/layer.hpp"
#include "net/receptive_field.hpp"
#include "net/tensor_window.hpp"

namespace bigtrain::net {

class Encoder;

// Where the streamed trunk reads its input: the tiler's region reads, or a whole
// image in memory (TensorRegionReader).
class RegionReader {
 public:
  virtual ~RegionReader() = default;
  // [N, C, H, W] of the whole image batch.
  virtual Shape image_shape() const = 0;
  // The pixels of `region` (inside the image) of every image, [N, C, height, width],
  // on any device.
  virtual Tensor read(const Window& region) = 0;
};

class TensorRegionReader final : public RegionReader {
 public:
  explicit TensorRegionReader(Tensor image);
  Shape image_shape() const override { return image_.shape(); }
  Tensor read(const Window& region) override;

 private:
  Tensor image_;
};

struct StreamTile {
  Window input;  // image pixels read: the own cells' receptive field, clipped and aligned
  Window cells;  // the feature map cells this tile writes
  // Where `cells` begin in the tile's own output.
  std::int64_t output_y = 0, output_x = 0;
};

struct StreamPlan {
  ReceptiveField field;  // of the whole trunk
  Shape image;           // [N, C, H, W]
  Shape feature_map;     // [N, C', H', W']
  std::int64_t tile = 0; // pixels per tile side, a multiple of the trunk's stride
  std::vector<StreamTile> tiles;

  // Pixels the tiles read (each read once per forward), over the image's pixels:
  // 1 + the halo's recomputation.
  double halo_overhead() const;
  // The largest tile input, [N, C, h, w]: what bounds one tile's activations.
  Shape largest_input() const;
};

// The tiles for `field` over an image whose trunk output is `feature_map`. The tile
// size is rounded down to a multiple of the stride (at least one stride). Exposed
// with the field as an argument so a test can shorten the halo and see it fail.
StreamPlan make_stream_plan(const ReceptiveField& field, const Shape& image, const Shape& feature_map,
                            std::int64_t tile);

// The layers from image to feature map, run in order.
class StreamingTrunk {
 public:
  explicit StreamingTrunk(std::vector<Layer*> layers);
  // An encoder's layers up to, not including, its global average pooling.
  explicit StreamingTrunk(Encoder& encoder);

  // The trunk's receptive field as `ctx` runs it; throws bigtrain::Error naming the
  // first layer that cannot be streamed (BatchNorm with batch statistics, training
  // dropout, global pooling, a linear layer).
  ReceptiveField receptive_field(const ForwardContext& ctx) const;
  // The whole-image output shape for an input shape [N, C, H, W].
  Shape output_shape(const Shape& image, const ForwardContext& ctx) const;
  StreamPlan plan(const Shape& image, std::int64_t tile, const ForwardContext& ctx) const;

  // The feature map of the whole image, one tile at a time (nothing kept).
  Tensor forward(RegionReader& image, const StreamPlan& plan, const ForwardContext& ctx);
  // Adds every trunk parameter's gradient for dL/d(feature map) `dmap`: each tile's
  // forward recomputed with activations kept and its own cells' gradient
  // backpropagated (see the file comment).
  void backward(RegionReader& image, const StreamPlan& plan, const Tensor& dmap, const ForwardContext& ctx);

  const std::vector<Layer*>& layers() const { return layers_; }

 private:
  Tensor run_tile(RegionReader& image, const StreamTile& tile, const StreamPlan& plan, const ForwardContext& ctx);

  std::vector<Layer*> layers_;
};

}  // namespace bigtrain::net
