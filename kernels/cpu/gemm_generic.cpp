// Portable F32 GEMM kernel (CPUs without AVX2): 4 x 8 scalar tile.
#include "cpu/gemm_driver.h"

namespace sgrt::cpu::gemm_impl {
namespace {

struct F32x1 {
  using Elem = float;
  using reg = float;
  static constexpr int KU = 1, W = 1, NV = 8, MR = 4;
  static constexpr int64_t KC = 256, MC = 64, NC = 1024;
  static reg zero() { return 0.0f; }
  static reg loadb(const float* p) { return *p; }
  static reg bcast(const float* p) { return *p; }
  static reg dot(reg acc, reg a, reg b) { return acc + a * b; }
  static reg load(const float* p) { return *p; }
  static void store(float* p, reg v) { *p = v; }
  static reg mul(reg a, reg b) { return a * b; }
  static reg fma(reg a, reg b, reg c) { return a * b + c; }
  static reg set1(float v) { return v; }
  static float convert(float v) { return v; }
};

}  // namespace

void run_generic(const Problem& p) { run<F32x1>(p); }

}  // namespace sgrt::cpu::gemm_impl
