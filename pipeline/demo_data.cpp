#include "pipeline/demo_data.hpp"

#include <zlib.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <oneapi/tbb/parallel_for.h>
#include <opencv2/imgproc.hpp>

#include "kernels/core/error.hpp"
#include "pipeline/atomic_file.hpp"
#include "pipeline/random.hpp"
#include "tiler/tiff_writer.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

std::vector<std::uint8_t> read_gzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw Error(fmt::format("{}: cannot open (run scripts/fetch_mnist to download MNIST)", path));
  std::vector<std::uint8_t> bytes;
  std::uint8_t buffer[1 << 16];
  for (;;) {
    const int got = gzread(file, buffer, sizeof buffer);
    if (got < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      throw Error(fmt::format("{}: not a readable gzip file: {}", path, message));
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), buffer, buffer + got);
  }
  gzclose(file);
  return bytes;
}

std::uint32_t big_endian(const std::vector<std::uint8_t>& bytes, std::size_t offset) {
  return (std::uint32_t{bytes[offset]} << 24) | (std::uint32_t{bytes[offset + 1]} << 16) |
         (std::uint32_t{bytes[offset + 2]} << 8) | bytes[offset + 3];
}

struct Placement {
  std::int64_t digit;  // index into MnistDigits
  int x, y;
};

struct Canvas {
  int label;
  std::vector<Placement> digits;
  std::vector<std::pair<cv::Point, cv::Point>> lines;
  std::vector<int> line_widths, line_values;
};

// Digits of one class in [begin, end) of the MNIST order.
std::vector<std::vector<std::int64_t>> digits_by_class(const MnistDigits& digits, std::int64_t begin, std::int64_t end) {
  std::vector<std::vector<std::int64_t>> by_class(10);
  for (std::int64_t i = begin; i < end; ++i) by_class.at(static_cast<std::size_t>(digits.labels[i])).push_back(i);
  return by_class;
}

Canvas plan_canvas(const DemoDataOptions& options, int label, const std::vector<std::vector<std::int64_t>>& pool,
                   std::uint64_t seed) {
  SplitMix64 rng(seed);
  Canvas canvas;
  canvas.label = label;
  std::vector<int> classes(static_cast<std::size_t>(options.label_digits), label);
  for (int k = 0; k < options.other_digits; ++k) {
    int other;
    do other = static_cast<int>(rng.below(10));
    while (other == label);
    classes.push_back(other);
  }
  const int span = static_cast<int>(options.size) - 28;
  for (int digit_class : classes) {
    const auto& candidates = pool.at(static_cast<std::size_t>(digit_class));
    BT_CHECK(!candidates.empty(), "make-demo-data: no MNIST digit of class {} in this split", digit_class);
    Placement placement{candidates[rng.below(candidates.size())], 0, 0};
    // Digits never overlap (a 4-pixel margin), so each stays readable; rejection
    // sampling is quick because 5 digits cover a tiny part of the canvas.
    for (int attempt = 0;; ++attempt) {
      placement.x = static_cast<int>(rng.below(static_cast<std::uint64_t>(span + 1)));
      placement.y = static_cast<int>(rng.below(static_cast<std::uint64_t>(span + 1)));
      const bool clear = std::none_of(canvas.digits.begin(), canvas.digits.end(), [&](const Placement& p) {
        return std::abs(p.x - placement.x) < 32 && std::abs(p.y - placement.y) < 32;
      });
      if (clear) break;
      BT_CHECK(attempt < 10000, "make-demo-data: a {}x{} canvas has no room for {} digits", options.size, options.size,
               classes.size());
    }
    canvas.digits.push_back(placement);
  }
  const int lines = options.clutter_lines >= 0
                        ? options.clutter_lines
                        : static_cast<int>(std::lround(50.0 * static_cast<double>(options.size * options.size) / (1500.0 * 1500.0)));
  for (int k = 0; k < lines; ++k) {
    const cv::Point a(static_cast<int>(rng.below(static_cast<std::uint64_t>(options.size))),
                      static_cast<int>(rng.below(static_cast<std::uint64_t>(options.size))));
    const double angle = rng.uniform(0.0, 6.283185307179586), length = rng.uniform(10.0, 40.0);
    const cv::Point b(a.x + static_cast<int>(std::lround(length * std::cos(angle))),
                      a.y + static_cast<int>(std::lround(length * std::sin(angle))));
    canvas.lines.emplace_back(a, b);
    canvas.line_widths.push_back(1 + static_cast<int>(rng.below(2)));
    canvas.line_values.push_back(128 + static_cast<int>(rng.below(128)));
  }
  return canvas;
}

cv::Mat render(const Canvas& canvas, const MnistDigits& digits, std::int64_t size) {
  cv::Mat pixels(static_cast<int>(size), static_cast<int>(size), CV_8UC1, cv::Scalar(0));
  for (std::size_t k = 0; k < canvas.lines.size(); ++k)
    cv::line(pixels, canvas.lines[k].first, canvas.lines[k].second, cv::Scalar(canvas.line_values[k]),
             canvas.line_widths[k], cv::LINE_8);
  for (const auto& placement : canvas.digits) {
    const cv::Mat digit(28, 28, CV_8UC1, const_cast<std::uint8_t*>(digits.image(placement.digit)));
    cv::Mat target = pixels(cv::Rect(placement.x, placement.y, 28, 28));
    cv::max(target, digit, target);
  }
  return pixels;
}

}  // namespace

MnistDigits load_mnist(const std::string& images_gz, const std::string& labels_gz) {
  const auto images = read_gzip(images_gz);
  const auto labels = read_gzip(labels_gz);
  if (images.size() < 16 || big_endian(images, 0) != 0x803)
    throw Error(fmt::format("{}: not an MNIST image file (IDX magic 0x803 expected)", images_gz));
  if (labels.size() < 8 || big_endian(labels, 0) != 0x801)
    throw Error(fmt::format("{}: not an MNIST label file (IDX magic 0x801 expected)", labels_gz));
  MnistDigits digits;
  digits.count = big_endian(images, 4);
  if (big_endian(images, 8) != 28 || big_endian(images, 12) != 28)
    throw Error(fmt::format("{}: digits must be 28x28", images_gz));
  if (images.size() != 16 + static_cast<std::size_t>(digits.count) * 784)
    throw Error(fmt::format("{}: holds {} bytes, {} digits need {}", images_gz, images.size(), digits.count,
                            16 + digits.count * 784));
  if (big_endian(labels, 4) != digits.count || labels.size() != 8 + static_cast<std::size_t>(digits.count))
    throw Error(fmt::format("{}: label count does not match the {} images of {}", labels_gz, digits.count, images_gz));
  digits.pixels.assign(images.begin() + 16, images.end());
  for (std::int64_t i = 0; i < digits.count; ++i) {
    const int label = labels[8 + static_cast<std::size_t>(i)];
    if (label > 9) throw Error(fmt::format("{}: label {} of digit {} is not 0..9", labels_gz, label, i));
    digits.labels.push_back(label);
  }
  return digits;
}

MnistDigits load_mnist_folder(const std::string& folder) {
  return load_mnist((fs::path(folder) / "mnist-images-idx3-ubyte.gz").string(),
                    (fs::path(folder) / "mnist-labels-idx1-ubyte.gz").string());
}

DemoDataSummary make_demo_data(const DemoDataOptions& options, const MnistDigits& digits) {
  BT_CHECK(!options.out.empty(), "make-demo-data: an output folder is required");
  BT_CHECK(options.size >= 64, "make-demo-data: canvases must be at least 64 pixels, got {}", options.size);
  BT_CHECK(options.classes.size() >= 2, "make-demo-data: at least two classes are needed");
  for (int c : options.classes) BT_CHECK(c >= 0 && c <= 9, "make-demo-data: class {} is not a digit 0..9", c);
  BT_CHECK(options.label_digits > options.other_digits,
           "make-demo-data: the label's {} digits must outnumber the {} others", options.label_digits,
           options.other_digits);
  const auto split_at = static_cast<std::int64_t>(static_cast<double>(digits.count) * options.train_digit_fraction);
  const auto train_pool = digits_by_class(digits, 0, split_at);
  const auto held_out_pool = digits_by_class(digits, split_at, digits.count);

  DemoDataSummary summary;
  const std::pair<const char*, std::int64_t> splits[] = {{"train", options.train}, {"val", options.val},
                                                         {"test", options.test}};
  for (std::size_t s = 0; s < 3; ++s) {
    const auto [name, count] = splits[s];
    if (count <= 0) continue;
    const fs::path folder = fs::path(options.out) / name;
    fs::create_directories(folder);
    const auto& pool = s == 0 ? train_pool : held_out_pool;
    std::vector<int> labels(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i)  // balanced: classes in turn
      labels[static_cast<std::size_t>(i)] = options.classes[static_cast<std::size_t>(i) % options.classes.size()];
    oneapi::tbb::parallel_for(std::int64_t{0}, count, [&](std::int64_t i) {
      const Canvas canvas = plan_canvas(options, labels[static_cast<std::size_t>(i)], pool,
                                        mix_seed(options.seed, s, static_cast<std::uint64_t>(i)));
      const cv::Mat pixels = render(canvas, digits, options.size);
      tiler::TiffWriteOptions write;
      write.width = write.height = options.size;
      write.channels = 1;
      write.tile_size = options.tile_size;
      tiler::write_tiff((folder / fmt::format("{:05d}.tif", i)).string(), write,
                        [&](int, const cv::Rect& rect, cv::Mat& out) {
                          // The last row/column of blocks pass the edge: copy what exists, zero the rest.
                          out.setTo(0);
                          const cv::Rect inside = rect & cv::Rect(0, 0, pixels.cols, pixels.rows);
                          pixels(inside).copyTo(out(cv::Rect(inside.tl() - rect.tl(), inside.size())));
                        });
    });
    std::string manifest = "path,label\n";
    for (std::int64_t i = 0; i < count; ++i)
      manifest += fmt::format("{}/{:05d}.tif,{}\n", name, i, labels[static_cast<std::size_t>(i)]);
    const std::string manifest_path = (fs::path(options.out) / fmt::format("{}.csv", name)).string();
    write_file_atomically(manifest_path, manifest);
    summary.manifests.push_back(manifest_path);
    summary.images += count;
  }
  return summary;
}

}  // namespace bigtrain
