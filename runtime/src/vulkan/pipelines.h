// The one descriptor set (binding 0: the arena, binding 1: the error word,
// binding 2: the scratch words, binding 3: a uniform block with the arena's
// device address), the one pipeline layout (that set + the Push constants), and
// compute pipelines created once per (shader, specialization) and cached. With
// `by_address` every shader is its *_addr build, which reaches the arena by the
// address in binding 3 (an arena past maxStorageBufferRange); otherwise by
// binding 0.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "context.h"

namespace sgrt::vk {

class Pipelines {
 public:
  static Status create(Context* ctx, const Buffer& arena, const Buffer& errors, const Buffer& scratch,
                       const Buffer& address, bool by_address, std::unique_ptr<Pipelines>* out);
  ~Pipelines();
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;

  // The pipeline of `shader` with constant_id 0 = op and constant_id 1 = size
  // (vk::Dispatch::size; ignored by shaders that declare no constant 1).
  Status get(const std::string& shader, uint32_t op, uint32_t size, VkPipeline* out);
  VkPipelineLayout layout() const { return layout_; }
  VkDescriptorSet set() const { return set_; }

 private:
  Pipelines(Context* ctx, bool by_address) : ctx_(ctx), by_address_(by_address) {}
  Status init(const Buffer& arena, const Buffer& errors, const Buffer& scratch, const Buffer& address);

  Context* ctx_;
  bool by_address_;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  VkDescriptorSet set_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::map<std::string, VkShaderModule> modules_;
  std::map<std::tuple<std::string, uint32_t, uint32_t>, VkPipeline> pipelines_;
};

}  // namespace sgrt::vk
