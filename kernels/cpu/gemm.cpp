// GEMM front end: checks arguments, turns scales into row / column / K multipliers,
// picks the kernel for the active ISA and runs it.
#include "cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/gemm_problem.h"
#include "cpu/parallel.h"
#include "cpu/zero_rows.h"
#include "formats/formats.h"

namespace sgrt::cpu {
namespace {

using gemm_impl::Problem;
using gemm_impl::Source;

// Decode tables, as float and as BF16 bits.
struct Lut {
  float f[256];
  uint16_t bf16[256];
  Lut(float (*decode)(uint32_t), uint32_t codes) {
    for (uint32_t c = 0; c < 256; ++c) {
      f[c] = c < codes ? decode(c) : 0.0f;
      bf16[c] = fmt::bf16_encode(f[c]);
    }
  }
};

const Lut* lut_for(DType t) {
  static const Lut e4m3(fmt::e4m3_decode, 256), e5m2(fmt::e5m2_decode, 256), e2m1(fmt::e2m1_decode, 16);
  switch (t) {
    case DType::e4m3: return &e4m3;
    case DType::e5m2: return &e5m2;
    case DType::e2m1: return &e2m1;
    default: return nullptr;
  }
}

bool is_data_dtype(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::e4m3 || t == DType::e5m2 || t == DType::e2m1 ||
         dtype_is_block(t);
}

// The 8-bit scale codes' values (e4m3's table is the data LUT's), or null.
const float* scale_table(DType t) {
  static const Lut e8m0(fmt::e8m0_decode, 256);
  return t == DType::e8m0 ? e8m0.f : t == DType::e4m3 ? lut_for(DType::e4m3)->f : nullptr;
}

float scale_at(const GemmOperand& op, int64_t i) {
  switch (op.scale_dtype) {
    case DType::f32: return static_cast<const float*>(op.scale)[i];
    case DType::i32: return std::ldexp(1.0f, -static_cast<const int32_t*>(op.scale)[i]);
    case DType::e8m0: return fmt::e8m0_decode(static_cast<const uint8_t*>(op.scale)[i]);
    default: return fmt::e4m3_decode(static_cast<const uint8_t*>(op.scale)[i]);  // e4m3
  }
}

// op(A) = [M,K] is stored [M,K] unless trans; op(B) = [K,N] is stored [N,K] only if
// trans. "Outer-major" storage puts an operand's K index contiguous.
bool outer_major(const GemmOperand& op, bool is_b) { return op.trans == is_b; }

// Checks one operand whose op() is [outer, K] (B's is transposed: [K, outer]).
const char* check(const GemmOperand& op, bool is_b, int64_t outer, int64_t K) {
  if (!is_data_dtype(op.dtype)) return "gemm: operand dtype must be f32, bf16, e4m3, e5m2, e2m1, q8_0 or q4_1";
  if (dtype_is_block(op.dtype) && (op.ld % dtype_block_size(op.dtype) || op.scale_mode != OperandScale::none))
    return "gemm: a q8_0 / q4_1 operand needs whole blocks per stored row (ld % 32 == 0) and no extra scale";
  if (outer * K > 0 && !op.data) return "gemm: null operand data";
  if (op.ld < (outer_major(op, is_b) ? K : outer)) return "gemm: leading dimension smaller than the stored row";
  if (op.scale_mode == OperandScale::none) return nullptr;
  if (!op.scale) return "gemm: scale_mode set but scale is null";
  const DType sd = op.scale_dtype;
  if (sd != DType::f32 && sd != DType::i32 && sd != DType::e8m0 && sd != DType::e4m3)
    return "gemm: scale_dtype must be f32, i32, e8m0 or e4m3";
  if (op.scale_mode == OperandScale::block) {
    if (op.block <= 0) return "gemm: block scaling needs block > 0";
    if (op.scale_ld != 0 && op.scale_ld < (K + op.block - 1) / op.block) return "gemm: scale_ld too small";
  }
  return nullptr;
}

// Fills the operand's Source; K multipliers (inner / block modes) go to `kscale`.
Source source(const GemmOperand& op, bool is_b, int64_t outer, int64_t K, std::vector<float>& kscale) {
  const bool om = outer_major(op, is_b);
  const Lut* lut = lut_for(op.dtype);
  Source s{op.data, op.dtype, om ? op.ld : 1, om ? 1 : op.ld, lut ? lut->f : nullptr,
           lut ? lut->bf16 : nullptr, nullptr, 0, 1};
  if (op.scale_mode == OperandScale::inner) {
    kscale.resize(K);
    for (int64_t k = 0; k < K; ++k) kscale[k] = scale_at(op, k);
    s.kscale = kscale.data();
  } else if (op.scale_mode == OperandScale::block) {
    const int64_t ld = op.scale_ld ? op.scale_ld : (K + op.block - 1) / op.block;
    const int64_t nb = (K + op.block - 1) / op.block;
    kscale.resize(outer * nb);
    if (const float* table = scale_table(op.scale_dtype)) {  // MX / NVFP4: a lookup per block
      const uint8_t* codes = static_cast<const uint8_t*>(op.scale);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t b = 0; b < nb; ++b) kscale[o * nb + b] = table[codes[o * ld + b]];
    } else {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t b = 0; b < nb; ++b) kscale[o * nb + b] = scale_at(op, o * ld + b);
    }
    s.kscale = kscale.data();
    s.kscale_ld = nb;
    s.kblock = op.block;
  }
  return s;
}

// The operand's epilogue multipliers: tensor_scale, tensor and outer scales.
void outer_scales(const GemmOperand& op, float mult, std::vector<float>& out) {
  mult *= op.tensor_scale;
  if (op.scale_mode == OperandScale::tensor) mult *= scale_at(op, 0);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = op.scale_mode == OperandScale::outer ? mult * scale_at(op, static_cast<int64_t>(i)) : mult;
}

// C's rows [r0, r1) (row stride ldc, N wide) as an empty sum leaves them: `zero`
// (beta == 0: C not read) or beta * C, plus the bias, then act.
void empty_sum_rows(float* C, int64_t ldc, int64_t N, int64_t r0, int64_t r1, float zero, float beta,
                    const float* bias, const Activation& act) {
  for (int64_t i = r0; i < r1; ++i) {
    float* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) {
      c[j] = beta == 0.0f ? zero : beta * c[j];
      if (bias) c[j] += bias[j];
    }
    activate_run(c, N, act, i * ldc);
  }
}

// The product of checked, non-empty operands on the active ISA's driver.
void multiply(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& a, const GemmOperand& b, float beta,
              float* C, int64_t ldc, const float* bias, Triangle tri, Activation act) {
  std::vector<float> rs(M), cs(N), ka, kb;
  outer_scales(a, alpha, rs);
  outer_scales(b, 1.0f, cs);
  const Source sa = source(a, false, M, K, ka), sb = source(b, true, N, K, kb);
  const Problem wide{M, N, K, sa, sb, rs.data(), cs.data(), beta, C, ldc, false, bias, tri, act};
  // A product with few columns that the f32 drivers' skinny path does not take
  // (FP8 or scaled operands) runs as C^T = op(B)^T op(A)^T: its columns become the
  // micro-tile's rows (14 of them) instead of a fraction of its 32 lanes. Every
  // element's sum and merge are the same, so the result is bit for bit the
  // untransposed one. (Not with a triangle: the driver's skips are the
  // untransposed product's.)
  const bool narrow = N < 16 && M > N && tri == Triangle::none && !gemm_impl::skinny_fits(wide);
  const Problem p = narrow ? Problem{N, M, K, sb, sa, cs.data(), rs.data(), beta, C, ldc, true, bias, Triangle::none, act}
                           : wide;
  const Isa isa = active_isa();
  // BF16 panels pay off over many rows; one row runs on the f32 drivers' gemv.
  const bool low_precision = a.dtype != DType::f32 && b.dtype != DType::f32 && !gemm_impl::is_gemv(p);
#if defined(__x86_64__)
  if (isa == Isa::avx512_bf16 && low_precision) gemm_impl::run_avx512_bf16(p);
  else if (isa >= Isa::avx512) gemm_impl::run_avx512(p);
  else if (isa == Isa::avx2) gemm_impl::run_avx2(p);
  else gemm_impl::run_generic(p);
#elif defined(__aarch64__)
  if (isa == Isa::neon_bf16 && low_precision) gemm_impl::run_neon_bf16(p);
  else if (isa >= Isa::neon) gemm_impl::run_neon(p);
  else gemm_impl::run_generic(p);
#else
  (void)isa, (void)low_precision;
  gemm_impl::run_generic(p);
#endif
}

// An A whose all-zero rows (zero_rows.h) are worth skipping: the others (and
// their outer scales) are gathered a chunk at a time (kGatherBytes at most),
// multiplied into C's rows [first, last) and moved to their own; a zero row gets
// the empty sum's result, as in the full product (its sums start at +0 and stay
// there). A row's sum does not depend on M in the drivers (only one row's gemv
// would sum otherwise, so a chunk is never one row): the result is the full
// product's bit for bit, except that a NaN or infinity in B reaches only the
// rows that multiply it. Returns false, C untouched, where there is nothing to
// gain. f32, bf16, e4m3 or e5m2 codes stored [M, K], no K or block scales; not
// with beta (the rows are computed away from their C) nor a relu_grad mask
// (indexed by C's position).
constexpr int64_t kGatherBytes = int64_t{64} << 20;  // a chunk more packs all of B once more
bool multiply_nonzero_rows(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& a, const GemmOperand& b,
                           float beta, float* C, int64_t ldc, const float* bias, Triangle tri, Activation act) {
  // Each row skipped saves 2NK flops; finding them reads a row's first non-zero
  // cache lines, gathering copies K codes and N floats a kept row.
  const bool codes = a.dtype == DType::f32 || a.dtype == DType::bf16 || a.dtype == DType::e4m3 || a.dtype == DType::e5m2;
  const bool scales = a.scale_mode == OperandScale::none || a.scale_mode == OperandScale::tensor ||
                      a.scale_mode == OperandScale::outer;
  if (!codes || !scales || a.trans || beta != 0.0f || tri != Triangle::none || act.mask || M < 8 || N < 16 || K < 16)
    return false;
  const int bytes = static_cast<int>(dtype_bytes(a.dtype, 1));
  auto* kept = static_cast<int64_t*>(thread_scratch(4, sizeof(int64_t) * M));
  int64_t count = nonzero_rows(a.data, bytes, M, K, a.ld, kept);
  if ((M - count) * 8 < M) return false;  // under 1/8 of the rows: copies would cost what they save
  if (count == 1) {  // a row alone: a zero row beside it keeps the blocked drivers' sums
    const int64_t other = kept[0] == 0 ? 1 : 0;
    kept[1] = std::max(kept[0], other), kept[0] = std::min(kept[0], other), count = 2;
  }
  if (count > 0) {
    const bool outer = a.scale_mode == OperandScale::outer;
    const int scale_bytes = outer ? static_cast<int>(dtype_bytes(a.scale_dtype, 1)) : 0;
    const int64_t most = std::max<int64_t>(8, kGatherBytes / (K * bytes)), chunks = (count + most - 1) / most;
    const int64_t rows = (count + chunks - 1) / chunks, at = (rows * K * bytes + 7) / 8 * 8;  // the scales, aligned
    auto* buf = static_cast<uint8_t*>(thread_scratch(5, static_cast<size_t>(at + rows * scale_bytes)));
    GemmOperand gathered = a;
    gathered.data = buf, gathered.ld = K;
    if (outer) gathered.scale = buf + at;
    for (int64_t c = chunks - 1; c >= 0; --c) {  // C's rows [first, last) are free: later rows went higher
      const int64_t first = c * count / chunks, last = (c + 1) * count / chunks;
      gather_rows(a.data, bytes, a.ld, K, kept + first, last - first, buf);
      if (outer) gather_rows(a.scale, scale_bytes, 1, 1, kept + first, last - first, buf + at);
      multiply(last - first, N, K, alpha, gathered, b, 0.0f, C + first * ldc, ldc, bias, Triangle::none, act);
      spread_rows(C, ldc, N, kept, first, last);
    }
  }
  const float zero = 0.0f * alpha;  // (0 * cs) * rs, the scales being positive
  parallel_for(M, std::max<int64_t>(1, 16384 / N), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      if (!std::binary_search(kept, kept + count, r)) empty_sum_rows(C, ldc, N, r, r + 1, zero, 0.0f, bias, act);
  });
  return true;
}

}  // namespace

const char* gemm(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& a,
                 const GemmOperand& b, float beta, float* C, int64_t ldc, const float* bias, Triangle tri,
                 Activation act) {
  if (M < 0 || N < 0 || K < 0) return "gemm: negative size";
  if (M * N > 0 && (!C || ldc < N)) return "gemm: bad C or ldc";
  if (const char* e = check(a, false, M, K)) return e;
  if (const char* e = check(b, true, N, K)) return e;
  if (M == 0 || N == 0) return nullptr;
  if (K == 0) empty_sum_rows(C, ldc, N, 0, M, 0.0f, beta, bias, act);
  else if (!multiply_nonzero_rows(M, N, K, alpha, a, b, beta, C, ldc, bias, tri, act))
    multiply(M, N, K, alpha, a, b, beta, C, ldc, bias, tri, act);
  return nullptr;
}

void add_bias_rows(float* C, int64_t m, int64_t n, const float* bias) {
  parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < n; ++j) C[r * n + j] += bias[j];
  });
}

void activate_rows(float* C, int64_t m, int64_t n, int64_t ldc, const Activation& act) {
  if (!act.any()) return;
  parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) activate_run(C + r * ldc, n, act, r * ldc);
  });
}

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
              int64_t ldc, const float* bias, Triangle tri, Activation act) {
  GemmOperand a, b;
  a.data = A; a.trans = trans_a; a.ld = lda;
  b.data = B; b.trans = trans_b; b.ld = ldb;
  gemm(M, N, K, alpha, a, b, beta, C, ldc, bias, tri, act);  // invalid arguments leave C untouched
}

}  // namespace sgrt::cpu
