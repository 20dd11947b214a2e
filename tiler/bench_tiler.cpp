// One measurement of reading every tile of an image, in its own process so the
// peak RSS belongs to it alone (scripts/bench_tiler runs many and compares):
//   bigtrain_bench_tiler lazy|naive|overlap IMAGE [--tile 256] [--threads N]
//                        [--stride S] [--passes P] [--cache-mb M]
// lazy:    open_image + read_tile per tile (decodes only the intersecting blocks);
// naive:   OpenCV decodes the whole image, then each tile is cropped (copied) out;
// overlap: training's access pattern: tiles every --stride pixels (overlapping when
//          smaller than --tile), the whole grid read --passes times (pass 1, pass 2),
//          through a decoded-block cache of --cache-mb MiB (0: no cache).
// Prints one JSON line: tiles, seconds, tiles_per_second, peak_rss_mb (and, for
// overlap, the blocks decoded).
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include "tiler/block_cache.hpp"
#include "tiler/image_source.hpp"
#include "tiler/tiff_source.hpp"
#include "tiler/tile_grid.hpp"
#include "tiler/tile_reader.hpp"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: bigtrain_bench_tiler lazy|naive|overlap IMAGE [--tile 256] [--threads N] [--stride S] "
               "[--passes P] [--cache-mb M]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace bigtrain::tiler;
  if (argc < 3) return usage();
  const std::string mode = argv[1], path = argv[2];
  int tile = 256, threads = 1, stride = 0, passes = 1, cache_mb = 32;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tile") == 0) tile = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--stride") == 0) stride = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--passes") == 0) passes = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--cache-mb") == 0) cache_mb = std::atoi(argv[i + 1]);
    else return usage();
  }
  if (stride <= 0) stride = tile;
  if ((mode != "lazy" && mode != "naive" && mode != "overlap") || tile <= 0 || threads <= 0 || stride > tile ||
      passes <= 0 || cache_mb < 0)
    return usage();
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  cv::setNumThreads(threads);
  std::atomic<uint64_t> checksum{0};
  size_t tiles = 0;
  long long decoded = -1;
  const auto start = std::chrono::steady_clock::now();
  try {
    if (mode == "overlap") {
      BlockCache cache(static_cast<size_t>(cache_mb) << 20);
      const TiffSource source(path, cache_mb > 0 ? &cache : nullptr);
      const Sampling sampling = sampling_at_level(source.info(), 0);
      const TileGrid grid(sampling.width, sampling.height, tile, tile - stride, BorderPolicy::shift);
      const size_t per_pass = grid.tiles().size();
      tiles = per_pass * static_cast<size_t>(passes);
      // Grid order within each pass, as the tile stream reads; passes one after another.
      for (int pass = 0; pass < passes; ++pass)
        tbb::parallel_for(size_t{0}, per_pass, [&](size_t i) {
          cv::Mat pixels = read_tile(source, sampling, grid.tiles()[i].rect);
          checksum += pixels.data[pixels.total() * pixels.elemSize() / 2];
        }, tbb::simple_partitioner());
      if (cache_mb > 0) decoded = cache.stats().misses;
    } else if (mode == "lazy") {
      auto source = open_image(path);
      const Sampling sampling = sampling_at_level(source->info(), 0);
      const TileGrid grid(sampling.width, sampling.height, tile, 0, BorderPolicy::pad);
      tiles = grid.tiles().size();
      tbb::parallel_for(size_t{0}, tiles, [&](size_t i) {
        cv::Mat pixels = read_tile(*source, sampling, grid.tiles()[i].rect);
        checksum += pixels.data[pixels.total() * pixels.elemSize() / 2];
      }, tbb::simple_partitioner());
    } else {
      const cv::Mat whole = cv::imread(path, cv::IMREAD_UNCHANGED);
      if (whole.empty()) {
        std::fprintf(stderr, "%s: OpenCV cannot decode it\n", path.c_str());
        return 1;
      }
      const TileGrid grid(whole.cols, whole.rows, tile, 0, BorderPolicy::pad);
      tiles = grid.tiles().size();
      tbb::parallel_for(size_t{0}, tiles, [&](size_t i) {
        // The same padded tile read_tile gives, cut from the decoded image.
        const cv::Rect rect = grid.tiles()[i].rect, inside = rect & cv::Rect(0, 0, whole.cols, whole.rows);
        cv::Mat pixels(rect.size(), whole.type(), cv::Scalar::all(0));
        whole(inside).copyTo(pixels(cv::Rect(inside.tl() - rect.tl(), inside.size())));
        checksum += pixels.data[pixels.total() * pixels.elemSize() / 2];
      }, tbb::simple_partitioner());
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("{\"mode\": \"%s\", \"threads\": %d, \"tiles\": %zu, \"seconds\": %.6f, \"tiles_per_second\": %.3f, "
              "\"peak_rss_mb\": %.1f, \"checksum\": %llu, \"blocks_decoded\": %lld}\n",
              mode.c_str(), threads, tiles, seconds, tiles / seconds, usage.ru_maxrss / 1024.0,
              static_cast<unsigned long long>(checksum.load()), decoded);
  return 0;
}
