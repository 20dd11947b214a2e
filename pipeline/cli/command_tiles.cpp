// `bigtrain tiles IMAGE --tile T --overlap O`: lays a tile grid over an image, drops
// background tiles, and optionally draws a preview, dumps the kept tiles as
// lossless PNGs, or reads them all (to measure speed and memory).
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <opencv2/imgproc.hpp>
#include <spdlog/spdlog.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include "kernels/core/error.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "tiler/background.hpp"
#include "tiler/image_source.hpp"
#include "tiler/image_writer.hpp"
#include "tiler/tile_grid.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain::cli {
namespace {

struct TilesArgs {
  std::string image, border = "pad", preview, dump, foreground = "dark", background;
  int tile = 256, overlap = 0, level = 0, thumbnail = 1024, threads = 0, max_value = 0;
  double downsample = 0, min_foreground = 0, pad_value = 0;
  std::optional<int> threshold;
  bool read = false, json = false;
};

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

void draw_preview(const std::string& path, const tiler::Thumbnail& thumb, const tiler::Sampling& sampling,
                  const tiler::TileGrid& grid, const std::vector<char>& kept) {
  cv::Mat canvas = thumb.pixels.channels() == 3 ? thumb.pixels.clone() : cv::Mat();
  if (canvas.empty()) cv::cvtColor(thumb.pixels, canvas, cv::COLOR_GRAY2RGB);
  // Room for the padded border tiles, drawn over a grey margin.
  const double sx = static_cast<double>(thumb.pixels.cols) / sampling.width, sy = static_cast<double>(thumb.pixels.rows) / sampling.height;
  int right = 0, bottom = 0;
  for (const tiler::Tile& t : grid.tiles()) {
    right = std::max(right, static_cast<int>(std::ceil(t.rect.br().x * sx)) - canvas.cols);
    bottom = std::max(bottom, static_cast<int>(std::ceil(t.rect.br().y * sy)) - canvas.rows);
  }
  cv::copyMakeBorder(canvas, canvas, 0, std::max(bottom, 0) + 1, 0, std::max(right, 0) + 1, cv::BORDER_CONSTANT, cv::Scalar(128, 128, 128));
  cv::Mat shade = canvas.clone();
  for (size_t i = 0; i < grid.tiles().size(); ++i) {
    const cv::Rect& r = grid.tiles()[i].rect;
    const cv::Rect scaled(cv::Point(static_cast<int>(r.x * sx), static_cast<int>(r.y * sy)),
                          cv::Point(static_cast<int>(std::ceil(r.br().x * sx)) - 1, static_cast<int>(std::ceil(r.br().y * sy)) - 1));
    if (!kept[i]) cv::rectangle(shade, scaled, cv::Scalar(220, 40, 40), cv::FILLED);  // dropped: red wash
  }
  cv::addWeighted(canvas, 0.55, shade, 0.45, 0, canvas);
  // Kept outlines last, so overlapping dropped neighbours do not hide them.
  for (size_t n = 0; n < 2 * grid.tiles().size(); ++n) {
    const size_t i = n % grid.tiles().size();
    if (static_cast<bool>(kept[i]) != (n >= grid.tiles().size())) continue;
    const cv::Rect& r = grid.tiles()[i].rect;
    const cv::Rect scaled(cv::Point(static_cast<int>(r.x * sx), static_cast<int>(r.y * sy)),
                          cv::Point(static_cast<int>(std::ceil(r.br().x * sx)) - 1, static_cast<int>(std::ceil(r.br().y * sy)) - 1));
    cv::rectangle(canvas, scaled, kept[i] ? cv::Scalar(20, 160, 20) : cv::Scalar(200, 0, 0), 1);
  }
  tiler::write_image_file(path, canvas);
}

RegisterCommand tiles_command("tiles", [](CLI::App& app) {
  app.description("Lay a tile grid over an image, drop background tiles; preview, dump or read the kept tiles");
  auto a = std::make_shared<TilesArgs>();
  app.add_option("IMAGE", a->image, "TIFF/BigTIFF, PNG, JPEG or BMP")->required();
  app.add_option("--tile", a->tile, "tile size in pixels")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--overlap", a->overlap, "overlap between neighbouring tiles (< tile)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--border", a->border, "edge tiles: pad, shift or drop")->check(CLI::IsMember({"pad", "shift", "drop"}))->capture_default_str();
  auto* level = app.add_option("--level", a->level, "read this pyramid level as stored")->check(CLI::NonNegativeNumber);
  app.add_option("--downsample", a->downsample, "read at this factor (>= 1) from the nearest finer level, area-resampled")->excludes(level);
  app.add_option("--min-foreground", a->min_foreground, "drop tiles with a smaller foreground fraction (0 keeps all)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--background", a->background,
                 "how foreground is found (tiler.background): otsu, fixed (needs --threshold), local_contrast "
                 "(objects on uneven or textured background) or none; default otsu, fixed with --threshold")
      ->check(CLI::IsMember({"otsu", "fixed", "local_contrast", "none"}));
  app.add_option("--threshold", a->threshold,
                 "fixed: grey level 0..255; local_contrast: least departure from the local background (default: "
                 "from the noise)")
      ->check(CLI::Range(0, 255));
  app.add_option("--max-value", a->max_value,
                 "pixel value of full brightness for the thumbnail (data.max_value; 0: the image's own)")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--foreground", a->foreground, "dark (tissue on a bright slide) or bright")->check(CLI::IsMember({"dark", "bright"}))->capture_default_str();
  app.add_option("--thumbnail-size", a->thumbnail, "longest side of the thumbnail for background and preview")->check(CLI::Range(16, 16384))->capture_default_str();
  app.add_option("--pad-value", a->pad_value, "value of padded pixels (border pad)")->capture_default_str();
  app.add_option("--preview", a->preview, "write a thumbnail with the grid drawn (kept green, dropped red)");
  app.add_option("--dump", a->dump, "write every kept tile as a lossless PNG r{row}_c{col}_x{x}_y{y}.png");
  app.add_flag("--read", a->read, "read every kept tile (discarding it) and report tiles per second");
  app.add_option("--threads", a->threads, "reading threads for --dump/--read (0 = all cores)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--json", a->json, "print one JSON object");
  return std::function<int()>([a] {
    std::optional<tbb::global_control> limit;
    if (a->threads > 0) limit.emplace(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(a->threads));
    const tiler::BorderPolicy border = *tiler::parse_border_policy(a->border);
    auto source = tiler::open_image(a->image);
    const tiler::ImageInfo& info = source->info();
    const tiler::Sampling sampling = a->downsample > 0 ? tiler::sampling_at_downsample(info, a->downsample)
                                                       : tiler::sampling_at_level(info, a->level);
    if (a->overlap >= a->tile) throw Error(fmt::format("--overlap {} must be smaller than --tile {}", a->overlap, a->tile));
    const tiler::TileGrid grid(sampling.width, sampling.height, a->tile, a->overlap, border);

    std::optional<tiler::Thumbnail> thumb;
    std::optional<tiler::ForegroundMask> mask;
    if (a->min_foreground > 0 || !a->preview.empty()) thumb = tiler::make_thumbnail(*source, a->thumbnail, a->max_value);
    std::vector<char> kept(grid.tiles().size(), 1);
    if (a->min_foreground > 0) {
      tiler::ForegroundOptions options;
      const std::string mode = !a->background.empty() ? a->background : a->threshold ? "fixed" : "otsu";
      options.mode = *tiler::parse_background_mode(mode);
      if (options.mode == tiler::BackgroundMode::fixed && !a->threshold)
        throw Error("--background fixed needs --threshold (a grey level 0..255)");
      options.threshold = a->threshold;
      options.dark_foreground = a->foreground == "dark";
      mask = tiler::foreground_mask(*thumb, options);
      if (mask->uniform) spdlog::warn("{}: the thumbnail is one flat grey; keeping every tile", info.path);
      for (size_t i = 0; i < kept.size(); ++i)
        kept[i] = tiler::foreground_fraction(*mask, sampling, grid.tiles()[i].rect) >= a->min_foreground;
    }
    std::vector<size_t> kept_indices;
    for (size_t i = 0; i < kept.size(); ++i)
      if (kept[i]) kept_indices.push_back(i);
    const size_t dropped_background = kept.size() - kept_indices.size();

    if (!a->preview.empty()) draw_preview(a->preview, *thumb, sampling, grid, kept);

    double seconds = 0;
    if (!a->dump.empty() || a->read) {
      if (!a->dump.empty()) std::filesystem::create_directories(a->dump);
      std::atomic<int64_t> checksum{0};
      const auto start = std::chrono::steady_clock::now();
      tbb::parallel_for(size_t{0}, kept_indices.size(), [&](size_t k) {
        const tiler::Tile& t = grid.tiles()[kept_indices[k]];
        cv::Mat pixels = tiler::read_tile(*source, sampling, t.rect, a->pad_value);
        if (!a->dump.empty())
          tiler::write_image_file((std::filesystem::path(a->dump) / fmt::format("r{}_c{}_x{}_y{}.png", t.row, t.col, t.rect.x, t.rect.y)).string(), pixels);
        else
          checksum += pixels.ptr<uint8_t>(0)[0];  // keeps the read from being optimised away
      }, tbb::simple_partitioner());
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }

    nlohmann::json out = {{"image", info.path},
                          {"level", sampling.level},
                          {"downsample", sampling.downsample},
                          {"width", sampling.width},
                          {"height", sampling.height},
                          {"tile", a->tile},
                          {"overlap", a->overlap},
                          {"border", a->border},
                          {"rows", grid.rows()},
                          {"cols", grid.cols()},
                          {"tiles", grid.tiles().size()},
                          {"kept", kept_indices.size()},
                          {"dropped_background", dropped_background},
                          {"dropped_border", grid.dropped_at_border()},
                          {"min_foreground", a->min_foreground},
                          {"background", mask ? nlohmann::json(tiler::background_mode_name(mask->mode)) : nlohmann::json(nullptr)},
                          {"threshold", mask ? nlohmann::json(mask->threshold) : nlohmann::json(nullptr)},
                          {"full_scale", a->max_value > 0 ? a->max_value : info.full_scale()},
                          {"peak_rss_mb", peak_rss_mb()}};
    if (!a->dump.empty() || a->read) {
      out["read_seconds"] = seconds;
      out["tiles_per_second"] = seconds > 0 ? kept_indices.size() / seconds : 0.0;
    }
    if (a->json) {
      fmt::print("{}\n", out.dump());
      return 0;
    }
    fmt::print("{}: {}x{} at level {} (downsample {:.4g}); tile {}, overlap {}, border {}\n", info.path, sampling.width,
               sampling.height, sampling.level, sampling.downsample, a->tile, a->overlap, a->border);
    fmt::print("tiles: {} ({} rows x {} cols); kept {}, dropped {} as background", grid.tiles().size(), grid.rows(),
               grid.cols(), kept_indices.size(), dropped_background);
    if (mask && mask->mode == tiler::BackgroundMode::local_contrast)
      fmt::print(" (background local_contrast, least departure {} grey levels, min foreground {})", mask->threshold,
                 a->min_foreground);
    else if (mask)
      fmt::print(" (background {}, grey threshold {}, min foreground {})", tiler::background_mode_name(mask->mode),
                 mask->threshold, a->min_foreground);
    if (border == tiler::BorderPolicy::drop) fmt::print(", {} partial tiles dropped at the border", grid.dropped_at_border());
    fmt::print("\n");
    if (!a->preview.empty()) fmt::print("preview: {}\n", a->preview);
    if (!a->dump.empty()) fmt::print("dumped {} tiles to {} in {:.2f} s\n", kept_indices.size(), a->dump, seconds);
    if (a->read) fmt::print("read {} tiles in {:.2f} s ({:.0f} tiles/s), peak RSS {:.0f} MB\n", kept_indices.size(), seconds,
                            out["tiles_per_second"].get<double>(), peak_rss_mb());
    return 0;
  });
});

}  // namespace
}  // namespace bigtrain::cli
