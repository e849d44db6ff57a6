#include "memory_plan.h"

#include <algorithm>

#include "sgrt/liveness.h"

namespace sgrt::compiler {
namespace {

uint64_t align_up(uint64_t x) { return (x + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// Live ranges of transient tensors (sgrt/liveness.h).
Liveness live_ranges(const Graph& g) {
  std::vector<int> read_back{g.loss};
  for (auto& [n, id] : g.metrics) read_back.push_back(id);
  for (auto& [n, id] : g.outputs) read_back.push_back(id);
  std::vector<ProgramTensors> programs;
  for (const Program& p : g.programs) {
    ProgramTensors& ops = programs.emplace_back();
    for (const Op& op : p.ops) ops.push_back(op_tensors(op.code, op.in, op.out));
  }
  return sgrt::live_ranges(g.tensors.size(), programs, read_back);
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

  Liveness live = live_ranges(g);
  std::vector<int> order;
  for (size_t id = 0; id < g.tensors.size(); ++id) {
    if (!g.tensors[id].persistent && !live.live[id].empty()) order.push_back(static_cast<int>(id));
    if (!live.live[id].empty() || g.tensors[id].persistent) g.naive_bytes += align_up(g.tensors[id].bytes);
    else g.tensors[id].bytes = 0;  // no program touches it: never materialized
  }
  std::vector<uint64_t> bytes(g.tensors.size()), offsets(g.tensors.size());
  for (size_t id = 0; id < g.tensors.size(); ++id) bytes[id] = g.tensors[id].bytes;
  uint64_t top = place_by_liveness(order, bytes, live, g.persistent_bytes, kArenaAlignment, &offsets);
  for (int id : order) g.tensors[id].offset = offsets[id];
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
