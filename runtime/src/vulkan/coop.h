// Cooperative matrices (tensor cores) for gemm_coop.comp: VK_KHR_cooperative_matrix
// or, where the shader was built for it (glslc before glslang 13),
// VK_NV_cooperative_matrix. Declared here by their registry ABI, so the probe
// compiles against Vulkan headers that predate the KHR extension.
#pragma once
#include <vulkan/vulkan.h>

#include "context.h"

namespace sgrt::vk {

// Same layout for VkPhysicalDeviceCooperativeMatrixFeaturesKHR and ...NV.
struct CoopFeatures {
  VkStructureType sType;
  void* pNext = nullptr;
  VkBool32 cooperativeMatrix = VK_FALSE;
  VkBool32 cooperativeMatrixRobustBufferAccess = VK_FALSE;
};

// What the device must enable for the coop path (chained into VkDeviceCreateInfo).
struct CoopEnable {
  CoopFeatures coop{};
  VkPhysicalDeviceShaderFloat16Int8Features f16{};
};

// Whether `pd` runs gemm_coop as built; fills `enable` (chain it when available).
CoopSupport probe_coop(VkInstance instance, VkPhysicalDevice pd, CoopEnable* enable);

}  // namespace sgrt::vk
