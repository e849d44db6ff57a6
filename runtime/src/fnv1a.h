// FNV-1a, 64-bit: the identities the runtime compares (a checkpoint's model
// and training step, the init file it started from, the ranks' models and
// parameters). Not a checksum against tampering; files carry CRC-32 footers.
#pragma once
#include <cstddef>
#include <cstdint>

namespace sgrt {

inline constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

// h carried from an earlier call continues the same hash.
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvBasis) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace sgrt
