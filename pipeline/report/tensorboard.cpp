#include "pipeline/report/tensorboard.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/report/report_data.hpp"

namespace bigtrain {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kEventPrefix = "events.out.tfevents.";

const std::array<std::uint32_t, 256>& crc_table() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

template <typename T>
void put_little_endian(std::string& out, T value) {
  // Protobuf and TFRecord are little-endian on the wire whatever the host is.
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void put_tag(std::string& out, int field, int wire_type) { put_varint(out, static_cast<std::uint64_t>(field << 3 | wire_type)); }

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

void put_header(std::string& out, double wall_time, std::int64_t step) {
  put_tag(out, 1, 1);
  put_little_endian(out, wall_time);
  // proto3 leaves a zero step out; so do we, so the bytes are protobuf's canonical
  // encoding (what a decoder re-serializes).
  if (step != 0) {
    put_tag(out, 2, 0);
    put_varint(out, static_cast<std::uint64_t>(step));  // int64: two's complement as varint
  }
}

}  // namespace

std::uint32_t crc32c(std::string_view bytes) {
  const auto& table = crc_table();
  std::uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(std::string_view bytes) {
  const std::uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string encode_file_version_event(double wall_time, std::string_view file_version) {
  std::string event;
  put_header(event, wall_time, 0);
  put_bytes(event, 3, file_version);
  return event;
}

std::string encode_scalar_event(double wall_time, std::int64_t step, const std::vector<ScalarValue>& scalars) {
  std::string summary;
  for (const auto& scalar : scalars) {
    std::string value;
    put_bytes(value, 1, scalar.tag);
    put_tag(value, 2, 5);
    put_little_endian(value, scalar.value);
    put_bytes(summary, 1, value);
  }
  std::string event;
  put_header(event, wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  put_little_endian(length, static_cast<std::uint64_t>(data.size()));
  std::string record = length;
  put_little_endian(record, masked_crc32c(length));
  record.append(data);
  put_little_endian(record, masked_crc32c(data));
  return record;
}

std::string tensorboard_events_from_metrics_csv(std::string_view metrics_csv, double start_time) {
  const MetricsTable table = parse_metrics_csv(metrics_csv, "metrics.csv");
  std::string file = tfrecord(encode_file_version_event(start_time));
  double elapsed = 0.0;
  for (const auto& row : table.rows) {
    std::vector<ScalarValue> scalars;
    for (std::size_t c = 0; c < table.columns.size(); ++c) {
      const std::string& column = table.columns[c];
      if (column == "epoch" || column == "split" || std::isnan(row.values[c])) continue;
      scalars.push_back({row.split + "/" + column, static_cast<float>(row.values[c])});
    }
    elapsed += row.value(table, "seconds");
    file += tfrecord(encode_scalar_event(start_time + elapsed, row.epoch, scalars));
  }
  return file;
}

std::string write_tensorboard_events(const std::string& run_dir) {
  fs::path existing;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kEventPrefix, 0) == 0 && name.find(".tmp") == std::string::npos) existing = entry.path();
  }
  double start_time = 0.0;
  if (existing.empty()) {
    std::array<char, 256> host{};
    if (gethostname(host.data(), host.size() - 1) != 0) std::strcpy(host.data(), "localhost");
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    // Whole seconds: the name keeps only those, and a regenerated file must match.
    start_time = static_cast<double>(std::chrono::duration_cast<std::chrono::seconds>(now).count());
    existing = fs::path(run_dir) / fmt::format("{}{}.{}", kEventPrefix, static_cast<long long>(start_time), host.data());
  } else {
    // The name's time is when the run began.
    const std::string name = existing.filename().string().substr(kEventPrefix.size());
    start_time = std::stod(name.substr(0, name.find('.')));
  }
  std::ifstream in(fs::path(run_dir) / "metrics.csv", std::ios::binary);
  if (!in) throw Error(fmt::format("{}: no metrics.csv to write TensorBoard scalars from", run_dir));
  std::stringstream csv;
  csv << in.rdbuf();
  write_file_atomically(existing.string(), tensorboard_events_from_metrics_csv(csv.str(), start_time));
  return existing.string();
}

}  // namespace bigtrain
