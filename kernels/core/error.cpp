#include "kernels/core/error.hpp"

namespace bigtrain {

void raise_check_failure(const char* condition, const char* file, int line, const std::string& message) {
  throw Error(fmt::format("{} (check `{}` failed at {}:{})", message, condition, file, line));
}

}  // namespace bigtrain
