// `bigtrain info IMAGE`: what the header of an image says (reads the header only).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pipeline/cli/command_registry.hpp"
#include "tiler/image_source.hpp"

namespace bigtrain::cli {
namespace {

nlohmann::json describe(const tiler::ImageInfo& info) {
  nlohmann::json levels = nlohmann::json::array();
  for (const tiler::LevelInfo& L : info.levels) {
    nlohmann::json level = {{"width", L.width},   {"height", L.height},           {"downsample", L.downsample},
                            {"layout", tiler::layout_name(L.layout)},         {"compression", L.compression}};
    if (L.layout == tiler::Layout::tiled) {
      level["tile_width"] = L.block_width;
      level["tile_height"] = L.block_height;
    } else if (L.layout == tiler::Layout::striped) {
      level["rows_per_strip"] = L.block_height;
    }
    levels.push_back(level);
  }
  return {{"path", info.path},         {"format", info.format},           {"width", info.width()},
          {"height", info.height()},   {"channels", info.channels},       {"bits", info.bits},
          {"max_value", info.max_value}, {"max_value_from", info.max_value_from}, {"full_scale", info.full_scale()},
          {"photometric", info.photometric}, {"planar_separate", info.planar_separate}, {"levels", levels}};
}

RegisterCommand info_command("info", [](CLI::App& app) {
  app.description("Print an image's header: size, channels, bits, compression, layout and pyramid levels");
  auto image = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  app.add_option("IMAGE", *image, "TIFF/BigTIFF, PNG, JPEG or BMP")->required();
  app.add_flag("--json", *json, "print one JSON object");
  return std::function<int()>([image, json] {
    auto source = tiler::open_image(*image);
    const tiler::ImageInfo& info = source->info();
    if (*json) {
      fmt::print("{}\n", describe(info).dump());
      return 0;
    }
    fmt::print("{}\n", info.path);
    fmt::print("  format:   {}\n", info.format);
    fmt::print("  size:     {} x {}\n", info.width(), info.height());
    fmt::print("  pixels:   {} channel(s), {}-bit, {}{}\n", info.channels, info.bits, info.photometric,
               info.planar_separate ? ", separate planes" : "");
    // The scale every pixel is divided by (thumbnail and network alike).
    if (info.max_value > 0)
      fmt::print("  scale:    full brightness at {} ({}; {}-bit storage)\n", info.full_scale(), info.max_value_from,
                 info.bits);
    else
      fmt::print("  scale:    full brightness at {} (the {}-bit storage's maximum; set data.max_value if the data "
                 "use fewer bits)\n",
                 info.full_scale(), info.bits);
    for (size_t i = 0; i < info.levels.size(); ++i) {
      const tiler::LevelInfo& L = info.levels[i];
      const std::string layout = L.layout == tiler::Layout::tiled     ? fmt::format("tiled {}x{}", L.block_width, L.block_height)
                                 : L.layout == tiler::Layout::striped ? fmt::format("striped, {} rows per strip", L.block_height)
                                                                      : std::string("decoded whole");
      fmt::print("  level {}:  {} x {} (downsample {:.4g}), {}, {}\n", i, L.width, L.height, L.downsample, layout, L.compression);
    }
    return 0;
  });
});

}  // namespace
}  // namespace bigtrain::cli
