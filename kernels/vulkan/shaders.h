// The SPIR-V of kernels/vulkan/*.comp, embedded at build time (CMakeLists.txt).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sgrt::vk {

struct ShaderBlob {
  const char* name;  // the .comp file's stem
  const uint32_t* code;
  size_t bytes;
};

extern const ShaderBlob kShaders[];
extern const int kNumShaders;
// gemm_coop was compiled for VK_KHR_cooperative_matrix (true) or VK_NV_cooperative_matrix.
extern const bool kCoopIsKhr;

// nullptr when no shader has this name.
inline const ShaderBlob* find_shader(std::string_view name) {
  for (int i = 0; i < kNumShaders; ++i)
    if (name == kShaders[i].name) return &kShaders[i];
  return nullptr;
}

}  // namespace sgrt::vk
