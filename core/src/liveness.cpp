#include "sgrt/liveness.h"

#include <algorithm>

namespace sgrt {
namespace {

bool overlaps(const std::vector<LiveInterval>& a, const std::vector<LiveInterval>& b) {
  for (const LiveInterval& x : a)
    for (const LiveInterval& y : b)
      if (x.begin <= y.end && y.begin <= x.end) return true;
  return false;
}

}  // namespace

std::vector<std::vector<LiveInterval>> live_ranges(size_t n_tensors, const std::vector<ProgramTensors>& programs,
                                                   const std::vector<int>& read_back) {
  std::vector<std::vector<LiveInterval>> live(n_tensors);
  int64_t base = 0;
  for (const ProgramTensors& p : programs) {
    std::vector<LiveInterval> cur(n_tensors, LiveInterval{-1, -1});
    int64_t end = base + static_cast<int64_t>(p.size());
    for (size_t i = 0; i < p.size(); ++i)
      for (int id : p[i]) {
        if (cur[id].begin < 0) cur[id].begin = base + static_cast<int64_t>(i);
        cur[id].end = std::max(cur[id].end, base + static_cast<int64_t>(i));
      }
    for (int id : read_back)
      if (id >= 0 && cur[id].begin >= 0) cur[id].end = end;  // read back after the program
    for (size_t id = 0; id < n_tensors; ++id)
      if (cur[id].begin >= 0) live[id].push_back(cur[id]);
    base = end + 1;
  }
  return live;
}

uint64_t place_by_liveness(std::vector<int> order, const std::vector<uint64_t>& bytes,
                           const std::vector<std::vector<LiveInterval>>& live, uint64_t base, uint64_t align,
                           std::vector<uint64_t>* offsets) {
  auto align_up = [align](uint64_t x) { return (x + align - 1) / align * align; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bytes[a] > bytes[b]; });
  std::vector<int> placed;
  uint64_t top = base;
  for (int id : order) {
    std::vector<std::pair<uint64_t, uint64_t>> busy;  // [start, end) of conflicting tensors
    for (int p : placed)
      if (overlaps(live[id], live[p])) busy.push_back({(*offsets)[p], (*offsets)[p] + bytes[p]});
    std::sort(busy.begin(), busy.end());
    uint64_t cand = base;
    for (auto [s, e] : busy) {
      if (cand + bytes[id] <= s) break;
      cand = std::max(cand, align_up(e));
    }
    (*offsets)[id] = cand;
    top = std::max(top, cand + bytes[id]);
    placed.push_back(id);
  }
  return top;
}

}  // namespace sgrt
