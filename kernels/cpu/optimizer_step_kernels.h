// Internal: optimizer_step.h's pass, written once on quantize_simd.h's N-lane
// vectors and compiled per ISA by optimizer_step.cpp (the baseline) and
// optimizer_step_avx2.cpp / _avx512.cpp. Internal linkage, as quantize_simd.h,
// so no AVX-512 copy can reach the baseline path.
//
// Each vector of elements is decoded (quantize_simd.h's decode, bit-identical to
// formats.h's), stepped and encoded in registers: no f32 block of the state is
// written anywhere. IEEE adds, multiplies, divides and square roots with no
// contraction (kernels/CMakeLists.txt): every width gives the same bits, which are
// PyTorch's operation order element by element.
#pragma once
#include <cstdint>
#include <cstring>

#include "cpu/optimizer_step.h"
#include "cpu/quantize_simd.h"
#include "cpu/row_reduce.h"
#if defined(__SSE__) && !defined(__AVX2__)
#include <xmmintrin.h>  // the baseline's sqrtps (immintrin.h comes with AVX2 and AVX-512)
#endif

namespace sgrt::cpu {
namespace optimizer_step_impl {
namespace {

using quant_impl::as;
using quant_impl::load;
using quant_impl::Vec;

template <DType D>
constexpr int kBytes = static_cast<int>(dtype_bits(D) / 8);

template <DType D>
constexpr fmt::Spec spec() {
  if constexpr (D == DType::f16) return fmt::spec_f16();
  else if constexpr (D == DType::e4m3) return fmt::spec_e4m3();
  else return fmt::spec_e5m2();
}

// Elements [i, i + N) of a D tensor at p: f32 as stored, else decode(code) * inv.
template <int N, DType D>
[[gnu::always_inline]] inline typename Vec<N>::f32 values(const void* p, int64_t i, float inv) {
  if constexpr (D == DType::f32) {
    return load<typename Vec<N>::f32>(static_cast<const float*>(p) + i);
  } else {
    const uint8_t* q = static_cast<const uint8_t*>(p) + i * kBytes<D>;
    return quant_impl::decode_vec<N, spec<D>()>(quant_impl::load_codes<N, kBytes<D>>(q)) * inv;
  }
}

// Stores x as elements [i, i + N) of a D tensor at p: f32 as is, else encode(x * scale).
template <int N, DType D>
[[gnu::always_inline]] inline void put(void* p, int64_t i, typename Vec<N>::f32 x, float scale) {
  if constexpr (D == DType::f32) {
    std::memcpy(static_cast<float*>(p) + i, &x, sizeof x);
  } else {
    constexpr fmt::Spec S = spec<D>();
    const typename Vec<N>::u32 code = quant_impl::encode_vec<N, S>(x * scale, typename Vec<N>::u32{}, false);
    quant_impl::store_codes<N, S.exp_bits + S.man_bits + 1>(p, i, code);
  }
}

template <int N>
[[gnu::always_inline]] inline typename Vec<N>::f32 sqrt_vec(typename Vec<N>::f32 x) {
#if defined(__AVX512F__)
  // (maskz: gcc 12 warns of the plain form's undefined pass-through operand.)
  if constexpr (N == 16) return as<typename Vec<N>::f32>(_mm512_maskz_sqrt_ps(0xFFFF, as<__m512>(x)));
#endif
#if defined(__AVX2__)
  if constexpr (N == 8) return as<typename Vec<N>::f32>(_mm256_sqrt_ps(as<__m256>(x)));
#endif
#if defined(__SSE__)
  if constexpr (N == 4) return as<typename Vec<N>::f32>(_mm_sqrt_ps(as<__m128>(x)));
#endif
#if defined(__aarch64__)
  if constexpr (N == 4) return as<typename Vec<N>::f32>(vsqrtq_f32(as<float32x4_t>(x)));
#endif
  for (int l = 0; l < N; ++l) x[l] = __builtin_sqrtf(x[l]);
  return x;
}

// The pass over [b, e) with the dtypes and the kind of pass fixed at compile time.
template <int N, DType W, DType S1, DType S2, DType G, bool AdamW, bool Store>
void pass(const OptimizerStepArgs& args, int64_t b, int64_t e, uint32_t amax[3]) {
  const OptimizerStepArgs a = args;  // a local copy: the stores cannot alias its fields
  using U = typename Vec<N>::u32;
  using F = typename Vec<N>::f32;
  const float c1 = 1.f - a.b1, c2 = 1.f - a.b2;
  // The first pass below O3 neither needs nor updates the parameter, but SGD's
  // momentum reads it (weight decay).
  const bool new_w = Store || a.scale_w, read_w = new_w || !AdamW;
  U acc[3] = {};
  // Elements [i, i + N) of the views at these pointers; lanes outside `live` are
  // not measured.
  auto step = [&](void* wp, void* s1p, void* s2p, const void* gp, int64_t i, U live) {
    const F g = values<N, G>(gp, i, a.inv[3]) * a.coef;
    F w = read_w ? values<N, W>(wp, i, a.inv[0]) : F{};
    F m = values<N, S1>(s1p, i, a.inv[1]), v{};
    if constexpr (AdamW) {
      v = values<N, S2>(s2p, i, a.inv[2]);
      m = a.b1 * m + c1 * g;
      v = a.b2 * v + c2 * g * g;
      if (new_w) w = w * a.decay - a.step * m / (sqrt_vec<N>(v) / a.bc2_sqrt + a.eps);
    } else {
      m = a.mu * m + (g + a.wd * w);
      if (new_w) w = w - a.lr * m;
    }
    if constexpr (Store) {
      put<N, W>(wp, i, w, a.scale[0]);
      put<N, S1>(s1p, i, m, a.scale[1]);
      if constexpr (AdamW) put<N, S2>(s2p, i, v, a.scale[2]);
    } else {
      // Non-negative floats order as their bits, a NaN above +inf.
      const F x[3] = {w, m, v};
      for (int s = 0; s < 3; ++s) {
        const U mag = live & (as<U>(x[s]) & 0x7FFFFFFFu);
        acc[s] = mag > acc[s] ? mag : acc[s];
      }
    }
  };
  int64_t i = b;
  for (; i + N <= e; i += N) step(a.w, a.s1, a.s2, a.g, i, quant_impl::splat<U>(~0u));
  if (i < e) {  // the tail through N-lane scratch, its other lanes zero and unmeasured
    const int k = static_cast<int>(e - i);
    alignas(64) uint8_t sw[4 * N] = {}, s1[4 * N] = {}, s2[4 * N] = {}, sg[4 * N] = {};
    std::memcpy(sw, static_cast<const uint8_t*>(a.w) + i * kBytes<W>, k * kBytes<W>);
    std::memcpy(s1, static_cast<const uint8_t*>(a.s1) + i * kBytes<S1>, k * kBytes<S1>);
    if (AdamW) std::memcpy(s2, static_cast<const uint8_t*>(a.s2) + i * kBytes<S2>, k * kBytes<S2>);
    std::memcpy(sg, static_cast<const uint8_t*>(a.g) + i * kBytes<G>, k * kBytes<G>);
    step(sw, s1, s2, sg, 0, as<U>(quant_impl::iota<N>() < static_cast<uint32_t>(k)));
    if (Store) {
      std::memcpy(static_cast<uint8_t*>(a.w) + i * kBytes<W>, sw, k * kBytes<W>);
      std::memcpy(static_cast<uint8_t*>(a.s1) + i * kBytes<S1>, s1, k * kBytes<S1>);
      if (AdamW) std::memcpy(static_cast<uint8_t*>(a.s2) + i * kBytes<S2>, s2, k * kBytes<S2>);
    }
  }
  if (!Store)
    for (int s = 0; s < 3; ++s) {
      uint32_t m = 0;
      for (int l = 0; l < N; ++l) m = acc[s][l] > m ? acc[s][l] : m;
      amax[s] = m;
    }
}

template <int N, DType W, DType S1, DType S2, DType G>
void level(const OptimizerStepArgs& a, int64_t b, int64_t e, uint32_t amax[3]) {
  if (a.adamw) return a.store ? pass<N, W, S1, S2, G, true, true>(a, b, e, amax) : pass<N, W, S1, S2, G, true, false>(a, b, e, amax);
  return a.store ? pass<N, W, S1, S2, G, false, true>(a, b, e, amax) : pass<N, W, S1, S2, G, false, false>(a, b, e, amax);
}

// The levels of optimizer_step_supports: fp32, O1, O2/O3.
template <int N>
void run(const OptimizerStepArgs& a, int64_t b, int64_t e, uint32_t amax[3]) {
  using D = DType;
  if (a.wt == D::f32) return level<N, D::f32, D::f32, D::f32, D::f32>(a, b, e, amax);
  if (a.s1t == D::f32) return level<N, D::f16, D::f32, D::f32, D::e5m2>(a, b, e, amax);
  return level<N, D::f16, D::e4m3, D::f16, D::e5m2>(a, b, e, amax);
}

// sum g[i]^2 over [0, n) in double, in row_reduce.h's 16-lane order (exact
// squares; check_finite's norm): the same bits at every width.
inline double sum_squares(const float* g, int64_t n) {
  return lane_sum(n, [g](int64_t i) { return static_cast<double>(g[i]) * g[i]; });
}

}  // namespace
}  // namespace optimizer_step_impl
}  // namespace sgrt::cpu
