// The GLSL mirror (kernels/formats/formats.glsl) against formats.h, run as a Vulkan
// compute shader (lavapipe in CI): encodes, stochastic rounding and decodes must
// agree bit for bit. The shader is compiled with glslc at test time and the Vulkan
// loader is opened with dlopen, so the test needs no build-time Vulkan dependency.
#include <doctest/doctest.h>

#define VK_NO_PROTOTYPES
#include <dlfcn.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "formats/formats.h"

using namespace sgrt::fmt;

namespace {

constexpr int kOut = 12;  // results per input

const char* kShader = R"(#version 450
#extension GL_GOOGLE_include_directive : require
#include "formats.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In { uint xin[]; };
layout(std430, binding = 1) writeonly buffer Out { uint res[]; };
layout(push_constant) uniform P { uint n; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= n) return;
  float x = uintBitsToFloat(xin[i]);
  uint o = i * 12u, r = fmt_sr_random(7u, i), c = i & 0xFFFFu;
  res[o + 0u] = fmt_encode(FMT_E4M3, x, false, 0u);
  res[o + 1u] = fmt_encode(FMT_E5M2, x, false, 0u);
  res[o + 2u] = fmt_encode(FMT_E2M1, x, false, 0u);
  res[o + 3u] = fmt_encode(FMT_F16, x, false, 0u);
  res[o + 4u] = fmt_encode(FMT_BF16, x, false, 0u);
  res[o + 5u] = fmt_e8m0_encode(x, false) | (fmt_e8m0_encode(x, true) << 8);
  res[o + 6u] = fmt_encode(FMT_E4M3, x, true, r) | (fmt_encode(FMT_E2M1, x, true, r) << 8);
  res[o + 7u] = fmt_encode(FMT_BF16, x, true, r);
  res[o + 8u] = floatBitsToUint(fmt_decode(FMT_E4M3, c & 0xFFu));
  res[o + 9u] = floatBitsToUint(fmt_decode(FMT_E5M2, c & 0xFFu));
  res[o + 10u] = floatBitsToUint(fmt_decode(FMT_F16, c));
  res[o + 11u] = floatBitsToUint(fmt_e8m0_decode(c % 255u)) + floatBitsToUint(fmt_decode(FMT_E2M1, c & 0xFu));
}
)";

// What the shader computes, from formats.h.
void expected(uint32_t i, float x, uint32_t* out) {
  const uint32_t r = static_cast<uint32_t>(sr_random(7, i)), c = i & 0xFFFF;
  out[0] = e4m3_encode(x);
  out[1] = e5m2_encode(x);
  out[2] = e2m1_encode(x);
  out[3] = f16_encode(x);
  out[4] = bf16_encode(x);
  out[5] = e8m0_encode(x, E8M0Round::down) | (e8m0_encode(x, E8M0Round::up) << 8);
  out[6] = e4m3_encode_sr(x, r) | (e2m1_encode_sr(x, r) << 8);
  out[7] = bf16_encode_sr(x, r);
  out[8] = float_bits(e4m3_decode(c));
  out[9] = float_bits(e5m2_decode(c));
  out[10] = float_bits(f16_decode(c));
  out[11] = float_bits(e8m0_decode(c % 255)) + float_bits(e2m1_decode(c));
}

template <class T>
T vk(VkStructureType type) {
  T x{};
  x.sType = type;
  return x;
}

bool is_nan_bits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

std::vector<uint32_t> compile_shader(std::string* err) {
  const std::string dir = std::string(SGRT_SOURCE_DIR) + "/kernels/formats";
  const std::string src = "/tmp/sgrt_formats_test_" + std::to_string(getpid()) + ".comp";
  const std::string spv = src + ".spv";
  std::ofstream(src) << kShader;
  const std::string cmd = "glslc -fshader-stage=compute -I " + dir + " " + src + " -o " + spv + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    *err = "glslc failed: " + cmd;
    return {};
  }
  std::ifstream f(spv, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  std::vector<uint32_t> words(bytes.size() / 4);
  std::memcpy(words.data(), bytes.data(), words.size() * 4);
  std::remove(src.c_str());
  std::remove(spv.c_str());
  return words;
}

// Runs the shader over `in` on the first Vulkan device; returns "" or what failed.
std::string run_shader(const std::vector<uint32_t>& spirv, const std::vector<uint32_t>& in,
                       std::vector<uint32_t>& out) {
  void* lib = dlopen("libvulkan.so.1", RTLD_NOW);
  if (!lib) return "no Vulkan loader (libvulkan.so.1)";
  auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  VkInstance inst = VK_NULL_HANDLE;
#define LOAD(name) auto name = reinterpret_cast<PFN_##name>(gipa(inst, #name))
  LOAD(vkCreateInstance);
  auto app = vk<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.apiVersion = VK_API_VERSION_1_1;
  auto ici = vk<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ici.pApplicationInfo = &app;
  if (vkCreateInstance(&ici, nullptr, &inst) != VK_SUCCESS) return "vkCreateInstance failed";
  LOAD(vkEnumeratePhysicalDevices);
  LOAD(vkGetPhysicalDeviceQueueFamilyProperties);
  LOAD(vkGetPhysicalDeviceMemoryProperties);
  LOAD(vkCreateDevice);
  LOAD(vkGetDeviceProcAddr);
  LOAD(vkDestroyInstance);
  uint32_t ndev = 1;
  VkPhysicalDevice pd = VK_NULL_HANDLE;
  vkEnumeratePhysicalDevices(inst, &ndev, &pd);
  if (!pd) return "no Vulkan device";
  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
  uint32_t family = 0;
  while (family < nq && !(qf[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family;
  const float prio = 1.0f;
  auto qci = vk<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qci.queueFamilyIndex = family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  auto dci = vk<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  VkDevice dev;
  if (vkCreateDevice(pd, &dci, nullptr, &dev) != VK_SUCCESS) return "vkCreateDevice failed";
#undef LOAD
#define LOAD(name) auto name = reinterpret_cast<PFN_##name>(vkGetDeviceProcAddr(dev, #name))
  LOAD(vkGetDeviceQueue); LOAD(vkCreateBuffer); LOAD(vkGetBufferMemoryRequirements);
  LOAD(vkAllocateMemory); LOAD(vkBindBufferMemory); LOAD(vkMapMemory);
  LOAD(vkCreateShaderModule); LOAD(vkCreateDescriptorSetLayout); LOAD(vkCreatePipelineLayout);
  LOAD(vkCreateComputePipelines); LOAD(vkCreateDescriptorPool); LOAD(vkAllocateDescriptorSets);
  LOAD(vkUpdateDescriptorSets); LOAD(vkCreateCommandPool); LOAD(vkAllocateCommandBuffers);
  LOAD(vkBeginCommandBuffer); LOAD(vkCmdBindPipeline); LOAD(vkCmdBindDescriptorSets);
  LOAD(vkCmdPushConstants); LOAD(vkCmdDispatch); LOAD(vkEndCommandBuffer);
  LOAD(vkQueueSubmit); LOAD(vkQueueWaitIdle); LOAD(vkDestroyDevice);
#undef LOAD
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  auto make_buffer = [&](size_t bytes, VkBuffer* buf) -> void* {
    auto bci = vk<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
    bci.size = bytes;
    bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
    vkCreateBuffer(dev, &bci, nullptr, buf);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dev, *buf, &req);
    auto mai = vk<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
    mai.allocationSize = req.size;
    for (uint32_t t = 0; t < mp.memoryTypeCount; ++t)
      if ((req.memoryTypeBits >> t & 1) && (mp.memoryTypes[t].propertyFlags & host) == host) {
        mai.memoryTypeIndex = t;
        break;
      }
    VkDeviceMemory mem;
    vkAllocateMemory(dev, &mai, nullptr, &mem);
    vkBindBufferMemory(dev, *buf, mem, 0);
    void* p = nullptr;
    vkMapMemory(dev, mem, 0, bytes, 0, &p);
    return p;
  };
  VkBuffer bin, bout;
  std::memcpy(make_buffer(in.size() * 4, &bin), in.data(), in.size() * 4);
  void* pout = make_buffer(out.size() * 4, &bout);

  auto smi = vk<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  smi.codeSize = spirv.size() * 4;
  smi.pCode = spirv.data();
  VkShaderModule sm;
  vkCreateShaderModule(dev, &smi, nullptr, &sm);
  VkDescriptorSetLayoutBinding b[2] = {};
  for (uint32_t k = 0; k < 2; ++k) {
    b[k].binding = k;
    b[k].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[k].descriptorCount = 1;
    b[k].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  auto dli = vk<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  dli.bindingCount = 2;
  dli.pBindings = b;
  VkDescriptorSetLayout dsl;
  vkCreateDescriptorSetLayout(dev, &dli, nullptr, &dsl);
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 4};
  auto pli = vk<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &dsl;
  pli.pushConstantRangeCount = 1;
  pli.pPushConstantRanges = &pcr;
  VkPipelineLayout pl;
  vkCreatePipelineLayout(dev, &pli, nullptr, &pl);
  auto cpi = vk<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  cpi.stage = vk<VkPipelineShaderStageCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
  cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpi.stage.module = sm;
  cpi.stage.pName = "main";
  cpi.layout = pl;
  VkPipeline pipe;
  if (vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cpi, nullptr, &pipe) != VK_SUCCESS)
    return "vkCreateComputePipelines failed";
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2};
  auto dpi = vk<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
  dpi.maxSets = 1;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &ps;
  VkDescriptorPool dp;
  vkCreateDescriptorPool(dev, &dpi, nullptr, &dp);
  auto dai = vk<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
  dai.descriptorPool = dp;
  dai.descriptorSetCount = 1;
  dai.pSetLayouts = &dsl;
  VkDescriptorSet ds;
  vkAllocateDescriptorSets(dev, &dai, &ds);
  VkDescriptorBufferInfo bi[2] = {{bin, 0, VK_WHOLE_SIZE}, {bout, 0, VK_WHOLE_SIZE}};
  VkWriteDescriptorSet w[2] = {};
  for (uint32_t k = 0; k < 2; ++k) {
    w[k].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    w[k].dstSet = ds;
    w[k].dstBinding = k;
    w[k].descriptorCount = 1;
    w[k].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[k].pBufferInfo = &bi[k];
  }
  vkUpdateDescriptorSets(dev, 2, w, 0, nullptr);
  auto cpci = vk<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  cpci.queueFamilyIndex = family;
  VkCommandPool pool;
  vkCreateCommandPool(dev, &cpci, nullptr, &pool);
  auto cbi = vk<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  cbi.commandPool = pool;
  cbi.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cbi.commandBufferCount = 1;
  VkCommandBuffer cb;
  vkAllocateCommandBuffers(dev, &cbi, &cb);
  auto bgi = vk<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  vkBeginCommandBuffer(cb, &bgi);
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, nullptr);
  const uint32_t n = static_cast<uint32_t>(in.size());
  vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, &n);
  vkCmdDispatch(cb, (n + 63) / 64, 1, 1);
  vkEndCommandBuffer(cb);
  VkQueue q;
  vkGetDeviceQueue(dev, family, 0, &q);
  auto si = vk<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  vkQueueSubmit(q, 1, &si, VK_NULL_HANDLE);
  vkQueueWaitIdle(q);
  std::memcpy(out.data(), pout, out.size() * 4);
  vkDestroyDevice(dev, nullptr);  // frees the objects made from it
  vkDestroyInstance(inst, nullptr);
  return "";
}

}  // namespace

TEST_CASE("formats.glsl encodes and decodes exactly as formats.h") {
  std::string err;
  const std::vector<uint32_t> spirv = compile_shader(&err);
  REQUIRE_MESSAGE(!spirv.empty(), err);
  // Every float with the low 12 mantissa bits clear (all exponents, ties of the
  // 8-bit formats, ±0, ±inf, NaN) plus a stride through all others.
  std::vector<uint32_t> in;
  for (uint32_t hi = 0; hi < (1u << 20); ++hi) in.push_back(hi << 12);
  for (uint64_t u = 1; u < (1ull << 32); u += 65537 * 7) in.push_back(static_cast<uint32_t>(u));
  std::vector<uint32_t> out(in.size() * kOut);
  const std::string why = run_shader(spirv, in, out);
  REQUIRE_MESSAGE(why.empty(), why);
  int64_t bad[kOut] = {};
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t want[kOut];
    expected(static_cast<uint32_t>(i), bits_float(in[i]), want);
    for (int k = 0; k < kOut; ++k) {
      const uint32_t got = out[i * kOut + k];
      const bool nan_ok = k >= 8 && k <= 10 && is_nan_bits(got) && is_nan_bits(want[k]);
      bad[k] += got != want[k] && !nan_ok;
    }
  }
  for (int k = 0; k < kOut; ++k) {
    CAPTURE(k);
    CHECK(bad[k] == 0);
  }
}
