#include "recorder.h"

#include <array>

namespace sgrt::vk {
namespace {

bool overlaps(const std::vector<Range>& a, const std::vector<Range>& b) {
  for (const Range& x : a)
    for (const Range& y : b)
      if (x.begin < y.end && y.begin < x.end) return true;
  return false;
}

}  // namespace

bool HazardTracker::needs_barrier(const Dispatch& d) const {
  return overlaps(d.reads, writes_) || overlaps(d.writes, writes_) || overlaps(d.writes, reads_);
}

void HazardTracker::add(const Dispatch& d) {
  reads_.insert(reads_.end(), d.reads.begin(), d.reads.end());
  writes_.insert(writes_.end(), d.writes.begin(), d.writes.end());
}

Status record_program(VkCommandBuffer cmd, const std::vector<Dispatch>& dispatches, Pipelines* pipelines,
                      const OpTimer* timer) {
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  VK_TRY(vkBeginCommandBuffer(cmd, &bi));
  memory_barrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                 VK_ACCESS_MEMORY_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                 VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines->layout(), 0, 1,
                          std::array<VkDescriptorSet, 1>{pipelines->set()}.data(), 0, nullptr);
  if (timer) timer->record_start(cmd);
  HazardTracker hazards;
  VkPipeline bound = VK_NULL_HANDLE;
  for (size_t k = 0; k < dispatches.size(); ++k) {
    const Dispatch& d = dispatches[k];
    VkPipeline pl = VK_NULL_HANDLE;
    SG_TRY(pipelines->get(d.shader, d.op, d.size, &pl));
    if (hazards.needs_barrier(d)) {
      memory_barrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
      hazards.clear();
    }
    hazards.add(d);
    if (pl != bound) vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pl);
    bound = pl;
    vkCmdPushConstants(cmd, pipelines->layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(Push), &d.push);
    vkCmdDispatch(cmd, d.groups[0], d.groups[1], d.groups[2]);
    if (timer) timer->record_after(cmd, k + 1);
  }
  memory_barrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                 VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                 VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
  VK_TRY(vkEndCommandBuffer(cmd));
  return Status::Ok();
}

}  // namespace sgrt::vk
