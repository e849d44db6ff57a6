#include "pipelines.h"

#include <algorithm>

#include "vulkan/push.h"
#include "shaders.h"

namespace sgrt::vk {

Status Pipelines::create(Context* ctx, const Buffer& arena, const Buffer& errors, const Buffer& scratch,
                         const Buffer& address, bool by_address, std::unique_ptr<Pipelines>* out) {
  std::unique_ptr<Pipelines> p(new Pipelines(ctx, by_address));
  SG_TRY(p->init(arena, errors, scratch, address));
  *out = std::move(p);
  return Status::Ok();
}

Pipelines::~Pipelines() {
  VkDevice d = ctx_->device();
  for (auto& [key, pl] : pipelines_) vkDestroyPipeline(d, pl, nullptr);
  for (auto& [name, m] : modules_) vkDestroyShaderModule(d, m, nullptr);
  if (cache_) vkDestroyPipelineCache(d, cache_, nullptr);
  if (pool_) vkDestroyDescriptorPool(d, pool_, nullptr);
  if (layout_) vkDestroyPipelineLayout(d, layout_, nullptr);
  if (set_layout_) vkDestroyDescriptorSetLayout(d, set_layout_, nullptr);
}

Status Pipelines::init(const Buffer& arena, const Buffer& errors, const Buffer& scratch, const Buffer& address) {
  constexpr uint32_t kBindings = 4;
  auto type = [](uint32_t i) { return i == 3 ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER; };
  VkDevice d = ctx_->device();
  VkDescriptorSetLayoutBinding bind[kBindings] = {};
  for (uint32_t i = 0; i < kBindings; ++i) {
    bind[i].binding = i;
    bind[i].descriptorType = type(i);
    bind[i].descriptorCount = 1;
    bind[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo sli{};
  sli.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  sli.bindingCount = kBindings;
  sli.pBindings = bind;
  VK_TRY(vkCreateDescriptorSetLayout(d, &sli, nullptr, &set_layout_));

  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(Push)};
  VkPipelineLayoutCreateInfo pli{};
  pli.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &set_layout_;
  pli.pushConstantRangeCount = 1;
  pli.pPushConstantRanges = &range;
  VK_TRY(vkCreatePipelineLayout(d, &pli, nullptr, &layout_));

  const VkDescriptorPoolSize sizes[2] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBindings - 1},
                                         {VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, 1}};
  VkDescriptorPoolCreateInfo dpi{};
  dpi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
  dpi.maxSets = 1;
  dpi.poolSizeCount = 2;
  dpi.pPoolSizes = sizes;
  VK_TRY(vkCreateDescriptorPool(d, &dpi, nullptr, &pool_));
  VkDescriptorSetAllocateInfo dai{};
  dai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  dai.descriptorPool = pool_;
  dai.descriptorSetCount = 1;
  dai.pSetLayouts = &set_layout_;
  VK_TRY(vkAllocateDescriptorSets(d, &dai, &set_));
  // Binding 0 spans what a storage-buffer binding may (all of an arena the
  // *_addr shaders do not reach this way).
  const VkDeviceSize arena_range = std::min<VkDeviceSize>(arena.size, ctx_->limits().maxStorageBufferRange);
  VkDescriptorBufferInfo infos[kBindings] = {{arena.buffer, 0, arena_range},
                                             {errors.buffer, 0, VK_WHOLE_SIZE},
                                             {scratch.buffer, 0, VK_WHOLE_SIZE},
                                             {address.buffer, 0, VK_WHOLE_SIZE}};
  VkWriteDescriptorSet w[kBindings] = {};
  for (uint32_t i = 0; i < kBindings; ++i) {
    w[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    w[i].dstSet = set_;
    w[i].dstBinding = i;
    w[i].descriptorCount = 1;
    w[i].descriptorType = type(i);
    w[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(d, kBindings, w, 0, nullptr);

  VkPipelineCacheCreateInfo pci{};
  pci.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
  VK_TRY(vkCreatePipelineCache(d, &pci, nullptr, &cache_));
  return Status::Ok();
}

Status Pipelines::get(const std::string& shader, uint32_t op, uint32_t size, VkPipeline* out) {
  auto key = std::make_tuple(shader, op, size);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) { *out = it->second; return Status::Ok(); }
  VkDevice d = ctx_->device();
  VkShaderModule& module = modules_[shader];
  if (!module) {
    const std::string build = by_address_ ? shader + "_addr" : shader;
    const ShaderBlob* blob = find_shader(build);
    if (!blob) return Status::Runtime("vulkan: no embedded shader named " + build);
    VkShaderModuleCreateInfo mi{};
  mi.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    mi.codeSize = blob->bytes;
    mi.pCode = blob->code;
    SG_TRY(check(vkCreateShaderModule(d, &mi, nullptr, &module), "vkCreateShaderModule").with_context(shader));
  }
  const uint32_t values[2] = {op, size};
  const VkSpecializationMapEntry entries[2] = {{0, 0, 4}, {1, 4, 4}};
  VkSpecializationInfo spec{2, entries, sizeof values, values};
  VkComputePipelineCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = &spec;
  ci.layout = layout_;
  VkPipeline pl = VK_NULL_HANDLE;
  SG_TRY(check(vkCreateComputePipelines(d, cache_, 1, &ci, nullptr, &pl), "vkCreateComputePipelines").with_context(shader));
  pipelines_[key] = pl;
  *out = pl;
  return Status::Ok();
}

}  // namespace sgrt::vk
