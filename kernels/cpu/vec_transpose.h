// Internal: an N x N transpose of GCC vectors held in registers (N lanes each, N a
// power of two), by log2(N) butterfly stages of lane swaps. Internal linkage, as
// the per-ISA kernel headers that include it (quantize_simd.h, gemm_driver.h), so
// each ISA's file compiles its own copy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

namespace sgrt::cpu {
namespace {

// One stage on rows a (bit H of the row index clear) and b (set): lanes with bit H
// set in a trade places with lanes without it in b (__builtin_shufflevector: GCC 12+
// and Clang).
template <uint32_t H, class V, size_t... L>
[[gnu::always_inline]] inline void swap_quadrants(V& a, V& b, std::index_sequence<L...>) {
  constexpr int n = sizeof...(L);
  const V lo = __builtin_shufflevector(a, b, ((L & H) != 0 ? n + static_cast<int>(L ^ H) : static_cast<int>(L))...);
  b = __builtin_shufflevector(a, b, ((L & H) != 0 ? n + static_cast<int>(L) : static_cast<int>(L ^ H))...);
  a = lo;
}

// Rows r[0, N) transposed in place (r[i][j] becomes r[j][i]): each stage swaps
// one bit of the row index with the same bit of the lane index.
template <int N, class V, uint32_t H = N / 2>
[[gnu::always_inline]] inline void transpose_tile(V* r) {
  static_assert(sizeof(V) == N * sizeof(r[0][0]) && (N & (N - 1)) == 0, "N lanes, a power of two");
  if constexpr (H >= 1) {
    for (int k = 0; k < N; ++k)
      if ((k & H) == 0) swap_quadrants<H>(r[k], r[k + H], std::make_index_sequence<N>());
    transpose_tile<N, V, H / 2>(r);
  }
}

}  // namespace
}  // namespace sgrt::cpu
