#include "cpu/zero_rows.h"

#include <algorithm>
#include <cstring>

#include "cpu/parallel.h"

namespace sgrt::cpu {

namespace {

// Whether a[0, k) is all +-0: the magnitude bits ORed a chunk at a time (each
// chunk's loop vectorizes), stopping at the first chunk with a non-zero.
bool zero_row(const float* a, int64_t k) {
  constexpr int64_t kChunk = 64;
  for (int64_t i = 0; i < k; i += kChunk) {
    const int64_t end = std::min(k, i + kChunk);
    uint32_t bits = 0;
    for (int64_t j = i; j < end; ++j) {
      uint32_t u;
      std::memcpy(&u, a + j, sizeof u);
      bits |= u << 1;  // the sign bit out: -0 is a zero
    }
    if (bits) return false;
  }
  return true;
}

}  // namespace

int64_t nonzero_rows(const float* a, int64_t m, int64_t k, int64_t ld, int64_t* kept) {
  // Flags first (rows in parallel: a zero row is read whole), then the list in order.
  parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kept[r] = !zero_row(a + r * ld, k);
  });
  int64_t count = 0;
  for (int64_t r = 0; r < m; ++r)
    if (kept[r]) kept[count++] = r;
  return count;
}

void gather_rows(const float* a, int64_t ld, int64_t k, const int64_t* rows, int64_t n, float* out) {
  parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::memcpy(out + i * k, a + rows[i] * ld, sizeof(float) * k);
  });
}

void spread_rows(float* c, int64_t ldc, int64_t n, const int64_t* kept, int64_t first, int64_t last) {
  for (int64_t i = last - 1; i >= first; --i)
    if (kept[i] != i) std::memcpy(c + kept[i] * ldc, c + i * ldc, sizeof(float) * n);
}

}  // namespace sgrt::cpu
