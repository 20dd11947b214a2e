#include "net/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"

namespace bigtrain::net {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors IO assumes a little-endian host");

struct DTypeInfo {
  StoredDType dtype;
  const char* name;
  std::size_t size;
};
constexpr std::array<DTypeInfo, 10> kDTypes{{{StoredDType::F64, "F64", 8},
                                             {StoredDType::F32, "F32", 4},
                                             {StoredDType::F16, "F16", 2},
                                             {StoredDType::BF16, "BF16", 2},
                                             {StoredDType::I64, "I64", 8},
                                             {StoredDType::I32, "I32", 4},
                                             {StoredDType::I16, "I16", 2},
                                             {StoredDType::I8, "I8", 1},
                                             {StoredDType::U8, "U8", 1},
                                             {StoredDType::BOOL, "BOOL", 1}}};

// The safetensors library refuses headers above 100 MB; so do we, before allocating.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  std::uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // inf / nan
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

StoredDType dtype_from_name(const std::string& name, const std::string& source, const std::string& tensor) {
  for (const auto& info : kDTypes)
    if (name == info.name) return info.dtype;
  throw Error(fmt::format("{}: tensor '{}' has unknown dtype '{}'", source, tensor, name));
}

StoredDType stored_from_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return StoredDType::F32;
    case DType::bf16: return StoredDType::BF16;
    case DType::f16: return StoredDType::F16;
    case DType::u8: return StoredDType::U8;
    case DType::i32: return StoredDType::I32;
  }
  throw Error("unsupported tensor dtype for safetensors");
}

template <typename T>
T load_unaligned(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

void write_all(int fd, const void* data, std::size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::write(fd, p, bytes);
    if (written < 0 && errno == EINTR) continue;
    // A user-facing message (disk full, file size limit), not a failed-check text.
    if (written <= 0)
      throw Error(fmt::format("{}: write failed: {}", path, written < 0 ? std::strerror(errno) : "no progress"));
    p += written;
    bytes -= static_cast<std::size_t>(written);
  }
}

}  // namespace

const char* stored_dtype_name(StoredDType dtype) {
  for (const auto& info : kDTypes)
    if (info.dtype == dtype) return info.name;
  return "?";
}

std::size_t stored_dtype_size(StoredDType dtype) {
  for (const auto& info : kDTypes)
    if (info.dtype == dtype) return info.size;
  return 0;
}

StoredTensor StoredTensor::from_tensor(const Tensor& tensor) {
  StoredTensor stored;
  stored.dtype = stored_from_dtype(tensor.dtype());
  stored.shape = tensor.shape();
  stored.bytes.resize(tensor.nbytes());
  Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
  if (!stored.bytes.empty()) std::memcpy(stored.bytes.data(), host.raw_data(), stored.bytes.size());
  return stored;
}

StoredTensor StoredTensor::from_int64(std::int64_t value) {
  StoredTensor stored;
  stored.dtype = StoredDType::I64;
  stored.bytes.resize(sizeof(value));
  std::memcpy(stored.bytes.data(), &value, sizeof(value));
  return stored;
}

Tensor StoredTensor::to_f32() const {
  Tensor tensor = Tensor::empty(shape);
  float* out = tensor.f32();
  const std::int64_t count = numel();
  const std::byte* in = bytes.data();
  switch (dtype) {
    case StoredDType::F32:
      if (count > 0) std::memcpy(out, in, static_cast<std::size_t>(count) * 4);
      break;
    case StoredDType::F64:
      for (std::int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(load_unaligned<double>(in + 8 * i));
      break;
    case StoredDType::F16:
      for (std::int64_t i = 0; i < count; ++i) out[i] = half_to_float(load_unaligned<std::uint16_t>(in + 2 * i));
      break;
    case StoredDType::BF16:
      for (std::int64_t i = 0; i < count; ++i)
        out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(load_unaligned<std::uint16_t>(in + 2 * i)) << 16);
      break;
    default:
      throw Error(fmt::format("a {} tensor cannot be read as floating point", stored_dtype_name(dtype)));
  }
  return tensor;
}

std::int64_t StoredTensor::to_int64() const {
  BT_CHECK(numel() == 1, "expected a single integer, got a tensor of shape {}", shape_str(shape));
  const std::byte* in = bytes.data();
  switch (dtype) {
    case StoredDType::I64: return load_unaligned<std::int64_t>(in);
    case StoredDType::I32: return load_unaligned<std::int32_t>(in);
    case StoredDType::I16: return load_unaligned<std::int16_t>(in);
    case StoredDType::I8: return load_unaligned<std::int8_t>(in);
    case StoredDType::U8: return load_unaligned<std::uint8_t>(in);
    default: throw Error(fmt::format("a {} tensor cannot be read as an integer", stored_dtype_name(dtype)));
  }
}

namespace {

// Where each tensor's bytes are, from a header checked against the data size.
struct Layout {
  std::uint64_t header_bytes = 0;
  SafetensorsFile file;  // tensors with dtype and shape; bytes not yet filled
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> ranges;  // [begin, end) in the data section
};

std::uint64_t header_length(std::span<const std::byte> first8, std::uint64_t file_size, const std::string& source) {
  BT_CHECK(file_size >= 8, "{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", source,
           file_size);
  const auto header_bytes = load_unaligned<std::uint64_t>(first8.data());
  BT_CHECK(header_bytes <= kMaxHeaderBytes && header_bytes <= file_size - 8,
           "{}: corrupt safetensors file: header length {} exceeds the file ({} bytes)", source, header_bytes,
           file_size);
  return header_bytes;
}

Layout parse_layout(std::string_view header_text, std::uint64_t header_bytes, std::uint64_t data_size,
                    const std::string& source) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text.begin(), header_text.end());
  } catch (const nlohmann::json::exception& error) {
    throw Error(fmt::format("{}: corrupt safetensors file: header is not valid JSON ({})", source, error.what()));
  }
  BT_CHECK(header.is_object(), "{}: corrupt safetensors file: header is not a JSON object", source);
  Layout layout;
  layout.header_bytes = header_bytes;
  SafetensorsFile& file = layout.file;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      BT_CHECK(entry.is_object(), "{}: __metadata__ must be an object of strings", source);
      for (const auto& [key, value] : entry.items()) {
        BT_CHECK(value.is_string(), "{}: metadata '{}' is not a string", source, key);
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    BT_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
             "{}: tensor '{}' needs dtype, shape and data_offsets", source, name);
    const auto& dtype = entry["dtype"];
    const auto& shape = entry["shape"];
    const auto& offsets = entry["data_offsets"];
    BT_CHECK(dtype.is_string(), "{}: tensor '{}': dtype is not a string", source, name);
    BT_CHECK(shape.is_array(), "{}: tensor '{}': shape is not an array", source, name);
    BT_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                 offsets[1].is_number_unsigned(),
             "{}: tensor '{}': data_offsets must be two non-negative integers", source, name);
    StoredTensor tensor;
    tensor.dtype = dtype_from_name(dtype.get<std::string>(), source, name);
    std::uint64_t count = 1;
    for (const auto& extent : shape) {
      BT_CHECK(extent.is_number_unsigned(), "{}: tensor '{}': shape has a non-integer or negative extent", source,
               name);
      const auto value = extent.get<std::uint64_t>();
      BT_CHECK(value == 0 || count <= data_size / value, "{}: tensor '{}': shape is larger than the file", source,
               name);
      count *= value;
      tensor.shape.push_back(static_cast<std::int64_t>(value));
    }
    const auto begin = offsets[0].get<std::uint64_t>();
    const auto end = offsets[1].get<std::uint64_t>();
    BT_CHECK(begin <= end && end <= data_size,
             "{}: corrupt safetensors file: tensor '{}' spans bytes [{}, {}) of a {}-byte data section (truncated?)",
             source, name, begin, end, data_size);
    const std::uint64_t expected = count * stored_dtype_size(tensor.dtype);
    BT_CHECK(end - begin == expected, "{}: tensor '{}': {} {} of shape {} needs {} bytes, data_offsets give {}",
             source, name, count, dtype.get<std::string>(), shape_str(tensor.shape), expected, end - begin);
    layout.ranges[name] = {begin, end};
    file.tensors.emplace(name, std::move(tensor));
  }
  return layout;
}

}  // namespace

SafetensorsFile parse_safetensors(std::span<const std::byte> contents, const std::string& source) {
  const std::uint64_t header_bytes = header_length(contents.first(std::min<std::size_t>(8, contents.size())),
                                                   contents.size(), source);
  const std::string_view header_text(reinterpret_cast<const char*>(contents.data() + 8), header_bytes);
  const std::span<const std::byte> data = contents.subspan(8 + header_bytes);
  Layout layout = parse_layout(header_text, header_bytes, data.size(), source);
  for (auto& [name, tensor] : layout.file.tensors) {
    const auto [begin, end] = layout.ranges.at(name);
    tensor.bytes.assign(data.begin() + static_cast<std::ptrdiff_t>(begin),
                        data.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return std::move(layout.file);
}

// Reads the header, then each tensor straight into its own buffer: the file is
// never held twice (a ResNet-101 checkpoint is 170 MB).
SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::ifstream stream(path, std::ios::binary);
  BT_CHECK(stream.good(), "{}: cannot open checkpoint: {}", source, std::strerror(errno));
  stream.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(stream.tellg());
  stream.seekg(0);
  std::array<std::byte, 8> first8{};
  if (size >= 8) stream.read(reinterpret_cast<char*>(first8.data()), 8);
  const std::uint64_t header_bytes = header_length(first8, size, source);
  std::string header_text(header_bytes, '\0');
  stream.read(header_text.data(), static_cast<std::streamsize>(header_bytes));
  BT_CHECK(stream.good(), "{}: read of the header failed", source);
  Layout layout = parse_layout(header_text, header_bytes, size - 8 - header_bytes, source);
  for (auto& [name, tensor] : layout.file.tensors) {
    const auto [begin, end] = layout.ranges.at(name);
    tensor.bytes.resize(end - begin);
    stream.seekg(static_cast<std::streamoff>(8 + header_bytes + begin));
    stream.read(reinterpret_cast<char*>(tensor.bytes.data()), static_cast<std::streamsize>(end - begin));
    BT_CHECK(stream.good() || end == begin, "{}: read of tensor '{}' failed", source, name);
  }
  return std::move(layout.file);
}

void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& file) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : file.tensors) {
    BT_CHECK(name != "__metadata__", "{}: '__metadata__' is reserved, not a tensor name", path.string());
    const std::uint64_t expected = static_cast<std::uint64_t>(tensor.numel()) * stored_dtype_size(tensor.dtype);
    BT_CHECK(tensor.bytes.size() == expected, "{}: tensor '{}' holds {} bytes, its shape {} needs {}", path.string(),
             name, tensor.bytes.size(), shape_str(tensor.shape), expected);
    header[name] = {{"dtype", stored_dtype_name(tensor.dtype)},
                    {"shape", tensor.shape},
                    {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  std::string header_text = header.dump();
  // Pad with spaces to a multiple of 8 so the data section is aligned, as the reference writer does.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const std::uint64_t header_length = header_text.size();

  const std::filesystem::path temp = path.string() + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("{}: cannot create: {}", temp.string(), std::strerror(errno)));
  try {
    write_all(fd, &header_length, sizeof(header_length), temp.string());
    write_all(fd, header_text.data(), header_text.size(), temp.string());
    for (const auto& [name, tensor] : file.tensors) write_all(fd, tensor.bytes.data(), tensor.bytes.size(), temp.string());
    if (::fsync(fd) != 0) throw Error(fmt::format("{}: fsync failed: {}", temp.string(), std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    std::filesystem::remove(temp);
    throw;
  }
  // Some file systems (NFS) report a failed write-back only here.
  if (::close(fd) != 0) {
    const std::string reason = std::strerror(errno);
    std::filesystem::remove(temp);
    throw Error(fmt::format("{}: close failed: {}; {} was left as it was", temp.string(), reason, path.string()));
  }
  std::error_code error;
  std::filesystem::rename(temp, path, error);
  if (error) {
    std::filesystem::remove(temp);
    throw Error(fmt::format("{}: cannot rename {} into place: {}", path.string(), temp.string(), error.message()));
  }
  // The rename itself is durable only once the folder's entry is on disk.
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int dir_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace bigtrain::net
