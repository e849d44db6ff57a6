#include "op_timer.h"

#include <algorithm>

namespace sgrt::vk {

Status OpTimer::create(const Context& ctx, std::vector<size_t> op_end, std::unique_ptr<OpTimer>* out) {
  if (ctx.timestamp_bits() == 0 || ctx.limits().timestampPeriod <= 0)
    return Status::Unsupported("vulkan: " + ctx.device_name() + "'s compute queue has no timestamps, so ops cannot be timed");
  std::unique_ptr<OpTimer> t(new OpTimer(ctx, std::move(op_end)));
  VkQueryPoolCreateInfo qi{};
  qi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
  qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qi.queryCount = static_cast<uint32_t>(t->op_end_.size() + 1);
  VK_TRY(vkCreateQueryPool(ctx.device(), &qi, nullptr, &t->pool_));
  *out = std::move(t);
  return Status::Ok();
}

OpTimer::~OpTimer() {
  if (pool_) vkDestroyQueryPool(ctx_.device(), pool_, nullptr);
}

void OpTimer::record_start(VkCommandBuffer cmd) const {
  vkCmdResetQueryPool(cmd, pool_, 0, static_cast<uint32_t>(op_end_.size() + 1));
  vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, 0);
  record_after(cmd, 0);  // ops without dispatches at the start
}

void OpTimer::record_after(VkCommandBuffer cmd, size_t done) const {
  // Bottom of pipe: the stamp is taken once every command before it has finished.
  auto [first, last] = std::equal_range(op_end_.begin(), op_end_.end(), done);
  for (auto it = first; it != last; ++it)
    vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, static_cast<uint32_t>(it - op_end_.begin() + 1));
}

Status OpTimer::read(std::vector<double>* op_seconds) const {
  std::vector<uint64_t> stamps(op_end_.size() + 1);
  VK_TRY(vkGetQueryPoolResults(ctx_.device(), pool_, 0, static_cast<uint32_t>(stamps.size()), stamps.size() * sizeof(uint64_t),
                               stamps.data(), sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  const uint32_t bits = ctx_.timestamp_bits();
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  const double seconds_per_tick = ctx_.limits().timestampPeriod * 1e-9;
  for (size_t i = 0; i < op_end_.size(); ++i)
    (*op_seconds)[i] += static_cast<double>((stamps[i + 1] - stamps[i]) & mask) * seconds_per_tick;
  return Status::Ok();
}

}  // namespace sgrt::vk
