// Block-by-block decoding of a q8_0 / q4_1 run (gguf_decode.h).
#include "cpu/gguf_decode.h"

#include "formats/gguf_blocks.h"

namespace sgrt::cpu {

void gguf_decode_run(DType t, const void* data, int64_t i0, int64_t n, float* out) {
  constexpr int64_t kB = fmt::kGgufBlock;
  const auto* bytes = static_cast<const uint8_t*>(data);
  const int64_t block_bytes = dtype_block_bytes(t);
  alignas(64) float blk[kB];
  for (int64_t i = i0, end = i0 + n; i < end;) {
    const int64_t b = i / kB, j0 = i - b * kB, j1 = end - b * kB < kB ? end - b * kB : kB;
    // Whole blocks decode straight into out; a cut block goes through blk.
    float* dst = j0 == 0 && j1 == kB ? out + (i - i0) : blk;
    if (t == DType::q8_0) fmt::q8_0_decode_block(bytes + b * block_bytes, dst);
    else fmt::q4_1_decode_block(bytes + b * block_bytes, dst);
    if (dst == blk)
      for (int64_t j = j0; j < j1; ++j) out[i - i0 + j - j0] = blk[j];
    i = b * kB + j1;
  }
}

}  // namespace sgrt::cpu
