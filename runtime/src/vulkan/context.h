// One Vulkan device with a compute queue: instance, device selection, buffers,
// and submit-and-wait. SGRT_VULKAN_DEVICE picks the device by index (as
// `sgrt devices` would list them: enumeration order) or by a case-insensitive
// substring of its name; otherwise the first discrete GPU, then integrated,
// virtual, CPU (lavapipe).
#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <memory>
#include <string>

#include "sgrt/status.h"
#include "vk_status.h"

namespace sgrt::vk {

struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  uint64_t size = 0;
  void* mapped = nullptr;  // when host-visible (coherent)
  bool cached = false;     // mapped memory the host reads through its caches (else uncached: slow to read)
  VkDeviceAddress address = 0;  // when created with VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT
};

// What the device offers for the cooperative-matrix GEMM (gemm_coop.comp).
struct CoopSupport {
  bool available = false;   // 16x16x16 FP16 x FP16 -> FP32 at subgroup scope
  uint32_t subgroup_size = 0;
  const char* extension = "";
};

class Context {
 public:
  // Errors say what is missing: no loader driver, no device, no device matching
  // SGRT_VULKAN_DEVICE (with the list of devices), no compute queue.
  static Status create(std::unique_ptr<Context>* out);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  VkDevice device() const { return device_; }
  const std::string& device_name() const { return name_; }
  VkPhysicalDeviceType device_type() const { return props_.deviceType; }
  const VkPhysicalDeviceLimits& limits() const { return props_.limits; }
  const CoopSupport& coop() const { return coop_; }
  // Whether shaders may reach buffers by device address (Vulkan 1.2's
  // bufferDeviceAddress, enabled when the device has it): the *_addr shaders.
  bool buffer_address() const { return buffer_address_; }
  // Valid bits of the compute queue's timestamps (0: it has none).
  uint32_t timestamp_bits() const { return timestamp_bits_; }

  // Where a buffer lives: device-local only; mapped and coherent (device-local too
  // where the device has such memory: staging); mapped and device-local, which
  // fails where there is none (an arena the host writes directly: never system
  // memory that every shader access would cross the bus for); or mapped,
  // coherent and host-cached where the device has such memory (what the host
  // reads back: a discrete GPU's device-local mappings are uncached, so each
  // host load crosses the bus).
  // Every buffer is a storage buffer and a transfer source and destination;
  // `extra_usage` adds to that (VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT also
  // allocates its memory addressable and fills out->address).
  enum class Memory { device, host, shared, readback };
  Status create_buffer(uint64_t bytes, Memory where, Buffer* out, VkBufferUsageFlags extra_usage = 0);
  void destroy_buffer(Buffer* b);

  Status allocate_command_buffer(VkCommandBuffer* out);
  // Submits and waits for completion.
  Status submit_and_wait(VkCommandBuffer cmd);
  // Records `record` into a reusable one-shot command buffer, submits, waits.
  template <class F>
  Status run_once(F record) {
    VK_TRY(vkResetCommandBuffer(once_, 0));
    VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    VK_TRY(vkBeginCommandBuffer(once_, &bi));
    record(once_);
    VK_TRY(vkEndCommandBuffer(once_));
    return submit_and_wait(once_);
  }

 private:
  Context() = default;
  Status init();
  Status pick_device();
  Status create_device();
  Status find_memory(uint32_t type_bits, VkMemoryPropertyFlags want, uint32_t* index) const;

  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice phys_ = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties props_{};
  VkPhysicalDeviceMemoryProperties mem_{};
  std::string name_;
  uint32_t queue_family_ = 0;
  uint32_t timestamp_bits_ = 0;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer once_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  CoopSupport coop_;
  bool buffer_address_ = false;
};

// Every compute barrier the backend records: all earlier writes of `src`
// stages visible to `dst` stages (a global memory barrier; one arena buffer).
void memory_barrier(VkCommandBuffer cmd, VkPipelineStageFlags src, VkAccessFlags src_access,
                    VkPipelineStageFlags dst, VkAccessFlags dst_access);

}  // namespace sgrt::vk
