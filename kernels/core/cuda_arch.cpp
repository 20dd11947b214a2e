#include "kernels/core/cuda_arch.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <tuple>

#include <fmt/format.h>

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/arch_probe.hpp"
#endif

namespace bigtrain {
namespace {

std::vector<std::string_view> split(std::string_view text, std::string_view separators) {
  std::vector<std::string_view> parts;
  while (!text.empty()) {
    const std::size_t end = text.find_first_of(separators);
    std::string_view part = text.substr(0, end);
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.front()))) part.remove_prefix(1);
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back()))) part.remove_suffix(1);
    if (!part.empty()) parts.push_back(part);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return parts;
}

// "86" -> 8.6, "120" -> 12.0; false for anything else.
bool parse_number(std::string_view digits, int divisor, CudaArch& arch) {
  int value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || value < divisor) return false;
  arch.major = value / divisor;
  arch.minor = value % divisor / (divisor / 10);
  return true;
}

}  // namespace

std::vector<CudaArch> parse_cuda_architectures(std::string_view cmake_list) {
  std::vector<CudaArch> built;
  for (std::string_view entry : split(cmake_list, ";,")) {
    bool real = true, virtual_code = true;
    if (entry.ends_with("-real")) {
      virtual_code = false;
      entry.remove_suffix(5);
    } else if (entry.ends_with("-virtual")) {
      real = false;
      entry.remove_suffix(8);
    }
    CudaArch arch;
    if (!entry.empty() && (entry.back() == 'a' || entry.back() == 'f')) {
      arch.specific = true;
      entry.remove_suffix(1);
    }
    if (!parse_number(entry, 10, arch)) return {};
    if (real) built.push_back(arch);
    if (virtual_code && !arch.specific) {
      arch.ptx = true;
      built.push_back(arch);
    }
  }
  return built;
}

std::vector<CudaArch> parse_nvcc_arch_list(std::string_view nvcc_list) {
  std::vector<CudaArch> built;
  for (std::string_view entry : split(nvcc_list, ",")) {
    CudaArch arch;
    if (!parse_number(entry, 100, arch)) return {};
    built.push_back(arch);
  }
  if (!built.empty()) {
    CudaArch newest = *std::max_element(built.begin(), built.end(), [](const CudaArch& a, const CudaArch& b) {
      return std::tie(a.major, a.minor) < std::tie(b.major, b.minor);
    });
    newest.ptx = true;
    built.push_back(newest);
  }
  return built;
}

std::string describe_cuda_architectures(const std::vector<CudaArch>& built) {
  if (built.empty()) return "none";
  std::string cubins, ptx;
  for (const CudaArch& arch : built) {
    std::string& list = arch.ptx ? ptx : cubins;
    if (!list.empty()) list += ", ";
    list += fmt::format("{}_{}{}{}", arch.ptx ? "compute" : "sm", arch.major, arch.minor, arch.specific ? "a" : "");
  }
  if (ptx.empty()) return cubins;
  return cubins.empty() ? "PTX " + ptx : cubins + " + PTX " + ptx;
}

bool cuda_arch_runs_on(const std::vector<CudaArch>& built, int major, int minor) {
  return std::any_of(built.begin(), built.end(), [&](const CudaArch& arch) {
    if (arch.ptx) return std::tie(arch.major, arch.minor) <= std::tie(major, minor);
    if (arch.specific) return arch.major == major && arch.minor == minor;
    return arch.major == major && arch.minor <= minor;
  });
}

std::string cuda_arch_mismatch(std::string_view device_name, int major, int minor,
                               const std::vector<CudaArch>& built) {
  if (cuda_arch_runs_on(built, major, minor)) return {};
  return fmt::format("GPU '{}' has compute capability {}.{}, which this build of bigtrain has no code for (built: {}). "
                     "Rebuild with -DBIGTRAIN_CUDA_ARCHS={}{} (if the CUDA toolkit still supports it), or use "
                     "device: cpu",
                     device_name, major, minor, describe_cuda_architectures(built), major, minor);
}

const std::vector<CudaArch>& built_cuda_architectures() {
  static const std::vector<CudaArch> built = [] {
#ifdef BIGTRAIN_CUDA_ARCHITECTURES
    std::vector<CudaArch> from_cmake = parse_cuda_architectures(BIGTRAIN_CUDA_ARCHITECTURES);
    if (!from_cmake.empty()) return from_cmake;
#endif
#ifdef BIGTRAIN_HAVE_CUDA
    return parse_nvcc_arch_list(cuda::nvcc_arch_list());
#else
    return std::vector<CudaArch>{};
#endif
  }();
  return built;
}

}  // namespace bigtrain
