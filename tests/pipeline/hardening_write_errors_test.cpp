// Issue 9: a disk that fills up or a folder that cannot be written is a clear Error
// naming the file, and no half-written file is ever left under a final name (nor a
// temporary beside it). The full disk is real: RLIMIT_FSIZE (ulimit -f) makes
// write() fail with EFBIG past the limit, as ENOSPC does on a full disk, through the
// same write path; it works as root too, where permissions would not.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/core/error.hpp"
#include "net/safetensors.hpp"
#include "pipeline/common/atomic_file.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Everything in `dir` but `keep`: what a failed write must not leave behind.
std::vector<std::string> other_files(const fs::path& dir, const std::string& keep) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename() != keep) names.push_back(entry.path().filename().string());
  return names;
}

class WriteErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bigtrain_write_errors_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved_limit_), 0);
    // Without this the kernel ends the process with SIGXFSZ at the limit, instead
    // of failing the write() as a full disk does.
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
  }
  void TearDown() override {
    ::setrlimit(RLIMIT_FSIZE, &saved_limit_);
    std::signal(SIGXFSZ, previous_handler_);
    fs::remove_all(dir_);
  }
  // Files written from now on may not grow past `bytes`.
  void limit_file_size(rlim_t bytes) {
    rlimit limit = saved_limit_;
    limit.rlim_cur = bytes;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  void lift_limit() { ::setrlimit(RLIMIT_FSIZE, &saved_limit_); }

  fs::path dir_;
  rlimit saved_limit_{};
  void (*previous_handler_)(int) = SIG_DFL;
};

TEST_F(WriteErrorsTest, FullDiskLeavesThePreviousFileAndNoTemporary) {
  const fs::path path = dir_ / "metrics.csv";
  write_file_atomically(path.string(), "epoch,loss\n1,0.5\n");
  limit_file_size(4096);
  const std::string too_big(10000, 'x');
  try {
    write_file_atomically(path.string(), too_big);
    FAIL() << "a write past the file size limit succeeded";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  }
  lift_limit();
  EXPECT_EQ(read_text(path), "epoch,loss\n1,0.5\n") << "the previous contents must survive";
  EXPECT_TRUE(other_files(dir_, "metrics.csv").empty()) << "left behind: " << other_files(dir_, "metrics.csv")[0];

  // A first write that fails leaves no file at all.
  limit_file_size(4096);
  EXPECT_THROW(write_file_atomically((dir_ / "report.html").string(), too_big), Error);
  lift_limit();
  EXPECT_FALSE(fs::exists(dir_ / "report.html"));
  EXPECT_TRUE(other_files(dir_, "metrics.csv").empty());
  // Under the limit the same call works (the failure was the limit, nothing else).
  limit_file_size(4096);
  EXPECT_NO_THROW(write_file_atomically((dir_ / "small.txt").string(), "fits"));
  lift_limit();
  EXPECT_EQ(read_text(dir_ / "small.txt"), "fits");
}

TEST_F(WriteErrorsTest, CheckpointWriteOnAFullDiskKeepsThePreviousCheckpoint) {
  const fs::path path = dir_ / "last.safetensors";
  net::SafetensorsFile small;
  small.tensors["w"] = net::StoredTensor::from_int64(7);
  small.metadata["epoch"] = "1";
  net::write_safetensors(path, small);
  net::SafetensorsFile large = small;
  large.tensors["big"].dtype = net::StoredDType::F32;
  large.tensors["big"].shape = {4096};
  large.tensors["big"].bytes.resize(4096 * 4);
  large.metadata["epoch"] = "2";
  limit_file_size(8192);
  try {
    net::write_safetensors(path, large);
    FAIL() << "a checkpoint past the file size limit was written";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("last.safetensors"), std::string::npos) << error.what();
  }
  lift_limit();
  EXPECT_EQ(net::read_safetensors(path).metadata.at("epoch"), "1");
  EXPECT_TRUE(other_files(dir_, "last.safetensors").empty());
}

TEST_F(WriteErrorsTest, UnwritableFolderNamesTheFile) {
  // A path through a regular file cannot be created by anyone, root included
  // (root ignores a read-only folder's permissions).
  write_file_atomically((dir_ / "plain").string(), "x");
  const fs::path path = dir_ / "plain" / "metrics.csv";
  try {
    write_file_atomically(path.string(), "epoch\n");
    FAIL() << "wrote below a regular file";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("Not a directory"), std::string::npos) << message;
  }
  if (::geteuid() != 0) {
    // Not root: a read-only folder is refused too.
    fs::create_directories(dir_ / "readonly");
    fs::permissions(dir_ / "readonly", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(write_file_atomically((dir_ / "readonly" / "a.txt").string(), "x"), Error);
    fs::permissions(dir_ / "readonly", fs::perms::owner_all);
    EXPECT_FALSE(fs::exists(dir_ / "readonly" / "a.txt"));
  }
}

}  // namespace
}  // namespace bigtrain
