#include "serialize.h"

#include <algorithm>

#include "memory_plan.h"
#include "sgrt/file_io.h"
#include "sgrt/model_file.h"
#include "sgrt/scale_codec.h"

namespace sgrt::compiler {
namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

Offset<sg::SourceLoc> write_loc(FlatBufferBuilder& b, const Loc& loc) {
  return sg::CreateSourceLocDirect(b, loc.file.c_str(), loc.line);
}

Offset<sg::Tensor> write_tensor(FlatBufferBuilder& b, const Tensor& t) {
  auto shape = b.CreateVector(t.type.shape);
  sg::ScaleSpecT spec = encode_scale_spec(t.scale);
  auto scale = sg::ScaleSpec::Pack(b, &spec);
  auto init = sg::CreateInit(b, t.init.kind, t.init.a, t.init.b, t.init.seed);
  auto loc = write_loc(b, t.loc);
  auto name = b.CreateString(t.name);
  return sg::CreateTensor(b, name, shape, static_cast<sg::DType>(t.type.dtype), t.role, scale, t.offset, t.bytes, loc,
                          init, t.persistent ? sg::Lifetime::persistent : sg::Lifetime::transient, t.grad_of,
                          t.range ? t.range->lo : 0.f, t.range ? t.range->hi : 0.f, t.range.has_value(), t.frozen);
}

Offset<sg::Op> write_op(FlatBufferBuilder& b, const Op& op) {
  std::vector<Offset<sg::Attr>> attrs;
  // Sorted by name: a Lua table's keys come in no fixed order, the file's bytes must.
  std::vector<Attr> sorted = op.attrs.all();
  std::sort(sorted.begin(), sorted.end(), [](const Attr& x, const Attr& y) { return x.name < y.name; });
  for (const Attr& a : sorted)
    attrs.push_back(sg::CreateAttrDirect(b, a.name.c_str(), a.i, a.f, &a.ints, static_cast<sg::AttrKind>(a.kind)));
  return sg::CreateOpDirect(b, static_cast<int32_t>(op.code), &op.in, &op.out, &attrs, write_loc(b, op.loc),
                            op_info(op.code).version);
}

std::vector<Offset<sg::NamedTensor>> write_named(FlatBufferBuilder& b, const std::vector<std::pair<std::string, int>>& v) {
  std::vector<Offset<sg::NamedTensor>> out;
  for (auto& [name, id] : v) out.push_back(sg::CreateNamedTensorDirect(b, name.c_str(), id));
  return out;
}

}  // namespace

std::vector<uint8_t> serialize(const Graph& g) {
  FlatBufferBuilder b(1 << 16);
  std::vector<Offset<sg::Tensor>> tensors;
  for (const Tensor& t : g.tensors) tensors.push_back(write_tensor(b, t));
  std::vector<Offset<sg::Program>> programs;
  for (const Program& p : g.programs) {
    std::vector<Offset<sg::Op>> ops;
    for (const Op& op : p.ops) ops.push_back(write_op(b, op));
    programs.push_back(sg::CreateProgramDirect(b, p.name.c_str(), &ops, p.peak_bytes));
  }
  auto memory = sg::CreateMemoryPlan(b, g.arena_bytes, g.persistent_bytes, kArenaAlignment, g.naive_bytes);
  const OptimizerConfig& o = g.optimizer;
  auto opt = sg::CreateOptimizer(b, o.kind, o.lr, o.momentum, o.beta1, o.beta2, o.eps, o.weight_decay, o.schedule,
                                 o.warmup_steps, o.min_lr_ratio);
  std::vector<Offset<sg::DataField>> fields;
  auto bound = g.data.fields;  // sorted by name, as the attributes: the file's bytes are fixed
  std::sort(bound.begin(), bound.end());
  for (auto& [field, id] : bound) fields.push_back(sg::CreateDataFieldDirect(b, field.c_str(), id));
  std::vector<Offset<sg::DataOption>> options;
  for (auto& [key, value] : g.data.options) options.push_back(sg::CreateDataOptionDirect(b, key.c_str(), value.c_str()));
  auto data = sg::CreateDataBindingDirect(b, g.data.dataset.c_str(), g.data.path.c_str(), &fields, g.data.shuffle,
                                          g.data.batch, &options);
  auto metrics = write_named(b, g.metrics);
  auto outputs = write_named(b, g.outputs);
  auto train = sg::CreateTrainConfig(b, g.train.epochs, g.train.steps, g.train.seed, g.train.log_every,
                                     g.train.accumulate, g.train.eval_every);
  auto model = sg::CreateModelDirect(b, kSchemaVersion, g.name.c_str(), g.source.c_str(), g.recipe.c_str(), &tensors,
                                     &programs, nullptr, memory, opt, data, g.loss, &metrics, &outputs, train,
                                     g.train_state, g.lr);
  sg::FinishModelBuffer(b, model);
  std::vector<uint8_t> bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  append_footer(&bytes);
  return bytes;
}

Status write_model(const Graph& g, const std::string& path) {
  std::vector<uint8_t> bytes = serialize(g);
  return write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace sgrt::compiler
