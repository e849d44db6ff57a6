// GGUF's Q8_0 and Q4_1 blocks (32 elements along a row), as ggml-quants.c lays
// them out: the storage of a frozen quantized base (DType::q8_0, DType::q4_1).
//   Q8_0, 34 bytes: f16 d | i8 q[32];                 x = q[j] * d
//   Q4_1, 20 bytes: f16 d | f16 m | u8 qs[16];        x = nibble * d + m,
//                   element j < 16 in the low nibble of qs[j], j >= 16 in the high
//                   nibble of qs[j - 16].
// Decoding computes in f32 in ggml's order (product, then sum), so a kernel that
// decodes with these functions reproduces the file's values bit for bit when it
// is built without FMA contraction of that expression. One header for host C++
// and CUDA device code; formats.glsl mirrors the decoders for Vulkan.
#pragma once
#include <stdint.h>

#include "formats/formats.h"

namespace sgrt::fmt {

constexpr int kGgufBlock = 32;
constexpr int kQ8_0Bytes = 34, kQ4_1Bytes = 20;

SGRT_HD inline float f16_at(const uint8_t* p) { return f16_decode(static_cast<uint32_t>(p[0] | p[1] << 8)); }

// Element j (0..31) of one block.
SGRT_HD inline float q8_0_value(const uint8_t* block, int j) {
  return static_cast<float>(static_cast<int8_t>(block[2 + j])) * f16_at(block);
}
SGRT_HD inline float q4_1_value(const uint8_t* block, int j) {
  const uint8_t byte = block[4 + (j & 15)];
  const int nibble = j < 16 ? byte & 0xF : byte >> 4;
  return static_cast<float>(nibble) * f16_at(block) + f16_at(block + 2);
}

// All 32 elements of one block.
SGRT_HD inline void q8_0_decode_block(const uint8_t* block, float* y) {
  const float d = f16_at(block);
  for (int j = 0; j < kGgufBlock; ++j) y[j] = static_cast<float>(static_cast<int8_t>(block[2 + j])) * d;
}
SGRT_HD inline void q4_1_decode_block(const uint8_t* block, float* y) {
  const float d = f16_at(block), m = f16_at(block + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(block[4 + j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(block[4 + j] >> 4) * d + m;
  }
}

// Encoders: ggml's reference quantizers (quantize_row_q8_0_ref,
// quantize_row_q4_1_ref), for weights that start in f32 (random init, a
// safetensors base) and must be stored as blocks.
SGRT_HD inline void q8_0_encode_block(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int j = 0; j < kGgufBlock; ++j) amax = amax > (x[j] < 0 ? -x[j] : x[j]) ? amax : (x[j] < 0 ? -x[j] : x[j]);
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = f16_encode(d);
  block[0] = static_cast<uint8_t>(dh & 0xFF);
  block[1] = static_cast<uint8_t>(dh >> 8);
  for (int j = 0; j < kGgufBlock; ++j) {
    const float v = x[j] * id;  // |v| <= 127: round half away from zero, as roundf
    block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(v < 0 ? -static_cast<int>(-v + 0.5f) : static_cast<int>(v + 0.5f)));
  }
}
SGRT_HD inline void q4_1_encode_block(const float* x, uint8_t* block) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < kGgufBlock; ++j) {
    lo = x[j] < lo ? x[j] : lo;
    hi = x[j] > hi ? x[j] : hi;
  }
  const float d = (hi - lo) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = f16_encode(d), mh = f16_encode(lo);
  block[0] = static_cast<uint8_t>(dh & 0xFF);
  block[1] = static_cast<uint8_t>(dh >> 8);
  block[2] = static_cast<uint8_t>(mh & 0xFF);
  block[3] = static_cast<uint8_t>(mh >> 8);
  for (int j = 0; j < 16; ++j) {
    const int a = static_cast<int>((x[j] - lo) * id + 0.5f), b = static_cast<int>((x[j + 16] - lo) * id + 0.5f);
    block[4 + j] = static_cast<uint8_t>((a < 15 ? a : 15) | (b < 15 ? b : 15) << 4);
  }
}

// n elements (whole blocks) of a q8_0 (q8 = true) or q4_1 tensor, block by block.
inline void gguf_encode_blocks(bool q8, const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / kGgufBlock; ++b)
    if (q8) q8_0_encode_block(x + b * kGgufBlock, out + b * kQ8_0Bytes);
    else q4_1_encode_block(x + b * kGgufBlock, out + b * kQ4_1Bytes);
}
inline void gguf_decode_blocks(bool q8, const uint8_t* in, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kGgufBlock; ++b)
    if (q8) q8_0_decode_block(in + b * kQ8_0Bytes, y + b * kGgufBlock);
    else q4_1_decode_block(in + b * kQ4_1Bytes, y + b * kGgufBlock);
}

}  // namespace sgrt::fmt
