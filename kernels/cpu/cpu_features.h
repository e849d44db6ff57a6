// Which SIMD level the CPU kernels run at: detected once (x86: CPUID; AArch64: the
// kernel's HWCAP bits), and limitable so tests and benchmarks can force the lower
// paths on a machine that has the higher.
#pragma once
#include <cstdint>

namespace sgrt::cpu {

// Ordered: each level implies the ones below it. The levels are the build target's.
enum class Isa : uint8_t {
  generic,     // portable C++
#if defined(__aarch64__)
  neon,        // Advanced SIMD: baseline on AArch64, so always detected
  neon_bf16,   // + FEAT_BF16 (HWCAP2_BF16): FP8/FP4/BF16 GEMMs on BFDOT
#else
  avx2,        // AVX2 + FMA
  avx512,      // AVX-512 F/BW/VL
  avx512_bf16  // + AVX512_BF16 (vdpbf16ps): FP8/FP4/BF16 GEMMs on BF16 dot products
#endif
};

// Every level of this build, lowest first.
#if defined(__aarch64__)
inline constexpr Isa kIsas[] = {Isa::generic, Isa::neon, Isa::neon_bf16};
#else
inline constexpr Isa kIsas[] = {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16};
#endif
inline constexpr Isa kTopIsa = kIsas[sizeof(kIsas) / sizeof(kIsas[0]) - 1];

Isa detected_isa();           // what this CPU and OS support
Isa active_isa();             // min(detected, limit)
void set_isa_limit(Isa max);  // default: no limit; also env SGRT_ISA=<isa_name>, e.g. generic
const char* isa_name(Isa isa);

}  // namespace sgrt::cpu
