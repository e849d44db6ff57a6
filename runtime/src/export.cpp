// Deployable graphs (export.h). The model is rewritten through FlatBuffers'
// object API: state folded into buffers, training programs stripped, weights
// of inference matmuls quantized to constants, memory plan adjusted.
#include "sgrt/export.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <span>

#include "cpu/op_args.h"
#include "lora_merge.h"
#include "sg_generated.h"
#include "sgrt/file_io.h"
#include "sgrt/liveness.h"
#include "sgrt/backend.h"
#include "sgrt/model_file.h"
#include "sgrt/quant.h"
#include "sgrt/scale_codec.h"
#include "sgrt/shape_infer.h"
#include "sgrt/tokenizer_model.h"

namespace sgrt {
namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// A quantize op's outputs computed now, on the host, by the CPU kernel itself:
// the exported constants are bit-identical to what the op would produce.
struct Folded {
  ScaleSpec spec;  // q's
  TensorType q_type, scale_type;
  std::vector<uint8_t> q, scale;
  std::vector<float> state;
};

// `a`: the op's attributes (whether it updates its state).
Status fold_quantize(const ScaleSpec& spec, const Attrs& a, const TensorType& x_type, const float* x,
                     std::vector<float> state, Folded* f) {
  TensorType state_type{{static_cast<int64_t>(state.size())}, DType::f32};
  std::vector<TensorType> outs;
  SG_TRY(infer_types(OpCode::Quantize, {x_type, state_type}, a, &outs, &spec));
  f->spec = spec;
  f->q_type = outs[0];
  f->scale_type = outs[1];
  f->q.assign(dtype_bytes(outs[0].dtype, numel(outs[0].shape)), 0);
  f->scale.assign(dtype_bytes(outs[1].dtype, numel(outs[1].shape)), 0);
  f->state = std::move(state);
  cpu::CpuKernel k = cpu::find_cpu_kernel(OpCode::Quantize, {DType::f32, DType::f32}, {outs[0].dtype, outs[1].dtype, DType::f32});
  if (!k) return Status::Unsupported("export: no CPU quantize kernel for " + type_str(outs[0]));
  int64_t ns = static_cast<int64_t>(f->state.size());
  // The kernel updates its state in place (out[2] is in[1]).
  cpu::OpArgs args{OpCode::Quantize, &a,
                   {{const_cast<float*>(x), &x_type, numel(x_type.shape)}, {f->state.data(), &state_type, ns}},
                   {{f->q.data(), &f->q_type, numel(outs[0].shape)},
                    {f->scale.data(), &f->scale_type, numel(outs[1].shape)},
                    {f->state.data(), &state_type, ns}},
                   &f->spec};
  return k(args);
}

// The scale spec of a weight stored [rows, cols]; rows_outer: rows index the
// matmul's output (the stored matrix is [out, in]).
ScaleSpec weight_format(ExportQuant q, bool rows_outer) {
  ScaleSpec s;
  s.dtype = DType::e4m3;
  s.mode = ScaleMode::current_amax;  // a weight's own amax, as in every recipe
  switch (q) {
    case ExportQuant::none: case ExportQuant::fp8: break;
    case ExportQuant::fp8_channel: s.granularity = rows_outer ? QuantGranularity::row : QuantGranularity::column; break;
    case ExportQuant::fp4:
      s.dtype = DType::e2m1;
      s.granularity = rows_outer ? QuantGranularity::column : QuantGranularity::row;
      break;
    case ExportQuant::nvfp4:
      s.dtype = DType::e2m1;
      s.granularity = QuantGranularity::nvfp4;
      s.mode = ScaleMode::block;
      break;
  }
  return s;
}

std::vector<uint8_t> as_bytes(const std::vector<float>& v) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(p, p + v.size() * sizeof(float));
}

class Exporter {
 public:
  Exporter(const Session& s, const ExportOptions& o) : s_(s), m_(s.model()), o_(o), r_(m_.root().UnPack()) {}

  // The exported FlatBuffer (no footer yet), checked to load, handed to `take`
  // while the builder holds it: one copy of the weights at the end, not two.
  using Take = std::function<Status(std::span<const uint8_t>)>;
  Status run(const Take& take) {
    if (o_.quantize != ExportQuant::none && !o_.infer_only)
      return Status::Invalid("export: quantizing needs --infer-only (quantized weights are constants that training would not update)");
    if (o_.merge_lora && !o_.infer_only)
      return Status::Invalid("export: merging LoRA adapters needs --infer-only (the merged graph has no adapters left to train)");
    upgrade_schema();
    if (o_.tokenizer) SG_TRY(store_tokenizer(*o_.tokenizer));
    if (o_.infer_only) SG_TRY(strip_training());
    if (o_.merge_lora) SG_TRY(merge_lora());
    if (o_.quantize != ExportQuant::none)
      for (auto& p : r_->programs) SG_TRY(quantize_program(*p));
    std::vector<bool> used = used_tensors();
    SG_TRY(fold_state(used));
    drop(used);
    plan_memory();
    // The builder sized for the buffers up front: grown by doubling, it would
    // hold the old and the new copy at once (0.9 GB for SmolLM2's 0.6 GB).
    size_t weights = 0;
    for (const auto& buf : r_->buffers) weights += buf->data.size();
    flatbuffers::FlatBufferBuilder b(weights + (size_t{16} << 20));
    sg::FinishModelBuffer(b, sg::Model::Pack(b, r_.get()));
    r_.reset();
    const std::span<const uint8_t> bytes(b.GetBufferPointer(), b.GetSize());
    SG_TRY(Model::check_bytes(bytes, m_.label() + " (exported)", /*footer=*/false));  // what we write must load
    return take(bytes);
  }

 private:
  // A tokenizer whose ids are the rows of the model's logits.
  Status store_tokenizer(const Tokenizer& tok) {
    const int logits = m_.find_output("logits");
    if (logits < 0) return Status::Invalid(m_.label() + ": a tokenizer needs a text model, one that declares sg.output(\"logits\", ...)");
    const Shape& shape = m_.tensors()[logits].type.shape;
    if (shape.empty() || shape.back() != static_cast<int64_t>(tok.vocab_size()))
      return Status::Invalid(m_.label() + ": the tokenizer has " + std::to_string(tok.vocab_size()) +
                             " tokens, the model's logits " + type_str(m_.tensors()[logits].type) + " another vocabulary");
    r_->tokenizer = tokenizer_table(tok.spec());
    return Status::Ok();
  }

  // The export is written in the current schema version: older ops are
  // upgraded, their scale plan re-encoded from the loader's specs and their
  // legacy attributes dropped.
  void upgrade_schema() {
    r_->schema_version = kSchemaVersion;
    for (size_t p = 0; p < r_->programs.size(); ++p)
      for (size_t k = 0; k < r_->programs[p]->ops.size(); ++k) {
        sg::OpT& op = *r_->programs[p]->ops[k];
        const OpInfoLoaded& o = m_.programs()[p].ops[k];
        if (op.version >= op_info(o.code).version) continue;
        std::erase_if(op.attrs, [&](const auto& a) { return is_v1_scale_attr(o.code, a->name); });
        op.version = op_info(o.code).version;
        if (o.code != OpCode::Quantize) continue;
        auto& scale = r_->tensors[o.out[0]]->scale;
        if (!scale) scale = std::make_unique<sg::ScaleSpecT>();
        *scale = encode_scale_spec(o.quant[0]);
      }
  }

  Status strip_training() {
    auto& ps = r_->programs;
    // The programs that train: the rest (eval, infer, a model's own such as prefill, decode_step) run forward ops only.
    ps.erase(std::remove_if(ps.begin(), ps.end(), [](const auto& p) { return p->name == "train_step" || p->name == "grad_step"; }),
             ps.end());
    if (ps.empty()) return Status::Invalid(m_.label() + ": has no inference program to keep (eval, infer)");
    r_->optimizer.reset();
    return Status::Ok();
  }

  bool is_param(int id) const {
    // A transient param is a low-precision master's working copy (docs/optimizer.md): the master is folded instead.
    return id >= 0 && id < static_cast<int>(m_.tensors().size()) && m_.tensors()[id].role == Role::param &&
           m_.tensors()[id].type.dtype == DType::f32 && m_.tensors()[id].persistent;
  }

  template <class T>
  Status read(int id, std::vector<T>* v) const {
    if (auto it = merged_.find(id); it != merged_.end()) {  // a weight with its adapters folded in
      const auto* p = reinterpret_cast<const T*>(it->second.data());
      v->assign(p, p + it->second.size() * sizeof(float) / sizeof(T));
      return Status::Ok();
    }
    const TensorInfo& t = m_.tensors()[id];
    v->resize(t.bytes / sizeof(T));
    return s_.read(id, v->data(), t.bytes);
  }

  int add_buffer(std::vector<uint8_t> data) {
    auto b = std::make_unique<sg::BufferT>();
    b->data = std::move(data);
    r_->buffers.push_back(std::move(b));
    return static_cast<int>(r_->buffers.size()) - 1;
  }

  void set_buffer(sg::TensorT& t, std::vector<uint8_t> data) {
    if (!t.init) t.init = std::make_unique<sg::InitT>();
    t.init->kind = sg::InitKind::buffer;
    t.init->buffer = add_buffer(std::move(data));
  }

  int add_constant(const std::string& name, const TensorType& type, std::vector<uint8_t> data, const std::string& rule) {
    auto t = std::make_unique<sg::TensorT>();
    t->name = name;
    t->shape = type.shape;
    t->dtype = static_cast<sg::DType>(type.dtype);
    t->role = sg::Role::constant;
    t->lifetime = sg::Lifetime::persistent;
    t->bytes = data.size();
    t->scale = std::make_unique<sg::ScaleSpecT>();
    t->scale->rule = rule;
    set_buffer(*t, std::move(data));
    r_->tensors.push_back(std::move(t));
    return static_cast<int>(r_->tensors.size()) - 1;
  }

  // Adds q, scale and state of a folded quantize as constants.
  void add_folded(const std::string& base, Folded f, int out[3]) {
    const std::string rule = "export: quantized from the trained weight";
    out[0] = add_constant(base, f.q_type, std::move(f.q), rule);
    out[1] = add_constant(base + ".scale", f.scale_type, std::move(f.scale), rule);
    TensorType st{{static_cast<int64_t>(f.state.size())}, DType::f32};
    out[2] = add_constant(base + ".qstate", st, as_bytes(f.state), rule);
    f.spec.rule = rule;
    f.spec.state_tensor = out[1];
    *r_->tensors[out[0]]->scale = encode_scale_spec(f.spec);
  }

  // Scale (exponent 0) and state shared by every f32 operand of a rewritten matmul.
  void f32_operand(int* scale, int* state) {
    if (f32_scale_ < 0) {
      f32_scale_ = add_constant("export.f32.scale", {{1}, DType::i32}, std::vector<uint8_t>(4, 0), "unscaled f32 operand");
      f32_state_ = add_constant("export.f32.qstate", {{kStateHeader}, DType::f32},
                                std::vector<uint8_t>(kStateHeader * sizeof(float), 0), "unscaled f32 operand");
    }
    *scale = f32_scale_;
    *state = f32_state_;
  }

  // In an infer/eval program: quantize ops on weights become constants, and
  // f32 matmuls with a weight operand become qmatmuls of the quantized weight.
  Status quantize_program(sg::ProgramT& p) {
    const ProgramInfo& info = m_.programs()[m_.find_program(p.name)];
    std::map<int, int> subst;  // outputs of removed quantize ops -> constants
    std::vector<std::unique_ptr<sg::OpT>> ops;
    for (size_t k = 0; k < p.ops.size(); ++k) {
      std::unique_ptr<sg::OpT>& op = p.ops[k];
      const OpInfoLoaded& o = info.ops[k];
      for (int& in : op->inputs)
        if (auto it = subst.find(in); it != subst.end()) in = it->second;
      if (o.code == OpCode::Quantize && is_param(o.in[0])) {
        int c[3];
        SG_TRY(folded_quantize(o, c));
        for (int i = 0; i < 3; ++i) subst[o.out[i]] = c[i];
        continue;
      }
      int w = o.code != OpCode::MatMul ? -1 : is_param(o.in[1]) ? 1 : is_param(o.in[0]) ? 0 : -1;
      if (w >= 0 && m_.tensors()[o.in[w]].type.shape.size() == 2) SG_TRY(rewrite_matmul(o, w, op.get()));
      ops.push_back(std::move(op));
    }
    p.ops = std::move(ops);
    return Status::Ok();
  }

  // A quantize op the recipe placed on a weight: folded with its own format
  // and scale source (and its scale state from training).
  Status folded_quantize(const OpInfoLoaded& o, int c[3]) {
    if (auto it = done_.find(o.out[0]); it != done_.end()) {
      std::copy(it->second.begin(), it->second.end(), c);
      return Status::Ok();
    }
    std::vector<float> x, state;
    SG_TRY(read(o.in[0], &x));
    SG_TRY(read(o.in[1], &state));
    Folded f;
    SG_TRY(fold_quantize(o.quant[0], o.attrs, m_.tensors()[o.in[0]].type, x.data(), std::move(state), &f).with_context(o.loc));
    add_folded(m_.tensors()[o.out[0]].name, std::move(f), c);
    done_[o.out[0]] = {c[0], c[1], c[2]};
    return Status::Ok();
  }

  Status rewrite_matmul(const OpInfoLoaded& o, int w, sg::OpT* op) {
    const char* trans_attr[2] = {"trans_a", "trans_b"};
    bool trans[2] = {o.attrs.i("trans_a") != 0, o.attrs.i("trans_b") != 0};
    bool rows_outer = w == 0 ? !trans[0] : trans[1];
    // Block scales run along a stored row, which must be the contracting one:
    // otherwise store the weight transposed.
    bool transpose = o_.quantize == ExportQuant::nvfp4 && !rows_outer;
    int weight = o.in[w];
    auto key = std::make_pair(weight, transpose);
    if (!quantized_.count(key)) {
      std::vector<float> x;
      SG_TRY(read(weight, &x));
      TensorType t = m_.tensors()[weight].type;
      if (transpose) {
        int64_t rows = t.shape[0], cols = t.shape[1];
        std::vector<float> tr(x.size());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) tr[c * rows + r] = x[r * cols + c];
        x.swap(tr);
        t.shape = {cols, rows};
      }
      Folded f;
      Attrs update;
      update.set_i("update", 1);
      SG_TRY(fold_quantize(weight_format(o_.quantize, rows_outer || transpose), update, t, x.data(),
                           std::vector<float>(kStateHeader, 0.f), &f).with_context(o.loc));
      std::array<int, 3> c;
      add_folded(m_.tensors()[weight].name + "." + dtype_name(f.q_type.dtype) + (transpose ? ".t" : ""), std::move(f), c.data());
      quantized_[key] = c;
    }
    const std::array<int, 3>& c = quantized_[key];
    int other = o.in[1 - w], os, ost;
    f32_operand(&os, &ost);
    std::vector<int> wq{c[0], c[1], c[2]}, x{other, os, ost};
    op->code = static_cast<int32_t>(OpCode::QMatMul);
    op->version = op_info(OpCode::QMatMul).version;
    op->inputs = w == 1 ? std::vector<int>{x[0], x[1], x[2], wq[0], wq[1], wq[2]}
                        : std::vector<int>{wq[0], wq[1], wq[2], x[0], x[1], x[2]};
    op->attrs.clear();
    add_attr(*op, trans_attr[0], w == 0 ? trans[0] != transpose : trans[0]);
    add_attr(*op, trans_attr[1], w == 1 ? trans[1] != transpose : trans[1]);
    return Status::Ok();
  }

  static void add_attr(sg::OpT& op, const char* name, int64_t v) {
    auto a = std::make_unique<sg::AttrT>();
    a->name = name;
    a->i = v;
    a->kind = sg::AttrKind::i;
    op.attrs.push_back(std::move(a));
  }

  // LoRA adapters folded into their base weights (lora_merge.h): in each kept
  // program the add that joins an adapter's branch goes, its readers take the
  // base matmul's output, and the ops left without a use (the branch) go. A
  // weight stored as blocks becomes f32 and its dequant_matmul a matmul.
  Status merge_lora() {
    for (auto& prog : r_->programs) {
      const ProgramInfo& info = m_.programs()[m_.find_program(prog->name)];
      std::vector<LoraJoin> joins;
      SG_TRY(find_lora_joins(m_, info, &joins));
      std::map<int, int> subst;
      std::vector<bool> gone(prog->ops.size(), false);
      for (const LoraJoin& j : joins) {
        subst[j.y] = j.base_out;
        gone[j.add_op] = true;
        if (!merged_.count(j.w)) SG_TRY(merged_weight(s_, j, &merged_[j.w]));
      }
      for (size_t k = 0; k < prog->ops.size(); ++k)
        for (int& in : prog->ops[k]->inputs)
          if (auto it = subst.find(in); it != subst.end()) in = it->second;
      auto redirect = [&subst](int& id) { if (auto it = subst.find(id); it != subst.end()) id = it->second; };
      redirect(r_->loss);
      for (auto& n : r_->metrics) redirect(n->tensor);
      for (auto& n : r_->outputs) redirect(n->tensor);
      drop_dead_ops(*prog, gone);
    }
    for (auto& [w, values] : merged_) {
      sg::TensorT& t = *r_->tensors[w];
      if (t.dtype == sg::DType::f32) continue;
      t.dtype = sg::DType::f32;
      t.bytes = values.size() * sizeof(float);
      for (auto& prog : r_->programs)
        for (auto& op : prog->ops)
          if (op->code == static_cast<int32_t>(OpCode::DequantMatMul) && op->inputs[1] == w) {
            op->code = static_cast<int32_t>(OpCode::MatMul);
            op->version = op_info(OpCode::MatMul).version;
            op->attrs.clear();
            add_attr(*op, "trans_b", 1);
          }
    }
    return Status::Ok();
  }

  // Removes the ops in `gone` and then every op whose outputs nothing later
  // reads (not the loss, a metric or an output either): scanned backwards, so a
  // chain of them goes at once.
  void drop_dead_ops(sg::ProgramT& p, std::vector<bool> gone) {
    std::vector<bool> needed(r_->tensors.size(), false);
    if (r_->loss >= 0) needed[r_->loss] = true;
    for (const auto& n : r_->metrics) needed[n->tensor] = true;
    for (const auto& n : r_->outputs) needed[n->tensor] = true;
    for (size_t k = p.ops.size(); k-- > 0;) {
      const sg::OpT& op = *p.ops[k];
      gone[k] = gone[k] || std::none_of(op.outputs.begin(), op.outputs.end(), [&](int id) { return needed[id]; });
      if (!gone[k])
        for (int id : op.inputs) needed[id] = true;
    }
    size_t k = 0;
    std::erase_if(p.ops, [&](const auto&) { return gone[k++]; });
  }

  // Every tensor a kept program, the loss, a metric, an output or the data
  // binding refers to (everything when training is kept).
  std::vector<bool> used_tensors() const {
    std::vector<bool> used(r_->tensors.size(), !o_.infer_only);
    for (const auto& p : r_->programs)
      for (const auto& op : p->ops) {
        for (int id : op->inputs) used[id] = true;
        for (int id : op->outputs) used[id] = true;
      }
    if (r_->loss >= 0) used[r_->loss] = true;
    for (const auto& n : r_->metrics) used[n->tensor] = true;
    for (const auto& n : r_->outputs) used[n->tensor] = true;
    if (r_->data)
      for (const auto& f : r_->data->fields) used[f->tensor] = true;
    return used;
  }

  // The session's values of the persistent state become the tensors' initializers.
  Status fold_state(const std::vector<bool>& used) {
    for (size_t id = 0; id < m_.tensors().size(); ++id) {
      const TensorInfo& t = m_.tensors()[id];
      if (!used[id] || !t.persistent || t.bytes == 0 || t.role == Role::input || static_cast<int>(id) == m_.train_state())
        continue;
      std::vector<uint8_t> v;
      SG_TRY(read(static_cast<int>(id), &v));
      merged_.erase(static_cast<int>(id));  // its bytes are the buffer's now
      if (t.init == InitKind::buffer) r_->buffers[t.init_buffer]->data = std::move(v);  // re-exported: current values
      else set_buffer(*r_->tensors[id], std::move(v));
    }
    return Status::Ok();
  }

  // Removes unused tensors and buffers, renumbering every reference.
  void drop(const std::vector<bool>& used) {
    std::vector<int> map(used.size(), -1);
    std::vector<std::unique_ptr<sg::TensorT>> kept;
    std::vector<std::unique_ptr<sg::BufferT>> buffers;
    for (size_t id = 0; id < used.size(); ++id) {
      if (!used[id]) continue;
      map[id] = static_cast<int>(kept.size());
      sg::TensorT& t = *r_->tensors[id];
      if (t.init && t.init->kind == sg::InitKind::buffer && r_->buffers[t.init->buffer]) {
        buffers.push_back(std::move(r_->buffers[t.init->buffer]));
        t.init->buffer = static_cast<int>(buffers.size()) - 1;
      }
      kept.push_back(std::move(r_->tensors[id]));
    }
    auto remap = [&map](int& id) { if (id >= 0) id = map[id]; };
    for (auto& t : kept) {
      remap(t->grad_of);
      if (t->scale) remap(t->scale->state_tensor);
    }
    for (auto& p : r_->programs)
      for (auto& op : p->ops) {
        for (int& id : op->inputs) remap(id);
        for (int& id : op->outputs) remap(id);
      }
    remap(r_->loss);
    remap(r_->step_tensor);
    remap(r_->lr_tensor);
    for (auto& n : r_->metrics) remap(n->tensor);
    for (auto& n : r_->outputs) remap(n->tensor);
    if (r_->data)
      for (auto& f : r_->data->fields) remap(f->tensor);
    r_->tensors = std::move(kept);
    r_->buffers = std::move(buffers);
  }

  // Persistent tensors are packed again from offset 0, transient ones placed
  // again by their liveness in the kept programs (sgrt/liveness.h, the
  // compiler's rule): removed programs and ops free their bytes, and a merge's
  // rewired reads extend the lifetimes they need.
  void plan_memory() {
    sg::MemoryPlanT& mem = *r_->memory;
    uint64_t align = mem.alignment ? mem.alignment : 64, off = 0, naive = 0;
    std::vector<uint64_t> bytes(r_->tensors.size()), offsets(r_->tensors.size());
    std::vector<int> transient;
    for (size_t id = 0; id < r_->tensors.size(); ++id) {
      sg::TensorT& t = *r_->tensors[id];
      naive += align_up(t.bytes, align);
      bytes[id] = t.bytes;
      if (t.bytes == 0) continue;
      if (t.lifetime != sg::Lifetime::persistent) {
        transient.push_back(static_cast<int>(id));
        continue;
      }
      t.offset = off;
      off = align_up(off + t.bytes, align);
    }
    std::vector<int> read_back{r_->loss};
    for (const auto& n : r_->metrics) read_back.push_back(n->tensor);
    for (const auto& n : r_->outputs) read_back.push_back(n->tensor);
    std::vector<ProgramTensors> programs;
    for (const auto& p : r_->programs) {
      ProgramTensors& ops = programs.emplace_back();
      for (const auto& op : p->ops) ops.push_back(op_tensors(static_cast<OpCode>(op->code), op->inputs, op->outputs));
    }
    uint64_t top = place_by_liveness(transient, bytes, live_ranges(bytes.size(), programs, read_back), off, align, &offsets);
    for (int id : transient) r_->tensors[id]->offset = offsets[id];
    for (auto& p : r_->programs) {
      uint64_t peak = off;
      for (auto& op : p->ops)
        for (const std::vector<int>* ids : {&op->inputs, &op->outputs})
          for (int id : *ids)
            if (const sg::TensorT& t = *r_->tensors[id]; t.lifetime != sg::Lifetime::persistent)
              peak = std::max(peak, t.offset + t.bytes);
      p->peak_bytes = peak - off;
    }
    mem.persistent_bytes = off;
    mem.arena_bytes = align_up(top, align);
    mem.naive_bytes = naive;
  }

  const Session& s_;
  const Model& m_;
  const ExportOptions& o_;
  std::unique_ptr<sg::ModelT> r_;
  int f32_scale_ = -1, f32_state_ = -1;
  std::map<int, std::array<int, 3>> done_;
  std::map<std::pair<int, bool>, std::array<int, 3>> quantized_;
  std::map<int, std::vector<float>> merged_;  // base weight -> W + scale B A
};

}  // namespace

Status parse_export_quant(const std::string& name, ExportQuant* out) {
  static const std::pair<const char*, ExportQuant> kNames[] = {
      {"", ExportQuant::none},   {"none", ExportQuant::none},   {"fp8", ExportQuant::fp8},
      {"fp8-channel", ExportQuant::fp8_channel}, {"fp4", ExportQuant::fp4}, {"nvfp4", ExportQuant::nvfp4}};
  for (auto& [n, q] : kNames)
    if (name == n) {
      *out = q;
      return Status::Ok();
    }
  return Status::Invalid("unknown quantization '" + name + "' (fp8, fp8-channel, fp4, nvfp4)");
}

namespace {

Status export_with(const Session& s, const ExportOptions& opts, const Exporter::Take& take) {
  if (!opts.merge_lora || opts.quantize == ExportQuant::none) return Exporter(s, opts).run(take);
  // Merged first; the merged weights are then f32 weights like any other, and
  // a session on the merged graph hands them to the quantizing pass.
  std::vector<uint8_t> bytes;
  SG_TRY(export_with(s, {opts.infer_only, ExportQuant::none, true, opts.tokenizer}, [&bytes](std::span<const uint8_t> b) {
    bytes.assign(b.begin(), b.end());
    append_footer(&bytes);
    return Status::Ok();
  }));
  std::unique_ptr<Model> merged;
  SG_TRY(Model::load_bytes(std::move(bytes), s.model().label() + " (merged)", &merged));
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend("cpu", &be));
  std::unique_ptr<Session> ms;
  SG_TRY(Session::create(std::move(merged), std::move(be), &ms));
  SG_TRY(ms->init(0, 0));
  return Exporter(*ms, {true, opts.quantize, false}).run(take);
}

}  // namespace

Status export_model(const Session& s, const ExportOptions& opts, std::vector<uint8_t>* out) {
  return export_with(s, opts, [out](std::span<const uint8_t> b) {
    out->assign(b.begin(), b.end());
    append_footer(out);
    return Status::Ok();
  });
}

// Written from the builder's buffer, then the footer: no copy of the file in memory.
Status export_to_file(const Session& s, const ExportOptions& opts, const std::string& path) {
  return export_with(s, opts, [&path](std::span<const uint8_t> b) {
    std::unique_ptr<AtomicFile> f;
    SG_TRY(AtomicFile::create(path, &f));
    SG_TRY(f->write(b.data(), b.size()));
    uint8_t footer[kFooterBytes];
    footer_of(crc32_of(b.data(), b.size()), footer);
    SG_TRY(f->write(footer, kFooterBytes));
    return f->commit();
  });
}

bool carries_weights(const Model& m) {
  return std::all_of(m.tensors().begin(), m.tensors().end(),
                     [](const TensorInfo& t) { return t.role != Role::param || !t.persistent || t.init == InitKind::buffer; });
}

}  // namespace sgrt
