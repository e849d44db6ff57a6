#include "cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1 << 14)  // the Linux kernel's bit; older C libraries lack the name
#endif
#endif

namespace sgrt::cpu {
namespace {

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // __builtin_cpu_supports also checks the OS saves the registers
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return Isa::generic;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl"))
    return Isa::avx2;
  return __builtin_cpu_supports("avx512bf16") ? Isa::avx512_bf16 : Isa::avx512;
#elif defined(__aarch64__)
  return getauxval(AT_HWCAP2) & HWCAP2_BF16 ? Isa::neon_bf16 : Isa::neon;
#else
  return Isa::generic;
#endif
}

Isa env_limit() {
  const char* s = std::getenv("SGRT_ISA");
  for (Isa i : kIsas)
    if (s && std::strcmp(s, isa_name(i)) == 0) return i;
  return kTopIsa;
}

std::atomic<Isa> g_limit{env_limit()};

}  // namespace

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() {
  const Isa limit = g_limit.load(std::memory_order_relaxed);
  return limit < detected_isa() ? limit : detected_isa();
}

void set_isa_limit(Isa max) { g_limit.store(max, std::memory_order_relaxed); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::generic: return "generic";
#if defined(__aarch64__)
    case Isa::neon: return "neon";
    case Isa::neon_bf16: return "neon_bf16";
#else
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
#endif
  }
  return "?";
}

}  // namespace sgrt::cpu
