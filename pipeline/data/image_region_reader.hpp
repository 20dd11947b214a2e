#pragma once
// tiler.mode stream's input: the streamed trunk (net/streaming.hpp) asks for regions
// of the whole image, each with its halo; they are read from the file through the
// tiler (only the storage blocks a region touches are decoded) at the configured
// level or downsample, and preprocessed as a tile is (channels, scale, normalisation;
// never augmented: a streaming tile is a piece of one input, not an instance).
#include <cstdint>
#include <memory>
#include <string>

#include "net/streaming.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/preprocess.hpp"
#include "tiler/image_source.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain {

class ImageRegionReader final : public net::RegionReader {
 public:
  // Opens `path` (header only). `max_value` > 0 (data.max_value) replaces the image's
  // own full scale. Throws Error naming the file when it cannot be opened, or the
  // tiler options when they do not fit it.
  ImageRegionReader(const std::string& path, const TilerConfig& tiler, Preprocessing preprocessing,
                    std::int64_t max_value = 0);

  // [1, channels, height, width] in grid pixels of the sampling.
  Shape image_shape() const override;
  // Host float32 [1, channels, region.height, region.width].
  Tensor read(const net::Window& region) override;

  const tiler::Sampling& sampling() const { return sampling_; }
  const std::shared_ptr<const tiler::ImageSource>& source() const { return source_; }
  int full_scale() const { return full_scale_; }
  std::int64_t pixels_read() const { return pixels_read_; }

 private:
  std::string path_;
  std::shared_ptr<const tiler::ImageSource> source_;
  tiler::Sampling sampling_;
  Preprocessing preprocessing_;
  int full_scale_ = 255;
  std::int64_t pixels_read_ = 0;
};

}  // namespace bigtrain
