#include "sgrt/model.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "sg_generated.h"
#include "sgrt/checked_math.h"
#include "sgrt/file_io.h"
#include "sgrt/model_file.h"
#include "sgrt/quant.h"
#include "sgrt/scale_codec.h"
#include "sgrt/shape_infer.h"

namespace sgrt {

static_assert(static_cast<int>(sg::DType::q4_1) == static_cast<int>(DType::q4_1) && kNumDTypes == 10,
              "sg.fbs DType and sgrt::DType disagree");
static_assert(static_cast<int>(sg::Role::statistic) == static_cast<int>(Role::statistic));
static_assert(static_cast<int>(sg::InitKind::buffer) == static_cast<int>(InitKind::buffer));
static_assert(static_cast<int>(sg::AttrKind::ints) == static_cast<int>(AttrKind::ints));

// A mapped file rather than a copy: an exported file's weights are read once
// into the arena, and their pages can then be dropped (release_file_pages).
// What cannot be mapped (a pipe) is read.
Status Model::load_file(const std::string& path, std::unique_ptr<Model>* out) {
  auto m = std::unique_ptr<Model>(new Model());
  if (MappedFile::open(path, &m->mapped_).ok() && m->mapped_.size() > 0) {
    m->bytes_ = std::span<const uint8_t>(m->mapped_.data(), m->mapped_.size());
  } else {
    SG_TRY(read_file(path, &m->owned_).with_context("cannot load model"));
    m->bytes_ = m->owned_;
  }
  SG_TRY(load(std::move(m), path, out));
  (*out)->mapped_.release(0, (*out)->mapped_.size());  // the checksum read every page; the decoded model is on the heap
  return Status::Ok();
}

Status Model::load_bytes(std::vector<uint8_t> bytes, const std::string& label, std::unique_ptr<Model>* out) {
  auto m = std::unique_ptr<Model>(new Model());
  m->owned_ = std::move(bytes);
  m->bytes_ = m->owned_;
  return load(std::move(m), label, out);
}

Status Model::check_bytes(std::span<const uint8_t> bytes, const std::string& label, bool footer) {
  auto m = std::unique_ptr<Model>(new Model());
  m->bytes_ = bytes;
  std::unique_ptr<Model> loaded;
  return load(std::move(m), label, &loaded, footer);
}

void Model::release_file_pages(std::span<const uint8_t> part) const {
  if (mapped_.size() > 0 && part.data() >= mapped_.data() && part.data() + part.size() <= mapped_.data() + mapped_.size())
    mapped_.release(static_cast<size_t>(part.data() - mapped_.data()), part.size());
}

Status Model::load(std::unique_ptr<Model> m, const std::string& label, std::unique_ptr<Model>* out, bool footer) {
  m->label_ = label;
  size_t payload = m->bytes_.size();
  const MappedFile& mapped = m->mapped_;  // a mapped file's pages are dropped as the checksum passes them
  if (footer)
    SG_TRY(check_footer(m->bytes_.data(), m->bytes_.size(), &payload, [&mapped](size_t at, size_t len) { mapped.release(at, len); })
               .with_context(label));
  if (!sg::ModelBufferHasIdentifier(m->bytes_.data()))
    return Status::Invalid(label + ": not a scaled-graph file (identifier is not SGIR)");
  flatbuffers::Verifier verifier(m->bytes_.data(), payload);
  if (!sg::VerifyModelBuffer(verifier)) return Status::Invalid(label + ": the FlatBuffer does not verify");
  m->root_ = sg::GetModel(m->bytes_.data());
  SG_TRY(check_schema_version(m->root_->schema_version()).with_context(label));
  SG_TRY(m->decode().with_context(label));
  *out = std::move(m);
  return Status::Ok();
}

int Model::find_output(const std::string& name) const {
  for (const auto& [n, id] : outputs_)
    if (n == name) return id;
  return -1;
}

int Model::find_program(const std::string& name) const {
  for (size_t i = 0; i < programs_.size(); ++i) if (programs_[i].name == name) return static_cast<int>(i);
  return -1;
}

std::span<const uint8_t> Model::buffer(int index) const {
  const flatbuffers::Vector<uint8_t>* d = root_->buffers()->Get(index)->data();
  return d ? std::span<const uint8_t>(d->data(), d->size()) : std::span<const uint8_t>();
}

int Model::find_tensor(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) if (tensors_[i].name == name) return static_cast<int>(i);
  return -1;
}

namespace {

std::string loc_str(const sg::SourceLoc* loc) {
  if (!loc || !loc->file()) return "<builtin>";
  return loc->file()->str() + ":" + std::to_string(loc->line());
}

// Copied bytewise: the Verifier checks that a vector's length prefix is
// aligned, not its 8-byte elements, and a misaligned load is undefined.
template <class T>
std::vector<T> vec(const flatbuffers::Vector<T>* v) {
  static_assert(FLATBUFFERS_LITTLEENDIAN, "scalars are stored little endian");
  std::vector<T> out(v ? v->size() : 0);
  if (!out.empty()) std::memcpy(out.data(), v->Data(), out.size() * sizeof(T));
  return out;
}

// The typed specs a quantize (its output's) or qmatmul (its operands') kernels
// read, from the tensors' decoded IR specs; indices are valid, counts are
// checked by the shape rule after.
void attach_scales(OpInfoLoaded* op, const std::vector<ScaleSpec>& specs) {
  if (op->code == OpCode::Quantize) op->quant[0] = specs[op->out[0]];
  if (op->code == OpCode::QMatMul && op->in.size() == 6) {
    op->quant[0] = specs[op->in[0]];
    op->quant[1] = specs[op->in[3]];
  }
}

}  // namespace

// Decodes every table and checks what the Verifier cannot: indices in range,
// types that agree with each op's shape rule, tensors inside the arena.
Status Model::decode() {
  const sg::Model& r = *root_;
  const sg::MemoryPlan* mem = r.memory();
  if (!mem) return Status::Invalid("no memory plan");
  arena_bytes_ = mem->arena_bytes();
  if (!checked_round_up(std::max(arena_bytes_, uint64_t{1}), kArenaAlignment, &arena_alloc_bytes_) ||
      arena_alloc_bytes_ > SIZE_MAX)
    return Status::Invalid("the " + std::to_string(arena_bytes_) + "-byte arena is too large to allocate");
  if (!r.tensors()) return Status::Invalid("no tensors");
  const uint32_t version = r.schema_version();
  std::vector<ScaleSpec> specs;  // per tensor
  for (const sg::Tensor* t : *r.tensors()) {
    TensorInfo ti;
    ti.name = t->name()->str();
    ti.type.shape = vec(t->shape());
    int dt = static_cast<int>(t->dtype());
    if (dt < 0 || dt >= kNumDTypes) return Status::Invalid("tensor " + ti.name + ": invalid dtype " + std::to_string(dt));
    ti.type.dtype = static_cast<DType>(dt);
    int64_t count;  // bounded, so element and byte counts cannot overflow
    if (!checked_numel(ti.type.shape, &count))
      return Status::Invalid("tensor " + ti.name + ": invalid shape " + shape_str(ti.type.shape));
    int role = static_cast<int>(t->role());
    if (role < 0 || role > static_cast<int>(Role::statistic)) return Status::Invalid("tensor " + ti.name + ": invalid role");
    ti.role = static_cast<Role>(role);
    ti.offset = t->offset();
    ti.bytes = t->bytes();
    ti.persistent = t->lifetime() == sg::Lifetime::persistent;
    ti.frozen = t->frozen();
    if (ti.frozen && ti.role != Role::param) return Status::Invalid("tensor " + ti.name + ": only a param can be frozen");
    // A block format (a frozen quantized base) is a param of whole blocks along its
    // last dimension: dtype_bytes and every kernel count in blocks.
    if (dtype_is_block(ti.type.dtype) &&
        (ti.role != Role::param || ti.type.shape.empty() || ti.type.shape.back() % dtype_block_size(ti.type.dtype) != 0))
      return Status::Invalid("tensor " + ti.name + ": a " + dtype_name(ti.type.dtype) + " tensor must be a param of whole " +
                             std::to_string(dtype_block_size(ti.type.dtype)) + "-element blocks along its last dimension, got " +
                             type_str(ti.type));
    if (ti.bytes != 0 && ti.bytes != dtype_bytes(ti.type.dtype, numel(ti.type.shape)))
      return Status::Invalid("tensor " + ti.name + ": " + std::to_string(ti.bytes) + " bytes do not fit " + type_str(ti.type));
    if (ti.offset > arena_bytes_ || ti.bytes > arena_bytes_ - ti.offset)
      return Status::Invalid("tensor " + ti.name + " lies outside the arena");
    if (ti.offset % kTensorAlignment != 0)
      return Status::Invalid("tensor " + ti.name + ": arena offset " + std::to_string(ti.offset) + " is not a multiple of " +
                             std::to_string(kTensorAlignment));
    if (const sg::Init* in = t->init()) {
      int k = static_cast<int>(in->kind());
      if (k < 0 || k > static_cast<int>(InitKind::buffer)) return Status::Invalid("tensor " + ti.name + ": invalid initializer");
      ti.init = static_cast<InitKind>(k);
      ti.init_a = in->a();
      ti.init_b = in->b();
      ti.init_seed = in->seed();
      if (ti.init == InitKind::buffer) {
        const auto* bufs = r.buffers();
        if (!bufs || in->buffer() < 0 || in->buffer() >= static_cast<int>(bufs->size()) ||
            (ti.bytes > 0 && (!bufs->Get(in->buffer())->data() || bufs->Get(in->buffer())->data()->size() != ti.bytes)))
          return Status::Invalid("tensor " + ti.name + ": its initializer buffer is missing or not " + std::to_string(ti.bytes) + " bytes");
        ti.init_buffer = in->buffer();
      }
    }
    ti.loc = loc_str(t->loc());
    specs.emplace_back();
    SG_TRY(decode_scale_spec(t->scale(), ti.type.dtype, ti.name, version, &specs.back()));
    tensors_.push_back(std::move(ti));
  }
  const int nt = static_cast<int>(tensors_.size());
  auto valid = [nt](int id) { return id >= 0 && id < nt; };

  if (!r.programs()) return Status::Invalid("no programs");
  for (const sg::Program* p : *r.programs()) {
    ProgramInfo pi;
    pi.name = p->name()->str();
    pi.peak_bytes = p->peak_bytes();
    if (p->ops()) {
      for (const sg::Op* o : *p->ops()) {
        OpInfoLoaded op;
        op.loc = loc_str(o->loc());
        if (!op_code_valid(o->code()))
          return Status::Invalid(op.loc + ": unknown op code " + std::to_string(o->code()) + " in program " + pi.name);
        op.code = static_cast<OpCode>(o->code());
        const int version = op_info(op.code).version;  // ops.def's version column
        if (o->version() > version || o->version() < 1)
          return Status::Invalid(op.loc + ": " + std::string(op_info(op.code).name) + " version " +
                                 std::to_string(o->version()) + ", this reader takes 1 to " + std::to_string(version));
        const bool legacy = o->version() < version;  // upgraded as it is read
        op.in = vec(o->inputs());
        op.out = vec(o->outputs());
        if (o->attrs())
          for (const sg::Attr* a : *o->attrs()) {
            if (legacy && is_v1_scale_attr(op.code, a->name()->c_str())) continue;
            int kind = static_cast<int>(a->kind());
            if (kind < 0 || kind > static_cast<int>(AttrKind::ints))
              return Status::Invalid(op.loc + ": attribute '" + a->name()->str() + "' has an invalid kind");
            op.attrs.add(Attr{a->name()->str(), static_cast<AttrKind>(kind), a->i(), a->f(), vec(a->ints())});
          }
        std::vector<TensorType> ins, outs;
        for (int id : op.in) {
          if (!valid(id)) return Status::Invalid(op.loc + ": " + std::string(op_info(op.code).name) + " has an invalid input index");
          if (tensors_[id].bytes == 0) return Status::Invalid(op.loc + ": input " + tensors_[id].name + " has no storage");
          ins.push_back(tensors_[id].type);
        }
        if (op.code == OpCode::Quantize && (op.out.empty() || !valid(op.out[0])))
          return Status::Invalid(op.loc + ": quantize has an invalid output index");
        attach_scales(&op, specs);
        if (op.code == OpCode::Quantize && legacy && ins.size() == 2) upgrade_v1_history(ins[1], &op.quant[0]);
        bool scaled = op.code == OpCode::Quantize || op.code == OpCode::QMatMul;
        Status st = infer_types(op.code, ins, op.attrs, &outs, scaled ? op.quant : nullptr);
        if (!st.ok()) return st.with_context(op.loc);
        if (outs.size() != op.out.size())
          return Status::Invalid(op.loc + ": " + std::string(op_info(op.code).name) + " has the wrong number of outputs");
        for (size_t i = 0; i < op.out.size(); ++i) {
          int id = op.out[i];
          if (!valid(id) || !(tensors_[id].type == outs[i]) || tensors_[id].bytes == 0)
            return Status::Invalid(op.loc + ": " + std::string(op_info(op.code).name) + " output " + std::to_string(i) +
                                   " does not match its inferred type " + type_str(outs[i]));
        }
        pi.ops.push_back(std::move(op));
      }
    }
    programs_.push_back(std::move(pi));
  }

  auto named = [&](const flatbuffers::Vector<flatbuffers::Offset<sg::NamedTensor>>* v,
                   std::vector<std::pair<std::string, int>>* out) -> Status {
    if (!v) return Status::Ok();
    for (const sg::NamedTensor* n : *v) {
      if (!valid(n->tensor())) return Status::Invalid("metric or output '" + n->name()->str() + "' has an invalid tensor");
      out->push_back({n->name()->str(), n->tensor()});
    }
    return Status::Ok();
  };
  SG_TRY(named(r.metrics(), &metrics_));
  SG_TRY(named(r.outputs(), &outputs_));
  loss_ = r.loss();
  train_state_ = r.step_tensor();
  lr_ = r.lr_tensor();
  for (int id : {loss_, train_state_, lr_})
    if (id != -1 && !valid(id)) return Status::Invalid("loss, step or lr refers to an invalid tensor");
  if (train_state_ >= 0 && !(tensors_[train_state_].type == TensorType{{kTrainStateLen}, DType::i32}))
    return Status::Invalid("the train state is not i32[" + std::to_string(kTrainStateLen) + "]");
  if (const sg::DataBinding* d = r.data(); d && d->fields())
    for (const sg::DataField* f : *d->fields())
      if (!valid(f->tensor())) return Status::Invalid("data field '" + f->field()->str() + "' has an invalid tensor");
  return Status::Ok();
}

// Each dropped tensor's span, rounded up to kTensorAlignment, holds nothing
// else (checked), so closing it up shifts later tensors by multiples of the
// alignment and keeps every other tensor's neighbours as the plan laid them.
Status Model::drop_storage(const std::vector<int>& ids) {
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [begin, end)
  for (int id : ids) {
    const TensorInfo& t = tensors_.at(static_cast<size_t>(id));
    if (t.bytes == 0) continue;
    for (const ProgramInfo& p : programs_)
      for (const OpInfoLoaded& op : p.ops)
        if (std::find(op.in.begin(), op.in.end(), id) != op.in.end() || std::find(op.out.begin(), op.out.end(), id) != op.out.end())
          return Status::Invalid(op.loc + ": program " + p.name + " still uses " + t.name + ", whose storage is being dropped");
    uint64_t end = (t.offset + t.bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    for (size_t o = 0; o < tensors_.size(); ++o)
      if (static_cast<int>(o) != id && tensors_[o].bytes > 0 && tensors_[o].offset < end &&
          t.offset < tensors_[o].offset + tensors_[o].bytes)
        return Status::Invalid("tensor " + t.name + " shares its arena bytes with " + tensors_[o].name + ": it cannot be dropped");
    spans.push_back({t.offset, std::min(end, arena_bytes_)});
  }
  for (int id : ids) tensors_[static_cast<size_t>(id)].bytes = tensors_[static_cast<size_t>(id)].offset = 0;
  std::sort(spans.begin(), spans.end());
  for (TensorInfo& t : tensors_) {
    if (t.bytes == 0) continue;
    uint64_t shift = 0;
    for (auto [b, e] : spans) shift += e <= t.offset ? e - b : 0;
    t.offset -= shift;
  }
  for (auto [b, e] : spans) arena_bytes_ -= e - b;
  if (!checked_round_up(std::max(arena_bytes_, uint64_t{1}), kArenaAlignment, &arena_alloc_bytes_))
    return Status::Invalid("arena size overflows");
  return Status::Ok();
}

void Model::set_updated_by(int tensor, int rank, bool sharded) {
  tensors_.at(static_cast<size_t>(tensor)).updated_by = rank;
  tensors_.at(static_cast<size_t>(tensor)).sharded = sharded;
}

}  // namespace sgrt
