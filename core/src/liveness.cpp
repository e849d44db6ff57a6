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

OpTensors op_tensors(OpCode code, const std::vector<int>& in, const std::vector<int>& out) {
  OpTensors t{in, -1, -1};
  t.tensors.insert(t.tensors.end(), out.begin(), out.end());
  const int k = op_overwritable_input(code);
  if (k >= 0 && static_cast<size_t>(k) < in.size() && !out.empty() && in[k] != out[0]) {
    t.overwritten = in[k];
    t.overwriting = out[0];
  }
  return t;
}

Liveness live_ranges(size_t n_tensors, const std::vector<ProgramTensors>& programs, const std::vector<int>& read_back) {
  Liveness r{std::vector<std::vector<LiveInterval>>(n_tensors), std::vector<int>(n_tensors, -1)};
  // Candidates first: an output offered two inputs, or an input offered to two
  // outputs, takes none.
  std::vector<int> taker(n_tensors, -1);
  std::vector<bool> refused(n_tensors, false);  // by output
  for (const ProgramTensors& p : programs)
    for (const OpTensors& op : p) {
      if (op.overwriting < 0) continue;
      const int in = op.overwritten, out = op.overwriting;
      if ((r.shares[out] >= 0 && r.shares[out] != in) || (taker[in] >= 0 && taker[in] != out)) refused[out] = true;
      r.shares[out] = in;
      taker[in] = out;
    }
  int64_t base = 0;
  for (const ProgramTensors& p : programs) {
    std::vector<LiveInterval> cur(n_tensors, LiveInterval{-1, -1});
    int64_t end = base + static_cast<int64_t>(p.size());
    for (size_t i = 0; i < p.size(); ++i)
      for (int id : p[i].tensors) {
        if (cur[id].begin < 0) cur[id].begin = base + static_cast<int64_t>(i);
        cur[id].end = std::max(cur[id].end, base + static_cast<int64_t>(i));
      }
    for (int id : read_back)
      if (id >= 0 && cur[id].begin >= 0) cur[id].end = end;  // read back after the program
    for (size_t out = 0; out < n_tensors; ++out) {
      const int in = r.shares[out];
      if (in < 0 || cur[in].begin < 0 || cur[out].begin < 0) continue;
      const LiveInterval a = cur[in], b = cur[out];
      if (a.begin > b.end || b.begin > a.end) continue;  // apart in this program
      const OpTensors& op = p[static_cast<size_t>(b.begin - base)];
      if (a.end != b.begin || op.overwritten != in || op.overwriting != static_cast<int>(out)) refused[out] = true;
    }
    for (size_t id = 0; id < n_tensors; ++id)
      if (cur[id].begin >= 0) r.live[id].push_back(cur[id]);
    base = end + 1;
  }
  for (size_t out = 0; out < n_tensors; ++out)
    if (refused[out]) r.shares[out] = -1;
  for (size_t out = 0; out < n_tensors; ++out) {  // a ring of shares (never made by one program) takes none
    int at = r.shares[out];
    for (size_t steps = 0; at >= 0 && steps < n_tensors && at != static_cast<int>(out); ++steps) at = r.shares[at];
    if (at == static_cast<int>(out)) r.shares[out] = -1;
  }
  return r;
}

uint64_t place_by_liveness(std::vector<int> order, const std::vector<uint64_t>& bytes, const Liveness& live,
                           uint64_t base, uint64_t align, std::vector<uint64_t>* offsets) {
  auto align_up = [align](uint64_t x) { return (x + align - 1) / align * align; };
  // Groups of tensors that share bytes, each placed as one: its root (a tensor
  // that takes no other's bytes), every member's intervals, the largest size.
  const size_t n = bytes.size();
  std::vector<bool> placing(n, false);
  for (int id : order) placing[id] = true;
  std::vector<int> root(n, -1);
  auto find = [&](int id) {
    while (live.shares[id] >= 0 && placing[live.shares[id]]) id = live.shares[id];
    return id;
  };
  std::vector<std::vector<LiveInterval>> group(n);
  std::vector<uint64_t> size(n, 0);
  std::vector<int> roots;
  for (int id : order) {
    root[id] = find(id);
    group[root[id]].insert(group[root[id]].end(), live.live[id].begin(), live.live[id].end());
    size[root[id]] = std::max(size[root[id]], bytes[id]);
    if (root[id] == id) roots.push_back(id);
  }
  std::stable_sort(roots.begin(), roots.end(), [&](int a, int b) { return size[a] > size[b]; });
  std::vector<int> placed;
  uint64_t top = base;
  for (int id : roots) {
    std::vector<std::pair<uint64_t, uint64_t>> busy;  // [start, end) of conflicting tensors
    for (int p : placed)
      if (overlaps(group[id], group[p])) busy.push_back({(*offsets)[p], (*offsets)[p] + size[p]});
    std::sort(busy.begin(), busy.end());
    uint64_t cand = base;
    for (auto [s, e] : busy) {
      if (cand + size[id] <= s) break;
      cand = std::max(cand, align_up(e));
    }
    (*offsets)[id] = cand;
    top = std::max(top, cand + size[id]);
    placed.push_back(id);
  }
  for (int id : order) (*offsets)[id] = (*offsets)[root[id]];
  return top;
}

}  // namespace sgrt
