#include "memory_plan.h"

#include <algorithm>

namespace sgrt::compiler {
namespace {

uint64_t align_up(uint64_t x) { return (x + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

struct Interval { int64_t begin, end; };  // inclusive op indices on one global timeline

bool overlaps(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  for (const Interval& x : a)
    for (const Interval& y : b)
      if (x.begin <= y.end && y.begin <= x.end) return true;
  return false;
}

// Live ranges of transient tensors; programs are laid end to end in time so a
// tensor used by two programs holds its bytes in both.
std::vector<std::vector<Interval>> live_ranges(const Graph& g) {
  std::vector<std::vector<Interval>> live(g.tensors.size());
  std::vector<int> program_outputs{g.loss};
  for (auto& [n, id] : g.metrics) program_outputs.push_back(id);
  for (auto& [n, id] : g.outputs) program_outputs.push_back(id);
  int64_t base = 0;
  for (const Program& p : g.programs) {
    std::vector<Interval> cur(g.tensors.size(), Interval{-1, -1});
    auto touch = [&](int id, int64_t t) {
      if (cur[id].begin < 0) cur[id].begin = t;
      cur[id].end = std::max(cur[id].end, t);
    };
    int64_t end = base + static_cast<int64_t>(p.ops.size());
    for (size_t i = 0; i < p.ops.size(); ++i) {
      for (int id : p.ops[i].in) touch(id, base + i);
      for (int id : p.ops[i].out) touch(id, base + i);
    }
    for (int id : program_outputs)
      if (id >= 0 && cur[id].begin >= 0) cur[id].end = end;  // read back after the program
    for (size_t id = 0; id < cur.size(); ++id)
      if (cur[id].begin >= 0) live[id].push_back(cur[id]);
    base = end + 1;
  }
  return live;
}

}  // namespace

Status plan_memory(Graph& g) {
  uint64_t off = 0;
  g.naive_bytes = 0;
  for (Tensor& t : g.tensors) {
    t.bytes = dtype_bytes(t.type.dtype, numel(t.type.shape));
    if (!t.persistent) continue;
    t.offset = off;
    off = align_up(off + t.bytes);
  }
  g.persistent_bytes = off;

  std::vector<std::vector<Interval>> live = live_ranges(g);
  std::vector<int> order;
  for (size_t id = 0; id < g.tensors.size(); ++id) {
    if (!g.tensors[id].persistent && !live[id].empty()) order.push_back(static_cast<int>(id));
    if (!live[id].empty() || g.tensors[id].persistent) g.naive_bytes += align_up(g.tensors[id].bytes);
    else g.tensors[id].bytes = 0;  // no program touches it: never materialized
  }
  // Largest first, each at the lowest offset that clears every placed tensor
  // alive at the same time.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return g.tensors[a].bytes > g.tensors[b].bytes; });
  std::vector<int> placed;
  uint64_t top = 0;
  for (int id : order) {
    std::vector<std::pair<uint64_t, uint64_t>> busy;  // [start, end) of conflicting tensors
    for (int p : placed)
      if (overlaps(live[id], live[p])) busy.push_back({g.tensors[p].offset, g.tensors[p].offset + g.tensors[p].bytes});
    std::sort(busy.begin(), busy.end());
    uint64_t cand = g.persistent_bytes, need = g.tensors[id].bytes;
    for (auto [s, e] : busy) {
      if (cand + need <= s) break;
      cand = std::max(cand, align_up(e));
    }
    g.tensors[id].offset = cand;
    top = std::max(top, cand + need);
    placed.push_back(id);
  }
  g.arena_bytes = align_up(std::max(top, g.persistent_bytes));

  for (Program& p : g.programs) {
    uint64_t peak = g.persistent_bytes;
    for (const Op& op : p.ops) {
      for (int id : op.in) if (!g.tensors[id].persistent) peak = std::max(peak, g.tensors[id].offset + g.tensors[id].bytes);
      for (int id : op.out) if (!g.tensors[id].persistent) peak = std::max(peak, g.tensors[id].offset + g.tensors[id].bytes);
    }
    p.peak_bytes = peak - g.persistent_bytes;
  }
  return Status::Ok();
}

}  // namespace sgrt::compiler
