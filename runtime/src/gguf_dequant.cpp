// Block decoders for the GGUF tensor types sgrt reads, as ggml-quants.c's
// dequantize_row_* define them. Each value is computed in f32 in ggml's order
// (e.g. Q4_1: q * d, then + m), rounding after every operation: this file is
// built with -ffp-contract=off (runtime/CMakeLists.txt) so no FMA changes a bit.
#include <cstring>

#include "formats/formats.h"
#include "formats/gguf_blocks.h"
#include "sgrt/gguf.h"

namespace sgrt {
namespace {

using fmt::f16_at;

void decode_f32(const uint8_t* src, int64_t nb, float* y) { std::memcpy(y, src, static_cast<size_t>(nb) * 4); }

void decode_f16(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) y[i] = f16_at(src + 2 * i);
}

void decode_bf16(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t i = 0; i < nb; ++i) y[i] = fmt::bf16_decode(static_cast<uint32_t>(src[2 * i] | src[2 * i + 1] << 8));
}

// Q8_0 and Q4_1: kernels/formats/gguf_blocks.h, shared with the kernels that
// read them inside a GEMM.
void decode_q8_0(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b) fmt::q8_0_decode_block(src + b * fmt::kQ8_0Bytes, y + b * fmt::kGgufBlock);
}

// Q4_0: f16 d | u8 qs[16]; elements j and j + 16 in the low and high nibble of
// qs[j]; y = (nibble - 8) * d.
void decode_q4_0(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, src += 18, y += 32) {
    const float d = f16_at(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void decode_q4_1(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b) fmt::q4_1_decode_block(src + b * fmt::kQ4_1Bytes, y + b * fmt::kGgufBlock);
}

// Q4_K super-block of 256: f16 d | f16 dmin | u8 scales[12] | u8 qs[128].
// Eight sub-blocks of 32, each with a 6-bit scale and min packed in `scales`
// (get_scale_min_k4); y = (d * scale) * nibble - (dmin * min).
void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void decode_q4_k(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, src += 144) {
    const float d = f16_at(src), dmin = f16_at(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    for (int is = 0; is < 8; is += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(is, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) y[32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
      y += 64;
    }
  }
}

// Q6_K super-block of 256: u8 ql[128] (low 4 bits) | u8 qh[64] (high 2 bits) |
// i8 scales[16] | f16 d. Two halves of 128; y = (d * scale) * (q6 - 32).
void decode_q6_k(const uint8_t* src, int64_t nb, float* y) {
  for (int64_t b = 0; b < nb; ++b, src += 210) {
    const float d = f16_at(src + 208);
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0 & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2 & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

using Decoder = void (*)(const uint8_t* src, int64_t blocks, float* dst);

Decoder decoder_of(GgufType t) {
  switch (t) {
    case GgufType::F32: return decode_f32;
    case GgufType::F16: return decode_f16;
    case GgufType::BF16: return decode_bf16;
    case GgufType::Q8_0: return decode_q8_0;
    case GgufType::Q4_0: return decode_q4_0;
    case GgufType::Q4_1: return decode_q4_1;
    case GgufType::Q4_K: return decode_q4_k;
    case GgufType::Q6_K: return decode_q6_k;
    default: return nullptr;
  }
}

}  // namespace

bool gguf_type_supported(GgufType type) { return decoder_of(type) != nullptr; }

const char* gguf_supported_type_names() { return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K"; }

Status gguf_dequantize_rows(GgufType type, const uint8_t* src, int64_t n, float* dst) {
  const uint32_t id = static_cast<uint32_t>(type);
  const char* name = gguf_type_name(id);
  Decoder dec = decoder_of(type);
  if (!dec)
    return Status::Unsupported("GGUF type " + (name ? std::string(name) : "id " + std::to_string(id)) +
                               " is not supported (supported: " + gguf_supported_type_names() + ")");
  int64_t block_elems = 0, block_bytes = 0;
  gguf_type_layout(id, &block_elems, &block_bytes);
  if (n < 0 || n % block_elems != 0)
    return Status::Invalid(std::to_string(n) + " elements of " + name + " are not whole blocks of " +
                           std::to_string(block_elems));
  if (n > 0) dec(src, n / block_elems, dst);  // an empty tensor may come with null pointers
  return Status::Ok();
}

}  // namespace sgrt
