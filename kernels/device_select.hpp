#pragma once
// Turns the run configuration's `device.type` into the backend every op runs on.
#include <string>
#include <string_view>

#include "kernels/core/device.hpp"

namespace bigtrain::kernels {

// "cpu" -> cpu; "cuda" -> cuda, or a bigtrain::Error saying why no GPU can be used
// (build without the CUDA backend, no driver, no device); "auto" -> cuda when a
// GPU is usable, else cpu. Anything else is an error listing the valid values.
Backend select_backend(std::string_view device_type);

// One line for logs: "cuda (2 devices)" or "cpu (cuda: no CUDA driver or no GPU on this machine)".
std::string describe_backend_choice(Backend backend);

}  // namespace bigtrain::kernels
