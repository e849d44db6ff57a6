// Blockwise FP8's GEMM (DeepSeek-V3): FP32 accumulation promoted every 128
// elements of K. Each K chunk's product of the raw codes runs through the
// ordinary GEMM (codes are exact in BF16, so the BF16 kernel is exact per
// product), whose epilogue multiplies it by the chunk's two FP32 scales and
// adds it to C in chunk order.
#include <vector>

#include "cpu/gemm.h"

namespace sgrt::cpu {

const char* gemm_k_chunked(int64_t M, int64_t N, int64_t K, const GemmOperand& a, const ChunkScales& sa,
                           const GemmOperand& b, const ChunkScales& sb, float* C, int64_t ldc) {
  auto fp8 = [](DType t) { return t == DType::e4m3 || t == DType::e5m2; };
  if (!fp8(a.dtype) || !fp8(b.dtype)) return "gemm_k_chunked: operands must be e4m3 or e5m2 codes";
  if (a.trans || !b.trans) return "gemm_k_chunked: K must be each operand's stored row (A [M, K], B [N, K])";
  if (a.scale_mode != OperandScale::none || b.scale_mode != OperandScale::none)
    return "gemm_k_chunked: the chunk scales are the only scales";
  if (sa.outer_per_scale < 1 || sb.outer_per_scale < 1) return "gemm_k_chunked: outer_per_scale must be positive";
  if (M <= 0 || N <= 0) return nullptr;
  if (K <= 0) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = 0;
    return nullptr;
  }
  // Chunk c's scales as the GEMM's outer (epilogue) multipliers; beta = 1 after
  // the first chunk adds the chunk to C, as the driver does between its K blocks.
  std::vector<float> rs(static_cast<size_t>(M)), cs(static_cast<size_t>(N));
  for (int64_t c = 0; c * kFp8Tile < K; ++c) {
    const int64_t k0 = c * kFp8Tile, kc = K - k0 < kFp8Tile ? K - k0 : kFp8Tile;
    for (int64_t m = 0; m < M; ++m) rs[m] = sa.scale[(m / sa.outer_per_scale) * sa.ld + c];
    for (int64_t n = 0; n < N; ++n) cs[n] = sb.scale[(n / sb.outer_per_scale) * sb.ld + c];
    GemmOperand ac = a, bc = b;  // one byte per code: the chunk starts k0 bytes in
    ac.data = static_cast<const uint8_t*>(a.data) + k0;
    bc.data = static_cast<const uint8_t*>(b.data) + k0;
    ac.scale_mode = bc.scale_mode = OperandScale::outer;
    ac.scale_dtype = bc.scale_dtype = DType::f32;
    ac.scale = rs.data();
    bc.scale = cs.data();
    if (const char* err = gemm(M, N, kc, 1.f, ac, bc, c == 0 ? 0.f : 1.f, C, ldc)) return err;
  }
  return nullptr;
}

}  // namespace sgrt::cpu
