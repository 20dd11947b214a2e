#include "pipeline/data/demo_data.hpp"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <oneapi/tbb/parallel_for.h>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "kernels/core/error.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/common/random.hpp"
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
  std::vector<std::int64_t> digits;  // indices into MnistDigits, left to right
  int value = 0;
  int x = 0, y = 0;
};

struct Fragment {
  std::int64_t digit;
  cv::Rect crop;  // of the 28 x 28 MNIST digit
  int x, y;       // on the canvas
};

struct Stroke {
  cv::Point center;
  cv::Size axes;
  double angle, start, end;
  int value;
};

struct Canvas {
  int label;
  std::vector<Placement> digits;  // the label's copies first, then the others
  std::vector<std::pair<cv::Point, cv::Point>> lines;
  std::vector<int> line_widths, line_values;
  std::vector<Stroke> strokes;
  std::vector<Fragment> fragments;
  std::uint64_t background_seed = 0;
};

int object_width(const DemoDataOptions& options) { return options.digit_size * options.number_digits; }

double fragment_scale(const DemoDataOptions& options) { return options.digit_size / 28.0; }

cv::Rect fragment_box(const DemoDataOptions& options, const Fragment& f) {
  const double scale = fragment_scale(options);
  return {f.x, f.y, static_cast<int>(std::lround(f.crop.width * scale)),
          static_cast<int>(std::lround(f.crop.height * scale))};
}

// Digits of one class in [begin, end) of the MNIST order.
std::vector<std::vector<std::int64_t>> digits_by_class(const MnistDigits& digits, std::int64_t begin, std::int64_t end) {
  std::vector<std::vector<std::int64_t>> by_class(10);
  for (std::int64_t i = begin; i < end; ++i) by_class.at(static_cast<std::size_t>(digits.labels[i])).push_back(i);
  return by_class;
}

// A free spot for a w x h box: clutter never covers an object (a margin of a
// quarter digit), so every object stays readable and the label stays true.
cv::Point free_spot(SplitMix64& rng, const DemoDataOptions& options, const Canvas& canvas, int w, int h) {
  const int margin = options.digit_size / 4;
  const int ow = object_width(options), oh = options.digit_size;
  for (int attempt = 0; attempt < 10000; ++attempt) {
    const int x = static_cast<int>(rng.below(static_cast<std::uint64_t>(std::max<std::int64_t>(1, options.size - w + 1))));
    const int y = static_cast<int>(rng.below(static_cast<std::uint64_t>(std::max<std::int64_t>(1, options.size - h + 1))));
    const cv::Rect box(x, y, w, h);
    const bool clear = std::none_of(canvas.digits.begin(), canvas.digits.end(), [&](const Placement& p) {
      return (box & cv::Rect(p.x - margin, p.y - margin, ow + 2 * margin, oh + 2 * margin)).area() > 0;
    });
    if (clear) return {x, y};
  }
  throw Error(fmt::format("make-demo-data: a {}x{} canvas has no room for clutter beside its objects", options.size,
                          options.size));
}

Canvas plan_canvas(const DemoDataOptions& options, const MnistDigits& mnist, int label,
                   const std::vector<std::vector<std::int64_t>>& pool, std::uint64_t seed) {
  SplitMix64 rng(seed);
  Canvas canvas;
  canvas.label = label;
  std::vector<int> values(static_cast<std::size_t>(options.label_digits), label);
  for (int k = 0; k < options.other_digits; ++k) {
    int other;
    // One digit: any other digit (the original demo's draws). Numbers: another class.
    if (options.number_digits == 1) {
      do other = static_cast<int>(rng.below(10));
      while (other == label);
    } else {
      do other = options.classes[rng.below(options.classes.size())];
      while (other == label);
    }
    values.push_back(other);
  }
  const int width = object_width(options), height = options.digit_size;
  for (int value : values) {
    Placement placement;
    placement.value = value;
    int remaining = value;
    std::vector<int> digit_classes(static_cast<std::size_t>(options.number_digits));
    for (int k = options.number_digits - 1; k >= 0; --k, remaining /= 10) digit_classes[static_cast<std::size_t>(k)] = remaining % 10;
    for (int digit_class : digit_classes) {
      const auto& candidates = pool.at(static_cast<std::size_t>(digit_class));
      BT_CHECK(!candidates.empty(), "make-demo-data: no MNIST digit of class {} in this split", digit_class);
      placement.digits.push_back(candidates[rng.below(candidates.size())]);
    }
    // Objects never overlap (a margin of a seventh of a digit, 4 pixels at 28), so
    // each stays readable; rejection sampling is quick because 5 objects cover a
    // tiny part of the canvas.
    const int margin = 4 * options.digit_size / 28;
    for (int attempt = 0;; ++attempt) {
      placement.x = static_cast<int>(rng.below(static_cast<std::uint64_t>(options.size - width + 1)));
      placement.y = static_cast<int>(rng.below(static_cast<std::uint64_t>(options.size - height + 1)));
      const bool clear = std::none_of(canvas.digits.begin(), canvas.digits.end(), [&](const Placement& p) {
        return std::abs(p.x - placement.x) < width + margin && std::abs(p.y - placement.y) < height + margin;
      });
      if (clear) break;
      BT_CHECK(attempt < 10000, "make-demo-data: a {}x{} canvas has no room for {} objects", options.size,
               options.size, values.size());
    }
    canvas.digits.push_back(std::move(placement));
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
  // Curved strokes: arcs of a digit's size and stroke width, so they look like
  // parts of digits (a 0's bow, a 2's hook) and survive any brightness threshold.
  for (int k = 0; k < options.strokes; ++k) {
    Stroke stroke;
    stroke.axes = cv::Size(static_cast<int>(options.digit_size * rng.uniform(0.2, 0.5)),
                           static_cast<int>(options.digit_size * rng.uniform(0.2, 0.5)));
    const int reach = std::max(stroke.axes.width, stroke.axes.height) + options.digit_size / 8;
    const cv::Point corner = free_spot(rng, options, canvas, 2 * reach, 2 * reach);
    stroke.center = corner + cv::Point(reach, reach);
    stroke.angle = rng.uniform(0.0, 360.0);
    stroke.start = rng.uniform(0.0, 360.0);
    stroke.end = stroke.start + rng.uniform(60.0, 200.0);
    stroke.value = 150 + static_cast<int>(rng.below(106));
    canvas.strokes.push_back(stroke);
  }
  // Fragments: up to a third of another MNIST digit's box, the size of a digit's
  // part, with ink (an empty corner would be no clutter).
  for (int k = 0; k < options.fragments; ++k) {
    Fragment fragment{};
    for (int attempt = 0;; ++attempt) {
      const auto& candidates = pool.at(rng.below(10));
      fragment.digit = candidates[rng.below(candidates.size())];
      const int w = 9 + static_cast<int>(rng.below(8)), h = 9 + static_cast<int>(rng.below(8));
      fragment.crop = cv::Rect(static_cast<int>(rng.below(static_cast<std::uint64_t>(28 - w + 1))),
                               static_cast<int>(rng.below(static_cast<std::uint64_t>(28 - h + 1))), w, h);
      const cv::Mat digit(28, 28, CV_8UC1, const_cast<std::uint8_t*>(mnist.image(fragment.digit)));
      if (cv::countNonZero(digit(fragment.crop) > 128) >= 12 || attempt >= 100) break;
    }
    const cv::Rect box = fragment_box(options, fragment);
    const cv::Point spot = free_spot(rng, options, canvas, box.width, box.height);
    fragment.x = spot.x;
    fragment.y = spot.y;
    canvas.fragments.push_back(fragment);
  }
  if (options.background != "black") canvas.background_seed = rng.next();
  return canvas;
}

cv::Mat scaled(const cv::Mat& digit, double scale) {
  if (scale == 1.0) return digit;
  cv::Mat out;
  cv::resize(digit, out, cv::Size(), scale, scale, cv::INTER_LINEAR);
  return out;
}

void max_into(cv::Mat& canvas, const cv::Mat& ink, int x, int y) {
  const cv::Rect box = cv::Rect(x, y, ink.cols, ink.rows) & cv::Rect(0, 0, canvas.cols, canvas.rows);
  cv::Mat target = canvas(box);
  cv::max(target, ink(cv::Rect(box.x - x, box.y - y, box.width, box.height)), target);
}

// Smooth noise in [-1, 1]: a seeded lattice every `cell` pixels, bicubic in between.
cv::Mat smooth_noise(SplitMix64& rng, int size, int cell) {
  const int points = size / cell + 3;
  cv::Mat lattice(points, points, CV_32F);
  for (int r = 0; r < points; ++r)
    for (int c = 0; c < points; ++c) lattice.at<float>(r, c) = static_cast<float>(rng.uniform(-1.0, 1.0));
  cv::Mat big;
  cv::resize(lattice, big, cv::Size(points * cell, points * cell), 0, 0, cv::INTER_CUBIC);
  return big(cv::Rect(cell, cell, size, size)).clone();
}

// The textured background (grey levels, float): an illumination gradient across the
// canvas in a random direction, two octaves of smooth texture and pixel noise. Its
// bright parts are brighter than digits drawn on its dark parts.
cv::Mat textured_background(std::uint64_t seed, int size, int digit_size) {
  SplitMix64 rng(seed);
  const double low = rng.uniform(15.0, 45.0), high = rng.uniform(150.0, 190.0), angle = rng.uniform(0.0, 6.283185307179586);
  const double dx = std::cos(angle), dy = std::sin(angle);
  const double reach = (std::abs(dx) + std::abs(dy)) * size;
  const double offset = (std::min(0.0, dx) + std::min(0.0, dy)) * size;
  cv::Mat background(size, size, CV_32F);
  for (int y = 0; y < size; ++y) {
    float* row = background.ptr<float>(y);
    for (int x = 0; x < size; ++x) row[x] = static_cast<float>(low + (high - low) * ((dx * x + dy * y - offset) / reach));
  }
  background += 25.0 * smooth_noise(rng, size, std::max(8, digit_size * 3));
  background += 10.0 * smooth_noise(rng, size, std::max(4, digit_size / 2));
  for (int y = 0; y < size; ++y) {
    float* row = background.ptr<float>(y);
    // Roughly Gaussian (a sum of three uniforms), sd ~5 grey levels.
    for (int x = 0; x < size; ++x)
      row[x] += static_cast<float>(5.0 * (rng.uniform() + rng.uniform() + rng.uniform() - 1.5) * 2.0);
  }
  return background;
}

cv::Mat render(const DemoDataOptions& options, const Canvas& canvas, const MnistDigits& digits) {
  const auto size = static_cast<int>(options.size);
  cv::Mat ink(size, size, CV_8UC1, cv::Scalar(0));
  for (std::size_t k = 0; k < canvas.lines.size(); ++k)
    cv::line(ink, canvas.lines[k].first, canvas.lines[k].second, cv::Scalar(canvas.line_values[k]),
             canvas.line_widths[k], cv::LINE_8);
  const int thickness = std::max(1, static_cast<int>(std::lround(options.digit_size / 11.0)));
  for (const Stroke& s : canvas.strokes)
    cv::ellipse(ink, s.center, s.axes, s.angle, s.start, s.end, cv::Scalar(s.value), thickness, cv::LINE_AA);
  const double scale = fragment_scale(options);
  for (const Fragment& f : canvas.fragments) {
    const cv::Mat digit(28, 28, CV_8UC1, const_cast<std::uint8_t*>(digits.image(f.digit)));
    const cv::Rect box = fragment_box(options, f);
    cv::Mat piece;
    cv::resize(digit(f.crop), piece, box.size(), 0, 0, cv::INTER_LINEAR);
    max_into(ink, piece, f.x, f.y);
  }
  for (const auto& placement : canvas.digits)
    for (std::size_t k = 0; k < placement.digits.size(); ++k) {
      const cv::Mat digit(28, 28, CV_8UC1, const_cast<std::uint8_t*>(digits.image(placement.digits[k])));
      max_into(ink, scaled(digit, scale), placement.x + static_cast<int>(k) * options.digit_size, placement.y);
    }
  if (options.background == "black") return ink;
  // Ink adds 35% of its level to the background: digits keep their contrast to
  // what surrounds them, while their absolute brightness follows the illumination
  // (a digit in the dark corner is darker than the bright corner's background).
  cv::Mat pixels = textured_background(canvas.background_seed, size, options.digit_size);
  cv::Mat ink_float;
  ink.convertTo(ink_float, CV_32F, 0.35);
  pixels += ink_float;
  cv::Mat out;
  pixels.convertTo(out, CV_8U);  // rounds and saturates
  return out;
}

std::string label_text(const DemoDataOptions& options, int value) {
  return options.number_digits == 1 ? std::to_string(value) : fmt::format("{:0{}d}", value, options.number_digits);
}

std::string objects_rows(const DemoDataOptions& options, const Canvas& canvas, const std::string& path) {
  std::string rows;
  for (std::size_t k = 0; k < canvas.digits.size(); ++k) {
    const Placement& p = canvas.digits[k];
    rows += fmt::format("{},{},{},{},{},{},{}\n", path, k < static_cast<std::size_t>(options.label_digits) ? "label" : "other",
                        label_text(options, p.value), p.x, p.y, object_width(options), options.digit_size);
  }
  for (const Fragment& f : canvas.fragments) {
    const cv::Rect box = fragment_box(options, f);
    rows += fmt::format("{},fragment,-1,{},{},{},{}\n", path, box.x, box.y, box.width, box.height);
  }
  return rows;
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
  BT_CHECK(options.number_digits == 1 || options.number_digits == 2,
           "make-demo-data: objects are numbers of 1 or 2 digits, got {}", options.number_digits);
  const int largest = options.number_digits == 1 ? 9 : 99;
  for (int c : options.classes)
    BT_CHECK(c >= 0 && c <= largest, "make-demo-data: class {} is not a number 0..{}", c, largest);
  // Only the object itself must fit: whether all of them find room is the placement's
  // question, which fails naming the canvas when they do not (the tests' 96-pixel
  // canvases hold their five 28-pixel digits).
  BT_CHECK(options.digit_size >= 8 && options.digit_size * options.number_digits < options.size,
           "make-demo-data: digits of {} pixels do not fit a {}-pixel canvas", options.digit_size, options.size);
  BT_CHECK(options.background == "black" || options.background == "textured",
           "make-demo-data: background '{}' is not black or textured", options.background);
  BT_CHECK(options.strokes >= 0 && options.fragments >= 0, "make-demo-data: clutter counts must not be negative");
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
    std::vector<std::string> objects(static_cast<std::size_t>(count));
    oneapi::tbb::parallel_for(std::int64_t{0}, count, [&](std::int64_t i) {
      const Canvas canvas = plan_canvas(options, digits, labels[static_cast<std::size_t>(i)], pool,
                                        mix_seed(options.seed, s, static_cast<std::uint64_t>(i)));
      objects[static_cast<std::size_t>(i)] = objects_rows(options, canvas, fmt::format("{}/{:05d}.tif", name, i));
      const cv::Mat pixels = render(options, canvas, digits);
      tiler::TiffWriteOptions write;
      write.width = write.height = options.size;
      write.channels = 1;
      write.block_size = options.block_size;
      // No horizontal differencing: libtiff undoes it one byte after another (a
      // serial sum), which took 17% of the demo's training CPU time; on these
      // canvases it saves no space worth that.
      write.predictor = false;
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
      manifest += fmt::format("{}/{:05d}.tif,{}\n", name, i, label_text(options, labels[static_cast<std::size_t>(i)]));
    std::string objects_csv = "path,role,value,x,y,width,height\n";
    for (const auto& rows : objects) objects_csv += rows;
    write_file_atomically((fs::path(options.out) / fmt::format("{}.objects.csv", name)).string(), objects_csv);
    const std::string manifest_path = (fs::path(options.out) / fmt::format("{}.csv", name)).string();
    write_file_atomically(manifest_path, manifest);
    summary.manifests.push_back(manifest_path);
    summary.images += count;
  }
  return summary;
}

std::vector<std::pair<std::string, std::vector<DemoObject>>> read_demo_objects(const std::string& objects_csv) {
  std::ifstream in(objects_csv);
  if (!in) throw Error(fmt::format("{}: cannot open", objects_csv));
  std::vector<std::pair<std::string, std::vector<DemoObject>>> images;
  std::string line;
  std::getline(in, line);
  if (line != "path,role,value,x,y,width,height")
    throw Error(fmt::format("{}:1: expected the header path,role,value,x,y,width,height, got '{}'", objects_csv, line));
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::stringstream stream(line);
    for (std::string field; std::getline(stream, field, ',');) fields.push_back(field);
    DemoObject object;
    try {
      BT_CHECK(fields.size() == 7, "7 fields expected, got {}", fields.size());
      object.role = fields[1];
      BT_CHECK(object.role == "label" || object.role == "other" || object.role == "fragment",
               "role '{}' is not label, other or fragment", object.role);
      object.value = std::stoi(fields[2]);
      object.x = std::stoi(fields[3]);
      object.y = std::stoi(fields[4]);
      object.width = std::stoi(fields[5]);
      object.height = std::stoi(fields[6]);
      BT_CHECK(object.width > 0 && object.height > 0, "the box {}x{} is empty", object.width, object.height);
    } catch (const std::exception& error) {
      throw Error(fmt::format("{}:{}: {}", objects_csv, number, error.what()));
    }
    if (images.empty() || images.back().first != fields[0]) images.emplace_back(fields[0], std::vector<DemoObject>{});
    images.back().second.push_back(object);
  }
  return images;
}

}  // namespace bigtrain
