#include "pipeline/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "kernels/core/error.hpp"

namespace bigtrain {

std::string temporary_path_for(const std::string& path) {
  return fmt::format("{}.tmp-{}", path, static_cast<long>(::getpid()));
}

void commit_temporary(const std::string& temporary, const std::string& path) {
  // fsync before rename: otherwise a power cut can leave the new name pointing at
  // an empty file on filesystems that reorder metadata and data writes.
  const int fd = ::open(temporary.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    throw Error(fmt::format("{}: cannot rename the finished file into place: {}", path, std::strerror(error)));
  }
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  const std::string temporary = temporary_path_for(path);
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (!file) throw Error(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  const bool written = std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  const int write_error = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(temporary.c_str());
    throw Error(fmt::format("{}: writing failed: {}", path, std::strerror(written ? errno : write_error)));
  }
  commit_temporary(temporary, path);
}

}  // namespace bigtrain
