// Element types. Values match sg.fbs's DType (checked in runtime/src/schema_checks.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace sgrt {

enum class DType : uint8_t { f32 = 0, f16 = 1, bf16 = 2, e4m3 = 3, e5m2 = 4, e2m1 = 5, e8m0 = 6, i32 = 7 };
constexpr int kNumDTypes = 8;

// Bits per element; E2M1 packs two codes per byte (low nibble first).
constexpr int dtype_bits(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 32;
    case DType::f16: case DType::bf16: return 16;
    case DType::e4m3: case DType::e5m2: case DType::e8m0: return 8;
    case DType::e2m1: return 4;
  }
  return 0;
}
constexpr size_t dtype_bytes(DType t, int64_t count) {
  return static_cast<size_t>((count * dtype_bits(t) + 7) / 8);
}
const char* dtype_name(DType t);
bool dtype_from_name(const char* name, DType* out);

}  // namespace sgrt
