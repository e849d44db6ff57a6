// VkResult -> Status: every Vulkan call that can fail goes through VK_TRY, and
// the error names the call.
#pragma once
#include <vulkan/vulkan.h>

#include <string>

#include "sgrt/status.h"

namespace sgrt::vk {

const char* result_name(VkResult r);

inline Status check(VkResult r, const char* call) {
  if (r == VK_SUCCESS) return Status::Ok();
  return Status::Runtime(std::string("vulkan: ") + call + " failed: " + result_name(r));
}

}  // namespace sgrt::vk

#define VK_TRY(call) SG_TRY(::sgrt::vk::check((call), #call))
