#include "context.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <vector>

#include "coop.h"

namespace sgrt::vk {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

std::vector<VkQueueFamilyProperties> queue_families(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, fams.data());
  return fams;
}

bool compute_family(VkPhysicalDevice pd, uint32_t* family) {
  std::vector<VkQueueFamilyProperties> fams = queue_families(pd);
  for (uint32_t i = 0; i < fams.size(); ++i)
    if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) { *family = i; return true; }
  return false;
}

}  // namespace

void memory_barrier(VkCommandBuffer cmd, VkPipelineStageFlags src, VkAccessFlags src_access,
                    VkPipelineStageFlags dst, VkAccessFlags dst_access) {
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr, src_access, dst_access};
  vkCmdPipelineBarrier(cmd, src, dst, 0, 1, &b, 0, nullptr, 0, nullptr);
}

Status Context::create(std::unique_ptr<Context>* out) {
  std::unique_ptr<Context> c(new Context());
  SG_TRY(c->init());
  *out = std::move(c);
  return Status::Ok();
}

Context::~Context() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    if (fence_) vkDestroyFence(device_, fence_, nullptr);
    if (pool_) vkDestroyCommandPool(device_, pool_, nullptr);
    vkDestroyDevice(device_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

Status Context::init() {
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "sgrt";
  app.pEngineName = "sgrt";
  app.apiVersion = VK_API_VERSION_1_2;  // the most used (bufferDeviceAddress); 1.1 devices still run
  VkInstanceCreateInfo ici{};
  ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ici.pApplicationInfo = &app;
  VkResult r = vkCreateInstance(&ici, nullptr, &instance_);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
    return Status::Unsupported("vulkan: no Vulkan driver found (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER); "
                               "install one, e.g. Mesa's lavapipe (mesa-vulkan-drivers)");
  SG_TRY(check(r, "vkCreateInstance"));
  SG_TRY(pick_device());
  return create_device();
}

Status Context::pick_device() {
  uint32_t n = 0;
  VK_TRY(vkEnumeratePhysicalDevices(instance_, &n, nullptr));
  std::vector<VkPhysicalDevice> devs(n);
  VK_TRY(vkEnumeratePhysicalDevices(instance_, &n, devs.data()));
  if (n == 0)
    return Status::Unsupported("vulkan: no Vulkan device found; install a driver, e.g. Mesa's lavapipe (mesa-vulkan-drivers)");
  std::vector<VkPhysicalDeviceProperties> props(n);
  std::string list;
  for (uint32_t i = 0; i < n; ++i) {
    vkGetPhysicalDeviceProperties(devs[i], &props[i]);
    list += (i ? ", " : "") + std::to_string(i) + ": " + props[i].deviceName;
  }
  const char* want = std::getenv("SGRT_VULKAN_DEVICE");
  int pick = -1;
  uint32_t family = 0;
  if (want && *want) {
    std::string w = want;
    bool index = std::all_of(w.begin(), w.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    for (uint32_t i = 0; i < n && pick < 0; ++i)
      if (index ? std::to_string(i) == w : lower(props[i].deviceName).find(lower(w)) != std::string::npos) pick = static_cast<int>(i);
    if (pick < 0) return Status::Invalid("vulkan: no device matches SGRT_VULKAN_DEVICE=" + w + " (devices: " + list + ")");
    if (!compute_family(devs[pick], &family))
      return Status::Unsupported(std::string("vulkan: device ") + props[pick].deviceName + " has no compute queue");
  } else {
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t f = 0;
      if (props[i].apiVersion < VK_API_VERSION_1_1 || !compute_family(devs[i], &f)) continue;
      if (pick < 0 || type_rank(props[i].deviceType) < type_rank(props[pick].deviceType)) { pick = static_cast<int>(i); family = f; }
    }
    if (pick < 0) return Status::Unsupported("vulkan: no Vulkan 1.1 device with a compute queue (devices: " + list + ")");
  }
  if (props[pick].apiVersion < VK_API_VERSION_1_1)
    return Status::Unsupported(std::string("vulkan: device ") + props[pick].deviceName + " lacks Vulkan 1.1");
  phys_ = devs[pick];
  props_ = props[pick];
  name_ = props_.deviceName;
  queue_family_ = family;
  timestamp_bits_ = queue_families(phys_)[family].timestampValidBits;
  vkGetPhysicalDeviceMemoryProperties(phys_, &mem_);
  return Status::Ok();
}

Status Context::create_device() {
  float prio = 1.f;
  VkDeviceQueueCreateInfo qci{};
  qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  CoopEnable enable;
  coop_ = probe_coop(instance_, phys_, &enable);
  VkDeviceCreateInfo dci{};
  dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  if (coop_.available) {
    dci.pNext = &enable.coop;
    dci.enabledExtensionCount = 1;
    dci.ppEnabledExtensionNames = &coop_.extension;
  }
  VkPhysicalDeviceBufferDeviceAddressFeatures address{};
  address.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES;
  if (props_.apiVersion >= VK_API_VERSION_1_2) {
    VkPhysicalDeviceFeatures2 feats{};
    feats.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    feats.pNext = &address;
    vkGetPhysicalDeviceFeatures2(phys_, &feats);
    buffer_address_ = address.bufferDeviceAddress == VK_TRUE;
    // Enable exactly that (no capture-replay, no multi-device).
    address.bufferDeviceAddressCaptureReplay = VK_FALSE;
    address.bufferDeviceAddressMultiDevice = VK_FALSE;
    address.pNext = const_cast<void*>(dci.pNext);
    if (buffer_address_) dci.pNext = &address;
  }
  VK_TRY(vkCreateDevice(phys_, &dci, nullptr, &device_));
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  VkCommandPoolCreateInfo pci{};
  pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = queue_family_;
  VK_TRY(vkCreateCommandPool(device_, &pci, nullptr, &pool_));
  SG_TRY(allocate_command_buffer(&once_));
  VkFenceCreateInfo fci{};
  fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  VK_TRY(vkCreateFence(device_, &fci, nullptr, &fence_));
  return Status::Ok();
}

Status Context::find_memory(uint32_t type_bits, VkMemoryPropertyFlags want, uint32_t* index) const {
  for (uint32_t i = 0; i < mem_.memoryTypeCount; ++i)
    if ((type_bits & (1u << i)) && (mem_.memoryTypes[i].propertyFlags & want) == want) { *index = i; return Status::Ok(); }
  return Status::Unsupported("vulkan: device " + name_ + " has no memory type with flags " + std::to_string(want));
}

Status Context::create_buffer(uint64_t bytes, Memory where, Buffer* out, VkBufferUsageFlags extra_usage) {
  const bool host_visible = where != Memory::device;
  Buffer b;
  b.size = std::max<uint64_t>(bytes, 16);
  VkBufferCreateInfo bci{};
  bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bci.size = b.size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | extra_usage;
  const bool addressed = (extra_usage & VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT) != 0;
  if (addressed && !buffer_address_) return Status::Unsupported("vulkan: device " + name_ + " lacks bufferDeviceAddress");
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VK_TRY(vkCreateBuffer(device_, &bci, nullptr, &b.buffer));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, b.buffer, &req);
  const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const VkMemoryPropertyFlags local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  // The memory types that serve `where`, best first.
  std::vector<VkMemoryPropertyFlags> wants;
  switch (where) {
    case Memory::device: wants = {local}; break;
    case Memory::shared: wants = {host | local}; break;
    case Memory::host: wants = {host | local, host}; break;
    case Memory::readback: wants = {host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, host}; break;
  }
  uint32_t type = 0;
  Status st;
  for (VkMemoryPropertyFlags want : wants)
    if ((st = find_memory(req.memoryTypeBits, want, &type)).ok()) break;
  if (st.ok()) {
    VkMemoryAllocateFlagsInfo flags{};
    flags.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO;
    flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    VkMemoryAllocateInfo mai{};
    mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    mai.pNext = addressed ? &flags : nullptr;
    mai.allocationSize = req.size;
    mai.memoryTypeIndex = type;
    st = check(vkAllocateMemory(device_, &mai, nullptr, &b.memory), "vkAllocateMemory");
  }
  if (st.ok()) st = check(vkBindBufferMemory(device_, b.buffer, b.memory, 0), "vkBindBufferMemory");
  if (st.ok() && host_visible) st = check(vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), "vkMapMemory");
  if (st.ok() && host_visible) b.cached = (mem_.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) != 0;
  if (st.ok() && addressed) {
    VkBufferDeviceAddressInfo info{};
    info.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO;
    info.buffer = b.buffer;
    b.address = vkGetBufferDeviceAddress(device_, &info);
  }
  if (!st.ok()) {
    destroy_buffer(&b);
    return st.with_context("a " + std::to_string(bytes) + "-byte buffer on " + name_);
  }
  *out = b;
  return Status::Ok();
}

void Context::destroy_buffer(Buffer* b) {
  if (b->buffer) vkDestroyBuffer(device_, b->buffer, nullptr);
  if (b->memory) vkFreeMemory(device_, b->memory, nullptr);  // unmaps too
  *b = Buffer{};
}

Status Context::allocate_command_buffer(VkCommandBuffer* out) {
  VkCommandBufferAllocateInfo ai{};
  ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VK_TRY(vkAllocateCommandBuffers(device_, &ai, out));
  return Status::Ok();
}

Status Context::submit_and_wait(VkCommandBuffer cmd) {
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  VK_TRY(vkQueueSubmit(queue_, 1, &si, fence_));
  VK_TRY(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX));
  VK_TRY(vkResetFences(device_, 1, &fence_));
  return Status::Ok();
}

}  // namespace sgrt::vk
