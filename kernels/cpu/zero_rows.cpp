#include "cpu/zero_rows.h"

#include <algorithm>
#include <cstring>

#include "cpu/parallel.h"

namespace sgrt::cpu {

namespace {

// Whether the k elements (U: their width) at a are all +-0: the magnitude bits
// ORed a chunk at a time (each chunk's loop vectorizes; memcpy reads any
// type's bytes), stopping at the first chunk with a non-zero.
template <class U>
bool zero_row(const uint8_t* a, int64_t k) {
  constexpr int64_t kChunk = 256 / sizeof(U);
  constexpr U kMagnitude = static_cast<U>(static_cast<U>(~U{0}) >> 1);
  for (int64_t i = 0; i < k; i += kChunk) {
    const int64_t end = std::min(k, i + kChunk);
    U bits = 0;
    for (int64_t j = i; j < end; ++j) {
      U u;
      std::memcpy(&u, a + j * sizeof(U), sizeof(U));
      bits |= u & kMagnitude;
    }
    if (bits) return false;
  }
  return true;
}

template <class U>
int64_t nonzero_rows_of(const uint8_t* a, int64_t m, int64_t k, int64_t ld, int64_t* kept) {
  // Flags first (rows in parallel: a zero row is read whole), then the list in order.
  parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kept[r] = !zero_row<U>(a + r * ld * sizeof(U), k);
  });
  int64_t count = 0;
  for (int64_t r = 0; r < m; ++r)
    if (kept[r]) kept[count++] = r;
  return count;
}

}  // namespace

int64_t nonzero_rows(const void* a, int bytes, int64_t m, int64_t k, int64_t ld, int64_t* kept) {
  const auto* p = static_cast<const uint8_t*>(a);
  if (bytes == 1) return nonzero_rows_of<uint8_t>(p, m, k, ld, kept);
  if (bytes == 2) return nonzero_rows_of<uint16_t>(p, m, k, ld, kept);
  return nonzero_rows_of<uint32_t>(p, m, k, ld, kept);
}

void gather_rows(const void* a, int bytes, int64_t ld, int64_t k, const int64_t* rows, int64_t n, void* out) {
  const auto* src = static_cast<const uint8_t*>(a);
  auto* dst = static_cast<uint8_t*>(out);
  parallel_for(n, std::max<int64_t>(1, 65536 / std::max<int64_t>(k * bytes, 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::memcpy(dst + i * k * bytes, src + rows[i] * ld * bytes, k * bytes);
  });
}

void spread_rows(float* c, int64_t ldc, int64_t n, const int64_t* kept, int64_t first, int64_t last) {
  for (int64_t i = last - 1; i >= first; --i)
    if (kept[i] != i) std::memcpy(c + kept[i] * ldc, c + i * ldc, sizeof(float) * n);
}

}  // namespace sgrt::cpu
