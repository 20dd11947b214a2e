// `bigtrain make-image OUT.tif --size WxH`: streams a deterministic synthetic
// slide-like image to a TIFF, tile by tile, for demos, benchmarks and memory checks.
#include <regex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "tiler/synthetic_image.hpp"
#include "tiler/tiff_writer.hpp"

namespace bigtrain::cli {
namespace {

struct MakeImageArgs {
  std::string out, size = "2048x2048", compression = "deflate", pyramid = "subifd";
  int block = 256, strip = 0, bits = 8, channels = 3, levels = 1, quality = 90, deflate_level = 6;
  double tissue_cutoff = 0.5, background_grain = 6.0;
  bool bigtiff = false;
  uint64_t seed = 0;
};

RegisterCommand make_image("make-image", [](CLI::App& app) {
  app.description("Write a synthetic slide-like TIFF (tissue blobs on a bright background), streamed block by block");
  auto a = std::make_shared<MakeImageArgs>();
  app.add_option("OUT", a->out, "output .tif path")->required();
  app.add_option("--size", a->size, "WIDTHxHEIGHT")->capture_default_str();
  auto* block = app.add_option("--block,--tile", a->block, "side of the square storage blocks (TIFF tiles), a multiple of 16")
                     ->capture_default_str();
  app.add_option("--strip", a->strip, "write strips of this many rows instead of blocks")->excludes(block);
  app.add_option("--compression", a->compression, "none, lzw, deflate, packbits or jpeg")
      ->check(CLI::IsMember({"none", "lzw", "deflate", "packbits", "jpeg"}))
      ->capture_default_str();
  app.add_option("--quality", a->quality, "JPEG quality")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--deflate-level", a->deflate_level, "Deflate effort, 1 (fast) .. 9 (small)")
      ->check(CLI::Range(1, 9))
      ->capture_default_str();
  app.add_option("--tissue-cutoff", a->tissue_cutoff,
                 "where tissue starts on the blob field: 0.5 covers about half the slide, higher less")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--background-grain", a->background_grain,
                 "per-pixel noise of the background (8-bit levels); 0: a flat field, whose tiles are encoded once")
      ->check(CLI::Range(0.0, 40.0))
      ->capture_default_str();
  app.add_option("--bits", a->bits, "8 or 16")->check(CLI::IsMember({8, 16}))->capture_default_str();
  app.add_option("--channels", a->channels, "1 (grey) or 3 (RGB)")->check(CLI::IsMember({1, 3}))->capture_default_str();
  app.add_flag("--bigtiff", a->bigtiff, "write BigTIFF (64-bit offsets)");
  app.add_option("--levels", a->levels, "pyramid levels, each half the previous")->check(CLI::Range(1, 16))->capture_default_str();
  app.add_option("--pyramid", a->pyramid, "store levels as subifd or ifd")->check(CLI::IsMember({"subifd", "ifd"}))->capture_default_str();
  app.add_option("--seed", a->seed, "texture seed (same seed, same pixels)")->capture_default_str();
  return std::function<int()>([a] {
    std::smatch match;
    const std::regex pattern(R"((\d+)[xX](\d+))");
    if (!std::regex_match(a->size, match, pattern)) throw Error(fmt::format("--size must be WIDTHxHEIGHT, got '{}'", a->size));
    tiler::TiffWriteOptions o;
    o.width = std::stoll(match[1]);
    o.height = std::stoll(match[2]);
    o.channels = a->channels;
    o.bits = a->bits;
    o.tiled = a->strip == 0;
    o.block_size = a->block;
    o.rows_per_strip = a->strip;
    o.compression = *tiler::parse_tiff_compression(a->compression);
    o.jpeg_quality = a->quality;
    o.deflate_level = a->deflate_level;
    o.bigtiff = a->bigtiff;
    o.levels = a->levels;
    o.levels_as_subifds = a->pyramid == "subifd";
    tiler::SyntheticImage image{o.width, o.height, o.channels, o.bits, a->seed};
    image.tissue_cutoff = a->tissue_cutoff;
    image.background_grain = a->background_grain;
    tiler::write_tiff(a->out, o, [&](int level, const cv::Rect& rect, cv::Mat& pixels) {
      tiler::render_synthetic(image, level, rect, pixels);
    });
    spdlog::info("wrote {} ({}x{}, {} channel(s), {}-bit, {}, {}, {} level(s))", a->out, o.width, o.height, o.channels,
                 o.bits, o.tiled ? fmt::format("blocks {}", o.block_size) : fmt::format("strips of {} rows", o.rows_per_strip),
                 a->compression, o.levels);
    return 0;
  });
});

}  // namespace
}  // namespace bigtrain::cli
