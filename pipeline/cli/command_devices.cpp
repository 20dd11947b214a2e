// `bigtrain devices`: which backends this build has and which devices it sees: each
// GPU with what device.index, device.memory_limit and the architecture check need.
#include <dnnl.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/cuda_arch.hpp"
#include "kernels/core/device.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/distributed/distributed.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/runtime.hpp"
#endif

namespace bigtrain::cli {
namespace {

// Every GPU the driver reports, also one this build cannot run on (then with why).
nlohmann::json list_gpus() {
  nlohmann::json gpus = nlohmann::json::array();
#ifdef BIGTRAIN_HAVE_CUDA
  for (int i = 0; i < cuda_device_count(); ++i) {
    const cuda::DeviceInfo d = cuda::device_properties(i);
    const std::string unusable = cuda::device_unusable_reason(i);
    gpus.push_back({{"index", i},
                    {"name", d.name},
                    {"compute_capability", fmt::format("{}.{}", d.compute_major, d.compute_minor)},
                    {"total_memory_bytes", d.total_memory},
                    {"multiprocessors", d.multiprocessors},
                    {"usable", unusable.empty()},
                    {"reason", unusable}});
  }
#endif
  return gpus;
}

RegisterCommand devices("devices", [](CLI::App& app) {
  app.description("List the compute backends in this build and the devices they see (each GPU with its memory and "
                  "compute capability)");
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "print one JSON object");
  return std::function<int()>([json] {
    const dnnl_version_t* onednn = dnnl_version();
    nlohmann::json info = {
        {"cpu", {{"onednn", fmt::format("{}.{}.{}", onednn->major, onednn->minor, onednn->patch)}}},
        {"cuda_compiled", cuda_compiled()},
        {"cuda_devices", cuda_device_count()},
        {"cuda_architectures", cuda_compiled() ? describe_cuda_architectures(built_cuda_architectures()) : ""},
        {"gpus", list_gpus()},
        {"mpi_compiled", mpi_available()},
        {"nccl_compiled", nccl_available()},
    };
#ifdef BIGTRAIN_HAVE_CUDA
    if (cuda_device_count() == 0) info["cuda_unavailable_reason"] = cuda::unavailable_reason();
#endif
    if (*json) {
      fmt::print("{}\n", info.dump());
      return 0;
    }
    fmt::print("cpu: oneDNN {}\n", info["cpu"]["onednn"].get<std::string>());
    fmt::print("cuda: {}\n", !cuda_compiled()            ? std::string("not compiled in this build")
                             : cuda_device_count() == 0 ? fmt::format("compiled; {}", info.value("cuda_unavailable_reason", ""))
                                                        : fmt::format("{} device(s)", cuda_device_count()));
    if (cuda_compiled()) fmt::print("cuda architectures built: {}\n", info["cuda_architectures"].get<std::string>());
    if (info["gpus"].empty()) fmt::print("gpus: none\n");
    for (const auto& gpu : info["gpus"])
      fmt::print("  cuda:{}  {}  compute capability {}  {:.1f} GiB  {} SMs  {}\n", gpu["index"].get<int>(),
                 gpu["name"].get<std::string>(), gpu["compute_capability"].get<std::string>(),
                 static_cast<double>(gpu["total_memory_bytes"].get<std::size_t>()) / (1 << 30),
                 gpu["multiprocessors"].get<int>(),
                 gpu["usable"].get<bool>() ? std::string("usable") : "NOT usable: " + gpu["reason"].get<std::string>());
    fmt::print("distributed: {}\n", nccl_available()  ? "MPI (CPU tensors), NCCL (CUDA tensors)"
                                     : mpi_available() ? "MPI (CPU tensors; CUDA tensors through host copies)"
                                                       : "single process only (built without MPI)");
    return 0;
  });
});

}  // namespace
}  // namespace bigtrain::cli
