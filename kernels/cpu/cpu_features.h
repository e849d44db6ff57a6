// Which SIMD level the CPU kernels run at: detected once by CPUID, and limitable so
// tests and benchmarks can force the lower paths on a machine that has the higher.
#pragma once
#include <cstdint>

namespace sgrt::cpu {

// Ordered: each level implies the ones below it.
enum class Isa : uint8_t {
  generic,     // portable C++ (no AVX2)
  avx2,        // AVX2 + FMA
  avx512,      // AVX-512 F/BW/VL
  avx512_bf16  // + AVX512_BF16 (vdpbf16ps): FP8/FP4/BF16 GEMMs on BF16 dot products
};

Isa detected_isa();           // what this CPU and OS support
Isa active_isa();             // min(detected, limit)
void set_isa_limit(Isa max);  // default: no limit; also env SGRT_ISA=generic|avx2|avx512|avx512_bf16
const char* isa_name(Isa isa);

}  // namespace sgrt::cpu
