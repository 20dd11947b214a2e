#pragma once
// Files a later reader relies on (configs, metrics, checkpoints, reports) are
// written to a temporary name in the same directory and renamed over the final
// name, so a crash or a full disk never leaves a half-written file under it.
#include <string>
#include <string_view>

namespace bigtrain {

void write_file_atomically(const std::string& path, std::string_view contents);

// The temporary name used for `path` (same directory, so rename() is atomic).
std::string temporary_path_for(const std::string& path);
// Flushes `temporary` to disk and renames it to `path`; removes it on failure.
void commit_temporary(const std::string& temporary, const std::string& path);

}  // namespace bigtrain
