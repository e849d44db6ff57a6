// Per-op device time of one recorded program (Backend::request_profile): a
// timestamp query before its first dispatch and one after each op's last,
// read back after the run's fence. An op's time is the span between the end
// of the op before it and its own end.
#pragma once
#include <memory>
#include <vector>

#include "context.h"

namespace sgrt::vk {

class OpTimer {
 public:
  // op_end[i]: one past op i's last dispatch in the program's dispatch list
  // (nondecreasing; an op without dispatches ends where the one before did).
  // Fails, naming the device, where its compute queue has no timestamps.
  static Status create(const Context& ctx, std::vector<size_t> op_end, std::unique_ptr<OpTimer>* out);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // The queries' reset and the starting stamp, before the first dispatch.
  void record_start(VkCommandBuffer cmd) const;
  // Once dispatch `done - 1` is recorded: a stamp for each op that ends there.
  void record_after(VkCommandBuffer cmd, size_t done) const;
  // Adds the last run's time of op i, in seconds, to (*op_seconds)[i].
  Status read(std::vector<double>* op_seconds) const;

 private:
  OpTimer(const Context& ctx, std::vector<size_t> op_end) : ctx_(ctx), op_end_(std::move(op_end)) {}
  const Context& ctx_;
  std::vector<size_t> op_end_;
  VkQueryPool pool_ = VK_NULL_HANDLE;
};

}  // namespace sgrt::vk
