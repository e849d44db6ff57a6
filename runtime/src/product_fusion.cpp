#include "product_fusion.h"

#include <algorithm>
#include <initializer_list>

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

// Each tensor's producing op in the program (-1: none) and its readers (ops,
// and the caller for outputs and the loss).
struct Uses {
  std::vector<int> readers, producer;
  Uses(const Model& m, const ProgramInfo& p) : readers(m.tensors().size(), 0), producer(m.tensors().size(), -1) {
    for (int i = 0; i < static_cast<int>(p.ops.size()); ++i) {
      for (int t : p.ops[i].in) ++readers[t];
      for (int t : p.ops[i].out) producer[t] = i;
    }
    for (auto& [name, t] : m.outputs()) ++readers[t];
    if (m.loss() >= 0) ++readers[m.loss()];
  }
};

// add at op d reads the results of the two ops before it: one of `producers`
// (a product) and a broadcast of a row vector, both f32, transient and read by
// the add alone. Their indices, or false.
bool bias_add_at(const Model& m, const ProgramInfo& p, const Uses& u, int d, std::initializer_list<OpCode> producers,
                 int* mm, int* bc) {
  const std::vector<TensorInfo>& ts = m.tensors();
  const OpInfoLoaded& add = p.ops[d];
  if (d < 2 || add.code != OpCode::Add || add.in.size() != 2 || !all_f32(ts, add.in) || !all_f32(ts, add.out)) return false;
  // The two ops right before the add produce its operands, in either order.
  int first = u.producer[add.in[0]], second = u.producer[add.in[1]];
  if (std::min(first, second) != d - 2 || std::max(first, second) != d - 1) return false;
  *mm = p.ops[first].code == OpCode::BroadcastTo ? second : first;
  *bc = *mm == first ? second : first;
  const OpInfoLoaded &mul = p.ops[*mm], &cast = p.ops[*bc];
  if (std::find(producers.begin(), producers.end(), mul.code) == producers.end() || cast.code != OpCode::BroadcastTo)
    return false;
  if (mul.out.size() != 1 || cast.in.size() != 1 || !all_f32(ts, cast.in) || !all_f32(ts, mul.out)) return false;
  const TensorInfo &prod = ts[mul.out[0]], &copy = ts[cast.out[0]], &out = ts[add.out[0]];
  if (prod.persistent || copy.persistent || u.readers[mul.out[0]] != 1 || u.readers[cast.out[0]] != 1) return false;
  return prod.type == out.type && row_vector_of(ts[cast.in[0]].type, out.type);
}

// Whether output `out` may be written while the product's inputs are read.
bool clear_of_inputs(const std::vector<TensorInfo>& ts, const OpInfoLoaded& mul, const TensorInfo& out) {
  return std::none_of(mul.in.begin(), mul.in.end(), [&](int t) { return overlap(ts[t], out); });
}

}  // namespace

std::vector<BiasFusion> find_bias_fusions(const Model& m, const ProgramInfo& p) {
  const std::vector<TensorInfo>& ts = m.tensors();
  const Uses u(m, p);
  std::vector<BiasFusion> found;
  for (int d = 2; d < static_cast<int>(p.ops.size()); ++d) {
    int mm, bc;
    if (!bias_add_at(m, p, u, d, {OpCode::MatMul, OpCode::QMatMul}, &mm, &bc)) continue;
    if (!clear_of_inputs(ts, p.ops[mm], ts[p.ops[d].out[0]])) continue;
    const int bias = p.ops[bc].in[0];
    found.push_back({mm, bc, d, bias, overlap(ts[bias], ts[p.ops[d].out[0]])});
  }
  return found;
}

std::vector<AddendFusion> find_addend_fusions(const Model& m, const ProgramInfo& p, const std::vector<BiasFusion>& bias,
                                              bool qmatmul) {
  const std::vector<TensorInfo>& ts = m.tensors();
  const Uses u(m, p);
  std::vector<bool> taken(p.ops.size(), false);
  for (const BiasFusion& f : bias) taken[f.matmul] = taken[f.add] = true;
  std::vector<AddendFusion> found;
  for (int d = 1; d < static_cast<int>(p.ops.size()); ++d) {
    const OpInfoLoaded &add = p.ops[d], &mul = p.ops[d - 1];
    const bool product = mul.code == OpCode::MatMul || (qmatmul && mul.code == OpCode::QMatMul);
    if (taken[d] || taken[d - 1] || add.code != OpCode::Add || !product) continue;
    if (add.in.size() != 2 || mul.out.size() != 1 || add.in[1] != mul.out[0] || add.in[0] == add.in[1]) continue;
    if (!all_f32(ts, add.in) || !all_f32(ts, add.out) || !all_f32(ts, mul.out)) continue;
    if (mul.code == OpCode::MatMul && !all_f32(ts, mul.in)) continue;
    const TensorInfo &y = ts[add.in[0]], &prod = ts[mul.out[0]];
    if (prod.persistent || u.readers[mul.out[0]] != 1 || !(y.type == prod.type) || !(prod.type == ts[add.out[0]].type)) continue;
    AddendFusion f{d - 1, d, add.in[0]};
    // The sum's bias, when the sum is the "product" of a bias add right after.
    int sum_op, bc;
    if (d + 2 < static_cast<int>(p.ops.size()) && bias_add_at(m, p, u, d + 2, {OpCode::Add}, &sum_op, &bc) && sum_op == d) {
      f.broadcast = bc, f.bias_add = d + 2, f.bias = p.ops[bc].in[0];
      f.stage_bias = overlap(ts[f.bias], ts[p.ops[d + 2].out[0]]);
    }
    auto fits = [&](const AddendFusion& x) {
      const TensorInfo& out = ts[p.ops[x.bias_add >= 0 ? x.bias_add : x.add].out[0]];
      return clear_of_inputs(ts, mul, out) && (!overlap(y, out) || (y.offset == out.offset && y.bytes == out.bytes));
    };
    if (f.bias_add >= 0 && !fits(f)) f = AddendFusion{d - 1, d, add.in[0]};  // the sum alone, then
    if (fits(f)) found.push_back(f);
  }
  return found;
}

std::vector<ActivationFusion> find_activation_fusions(const Model& m, const ProgramInfo& p,
                                                      const std::vector<BiasFusion>& bias,
                                                      const std::vector<AddendFusion>& addend) {
  const std::vector<TensorInfo>& ts = m.tensors();
  const Uses u(m, p);
  // Each op that ends a product's work once fused, and what that work reads.
  std::vector<int> ends(p.ops.size(), -1);
  std::vector<std::vector<int>> reads(p.ops.size());
  for (int i = 0; i < static_cast<int>(p.ops.size()); ++i)
    if (p.ops[i].code == OpCode::MatMul || p.ops[i].code == OpCode::QMatMul) ends[i] = i, reads[i] = p.ops[i].in;
  for (const BiasFusion& f : bias) {
    ends[f.add] = f.matmul, reads[f.add] = p.ops[f.matmul].in;
    reads[f.add].push_back(f.bias);
  }
  for (const AddendFusion& f : addend) {
    const int last = f.bias_add >= 0 ? f.bias_add : f.add;
    ends[last] = f.matmul, reads[last] = p.ops[f.matmul].in;
    reads[last].push_back(f.addend);
    if (f.bias >= 0) reads[last].push_back(f.bias);
  }
  // Tensors the in-place form may not move: read by the caller (a model
  // output, the loss) or by a fused product as its bias or addend.
  std::vector<bool> pinned(ts.size(), false);
  for (auto& [name, t] : m.outputs()) pinned[t] = true;
  if (m.loss() >= 0) pinned[m.loss()] = true;
  for (int i = 0; i < static_cast<int>(p.ops.size()); ++i)
    if (ends[i] >= 0)
      for (size_t r = p.ops[ends[i]].in.size(); r < reads[i].size(); ++r) pinned[reads[i][r]] = true;
  std::vector<ActivationFusion> found;
  for (int d = 0; d < static_cast<int>(p.ops.size()); ++d) {
    const OpInfoLoaded& act = p.ops[d];
    const bool relu = act.code == OpCode::Relu;
    if ((!relu && act.code != OpCode::ReluGrad) || act.in.size() != (relu ? 1u : 2u) || act.out.size() != 1) continue;
    const int x = act.in.back(), o = act.out[0], mask = relu ? -1 : act.in[0], q = u.producer[x];
    if (q < 0 || ends[q] < 0 || !all_f32(ts, act.in) || !all_f32(ts, act.out)) continue;
    if (ts[x].persistent || u.readers[x] != 1 || !(ts[x].type == ts[o].type)) continue;
    if (mask >= 0 && (!(ts[mask].type == ts[o].type) || u.producer[mask] >= q)) continue;
    // Whether the product may write the activation into `into` when it runs and
    // have it read there until op `until`: the product's inputs and the mask
    // clear of it (it is written a K block at a time, before the last block's
    // store reads the mask), and no op in between (but the activation) touching
    // its bytes, other than to read o from them, nor one before d writing the mask's.
    auto fits = [&](int into, int until) {
      const TensorInfo& b = ts[into];
      if (mask >= 0 && overlap(ts[mask], b)) return false;
      if (std::any_of(reads[q].begin(), reads[q].end(), [&](int t) { return overlap(ts[t], b); })) return false;
      for (int k = q + 1; k <= until; ++k) {
        if (k == d) continue;
        for (int t : p.ops[k].in)
          if (t != o && overlap(ts[t], b)) return false;
        for (int t : p.ops[k].out)  // (the mask is read at q now, no longer at d)
          if (overlap(ts[t], b) || (mask >= 0 && k < d && overlap(ts[t], ts[mask]))) return false;
      }
      return true;
    };
    if (fits(o, d - 1)) {
      found.push_back({q, d, mask, false});
      continue;
    }
    // Otherwise into the product's own output, which its readers then read in
    // place of o (the MLP's relu_grad: the plan gives o the bytes of dlogits,
    // which dh's product reads).
    int last = d;
    for (int k = d + 1; k < static_cast<int>(p.ops.size()); ++k)
      if (std::find(p.ops[k].in.begin(), p.ops[k].in.end(), o) != p.ops[k].in.end()) last = k;
    if (!ts[o].persistent && !pinned[o] && fits(x, last)) found.push_back({q, d, mask, true});
  }
  return found;
}

std::vector<ScaleFusion> find_scale_fusions(const Model& m, const ProgramInfo& p) {
  const std::vector<TensorInfo>& ts = m.tensors();
  const Uses u(m, p);
  std::vector<ScaleFusion> found;
  for (int d = 0; d < static_cast<int>(p.ops.size()); ++d) {
    const OpInfoLoaded& scale = p.ops[d];
    if (scale.code != OpCode::Scale || scale.in.size() != 1 || scale.out.size() != 1) continue;
    const int x = scale.in[0], o = scale.out[0], q = u.producer[x];
    if (q < 0 || (p.ops[q].code != OpCode::MatMul && p.ops[q].code != OpCode::QMatMul) || p.ops[q].out.size() != 1) continue;
    if (!all_f32(ts, scale.in) || !all_f32(ts, scale.out) || ts[x].persistent || u.readers[x] != 1) continue;
    const TensorInfo& out = ts[o];
    bool clear = clear_of_inputs(ts, p.ops[q], out);
    for (int k = q + 1; k < d && clear; ++k)
      for (const std::vector<int>* ids : {&p.ops[k].in, &p.ops[k].out})
        for (int t : *ids) clear = clear && !overlap(ts[t], out);
    if (clear) found.push_back({q, d});
  }
  return found;
}

}  // namespace sgrt
