#include "kernels/cpu/isa.hpp"

#include <cstdint>

#include <dnnl.hpp>
#include <fmt/format.h>

namespace bigtrain::kernels::cpu {

namespace {

// oneDNN's ISA values are bit sets, each a superset of the ones it extends
// (avx512_core_amx contains avx512_core_bf16; avx2_vnni contains neither).
bool includes(dnnl::cpu_isa isa, dnnl::cpu_isa required) {
  const auto have = static_cast<std::uint32_t>(isa), need = static_cast<std::uint32_t>(required);
  return (have & need) == need;
}

}  // namespace

std::string effective_isa_name() {
  using isa = dnnl::cpu_isa;
  // Widest first: the first one contained names the machine.
  static constexpr std::pair<isa, const char*> kNames[] = {
      {isa::avx512_core_amx, "avx512_core_amx"}, {isa::avx512_core_bf16, "avx512_core_bf16"},
      {isa::avx512_core_vnni, "avx512_core_vnni"}, {isa::avx512_core, "avx512_core"},
      {isa::avx2_vnni, "avx2_vnni"}, {isa::avx2, "avx2"}, {isa::avx, "avx"}, {isa::sse41, "sse41"}};
  const isa effective = dnnl::get_effective_cpu_isa();
  for (const auto& [candidate, name] : kNames)
    if (includes(effective, candidate)) return name;
  return fmt::format("0x{:x}", static_cast<std::uint32_t>(effective));
}

std::optional<std::string> bf16_unavailable_reason() {
  if (includes(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core_bf16)) return std::nullopt;
  return fmt::format(
      "this CPU has no AVX512_BF16 instructions (oneDNN's instruction set here: {}; bfloat16 on the CPU "
      "needs avx512_core_bf16 or avx512_core_amx, as on Intel Cooper Lake / Sapphire Rapids or AMD Zen 4 and later)",
      effective_isa_name());
}

bool amx_available() { return includes(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core_amx); }

}  // namespace bigtrain::kernels::cpu
