// Records one program's dispatches into a command buffer that is replayed every
// run: a barrier in front (earlier submissions' and host writes), a compute
// barrier only between dispatches that touch overlapping arena bytes with a
// write on either side, and a barrier to the host and transfers at the end.
#pragma once
#include <vector>

#include "op_timer.h"
#include "pipelines.h"
#include "vulkan/table.h"

namespace sgrt::vk {

// With a timer, its stamps go in too: one at the start, one after each op.
Status record_program(VkCommandBuffer cmd, const std::vector<Dispatch>& dispatches, Pipelines* pipelines,
                      const OpTimer* timer = nullptr);

// The hazards between dispatches (exposed for tests): true when `d` must wait
// for the dispatches recorded since the last barrier.
class HazardTracker {
 public:
  bool needs_barrier(const Dispatch& d) const;
  void clear() { reads_.clear(); writes_.clear(); }
  void add(const Dispatch& d);

 private:
  std::vector<Range> reads_, writes_;
};

}  // namespace sgrt::vk
