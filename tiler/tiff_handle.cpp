#include "tiler/tiff_handle.hpp"

#include <cstdarg>
#include <cstdio>
#include <mutex>

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"

namespace bigtrain::tiler {
namespace {

std::string format_message(const char* module, const char* format, va_list args) {
  char buffer[1024];
  std::vsnprintf(buffer, sizeof buffer, format, args);
  return module && *module ? fmt::format("{}: {}", module, buffer) : std::string(buffer);
}

int capture_error(TIFF*, void* user_data, const char* module, const char* format, va_list args) {
  auto* sink = static_cast<TiffHandle::Sink*>(user_data);
  std::string message = format_message(module, format, args);
  spdlog::debug("libtiff error: {}", message);
  // A corrupt file can make libtiff report the same problem thousands of times;
  // the first few say all there is to say.
  if (sink->errors.size() < 2000) sink->errors += (sink->errors.empty() ? "" : "; ") + message;
  return 1;  // handled: keeps libtiff from also calling the global handler
}

int capture_warning(TIFF*, void*, const char* module, const char* format, va_list args) {
  spdlog::debug("libtiff warning: {}", format_message(module, format, args));
  return 1;
}

void log_global_error(const char* module, const char* format, va_list args) {
  spdlog::debug("libtiff error: {}", format_message(module, format, args));
}

void log_global_warning(const char* module, const char* format, va_list args) {
  spdlog::debug("libtiff warning: {}", format_message(module, format, args));
}

}  // namespace

void install_tiff_log_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    TIFFSetErrorHandler(log_global_error);
    TIFFSetWarningHandler(log_global_warning);
  });
}

TiffHandle::TiffHandle(const std::string& path, const char* mode) : path_(path), sink_(std::make_unique<Sink>()) {
  install_tiff_log_handlers();
  TIFFOpenOptions* options = TIFFOpenOptionsAlloc();
  BT_CHECK(options != nullptr, "{}: out of memory opening TIFF", path);
  TIFFOpenOptionsSetErrorHandlerExtR(options, capture_error, sink_.get());
  TIFFOpenOptionsSetWarningHandlerExtR(options, capture_warning, sink_.get());
  // A lying header must not make libtiff allocate gigabytes for one strip or one
  // offsets array; anything legitimate we read is far below this.
  TIFFOpenOptionsSetMaxSingleMemAlloc(options, tmsize_t{1} << 30);
  tif_ = TIFFOpenExt(path.c_str(), mode, options);
  TIFFOpenOptionsFree(options);
  if (!tif_) {
    std::string reason = sink_->errors.empty() ? "libtiff could not open it" : sink_->errors;
    throw Error(fmt::format("{}: cannot open as TIFF: {}", path, reason));
  }
}

TiffHandle::~TiffHandle() {
  if (tif_) TIFFClose(tif_);
}

std::string TiffHandle::take_errors() {
  std::string errors = std::move(sink_->errors);
  sink_->errors.clear();
  return errors;
}

void TiffHandle::fail(const std::string& what) {
  std::string errors = take_errors();
  throw Error(errors.empty() ? fmt::format("{}: {}", path_, what) : fmt::format("{}: {}: {}", path_, what, errors));
}

void TiffHandle::close() {
  if (!tif_) return;
  TIFF* tif = tif_;
  tif_ = nullptr;
  TIFFClose(tif);
  std::string errors = take_errors();
  if (!errors.empty()) throw Error(fmt::format("{}: error while closing TIFF: {}", path_, errors));
}

}  // namespace bigtrain::tiler
