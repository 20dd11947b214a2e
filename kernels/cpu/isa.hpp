#pragma once
// What the CPU backend can compute on this machine, as oneDNN sees it: its
// effective instruction set (the CPU's, capped by ONEDNN_MAX_CPU_ISA when set).
#include <optional>
#include <string>

namespace bigtrain::kernels::cpu {

// oneDNN's name for the instruction set its kernels use here, e.g. "avx2",
// "avx512_core_bf16".
std::string effective_isa_name();

// Empty when conv2d and linear can compute in bfloat16 at full speed here: the ISA
// has AVX512_BF16's dot-product instructions (avx512_core_bf16, or AMX, which
// includes them). Otherwise why not, naming the missing instruction set and the
// one oneDNN found. Without them oneDNN 2.6 would emulate bf16 on plain AVX-512
// (or refuse on AVX2): a bf16 run slower than float32, so it is refused instead.
std::optional<std::string> bf16_unavailable_reason();

// Whether oneDNN's AMX kernels run here (avx512_core_amx, not capped by
// ONEDNN_MAX_CPU_ISA): its bf16 convolutions then take activations in nhwc.
bool amx_available();

}  // namespace bigtrain::kernels::cpu
