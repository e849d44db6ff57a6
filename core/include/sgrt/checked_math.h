// Arithmetic on sizes and offsets that come from files and scripts: each
// helper reports overflow instead of wrapping (unsigned) or being undefined
// (signed). The loader, the backends and the DSL all use these, so one proven
// bound holds everywhere.
#pragma once
#include <cstdint>

#include "sgrt/shape.h"

namespace sgrt {

// The most elements one tensor may hold. Shapes from a file or a script are
// bounded by it, so element and byte counts (at most 8 bytes an element)
// never overflow int64.
constexpr int64_t kMaxElements = int64_t(1) << 40;

template <class T>
[[nodiscard]] bool checked_add(T a, T b, T* out) { return !__builtin_add_overflow(a, b, out); }

template <class T>
[[nodiscard]] bool checked_mul(T a, T b, T* out) { return !__builtin_mul_overflow(a, b, out); }

// v rounded up to a multiple of `align` (> 0), unless that overflows.
template <class T>
[[nodiscard]] bool checked_round_up(T v, T align, T* out) {
  T sum;
  if (!checked_add<T>(v, align - 1, &sum)) return false;
  *out = sum / align * align;
  return true;
}

// The element count of `s` when every dimension is positive and the count is
// at most kMaxElements; false otherwise (*out is then unspecified).
[[nodiscard]] inline bool checked_numel(const Shape& s, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : s)
    if (d <= 0 || d > kMaxElements / n) return false;
    else n *= d;
  *out = n;
  return true;
}

}  // namespace sgrt
