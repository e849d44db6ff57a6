#include "cpu_bias_fusion.h"

#include <algorithm>

namespace sgrt {
namespace {

bool all_f32(const std::vector<TensorInfo>& ts, const std::vector<int>& ids) {
  return std::all_of(ids.begin(), ids.end(), [&](int t) { return ts[t].type.dtype == DType::f32; });
}

bool overlap(const TensorInfo& a, const TensorInfo& b) {
  return a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// A row vector [N] (or [1, .., 1, N]) broadcast to `out`'s shape, whose last axis is N.
bool row_vector_of(const TensorType& v, const TensorType& out) {
  if (v.shape.empty() || out.shape.empty() || v.shape.back() != out.shape.back()) return false;
  return std::all_of(v.shape.begin(), v.shape.end() - 1, [](int64_t d) { return d == 1; });
}

}  // namespace

std::vector<BiasFusion> find_bias_fusions(const Model& m, const ProgramInfo& p) {
  const std::vector<TensorInfo>& ts = m.tensors();
  std::vector<int> readers(ts.size(), 0), producer(ts.size(), -1);
  for (int i = 0; i < static_cast<int>(p.ops.size()); ++i) {
    for (int t : p.ops[i].in) ++readers[t];
    for (int t : p.ops[i].out) producer[t] = i;
  }
  for (auto& [name, t] : m.outputs()) ++readers[t];  // the caller reads those
  if (m.loss() >= 0) ++readers[m.loss()];
  std::vector<BiasFusion> found;
  for (int d = 2; d < static_cast<int>(p.ops.size()); ++d) {
    const OpInfoLoaded& add = p.ops[d];
    if (add.code != OpCode::Add || add.in.size() != 2 || !all_f32(ts, add.in) || !all_f32(ts, add.out)) continue;
    // The two ops right before the add produce its operands, in either order.
    int first = producer[add.in[0]], second = producer[add.in[1]];
    if (std::min(first, second) != d - 2 || std::max(first, second) != d - 1) continue;
    int mm = p.ops[first].code == OpCode::BroadcastTo ? second : first;
    int bc = mm == first ? second : first;
    const OpInfoLoaded &mul = p.ops[mm], &cast = p.ops[bc];
    if ((mul.code != OpCode::MatMul && mul.code != OpCode::QMatMul) || cast.code != OpCode::BroadcastTo) continue;
    if (mul.out.size() != 1 || cast.in.size() != 1 || !all_f32(ts, cast.in) || !all_f32(ts, mul.out)) continue;
    const TensorInfo &prod = ts[mul.out[0]], &copy = ts[cast.out[0]], &out = ts[add.out[0]];
    if (prod.persistent || copy.persistent || readers[mul.out[0]] != 1 || readers[cast.out[0]] != 1) continue;
    if (!(prod.type == out.type) || !row_vector_of(ts[cast.in[0]].type, out.type)) continue;
    // The product's inputs are read while the output is written.
    if (std::any_of(mul.in.begin(), mul.in.end(), [&](int t) { return overlap(ts[t], out); })) continue;
    found.push_back({mm, bc, d, cast.in[0], overlap(ts[cast.in[0]], out)});
  }
  return found;
}

}  // namespace sgrt
