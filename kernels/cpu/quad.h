// Internal: 4 floats as a GCC vector, the baseline width (SSE2 / NEON) of the
// kernels not built per ISA (fp4_ops.cpp, matmul.cpp's sparse product), with its
// loads and the any-lane test (plain loops of selects or zero tests there
// compiled to a branch an element).
#pragma once
#include <cstdint>
#include <cstring>

namespace sgrt::cpu {

typedef float Quad __attribute__((vector_size(16)));

inline Quad load_quad(const float* p) {
  Quad v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store_quad(float* p, Quad v) { std::memcpy(p, &v, sizeof v); }

// Whether any lane of a comparison's mask is set.
inline bool any_lane(Quad mask) {
  uint64_t w[2];
  std::memcpy(w, &mask, sizeof w);
  return (w[0] | w[1]) != 0;
}

}  // namespace sgrt::cpu
