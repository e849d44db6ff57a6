#include "coop.h"

#include <cstring>
#include <vector>

#include "shaders.h"

namespace sgrt::vk {
namespace {

// VK_KHR_cooperative_matrix (Vulkan registry, extension 507).
constexpr VkStructureType kKhrFeaturesType = static_cast<VkStructureType>(1000506000);
constexpr VkStructureType kKhrPropsType = static_cast<VkStructureType>(1000506001);
struct KhrCoopProps {
  VkStructureType sType = kKhrPropsType;
  void* pNext = nullptr;
  uint32_t MSize = 0, NSize = 0, KSize = 0;
  int32_t AType = 0, BType = 0, CType = 0, ResultType = 0;
  VkBool32 saturatingAccumulation = VK_FALSE;
  int32_t scope = 0;
};
using KhrQuery = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, KhrCoopProps*);
constexpr int32_t kF16 = 0, kF32 = 1, kSubgroup = 3;  // same values for KHR and NV

bool has_extension(VkPhysicalDevice pd, const char* name) {
  uint32_t n = 0;
  if (vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> exts(n);
  if (vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data()) != VK_SUCCESS) return false;
  for (const VkExtensionProperties& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

bool shape_ok(uint32_t m, uint32_t n, uint32_t k, int32_t a, int32_t b, int32_t c, int32_t d, int32_t scope) {
  return m == 16 && n == 16 && k == 16 && a == kF16 && b == kF16 && c == kF32 && d == kF32 && scope == kSubgroup;
}

// Whether the device lists the 16x16x16 f16 -> f32 subgroup configuration.
bool offers_shape(VkInstance instance, VkPhysicalDevice pd) {
  uint32_t n = 0;
  if (kCoopIsKhr) {
    auto query = reinterpret_cast<KhrQuery>(
        vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
    if (!query || query(pd, &n, nullptr) != VK_SUCCESS) return false;
    std::vector<KhrCoopProps> props(n);
    if (query(pd, &n, props.data()) != VK_SUCCESS) return false;
    for (const KhrCoopProps& p : props)
      if (shape_ok(p.MSize, p.NSize, p.KSize, p.AType, p.BType, p.CType, p.ResultType, p.scope)) return true;
    return false;
  }
  auto query = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
  if (!query || query(pd, &n, nullptr) != VK_SUCCESS) return false;
  VkCooperativeMatrixPropertiesNV blank{};
  blank.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
  std::vector<VkCooperativeMatrixPropertiesNV> props(n, blank);
  if (query(pd, &n, props.data()) != VK_SUCCESS) return false;
  for (const VkCooperativeMatrixPropertiesNV& p : props)
    if (shape_ok(p.MSize, p.NSize, p.KSize, p.AType, p.BType, p.CType, p.DType, p.scope)) return true;
  return false;
}

}  // namespace

CoopSupport probe_coop(VkInstance instance, VkPhysicalDevice pd, CoopEnable* enable) {
  CoopSupport s;
  s.extension = kCoopIsKhr ? "VK_KHR_cooperative_matrix" : "VK_NV_cooperative_matrix";
  if (!has_extension(pd, s.extension)) return s;
  enable->coop.sType = kCoopIsKhr ? kKhrFeaturesType : VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
  enable->coop.pNext = &enable->f16;
  enable->f16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
  enable->f16.pNext = nullptr;
  VkPhysicalDeviceSubgroupProperties sub{};
  sub.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
  VkPhysicalDeviceProperties2 props{};
  props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  props.pNext = &sub;
  vkGetPhysicalDeviceProperties2(pd, &props);
  VkPhysicalDeviceFeatures2 feats{};
  feats.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  feats.pNext = &enable->coop;
  vkGetPhysicalDeviceFeatures2(pd, &feats);
  s.subgroup_size = sub.subgroupSize;
  s.available = enable->coop.cooperativeMatrix && enable->f16.shaderFloat16 && sub.subgroupSize >= 8 &&
                4 * sub.subgroupSize <= props.properties.limits.maxComputeWorkGroupSize[0] &&
                offers_shape(instance, pd);
  // Enable exactly what the shader needs.
  enable->coop.cooperativeMatrixRobustBufferAccess = VK_FALSE;
  enable->f16.shaderInt8 = VK_FALSE;
  return s;
}

}  // namespace sgrt::vk
