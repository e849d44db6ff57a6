// Internal: the blocked GEMM driver (BLIS-style loops, packing with on-the-fly decode,
// a register-tiled micro-kernel), templated on a SIMD traits type.
//
// Included only by the gemm_<isa>.cpp files. Everything here has internal linkage on
// purpose: each file compiles its own copy with its own ISA flags, so no
// AVX-512-compiled function can be picked by the linker for the AVX2 path.
//
// A traits type V provides: `Elem` (packed element: float, or uint16_t BF16),
// `KU` (K values per packed step: 1, or 2 for BF16 pairs), `W` (lanes), `NV`
// (vectors per micro-tile row), `MR`, `KC`, `MC`, `NC`, and the ops `reg`,
// zero(), loadb(const Elem*), bcast(const Elem*), dot(acc, a, b), load(const
// float*), store(float*, reg), mul, fma(a, b, c) = a * b + c, set1(float),
// convert(float) -> Elem.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cpu/gemm_problem.h"
#include "cpu/gguf_decode.h"
#include "cpu/parallel.h"
#include "cpu/vec_transpose.h"
#include "formats/gguf_blocks.h"  // its constants only

namespace sgrt::cpu::gemm_impl {
namespace {

inline int64_t mn(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline float f32_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Reads op(X) elements by storage index, decoded to float.
template <DType D>
struct Reader {
  const void* data;
  const float* lut;
  float operator()(int64_t i) const {
    if constexpr (D == DType::f32) {
      return static_cast<const float*>(data)[i];
    } else if constexpr (D == DType::bf16) {
      return f32_bits(static_cast<uint32_t>(static_cast<const uint16_t*>(data)[i]) << 16);
    } else if constexpr (D == DType::e2m1) {
      const uint8_t byte = static_cast<const uint8_t*>(data)[i >> 1];
      return lut[(byte >> ((i & 1) * 4)) & 0xF];
    } else {
      return lut[static_cast<const uint8_t*>(data)[i]];
    }
  }
};

// An IEEE binary16's value, exactly (a GGUF block's d and m). Not formats.h's
// f16_decode: nothing here calls another header's inline function (see above).
inline float half_value(const uint8_t* p) {
  const uint32_t h = p[0] | p[1] << 8, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  const float v = e == 0    ? static_cast<float>(m) * 0x1p-24f
                  : e == 31 ? f32_bits(m ? 0x7FC00000u : 0x7F800000u)
                            : f32_bits((e + 112u) << 23 | m << 13);
  return h & 0x8000u ? -v : v;
}

// A q8_0 / q4_1 block's 32 weights in 32 / W registers (a q4_1 block's low
// nibbles are weights 0..15, its high ones 16..31), through a traits type's
// bytes_to_f32: ggml's values bit for bit (q * d is exact in f32, a code of at
// most 8 bits times an f16, so q * d + m rounds once whether or not it is fused).
template <class V, DType D>
[[gnu::always_inline]] inline void block_weights(const uint8_t* b, typename V::reg* w) {
  alignas(64) float f[32];
  const auto half = [](const uint8_t* h) {
    if constexpr (requires { V::half(h); }) return V::half(h);
    else return half_value(h);
  };
  const typename V::reg d = V::set1(half(b));
  if constexpr (D == DType::q8_0) {
    V::template bytes_to_f32<true>(b + 2, f);
    V::template bytes_to_f32<true>(b + 18, f + 16);
#pragma GCC unroll 8
    for (int r = 0; r < 32 / V::W; ++r) w[r] = V::mul(V::load(f + r * V::W), d);
  } else {
    typedef uint8_t u8x16 __attribute__((vector_size(16)));
    alignas(64) uint8_t q[32];
    u8x16 codes;
    std::memcpy(&codes, b + 4, sizeof codes);
    const u8x16 lo = codes & 0xF, hi = codes >> 4;
    std::memcpy(q, &lo, sizeof lo);
    std::memcpy(q + 16, &hi, sizeof hi);
    V::template bytes_to_f32<false>(q, f);
    V::template bytes_to_f32<false>(q + 16, f + 16);
    const typename V::reg m = V::set1(half(b + 2));
#pragma GCC unroll 8
    for (int r = 0; r < 32 / V::W; ++r) w[r] = V::fma(V::load(f + r * V::W), d, m);
  }
}

// Elements [i0, i0 + n) of a q8_0 / q4_1 matrix, i0 and n multiples of 16 (half
// blocks), a block at a time through block_weights (gguf_decode_run's scalar
// loop had been most of a QLoRA product's packing).
template <class V, DType D>
void decode_half_blocks(const void* data, int64_t i0, int64_t n, float* out) {
  constexpr int64_t kBytes = D == DType::q8_0 ? fmt::kQ8_0Bytes : fmt::kQ4_1Bytes;
  constexpr int H = 16 / V::W;  // registers a half block
  for (int64_t i = i0; i < i0 + n;) {
    typename V::reg w[2 * H];
    block_weights<V, D>(static_cast<const uint8_t*>(data) + i / 32 * kBytes, w);
    // Constant register indices, so w stays in registers.
    const bool first = i % 32 == 0, second = i % 32 == 16 || i + 32 <= i0 + n;
    if (first)
#pragma GCC unroll 8
      for (int r = 0; r < H; ++r) V::store(out + r * V::W, w[r]);
    if (second)
#pragma GCC unroll 8
      for (int r = 0; r < H; ++r) V::store(out + (first ? 16 : 0) + r * V::W, w[H + r]);
    const int64_t done = 16 * (first + second);
    out += done, i += done;
  }
}

// Decodes n consecutive stored elements from index i0, times sc, into out. A traits
// type may offer a SIMD decode_fast<D> (false: this call is not one it takes).
template <class V, DType D>
void decode_run(const Source& s, int64_t i0, int64_t n, float sc, typename V::Elem* out) {
  if constexpr (dtype_is_block(D)) {  // a frozen quantized base: whole blocks at a time
    if constexpr (std::is_same_v<typename V::Elem, float>) {
      if constexpr (requires(const uint8_t* p, float* o) { V::template bytes_to_f32<false>(p, o); })
        if (sc == 1.0f && i0 % 16 == 0 && n % 16 == 0) return decode_half_blocks<V, D>(s.data, i0, n, out);
      if (sc == 1.0f) return gguf_decode_run(D, s.data, i0, n, out);
    }
    alignas(64) float tmp[256];
    for (int64_t j0 = 0; j0 < n; j0 += 256) {
      const int64_t m = mn(256, n - j0);
      gguf_decode_run(D, s.data, i0 + j0, m, tmp);
      for (int64_t j = 0; j < m; ++j) out[j0 + j] = V::convert(tmp[j] * sc);
    }
    return;
  }
  if constexpr (requires { V::template decode_fast<D>(s, i0, n, sc, out); })
    if (V::template decode_fast<D>(s, i0, n, sc, out)) return;
  const Reader<D> rd{s.data, s.lut};
  for (int64_t j = 0; j < n; ++j) out[j] = V::convert(rd(i0 + j) * sc);
}

// Row o's elements [k0, k0 + n) of a K-contiguous source, decoded, each times its
// inner/block scale. A traits type may decode a run of blocks with their scales in
// one pass (decode_fast_blocks<D>; a call per block was 14% of an nvfp4-train GPT
// step, NVFP4's blocks being 16 long); otherwise one decode_run per block.
template <class V, DType D>
void decode_row(const Source& s, int64_t o, int64_t k0, int64_t n, typename V::Elem* out) {
  const int64_t i0 = o * s.s_outer + k0;
  if (!s.kscale) return decode_run<V, D>(s, i0, n, 1.0f, out);
  const float* sc = s.kscale + o * s.kscale_ld;
  if constexpr (requires { V::template decode_fast_blocks<D>(s, i0, n, sc, s.kblock, out); })
    if (k0 % s.kblock == 0 && V::template decode_fast_blocks<D>(s, i0, n, sc + k0 / s.kblock, s.kblock, out)) return;
  for (int64_t kb = k0, ke; kb < k0 + n; kb = ke) {
    ke = mn(k0 + n, (kb / s.kblock + 1) * s.kblock);
    decode_run<V, D>(s, o * s.s_outer + kb, ke - kb, sc[kb / s.kblock], out + (kb - k0));
  }
}

// K is cut into equal blocks of at most KC + KC / 4 (multiples of 32, GGUF's block
// length): K = 784 runs as 2 x 392, not 384 + 384 + 16, whose last block would pay a
// whole pass over C and a pack for 16 steps. A function of K and KC alone, so ISAs
// with the same KC sum in the same order.
template <class V>
constexpr int64_t kc_max() { return V::KC + V::KC / 4; }
template <class V>
int64_t k_block(int64_t K) {
  const int64_t blocks = cdiv(K, kc_max<V>());
  return mn(kc_max<V>(), cdiv(cdiv(K, blocks), 32) * 32);
}

// dst[k * R + r] = src[r * ld + k] for k < W, r < R: row groups of W loaded a
// vector each (rows past R zero), transposed W x W in registers, stored a K step at
// a time (R lanes of it; the same words as the element loop, fewer operations).
template <int W, int R, int G = 0>
void pack_f32_tile(const float* src, int64_t ld, float* dst) {
  if constexpr (G * W < R) {
    typedef float vec __attribute__((vector_size(4 * W)));
    constexpr int lanes = R - G * W < W ? R - G * W : W;
    vec t[W];
#pragma GCC unroll 16
    for (int l = 0; l < W; ++l) {
      t[l] = vec{};
      if (l < lanes) std::memcpy(&t[l], src + (G * W + l) * ld, sizeof(vec));
    }
    transpose_tile<W>(t);
#pragma GCC unroll 16
    for (int i = 0; i < W; ++i) std::memcpy(dst + i * R + G * W, &t[i], sizeof(float) * lanes);
    pack_f32_tile<W, R, G + 1>(src, ld, dst);
  }
}

// Packs op(X)[o0 .. o0+rows) x [k0 .. k0+kc) into an R-wide panel: K step kk/KU, then
// row r, then kk%KU. Rows past `rows` and the odd K tail are zero. Each contiguous
// run of the source is decoded first, then placed.
template <class V, int R, DType D>
void pack_typed(const Source& s, int64_t o0, int64_t rows, int64_t k0, int64_t kc,
                typename V::Elem* dst) {
  using E = typename V::Elem;
  constexpr int KU = V::KU;
  if (rows < R || kc % KU) std::memset(dst, 0, sizeof(E) * cdiv(kc, KU) * KU * R);
  if constexpr (std::is_same_v<E, float> && D == DType::f32) {
    if (s.s_k == 1 && !s.kscale) {
      // Plain f32 rows: copy K step by K step, reading every row at once, so the
      // rows' cache misses overlap (row by row, each ~1 KB row was a fresh stream
      // and packing took 9 cycles an element on a GPT step).
      const float* src = static_cast<const float*>(s.data) + o0 * s.s_outer + k0;
      int64_t k = 0;
      if constexpr (V::W >= 4)  // whole panels: W K steps at a time, transposed in registers
        if (rows == R)
          for (; k + V::W <= kc; k += V::W) pack_f32_tile<V::W, R>(src + k, s.s_outer, dst + k * R);
      for (; k < kc; ++k)
        for (int64_t r = 0; r < rows; ++r) dst[k * R + r] = src[r * s.s_outer + k];
      return;
    }
  }
  alignas(64) E tmp[2][(kc_max<V>() > R ? kc_max<V>() : R) + 64];
  if (s.s_k == 1) {  // K contiguous: decode a row, then place its K pairs R apart
    if constexpr (!dtype_is_block(D)) {
      // Every row's run requested up front, so their cache misses overlap (row by
      // row, each decode waited for its own: 10% of an fp8-block GPT step).
      const uint8_t* base = static_cast<const uint8_t*>(s.data);
      const int64_t bytes = kc * dtype_bits(D) / 8;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(base + ((o0 + r) * s.s_outer + k0) * dtype_bits(D) / 8 + b);
    }
    int64_t k = 0;
    if constexpr (std::is_same_v<E, float> && V::W >= 4)
      if (rows == R) {
        // Up to kSteps K steps of every row decoded, then placed by W x W
        // transposes in registers (placed one element at a time, R apart, they
        // had been most of a QLoRA product's packing).
        constexpr int64_t kSteps = 64;
        alignas(64) float rows_k[R * kSteps];
        for (int64_t c; (c = mn(kSteps, (kc - k) / V::W * V::W)) > 0; k += c) {
          for (int64_t r = 0; r < R; ++r) decode_row<V, D>(s, o0 + r, k0 + k, c, rows_k + r * kSteps);
          for (int64_t j = 0; j < c; j += V::W) pack_f32_tile<V::W, R>(rows_k + j, kSteps, dst + (k + j) * R);
        }
      }
    if (k == kc) return;
    for (int64_t r = 0; r < rows; ++r) {  // (k > 0 only where KU == 1)
      decode_row<V, D>(s, o0 + r, k0 + k, kc - k, tmp[0]);
      const E* t = tmp[0];
      E* d = dst + k * R + r * KU;
      int64_t n = kc - k;
      for (; n >= KU; n -= KU, t += KU, d += R * KU) std::memcpy(d, t, sizeof(E) * KU);
      if (n) *d = *t;
    }
    return;
  }
  for (int64_t kb = k0, ke; kb < k0 + kc; kb = ke) {
    // Runs of K sharing one inner/block scale.
    ke = s.kscale ? mn(k0 + kc, (kb / s.kblock + 1) * s.kblock) : k0 + kc;
    auto scale = [&](int64_t o) { return s.kscale ? s.kscale[o * s.kscale_ld + kb / s.kblock] : 1.0f; };
    // Rows contiguous (s_outer == 1): decode KU rows' worth of one K step.
    const bool uniform = !s.kscale || s.kscale_ld == 0;  // one scale for all rows
    auto decode_k = [&](int64_t k, E* t) {
      if (uniform) return decode_run<V, D>(s, o0 + k * s.s_k, rows, scale(o0), t);
      for (int64_t r = 0; r < rows; ++r) decode_run<V, D>(s, o0 + r + k * s.s_k, 1, scale(o0 + r), t + r);
    };
    for (int64_t k = kb; k < ke;) {
      const int64_t j = k - k0;
      E* d = dst + (j / KU) * R * KU + j % KU;
      if constexpr (KU == 1) {  // the K step's rows are the panel's: decode in place
        decode_k(k, d);
        k += 1;
      } else if (j % 2 == 0 && k + 1 < ke) {  // a whole pair: interleave two rows
        decode_k(k, tmp[0]);
        decode_k(k + 1, tmp[1]);
        for (int64_t r = 0; r < rows; ++r) {
          d[2 * r] = tmp[0][r];
          d[2 * r + 1] = tmp[1][r];
        }
        k += 2;
      } else {
        decode_k(k, tmp[0]);
        for (int64_t r = 0; r < rows; ++r) d[r * KU] = tmp[0][r];
        k += 1;
      }
    }
  }
}

// f.template operator()<D>() for the source dtype D's instantiation (e5m2 runs
// as e4m3: any 8-bit table). Not for pack(): GCC then inlines each pack_typed
// into its lambda, 14 KB more of the AVX512_BF16 kernel.
template <class F>
void with_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<DType::f32>();
    case DType::bf16: return f.template operator()<DType::bf16>();
    case DType::e2m1: return f.template operator()<DType::e2m1>();
    case DType::q8_0: return f.template operator()<DType::q8_0>();
    case DType::q4_1: return f.template operator()<DType::q4_1>();
    default: return f.template operator()<DType::e4m3>();
  }
}

template <class V, int R>
void pack(const Source& s, int64_t o0, int64_t rows, int64_t k0, int64_t kc, typename V::Elem* dst) {
  switch (s.dtype) {
    case DType::f32: return pack_typed<V, R, DType::f32>(s, o0, rows, k0, kc, dst);
    case DType::bf16: return pack_typed<V, R, DType::bf16>(s, o0, rows, k0, kc, dst);
    case DType::e2m1: return pack_typed<V, R, DType::e2m1>(s, o0, rows, k0, kc, dst);
    case DType::q8_0: return pack_typed<V, R, DType::q8_0>(s, o0, rows, k0, kc, dst);
    case DType::q4_1: return pack_typed<V, R, DType::q4_1>(s, o0, rows, k0, kc, dst);
    default: return pack_typed<V, R, DType::e4m3>(s, o0, rows, k0, kc, dst);  // any 8-bit LUT
  }
}

// Packs op(X)[o0 .. o0+rows) into consecutive R-wide panels `stride` elements apart.
template <class V, int R>
void pack_panels(const Source& s, int64_t o0, int64_t rows, int64_t k0, int64_t kc,
                 typename V::Elem* dst, int64_t stride) {
  if constexpr (std::is_same_v<typename V::Elem, float>) {
    if (s.dtype == DType::f32 && s.s_outer == 1 && !s.kscale) {
      // Plain f32, rows contiguous: each K step's run of `rows` values is read once
      // for all panels (panel by panel, every panel re-read the same lines of all kc
      // K rows, which a wide matrix had pushed out of cache by then).
      const int64_t panels = cdiv(rows, R), tail = rows - (panels - 1) * R;
      if (tail < R) std::memset(dst + (panels - 1) * stride, 0, sizeof(float) * kc * R);
      const float* src = static_cast<const float*>(s.data) + o0 + k0 * s.s_k;
      for (int64_t k = 0; k < kc; ++k, src += s.s_k) {
        // K rows are s_k apart (a whole activation row, 1-4 KB on a GPT): the
        // weight gradient's operands come from memory, and the hardware's stride
        // prefetch left the copy waiting on every row's first line.
        if (k + 4 < kc)
          for (int64_t b = 0; b < rows; b += 16) __builtin_prefetch(src + 4 * s.s_k + b);
        for (int64_t j = 0; j < panels - 1; ++j) std::memcpy(dst + j * stride + k * R, src + j * R, sizeof(float) * R);
        std::memcpy(dst + (panels - 1) * stride + k * R, src + (panels - 1) * R, sizeof(float) * tail);
      }
      return;
    }
  }
  for (int64_t j = 0; j * R < rows; ++j) pack<V, R>(s, o0 + j * R, mn(R, rows - j * R), k0, kc, dst + j * stride);
}

// y + b in its own rounding, even where the compiler contracts a * b + c into one
// FMA (gemm_generic.cpp is built so): the barrier hides that y came from a multiply.
inline float separate_add(float y, float b) {
  asm("" : "+m"(y));
  return y + b;
}

// One element of the epilogue done in scalar code: y = beta * y + v (beta == 0:
// y not read), then + *add when given, a separate add's rounding.
inline void merge_into(float& y, float v, float beta, const float* add) {
  y = beta == 0.0f ? v : y * beta + v;
  if (add) y = separate_add(y, *add);
}

// A bias added to a merged vector: y * 1 + b (an FMA intrinsic: one rounding,
// y + b's); the portable kernel's scalar goes through separate_add.
template <class V>
typename V::reg add_bias(typename V::reg y, typename V::reg b) {
  if constexpr (V::W == 1) return separate_add(y, b);
  else return V::fma(y, V::set1(1.0f), b);
}

// A vector of merged sums v stored at c: beta * C + v (beta == 0: C not read),
// then + the bias's vector at `bias` when given.
template <class V>
void store_merged(float* c, typename V::reg v, float beta, const float* bias) {
  const typename V::reg y = beta == 0.0f ? v : V::fma(V::load(c), V::set1(beta), v);
  V::store(c, bias ? add_bias<V>(y, V::load(bias)) : y);
}

// C[MR x NR] = beta * C + (acc * cs) * rs, acc = sum over kp packed steps, then
// + bias[NR] when given (rounded after the merge: a separate add's bits).
// beta == 0 never reads C. ROWS < MR: the first `rows` (<= ROWS) rows of a tile
// cut by the matrix's last rows, each with a full tile's arithmetic (the packed A
// panel still MR rows apart), at ROWS rows' cost.
template <class V, int ROWS = V::MR>
void micro(int64_t kp, const typename V::Elem* a, const typename V::Elem* b, float* c, int64_t ldc,
           const float* rs, const float* cs, float beta, const float* bias = nullptr, int rows = ROWS) {
  constexpr int MR = V::MR, NV = V::NV, KU = V::KU, NR = NV * V::W;
  static_assert(ROWS <= MR);
  typename V::reg acc[ROWS][NV];
#pragma GCC unroll 16
  for (int i = 0; i < ROWS; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = V::zero();
  for (int64_t k = 0; k < kp; ++k, a += MR * KU, b += NR * KU) {
    decltype(V::loadb(b)) bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = V::loadb(b + j * V::W * KU);
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i) {
      const auto av = V::bcast(a + i * KU);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = V::dot(acc[i][j], av, bv[j]);
    }
  }
  typename V::reg csv[NV];
#pragma GCC unroll 4
  for (int j = 0; j < NV; ++j) csv[j] = V::load(cs + j * V::W);
#pragma GCC unroll 16
  for (int i = 0; i < ROWS && i < rows; ++i) {
    const typename V::reg r = V::set1(rs[i]);
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j)
      store_merged<V>(c + i * ldc + j * V::W, V::mul(V::mul(acc[i][j], csv[j]), r), beta,
                      bias ? bias + j * V::W : nullptr);
  }
}

// Row counts for the cut tiles' kernels: 4 and 8 rows where MR is larger (a
// remainder of 4 rows, M = 256 on 14-row tiles, cost 1.4 full tiles through
// micro_edge), clamped to MR so every ISA's instantiations compile.
template <class V>
constexpr int cut_rows(int rows) { return rows < V::MR ? rows : V::MR; }

// A tile cut by the matrix edge, or stored transposed (Problem::c_trans): compute
// the full tile into a buffer, then merge with the same arithmetic as micro().
// bias: the tile's stored columns' (c_trans: its rows'), or null.
template <class V>
void micro_edge(int64_t kp, const typename V::Elem* a, const typename V::Elem* b, float* c,
                int64_t ldc, int64_t mr, int64_t nr, const float* rs, const float* cs, float beta,
                bool c_trans, const float* bias) {
  constexpr int MR = V::MR, NR = V::NV * V::W;
  alignas(64) float t[MR * NR];
  alignas(64) float one[NR > MR ? NR : MR];
  for (float& x : one) x = 1.0f;
  micro<V>(kp, a, b, t, NR, one, one, 0.0f);
  if (c_trans) {
    for (int64_t j = 0; j < nr; ++j)
      for (int64_t i = 0; i < mr; ++i) merge_into(c[j * ldc + i], (t[i * NR + j] * rs[i]) * cs[j], beta, bias ? bias + i : nullptr);
    return;
  }
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) merge_into(c[i * ldc + j], (t[i * NR + j] * cs[j]) * rs[i], beta, bias ? bias + j : nullptr);
}

// The packed K steps [lo, hi) of the block starting at K index pc (kp steps) that
// rows [m0, m0 + mr) need: all, or those a triangular A leaves non-zero.
template <class V>
std::pair<int64_t, int64_t> packed_steps(Triangle tri, int64_t m0, int64_t mr, int64_t pc, int64_t kp) {
  constexpr int KU = V::KU;
  if (tri == Triangle::a_lower) return {0, mn(kp, cdiv(std::max<int64_t>(0, m0 + mr - pc), KU))};
  if (tri == Triangle::a_upper) return {mn(kp, std::max<int64_t>(0, m0 - pc) / KU), kp};
  return {0, kp};
}

// part[0] after part[i] += part[i + w] (i < w) for w = 8, 4, 2, 1: the fixed
// tree that merges dot16s' partial sums, each step's adds done as one vector add.
inline float tree16(const float* part) {
  typedef float v8 __attribute__((vector_size(32)));
  typedef float v4 __attribute__((vector_size(16)));
  v8 lo, hi;
  std::memcpy(&lo, part, sizeof lo);
  std::memcpy(&hi, part + 8, sizeof hi);
  lo += hi;
  v4 a, b;
  std::memcpy(&a, &lo, sizeof a);
  std::memcpy(&b, reinterpret_cast<const float*>(&lo) + 4, sizeof b);
  a += b;
  return (a[0] + a[2]) + (a[1] + a[3]);
}

// out[i * J + j] = sum x[i][k] y[j][k] over k < n as 16 partial sums (lane
// k % 16, fused multiply-adds) merged by tree16: the same order on every V, whose
// width divides 16. I x J sums at once, so each vector loaded serves several and
// their chains hide the FMA latency.
template <class V, int I = 1, int J = 1>
void dot16s(const float* const* x, const float* const* y, int64_t n, float* out) {
  constexpr int R = 16 / V::W;
  typename V::reg acc[I][J][R];
#pragma GCC unroll 16
  for (int i = 0; i < I; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < J; ++j)
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[i][j][r] = V::zero();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      typename V::reg yv[J];
#pragma GCC unroll 16
      for (int j = 0; j < J; ++j) yv[j] = V::load(y[j] + k + r * V::W);
#pragma GCC unroll 16
      for (int i = 0; i < I; ++i) {
        const typename V::reg xv = V::load(x[i] + k + r * V::W);
#pragma GCC unroll 16
        for (int j = 0; j < J; ++j) acc[i][j][r] = V::fma(xv, yv[j], acc[i][j][r]);
      }
    }
  for (int i = 0; i < I; ++i)
    for (int j = 0; j < J; ++j) {
      alignas(64) float part[16];
      for (int r = 0; r < R; ++r) V::store(part + r * V::W, acc[i][j][r]);
      for (int64_t t = k; t < n; ++t) part[t % 16] = std::fma(x[i][t], y[j][t], part[t % 16]);
      out[i * J + j] = tree16(part);
    }
}

// out[j] = x . w_j for J rows of a q8_0 / q4_1 B (row[j]: their indices), each
// block decoded into registers as it is multiplied (decoded to memory a row at
// a time first, the decode was most of a 4-bit model's generation step). The
// values and each sum's order are dot16s' over the decoded rows: the same bits.
template <class V, DType D, int J>
void block_rows_dot(const Problem& p, const float* x, const int64_t* row, float* out) {
  constexpr int R = 16 / V::W;
  constexpr int64_t kBytes = D == DType::q8_0 ? fmt::kQ8_0Bytes : fmt::kQ4_1Bytes;
  const uint8_t* w_row[J];
  for (int j = 0; j < J; ++j) w_row[j] = static_cast<const uint8_t*>(p.b.data) + row[j] * (p.b.s_outer / 32 * kBytes);
  typename V::reg acc[J][R];
#pragma GCC unroll 16
  for (int j = 0; j < J; ++j)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[j][r] = V::zero();
  for (int64_t blk = 0; blk < p.K / 32; ++blk) {
    typename V::reg xv[2 * R], w[2 * R];
#pragma GCC unroll 16
    for (int r = 0; r < 2 * R; ++r) xv[r] = V::load(x + blk * 32 + r * V::W);
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) {
      block_weights<V, D>(w_row[j] + blk * kBytes, w);
#pragma GCC unroll 16
      for (int r = 0; r < 2 * R; ++r) acc[j][r % R] = V::fma(xv[r], w[r], acc[j][r % R]);
    }
  }
  for (int j = 0; j < J; ++j) {
    alignas(64) float part[16];
    for (int r = 0; r < R; ++r) V::store(part + r * V::W, acc[j][r]);
    out[j] = tree16(part);
  }
}

// out[j] = x . w_j for J rows of B (row[j]: their indices; with their K
// scales), in dot16s' order.
template <class V, int J>
void rows_dot(const Problem& p, const float* x, const int64_t* row, float* out) {
  const Source& s = p.b;
  if constexpr (requires(const uint8_t* q, float* o) { V::template bytes_to_f32<false>(q, o); })
    if (dtype_is_block(s.dtype) && !s.kscale && p.K % 32 == 0)
      return s.dtype == DType::q8_0 ? block_rows_dot<V, DType::q8_0, J>(p, x, row, out)
                                    : block_rows_dot<V, DType::q4_1, J>(p, x, row, out);
  const float* w[J];
  if (s.dtype == DType::f32 && !s.kscale) {
    for (int j = 0; j < J; ++j) w[j] = static_cast<const float*>(s.data) + row[j] * s.s_outer;
  } else {
    float* rows = static_cast<float*>(thread_scratch(1, sizeof(float) * J * p.K));
    with_dtype(s.dtype, [&]<DType D>() {
      for (int j = 0; j < J; ++j) decode_row<V, D>(s, row[j], 0, p.K, rows + j * p.K);
    });
    for (int j = 0; j < J; ++j) w[j] = rows + j * p.K;
  }
  dot16s<V, 1, J>(&x, w, p.K, out);
}

// A product is_gemv() names: C[0, j] = ((x . w_j) * cs[j]) * rs[0], then beta,
// the bias and `act` as micro_edge() merges them. A's row is decoded once; the
// threads split the rows of B, 4 at a time (their sums' chains side by side,
// each in dot16s' order), so neither the thread count nor the grouping changes a bit.
template <class V>
void gemv(const Problem& p) {
  static_assert(std::is_same_v<typename V::Elem, float>);
  const int64_t K = p.K, N = p.N;
  const float* x = static_cast<const float*>(p.a.data);
  if (p.a.dtype != DType::f32 || p.a.kscale) {
    float* row = static_cast<float*>(thread_scratch(0, sizeof(float) * K));
    with_dtype(p.a.dtype, [&]<DType D>() { decode_row<V, D>(p.a, 0, 0, K, row); });
    x = row;
  }
  constexpr int J = 4;
  parallel_for(cdiv(N, J), std::max<int64_t>(1, 1024 / K), [&](int64_t t0, int64_t t1) {
    const int64_t n0 = t0 * J, n1 = mn(N, t1 * J);
    for (int64_t j0 = n0; j0 < n1; j0 += J) {
      int64_t row[J];  // past the last row, the last again (its sum unused)
      for (int j = 0; j < J; ++j) row[j] = mn(j0 + j, N - 1);
      float dot[J];
      rows_dot<V, J>(p, x, row, dot);
      for (int64_t j = j0; j < mn(N, j0 + J); ++j)
        merge_into(p.C[j], (dot[j - j0] * p.cs[j]) * p.rs[0], p.beta, p.bias ? p.bias + j : nullptr);
    }
    activate_run(p.C + n0, n1 - n0, p.act, n0);
  });
}

// gemm_skinny.h: the products skinny_fits() names (a side of at most 16).
template <class V>
void skinny(const Problem& p);

template <class V>
void run(const Problem& p) {
  using E = typename V::Elem;
  if constexpr (std::is_same_v<E, float>) {
    if (is_gemv(p)) return gemv<V>(p);
    if (skinny_fits(p)) return skinny<V>(p);
  }
  constexpr int MR = V::MR, NR = V::NV * V::W, KU = V::KU;
  const int threads = num_threads();
  for (int64_t jc = 0; jc < p.N; jc += V::NC) {
    const int64_t nc = mn(V::NC, p.N - jc), npanels = cdiv(nc, NR);
    const int64_t kblock = k_block<V>(p.K);
    for (int64_t pc = 0; pc < p.K; pc += kblock) {
      const int64_t kc = mn(kblock, p.K - pc), kp = cdiv(kc, KU);
      const int64_t bsz = kp * KU * NR, asz = kp * KU * MR;
      E* bt = static_cast<E*>(thread_scratch(1, sizeof(E) * bsz * npanels));
      parallel_for(npanels, 4, [&](int64_t b0, int64_t b1) {
        pack_panels<V, NR>(p.b, jc + b0 * NR, mn(nc - b0 * NR, (b1 - b0) * NR), pc, kc, bt + b0 * bsz, bsz);
      });
      const float beta = pc == 0 ? p.beta : 1.0f;
      const bool last_k = pc + kc == p.K;  // the bias follows the whole sum
      // Tasks: row blocks (each packs its own A block), as many as a multiple of
      // the threads allows (M = 500 in three blocks left one of two threads a
      // third of the product idle), split further by column panels when there
      // are too few rows to feed every thread. The blocks share out the full
      // tiles; a last cut tile, cheap now, is a task of its own (M = 256 on
      // 14-row tiles: 126 + 126 + 4 rows, not 140 + 116).
      const int64_t blocks = cdiv(cdiv(p.M, V::MC), threads) * threads;
      const int64_t full_rows = p.M >= MR ? p.M / MR * MR : p.M;
      const int64_t mc = cdiv(cdiv(full_rows, blocks), MR) * MR;
      const int64_t n_ic = cdiv(p.M, mc);
      const int64_t n_jn = n_ic >= threads ? 1 : mn(npanels, cdiv(threads, n_ic));
      parallel_for(n_ic * n_jn, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t i0 = (t / n_jn) * mc, mrows = mn(mc, p.M - i0), jn = t % n_jn;
          E* at = static_cast<E*>(thread_scratch(0, sizeof(E) * asz * cdiv(mrows, MR)));
          pack_panels<V, MR>(p.a, i0, mrows, pc, kc, at, asz);
          for (int64_t j = jn * npanels / n_jn; j < (jn + 1) * npanels / n_jn; ++j) {
            const int64_t n0 = jc + j * NR, nr = mn(NR, p.N - n0);
            for (int64_t ir = 0; ir < mrows; ir += MR) {
              const int64_t m0 = i0 + ir, mr = mn(MR, p.M - m0);
              if (p.tri == Triangle::c_lower && n0 >= m0 + mr) continue;  // wholly above the diagonal
              const auto [k_lo, k_hi] = packed_steps<V>(p.tri, m0, mr, pc, kp);
              float* c = p.c_trans ? p.C + n0 * p.ldc + m0 : p.C + m0 * p.ldc + n0;
              const E* a = at + (ir / MR) * asz + k_lo * MR * KU;
              const E* b = bt + j * bsz + k_lo * NR * KU;
              const float* bias = p.bias && last_k ? p.bias + (p.c_trans ? m0 : n0) : nullptr;
              const int64_t kn = k_hi - k_lo;
              const bool whole_row = nr == NR && !p.c_trans;  // micro() stores rows of NR
              const int rows = static_cast<int>(mr);
              if (whole_row && mr == MR)
                micro<V>(kn, a, b, c, p.ldc, p.rs + m0, p.cs + n0, beta, bias);
              else if (whole_row && MR > 4 && mr <= 4)
                micro<V, cut_rows<V>(4)>(kn, a, b, c, p.ldc, p.rs + m0, p.cs + n0, beta, bias, rows);
              else if (whole_row && MR > 8 && mr <= 8)
                micro<V, cut_rows<V>(8)>(kn, a, b, c, p.ldc, p.rs + m0, p.cs + n0, beta, bias, rows);
              else
                micro_edge<V>(kn, a, b, c, p.ldc, mr, nr, p.rs + m0, p.cs + n0, beta, p.c_trans, bias);
            }
          }
          // The activation follows the whole sum and its bias: over the task's
          // block, row by row while it is in cache (tile by tile, a relu_grad
          // mask read as 14 strided streams cost more than the separate op).
          if (last_k && p.act.any()) {
            const int64_t n_lo = jc + jn * npanels / n_jn * NR, n_hi = mn(p.N, jc + (jn + 1) * npanels / n_jn * NR);
            const int64_t rows = p.c_trans ? n_hi - n_lo : mrows, len = p.c_trans ? mrows : n_hi - n_lo;
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t at = p.c_trans ? (n_lo + r) * p.ldc + i0 : (i0 + r) * p.ldc + n_lo;
              activate_run(p.C + at, len, p.act, at);
            }
          }
        }
      });
    }
  }
}

}  // namespace
}  // namespace sgrt::cpu::gemm_impl

#include "cpu/gemm_skinny.h"  // skinny<V>(), which uses the helpers above
