// Element types. Values match sg.fbs's DType (checked in runtime/src/model.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace sgrt {

// q8_0, q4_1: GGUF's block formats (blocks of 32 along the last dimension, each
// with its own f16 scale, kernels/formats/gguf_blocks.h), the storage of a frozen
// quantized base (a QLoRA base): no scale spec, only dequant_matmul and embedding
// read them.
enum class DType : uint8_t { f32 = 0, f16 = 1, bf16 = 2, e4m3 = 3, e5m2 = 4, e2m1 = 5, e8m0 = 6, i32 = 7, q8_0 = 8, q4_1 = 9 };
constexpr int kNumDTypes = 10;

// Elements per block and bytes per block of a block format; 1 and 0 otherwise.
constexpr int dtype_block_size(DType t) { return t == DType::q8_0 || t == DType::q4_1 ? 32 : 1; }
constexpr int dtype_block_bytes(DType t) { return t == DType::q8_0 ? 34 : t == DType::q4_1 ? 20 : 0; }
constexpr bool dtype_is_block(DType t) { return dtype_block_size(t) > 1; }

// Bits per element; E2M1 packs two codes per byte (low nibble first). Block
// formats have no whole number: 0 (dtype_bytes counts their blocks).
constexpr int dtype_bits(DType t) {
  switch (t) {
    case DType::q8_0: case DType::q4_1: return 0;
    case DType::f32: case DType::i32: return 32;
    case DType::f16: case DType::bf16: return 16;
    case DType::e4m3: case DType::e5m2: case DType::e8m0: return 8;
    case DType::e2m1: return 4;
  }
  return 0;
}
// Block formats: count is a whole number of blocks (shape inference checks the
// last dimension).
constexpr size_t dtype_bytes(DType t, int64_t count) {
  if (dtype_is_block(t)) return static_cast<size_t>(count / dtype_block_size(t) * dtype_block_bytes(t));
  return static_cast<size_t>((count * dtype_bits(t) + 7) / 8);
}
// Largest finite value of a low-precision float format (0 for f32, e8m0, i32:
// never scaled into). constexpr so CUDA device code can call it too.
constexpr float format_max(DType t) {
  switch (t) {
    case DType::e4m3: return 448.0f;
    case DType::e5m2: return 57344.0f;
    case DType::e2m1: return 6.0f;
    case DType::f16: return 65504.0f;
    case DType::bf16: return 3.38953139e38f;  // 0x7F7F: (2 - 2^-7) 2^127
    case DType::f32: case DType::e8m0: case DType::i32: case DType::q8_0: case DType::q4_1: return 0.0f;
  }
  return 0.0f;
}
const char* dtype_name(DType t);
bool dtype_from_name(const char* name, DType* out);

}  // namespace sgrt
