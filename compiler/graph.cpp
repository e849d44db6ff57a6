#include "graph.h"

#include "sgrt/shape_infer.h"

namespace sgrt::compiler {

namespace {

// Output types of an op on g's tensors; quantize and qmatmul's shape rules
// read the typed scale specs of their quantized tensors (shape_infer.h).
Status infer(const Graph& g, OpCode code, const std::vector<int>& in, const std::vector<int>& out, const Attrs& attrs,
             std::vector<TensorType>* types) {
  std::vector<TensorType> in_types;
  for (int id : in) in_types.push_back(g.t(id).type);
  ScaleSpec quant[2];
  bool scaled = false;
  if (code == OpCode::Quantize && !out.empty()) {
    quant[0] = g.t(out[0]).scale;
    scaled = true;
  } else if (code == OpCode::QMatMul && in.size() == 6) {
    quant[0] = g.t(in[0]).scale;
    quant[1] = g.t(in[3]).scale;
    scaled = true;
  }
  return infer_types(code, in_types, attrs, types, scaled ? quant : nullptr);
}

}  // namespace

int Graph::add_tensor(Tensor t) {
  tensors.push_back(std::move(t));
  return static_cast<int>(tensors.size()) - 1;
}

Status Graph::add_op_to(std::vector<Op>* ops, OpCode code, std::vector<int> in, Attrs attrs, Loc loc,
                        std::vector<int>* out, sg::Role out_role) {
  std::vector<TensorType> out_types;
  Status st = infer(*this, code, in, {}, attrs, &out_types);
  if (!st.ok()) return st.with_context(loc.str());
  out->clear();
  for (size_t i = 0; i < out_types.size(); ++i) {
    if (int alias = op_inplace_input(code, static_cast<int>(i)); alias >= 0) {
      out->push_back(in[alias]);  // same type: the shape rule says so
      continue;
    }
    Tensor t;
    t.name = std::string(op_info(code).name) + "_" + std::to_string(tensors.size());
    t.type = out_types[i];
    t.role = out_role;
    t.loc = loc;
    out->push_back(add_tensor(std::move(t)));
  }
  ops->push_back(Op{code, std::move(in), {}, std::move(attrs), loc});
  ops->back().out = *out;
  return Status::Ok();
}

Status Graph::add_inplace_op_to(std::vector<Op>* ops, OpCode code, std::vector<int> in, Attrs attrs, Loc loc,
                                std::vector<int> out) {
  std::vector<TensorType> out_types;
  Status st = infer(*this, code, in, out, attrs, &out_types);
  if (!st.ok()) return st.with_context(loc.str());
  for (size_t i = 0; i < out.size(); ++i)
    if (!(tensors[out[i]].type == out_types[i]))
      return Status::Invalid(loc.str() + ": " + std::string(op_info(code).name) + " cannot write " +
                             tensors[out[i]].name + " in place");
  ops->push_back(Op{code, std::move(in), std::move(out), std::move(attrs), loc});
  return Status::Ok();
}

Status Graph::add_op(OpCode code, std::vector<int> in, Attrs attrs, Loc loc, std::vector<int>* out) {
  return add_op_to(&forward, code, std::move(in), std::move(attrs), loc, out, sg::Role::activation);
}

int Graph::op1(OpCode code, std::vector<int> in, Attrs attrs, Loc loc, Status* st) {
  std::vector<int> out;
  *st = add_op(code, std::move(in), std::move(attrs), loc, &out);
  return st->ok() ? out[0] : -1;
}

int Graph::find_tensor(const std::string& n) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == n) return static_cast<int>(i);
  return -1;
}

int Graph::find_program(const std::string& n) const {
  for (size_t i = 0; i < programs.size(); ++i)
    if (programs[i].name == n) return static_cast<int>(i);
  return -1;
}

}  // namespace sgrt::compiler
