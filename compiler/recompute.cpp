#include "recompute.h"

#include <algorithm>
#include <map>
#include <set>

namespace sgrt::compiler {
namespace {

// An op that writes persistent state in place only while its `update`
// attribute allows it (running_stat): a recomputed copy runs with update = 0.
bool has_update_switch(OpCode code) {
  std::vector<AttrDecl> decls;
  if (!op_attr_decls(code, &decls).ok()) return false;
  return std::any_of(decls.begin(), decls.end(), [](const AttrDecl& d) { return d.name == "update"; });
}

// Tensors made inside forward[begin, end) that nothing after the segment reads:
// the ones backward would otherwise keep alive from the forward pass.
std::set<int> internal_tensors(const Graph& g, size_t begin, size_t end) {
  std::set<int> made, used_after;
  for (size_t i = begin; i < end; ++i)
    for (int o : g.forward[i].out)
      if (!g.t(o).persistent) made.insert(o);
  for (size_t i = end; i < g.forward.size(); ++i)
    for (int in : g.forward[i].in) used_after.insert(in);
  used_after.insert(g.loss);
  for (auto& [n, id] : g.metrics) used_after.insert(id);
  for (auto& [n, id] : g.outputs) used_after.insert(id);
  std::set<int> internal;
  for (int t : made)
    if (!used_after.count(t)) internal.insert(t);
  return internal;
}

Status recompute_segment(Graph& g, size_t begin, size_t end, size_t forward_ops, Program* train) {
  const std::set<int> internal = internal_tensors(g, begin, end);
  std::vector<Op>& ops = train->ops;
  std::set<int> needed;
  size_t first_read = ops.size();
  for (size_t j = forward_ops; j < ops.size(); ++j)
    for (int in : ops[j].in)
      if (internal.count(in)) {
        needed.insert(in);
        first_read = std::min(first_read, j);
      }
  if (needed.empty()) return Status::Ok();
  // Only the ops that lead to what backward reads; their other inputs are the
  // segment's inputs or outputs, which stay in memory.
  std::vector<bool> clone(end - begin, false);
  for (size_t i = end; i-- > begin;) {
    const Op& op = g.forward[i];
    for (int o : op.out) clone[i - begin] = clone[i - begin] || needed.count(o);
    if (!clone[i - begin]) continue;
    for (int o : op.out)
      if (g.t(o).persistent && !has_update_switch(op.code))
        return Status::Invalid(op.loc.str() + ": sg.checkpoint cannot recompute " + std::string(op_info(op.code).name) +
                               ", which writes the persistent '" + g.t(o).name + "'");
    for (int in : op.in)
      if (internal.count(in)) needed.insert(in);
  }
  std::map<int, int> fresh;  // original activation -> its recomputed copy
  std::vector<Op> clones;
  for (size_t i = begin; i < end; ++i) {
    if (!clone[i - begin]) continue;
    Op c = g.forward[i];
    for (int& in : c.in)
      if (fresh.count(in)) in = fresh[in];
    // The state is updated once per step, by the original op.
    if (has_update_switch(c.code)) c.attrs.set_i("update", 0);
    for (int& o : c.out) {
      if (g.t(o).persistent) continue;
      Tensor t = g.t(o);
      t.name += ".recomputed";
      int id = g.add_tensor(std::move(t));
      fresh[o] = id;
      o = id;
    }
    c.recomputes = static_cast<int>(i);
    clones.push_back(std::move(c));
  }
  for (size_t j = forward_ops; j < ops.size(); ++j)
    for (int& in : ops[j].in)
      if (fresh.count(in)) in = fresh[in];
  ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(first_read), clones.begin(), clones.end());
  return Status::Ok();
}

}  // namespace

Status recompute_checkpoints(Graph& g, size_t forward_ops, Program* train) {
  for (auto [begin, end] : g.checkpoints) SG_TRY(recompute_segment(g, begin, end, forward_ops, train));
  return Status::Ok();
}

}  // namespace sgrt::compiler
