#pragma once
// Scalar summaries in TensorBoard's event-file format, so `tensorboard --logdir RUN_DIR`
// plots a run next to metrics.csv without any TensorFlow/protobuf dependency.
//
// The file is a TFRecord stream (uint64 length, masked CRC32C of the length, data,
// masked CRC32C of the data) of protobuf `Event` messages, encoded by hand with the
// field numbers of tensorflow/core/util/event.proto and framework/summary.proto:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bigtrain {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
std::uint32_t crc32c(std::string_view bytes);
// TFRecord's masking, so a CRC of data that itself holds CRCs stays well distributed.
std::uint32_t masked_crc32c(std::string_view bytes);

struct ScalarValue {
  std::string tag;
  float value = 0.0f;
};

// One serialized Event: the file-version header (when `file_version` is not empty)
// or a summary of scalars at `step`.
std::string encode_scalar_event(double wall_time, std::int64_t step, const std::vector<ScalarValue>& scalars);
std::string encode_file_version_event(double wall_time, std::string_view file_version = "brain.Event:2");
// Frames one record: length, masked CRC of the length, data, masked CRC of the data.
std::string tfrecord(std::string_view data);

// The scalars of a metrics.csv: every numeric column of each row as "<split>/<column>"
// at step = epoch; wall time = `start_time` plus the cumulative seconds of the rows
// before it (metrics.csv keeps durations, not clock times, and a resumed run must
// give the same file).
std::string tensorboard_events_from_metrics_csv(std::string_view metrics_csv, double start_time);

// Writes (atomically) RUN_DIR/events.out.tfevents.<time>.<host> from RUN_DIR/metrics.csv,
// reusing the name of an existing event file so each run keeps one. Returns its path.
std::string write_tensorboard_events(const std::string& run_dir);

}  // namespace bigtrain
