#pragma once
#include <string>

namespace bigtrain {

// Sends logs to stderr (stdout stays clean for --json output); `level` is a spdlog
// level name. A run directory can add its log.txt with add_log_file().
void setup_logging(const std::string& level);
void add_log_file(const std::string& path);

}  // namespace bigtrain
