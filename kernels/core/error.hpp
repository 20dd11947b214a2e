#pragma once
// Errors raised by bigtrain code. Every message names what failed and where, so a
// user reading a log line can act on it without a debugger.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace bigtrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void raise_check_failure(const char* condition, const char* file, int line, const std::string& message);

}  // namespace bigtrain

// BT_CHECK(cond, fmt, args...) throws bigtrain::Error naming the condition, file and line.
#define BT_CHECK(cond, ...)                                                                     \
  do {                                                                                          \
    if (!(cond)) ::bigtrain::raise_check_failure(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
