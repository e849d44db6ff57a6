// Column sums in sgrt/column_sums.h's order: y[c] = sum over r < rows of
// term(r, c), for c in [c0, c1), chunk by chunk. `part` holds c1 - c0 floats.
#pragma once
#include <algorithm>
#include <cstdint>

#include "sgrt/column_sums.h"

namespace sgrt::cpu {

template <class Term>
void column_sums(int64_t rows, int64_t c0, int64_t c1, float* y, float* part, Term term) {
  std::fill(y + c0, y + c1, 0.f);
  for (int64_t r0 = 0; r0 < rows; r0 += kColumnChunk) {
    std::fill(part, part + (c1 - c0), 0.f);
    for (int64_t r = r0; r < std::min(rows, r0 + kColumnChunk); ++r)
      for (int64_t c = c0; c < c1; ++c) part[c - c0] += term(r, c);
    for (int64_t c = c0; c < c1; ++c) y[c] += part[c - c0];
  }
}

}  // namespace sgrt::cpu
