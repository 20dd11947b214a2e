#include "pipeline/common/logging.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace bigtrain {

void setup_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("bigtrain");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
}

void add_log_file(const std::string& path) {
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  spdlog::default_logger()->sinks().push_back(sink);
}

}  // namespace bigtrain
