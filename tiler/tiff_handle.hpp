#pragma once
// One open libtiff handle whose error and warning messages are captured instead of
// reaching stderr: errors are kept so the bigtrain::Error raised for a failed call
// quotes libtiff's reason; warnings go to the debug log.
#include <memory>
#include <string>

#include <tiffio.h>

namespace bigtrain::tiler {

class TiffHandle {
 public:
  // mode is a TIFFOpen mode ("r", "w", "w8" for BigTIFF, ...). Throws bigtrain::Error
  // naming the file and libtiff's reason when it cannot be opened.
  TiffHandle(const std::string& path, const char* mode);
  ~TiffHandle();
  TiffHandle(const TiffHandle&) = delete;
  TiffHandle& operator=(const TiffHandle&) = delete;

  TIFF* get() const { return tif_; }
  const std::string& path() const { return path_; }
  // libtiff's errors since the last take_errors(), joined with "; " (empty if none).
  std::string take_errors();
  // Throws bigtrain::Error: "<path>: <what>: <libtiff's errors>".
  [[noreturn]] void fail(const std::string& what);
  // Closes now (flushes a written file); throws if libtiff reports an error.
  void close();

  struct Sink {
    std::string errors;
  };

 private:
  std::string path_;
  std::unique_ptr<Sink> sink_;
  TIFF* tif_ = nullptr;
};

// Routes libtiff's process-wide handlers (used where no per-handle one applies) to
// the debug log. Idempotent.
void install_tiff_log_handlers();

}  // namespace bigtrain::tiler
