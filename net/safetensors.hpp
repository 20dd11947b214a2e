#pragma once
// The safetensors format (https://github.com/huggingface/safetensors), read and
// written without the Rust library:
//   8 bytes   little-endian u64 N, the header length
//   N bytes   JSON: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//                    "__metadata__": {"key": "string value", ...}}
//   data      raw little-endian tensor bytes; offsets relative to the data start
// Reading checks every offset, size and dtype against the file, so a truncated or
// corrupt file is an Error naming the file, never a crash. Writing goes to a temp
// name in the same folder, is fsync'ed and renamed, so a reader never sees half a file.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kernels/core/tensor.hpp"

namespace bigtrain::net {

enum class StoredDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };
const char* stored_dtype_name(StoredDType dtype);
std::size_t stored_dtype_size(StoredDType dtype);

// One tensor as stored: dtype, shape, raw bytes (host).
struct StoredTensor {
  StoredDType dtype = StoredDType::F32;
  Shape shape;
  std::vector<std::byte> bytes;

  // Copies a tensor (any device; f32, bf16, f16, u8, i32) to the host.
  static StoredTensor from_tensor(const Tensor& tensor);
  static StoredTensor from_int64(std::int64_t value);  // shape [] (a PyTorch scalar tensor)
  // A host float32 tensor; F32, F64, F16 and BF16 are converted (PyTorch checkpoints
  // saved in half precision load into float32 models). Other dtypes are an Error.
  Tensor to_f32() const;
  // The value of a one-element integer tensor (I64, I32, I16, I8, U8).
  std::int64_t to_int64() const;
  std::int64_t numel() const { return shape_numel(shape); }
};

using StateDict = std::map<std::string, StoredTensor>;
using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  StateDict tensors;
  Metadata metadata;
};

SafetensorsFile read_safetensors(const std::filesystem::path& path);
// Parses file contents already in memory; `source` names them in errors.
SafetensorsFile parse_safetensors(std::span<const std::byte> contents, const std::string& source);
void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& file);

}  // namespace bigtrain::net
