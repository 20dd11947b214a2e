// `bigtrain devices`: which backends this build has and which devices it sees.
#include <dnnl.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/device.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/distributed/distributed.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace bigtrain::cli {
namespace {

RegisterCommand devices("devices", [](CLI::App& app) {
  app.description("List the compute backends in this build and the devices they see");
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "print one JSON object");
  return std::function<int()>([json] {
    const dnnl_version_t* onednn = dnnl_version();
    nlohmann::json info = {
        {"cpu", {{"onednn", fmt::format("{}.{}.{}", onednn->major, onednn->minor, onednn->patch)}}},
        {"cuda_compiled", cuda_compiled()},
        {"cuda_devices", cuda_device_count()},
        {"mpi_compiled", mpi_available()},
        {"nccl_compiled", nccl_available()},
    };
#ifdef BIGTRAIN_HAVE_CUDA
    if (cuda_device_count() == 0) info["cuda_unavailable_reason"] = cuda::unavailable_reason();
#endif
    if (*json) {
      fmt::print("{}\n", info.dump());
    } else {
      fmt::print("cpu: oneDNN {}\n", info["cpu"]["onednn"].get<std::string>());
      fmt::print("cuda: {}\n", !cuda_compiled()            ? std::string("not compiled in this build")
                               : cuda_device_count() == 0 ? fmt::format("compiled; {}", info.value("cuda_unavailable_reason", ""))
                                                          : fmt::format("{} device(s)", cuda_device_count()));
      fmt::print("distributed: {}\n", nccl_available()  ? "MPI (CPU tensors), NCCL (CUDA tensors)"
                                       : mpi_available() ? "MPI (CPU tensors; CUDA tensors through host copies)"
                                                         : "single process only (built without MPI)");
    }
    return 0;
  });
});

}  // namespace
}  // namespace bigtrain::cli
