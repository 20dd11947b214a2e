#pragma once
// The 10,000 cached MNIST digits (tests/data/mnist, made by scripts/fetch_mnist) and a
// small training loop over them, shared by the learning and determinism tests.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "kernels/core/tensor.hpp"

namespace bigtrain::testing {

struct MnistDigits {
  static constexpr std::int64_t kSide = 28;
  std::int64_t count = 0;
  std::vector<std::uint8_t> pixels;  // [count, 28, 28]
  std::vector<std::uint8_t> labels;  // [count]
};

inline std::filesystem::path mnist_cache_dir() {
  return std::filesystem::path(BIGTRAIN_SOURCE_DIR) / "tests" / "data" / "mnist";
}

// The whole decompressed content of a gzip file.
inline std::vector<std::uint8_t> read_gzip(const std::filesystem::path& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  BT_CHECK(file != nullptr, "{}: cannot open (run scripts/fetch_mnist --out {})", path.string(),
           path.parent_path().string());
  std::vector<std::uint8_t> data;
  std::vector<std::uint8_t> chunk(1 << 16);
  int n;
  while ((n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()))) > 0)
    data.insert(data.end(), chunk.begin(), chunk.begin() + n);
  int error = Z_OK;
  const std::string message = n < 0 ? gzerror(file, &error) : "";
  gzclose(file);
  BT_CHECK(n == 0, "{}: corrupt gzip data: {}", path.string(), message);
  return data;
}

inline std::uint32_t read_big_endian(const std::vector<std::uint8_t>& data, std::size_t offset) {
  return (std::uint32_t{data[offset]} << 24) | (std::uint32_t{data[offset + 1]} << 16) |
         (std::uint32_t{data[offset + 2]} << 8) | std::uint32_t{data[offset + 3]};
}

// Reads the IDX pair, checking magic numbers and sizes.
inline MnistDigits load_mnist(const std::filesystem::path& dir = mnist_cache_dir()) {
  const auto images_path = dir / "mnist-images-idx3-ubyte.gz";
  const auto labels_path = dir / "mnist-labels-idx1-ubyte.gz";
  const auto images = read_gzip(images_path);
  const auto labels = read_gzip(labels_path);
  BT_CHECK(images.size() >= 16 && read_big_endian(images, 0) == 0x803, "{}: not an IDX3 ubyte file",
           images_path.string());
  BT_CHECK(labels.size() >= 8 && read_big_endian(labels, 0) == 0x801, "{}: not an IDX1 ubyte file",
           labels_path.string());
  MnistDigits digits;
  digits.count = read_big_endian(images, 4);
  BT_CHECK(read_big_endian(images, 8) == 28 && read_big_endian(images, 12) == 28, "{}: images are not 28x28",
           images_path.string());
  BT_CHECK(read_big_endian(labels, 4) == digits.count, "{} holds {} labels for {} images", labels_path.string(),
           read_big_endian(labels, 4), digits.count);
  const std::size_t pixel_count = static_cast<std::size_t>(digits.count) * 28 * 28;
  BT_CHECK(images.size() == 16 + pixel_count, "{}: {} bytes, expected {}", images_path.string(), images.size(),
           16 + pixel_count);
  BT_CHECK(labels.size() == 8 + static_cast<std::size_t>(digits.count), "{}: truncated", labels_path.string());
  digits.pixels.assign(images.begin() + 16, images.end());
  digits.labels.assign(labels.begin() + 8, labels.end());
  for (std::uint8_t label : digits.labels) BT_CHECK(label < 10, "{}: label {} is not a digit", labels_path.string(), label);
  return digits;
}

// A batch [n, 1, 28, 28] of the digits at `indices`, scaled to [0, 1] and normalised
// with MNIST's usual mean/std, plus i32 labels [n].
inline std::pair<Tensor, Tensor> mnist_batch(const MnistDigits& digits, const std::vector<std::int64_t>& indices) {
  constexpr float kMean = 0.1307f, kStd = 0.3081f;
  const std::int64_t n = static_cast<std::int64_t>(indices.size());
  const std::int64_t area = MnistDigits::kSide * MnistDigits::kSide;
  Tensor images = Tensor::empty({n, 1, MnistDigits::kSide, MnistDigits::kSide});
  Tensor labels = Tensor::empty({n}, DType::i32);
  float* x = images.f32();
  std::int32_t* y = labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t* source = digits.pixels.data() + indices[i] * area;
    for (std::int64_t j = 0; j < area; ++j) x[i * area + j] = (source[j] / 255.0f - kMean) / kStd;
    y[i] = digits.labels[indices[i]];
  }
  return {images, labels};
}

}  // namespace bigtrain::testing
