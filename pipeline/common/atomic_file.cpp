#include "pipeline/common/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "kernels/core/error.hpp"

namespace bigtrain {
namespace {

std::string error_text(int error) {
  std::string text = std::strerror(error);
  if (error == ENOSPC) text += " (the disk is full)";
  if (error == EFBIG) text += " (over the file size limit, ulimit -f)";
  return text;
}

// Removes the half-written temporary and says what failed; errno must be the cause.
[[noreturn]] void fail(const std::string& temporary, const std::string& path, const char* what, int error) {
  std::remove(temporary.c_str());
  throw Error(fmt::format("{}: {} failed: {} (the file under this name, if any, is unchanged)", path, what, error_text(error)));
}

// Renames a complete, synced temporary over `path` and makes the rename durable.
void publish(const std::string& temporary, const std::string& path) {
  if (std::rename(temporary.c_str(), path.c_str()) != 0) fail(temporary, path, "renaming the finished file into place", errno);
  // The rename itself is durable only once the folder's entry is on disk; failing
  // that is not worth losing the run over (the file is complete either way).
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  const int dir_fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace

std::string temporary_path_for(const std::string& path) {
  return fmt::format("{}.tmp-{}", path, static_cast<long>(::getpid()));
}

void commit_temporary(const std::string& temporary, const std::string& path) {
  // fsync before rename: otherwise a power cut can leave the new name pointing at
  // an empty file on filesystems that reorder metadata and data writes. Its error
  // counts: a delayed write-back failure (disk full on NFS, thin provisioning) is
  // reported only here, and renaming would publish a file with holes in it.
  const int fd = ::open(temporary.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(temporary, path, "reopening the finished temporary file", errno);
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    fail(temporary, path, "fsync", error);
  }
  ::close(fd);
  publish(temporary, path);
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  const std::string temporary = temporary_path_for(path);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("{}: cannot write: {}", path, error_text(errno)));
  // write() may take less than asked (signals, pipes, quota edges): loop until done
  // or an error, which is what a full disk or a file size limit gives.
  for (std::size_t done = 0; done < contents.size();) {
    const ssize_t wrote = ::write(fd, contents.data() + done, contents.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      const int error = wrote < 0 ? errno : ENOSPC;
      ::close(fd);
      fail(temporary, path, "writing", error);
    }
    done += static_cast<std::size_t>(wrote);
  }
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    fail(temporary, path, "fsync", error);
  }
  // close() reports write-back errors some filesystems (NFS) defer past fsync.
  if (::close(fd) != 0) fail(temporary, path, "closing", errno);
  publish(temporary, path);
}

}  // namespace bigtrain
