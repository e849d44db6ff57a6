// Counter-based random numbers: the same values on every backend and thread
// count, derived from (seed, stream, index) alone. constexpr: CUDA device code
// calls the same functions (nvcc --expt-relaxed-constexpr).
#pragma once
#include <cmath>
#include <cstdint>

namespace sgrt {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(seed ^ splitmix64(stream)) + index);
}

// Uniform in [0, 1) with 24 random bits.
constexpr float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(rng_u64(seed, stream, index) >> 40) * 0x1p-24f;
}

// Standard normal by Box-Muller from two uniforms.
inline float rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t r = rng_u64(seed, stream, index);
  double u1 = (static_cast<double>(r >> 40) + 1.0) * 0x1p-24, u2 = static_cast<double>(r & 0xFFFFFF) * 0x1p-24;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace sgrt
