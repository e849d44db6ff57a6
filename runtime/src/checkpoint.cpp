#include "sgrt/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cpu/optimizer_state.h"
#include "fnv1a.h"
#include "sg_generated.h"
#include "sgrt/file_io.h"
#include "sgrt/mapped_file.h"
#include "sgrt/model_file.h"

namespace sgrt {
namespace {

constexpr char kMagic[8] = {'S', 'G', 'C', 'K', 'P', 'T', '0', '0' + kCheckpointFormat};

std::string file_in(const std::string& dir) { return dir + "/checkpoint.sgck"; }

template <class T>
void put(std::vector<uint8_t>* b, T v) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
  b->insert(b->end(), p, p + sizeof v);
}

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  template <class T>
  bool get(T* v) { return take(v, sizeof *v); }
  bool take(void* dst, size_t n) {
    if (n > n_ - pos_) return false;
    std::memcpy(dst, p_ + pos_, n);
    pos_ += n;
    return true;
  }
  const uint8_t* here() const { return p_ + pos_; }
  bool skip(size_t n) { if (n > n_ - pos_) return false; pos_ += n; return true; }

 private:
  const uint8_t* p_;
  size_t n_, pos_ = 0;
};

}  // namespace

namespace {

// FNV-1a, fed field by field.
class Hash {
 public:
  void mix(const void* p, size_t n) { h_ = fnv1a(p, n, h_); }
  template <class T>
  void mix(const T& v) { mix(&v, sizeof v); }
  void mix(const std::string& s) { mix(s.size()); mix(s.data(), s.size()); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = kFnvBasis;
};

// Ranges every checkpoint holds, whoever wrote it (the trainer checks the
// rest against its run: total > 0, batches per epoch equal to its data's).
Status check_meta(const CheckpointMeta& c) {
  const std::pair<const char*, int64_t> counts[] = {
      {"step", c.step}, {"planned total", c.total_steps}, {"batches per epoch", c.batches_per_epoch}, {"examples per step", c.examples_per_step}};
  for (auto [name, v] : counts)
    if (v < 0) return Status::Invalid(name + (" " + std::to_string(v)) + " is negative");
  if (c.total_steps > 0 && c.step > c.total_steps)
    return Status::Invalid("step " + std::to_string(c.step) + " is past the planned total of " + std::to_string(c.total_steps));
  return Status::Ok();
}

// What a checkpoint holds: a ZeRO-1 rank's model also names the moments
// other ranks keep (no storage here), so its checkpoints are the whole model's.
bool saved(const TensorInfo& t) { return in_checkpoint(t) || (t.persistent && t.sharded); }
uint64_t saved_bytes(const TensorInfo& t) { return dtype_bytes(t.type.dtype, numel(t.type.shape)); }

constexpr uint32_t kMaxPath = 4096;  // the init file's path
// Magic, 2 identities, 5 run fields; path length, path, its identity; record count.
constexpr size_t kMaxHeader = 8 + 2 * 8 + 5 * 8 + 4 + kMaxPath + 8 + 4;

struct Header {
  uint64_t model_id = 0, step_id = 0;
  CheckpointMeta meta;
  uint32_t count = 0;  // tensor records that follow
};

// Everything before the tensor records, its fields' ranges checked.
Status read_header(Reader& r, const std::string& path, Header* h) {
  char magic[8];
  if (!r.take(magic, 8) || std::memcmp(magic, kMagic, 7) != 0) return Status::Invalid(path + ": not an sgrt checkpoint");
  const int version = magic[7] - '0';
  if (version < 3 || version > kCheckpointFormat)
    return Status::Invalid(path + ": checkpoint format version " + std::string(1, magic[7]) + ", this sgrt reads versions 3 to " +
                           kMagic[7]);
  CheckpointMeta& c = h->meta;
  uint32_t init_len = 0;
  if (!r.get(&h->model_id) || !r.get(&h->step_id) || !r.get(&c.step) || !r.get(&c.total_steps) || !r.get(&c.seed) ||
      !r.get(&c.batches_per_epoch) || (version >= 4 && !r.get(&c.examples_per_step)) ||
      (version >= 5 && !r.get(&init_len)))
    return Status::Invalid(path + ": truncated header");
  if (init_len > kMaxPath) return Status::Invalid(path + ": corrupt header (an init file path of " + std::to_string(init_len) + " bytes)");
  c.init_file.resize(init_len);
  if (!r.take(c.init_file.data(), init_len) || (version >= 5 && !r.get(&c.init_identity)) || !r.get(&h->count))
    return Status::Invalid(path + ": truncated header");
  return check_meta(c).with_context(path);
}

}  // namespace

bool in_checkpoint(const TensorInfo& t) {
  return t.persistent && t.role != Role::input && t.role != Role::cache && t.bytes > 0;
}

namespace {

// A scale state (a quantized tensor's scale and history) that only m has, by
// name and type: another compilation (generation's shapes) numbers its
// activations' quantization points otherwise, and sizes their block scales by
// its own rows. It starts from its plan.
bool own_scale_state(const TensorInfo& t, const Model& trained) {
  if (t.role != Role::scale_state) return false;
  const int tt = trained.find_tensor(t.name);
  return tt < 0 || !(trained.tensors()[tt].type == t.type);
}

}  // namespace

std::vector<bool> checkpoint_tensors(const Model& m) { return checkpoint_tensors(m, m); }

std::vector<bool> checkpoint_tensors(const Model& m, const Model& trained) {
  std::vector<bool> out;
  for (const TensorInfo& t : m.tensors()) out.push_back(saved(t) && t.bytes > 0 && !own_scale_state(t, trained));
  return out;
}

uint64_t model_identity(const Model& m) {
  Hash h;
  for (const TensorInfo& t : m.tensors()) {
    if (!saved(t)) continue;
    h.mix(t.name.data(), t.name.size());
    h.mix(&t.type.dtype, 1);
    h.mix(t.type.shape.data(), t.type.shape.size() * sizeof(int64_t));
  }
  return h.value();
}

uint64_t step_identity(const Model& m) {
  if (m.kept_step_identity() != 0) return m.kept_step_identity();  // a ZeRO-1 rank's model: the compiled one's
  int p = m.find_program("train_step");
  if (p < 0) return 0;
  Hash h;
  h.mix(std::string(m.root().recipe() ? m.root().recipe()->str() : ""));
  for (const OpInfoLoaded& op : m.programs()[p].ops) {
    h.mix(op.code);
    for (const std::vector<int>* ids : {&op.in, &op.out}) {
      h.mix(ids->size());
      for (int id : *ids) {
        const TensorInfo& t = m.tensors()[id];
        h.mix(id);
        h.mix(t.type.dtype);
        h.mix(t.role);
        h.mix(t.type.shape.data(), t.type.shape.size() * sizeof(int64_t));
        if (const sg::ScaleSpec* sc = m.root().tensors()->Get(static_cast<flatbuffers::uoffset_t>(id))->scale()) {
          h.mix(sc->mode());
          h.mix(sc->granularity());
          h.mix(sc->block_size());
          h.mix(sc->block_scale_dtype());
          h.mix(sc->static_log2());
          h.mix(sc->history_len());
          h.mix(sc->margin());
          h.mix(sc->rescale_norm());
          h.mix(sc->grad_only());
        }
      }
    }
    // By name: a script's option tables reach the compiler in Lua's hash order.
    std::vector<const Attr*> attrs;
    for (const Attr& a : op.attrs.all()) attrs.push_back(&a);
    std::sort(attrs.begin(), attrs.end(), [](const Attr* x, const Attr* y) { return x->name < y->name; });
    for (const Attr* pa : attrs) {
      const Attr& a = *pa;
      h.mix(a.name);
      h.mix(a.i);
      h.mix(a.f);
      h.mix(a.ints.size());
      h.mix(a.ints.data(), a.ints.size() * sizeof(int64_t));
    }
  }
  return h.value();
}

Status save_checkpoint(const Session& s, const std::string& dir, const CheckpointMeta& meta) {
  return save_checkpoint(s.model(), [&s](int t, void* dst, size_t bytes) { return s.read(t, dst, bytes); }, dir, meta);
}

Status save_checkpoint(const Model& m, const TensorSource& read, const std::string& dir, const CheckpointMeta& meta) {
  if (meta.init_file.size() > kMaxPath)
    return Status::Invalid(meta.init_file.substr(0, 64) + "...: an init file path longer than " + std::to_string(kMaxPath) + " bytes");
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Status::Io(dir + ": cannot create: " + std::strerror(errno));
  std::vector<uint8_t> b;
  b.reserve(kMaxHeader);
  b.insert(b.end(), kMagic, kMagic + 8);
  put(&b, model_identity(m));
  put(&b, step_identity(m));
  put(&b, meta.step);
  put(&b, meta.total_steps);
  put(&b, meta.seed);
  put(&b, meta.batches_per_epoch);
  put(&b, meta.examples_per_step);
  put(&b, static_cast<uint32_t>(meta.init_file.size()));
  b.insert(b.end(), meta.init_file.begin(), meta.init_file.end());
  put(&b, meta.init_identity);
  uint32_t count = 0;
  for (const TensorInfo& t : m.tensors()) count += saved(t);
  put(&b, count);
  // Streamed a tensor at a time (its record's header, then its bytes): the
  // file is never whole in memory beside the session.
  std::unique_ptr<AtomicFile> out;
  SG_TRY(AtomicFile::create(file_in(dir), &out));
  uint32_t crc = 0;
  auto write = [&](const void* p, size_t n) {
    crc = crc32_of(p, n, crc);
    return out->write(p, n);
  };
  std::vector<uint8_t> data;
  for (size_t id = 0; id < m.tensors().size(); ++id) {
    const TensorInfo& t = m.tensors()[id];
    if (!saved(t)) continue;
    put(&b, static_cast<uint32_t>(t.name.size()));
    b.insert(b.end(), t.name.begin(), t.name.end());
    put(&b, saved_bytes(t));
    SG_TRY(write(b.data(), b.size()));
    b.clear();
    data.resize(saved_bytes(t));
    SG_TRY(read(static_cast<int>(id), data.data(), data.size()));
    SG_TRY(write(data.data(), data.size()));
  }
  SG_TRY(write(b.data(), b.size()));  // a model with no saved tensor: the header alone
  uint8_t footer[kFooterBytes];
  footer_of(crc, footer);
  SG_TRY(out->write(footer, kFooterBytes));
  return out->commit();
}

namespace {

// An O2/O3 run keeps a trained parameter as its low-precision master (f16 or
// e4m3 behind a power-of-two scale, docs/optimizer.md) and makes the f32 value
// each step with a dequantize op; a compilation without the training step
// (generation, an inference-only export) keeps that value as the parameter
// itself. The trained model's dequantize ops by the tensor each makes.
std::vector<const OpInfoLoaded*> working_copy_ops(const Model& trained) {
  std::vector<const OpInfoLoaded*> by_tensor(trained.tensors().size(), nullptr);
  for (const ProgramInfo& p : trained.programs())
    for (const OpInfoLoaded& op : p.ops)
      if (op.code == OpCode::Dequantize) by_tensor[op.out[0]] = &op;
  return by_tensor;
}

// The checkpoint of `trained` (its identities; step_id, when not 0, the
// training step's instead) into s, whose model is `trained` or another
// compilation of it keeping a part of its state under the same names, dtypes
// and shapes, or an f32 parameter in place of its master (decoded as the
// dequantize kernel does). Everything is checked before anything is written.
Status load_into(Session& s, const std::string& dir, const Model& trained, uint64_t step_id, CheckpointMeta* meta) {
  std::string path = file_in(dir);
  MappedFile f;  // read through once for the checksum, then a tensor at a time: each page dropped once read
  SG_TRY(MappedFile::open(path, &f));
  size_t n = 0;
  SG_TRY(check_footer(f.data(), f.size(), &n, [&f](size_t at, size_t len) { f.release(at, len); }).with_context(path));
  Reader r(f.data(), n);
  Header head;
  SG_TRY(read_header(r, path, &head));
  const Model& m = s.model();
  if (head.model_id != model_identity(trained))
    return Status::Invalid(path + ": checkpoint belongs to another model (its parameters differ from " + trained.label() + "'s)");
  // A model without a training step (an inference-only export) runs no update to compare.
  if (uint64_t mine = step_id ? step_id : step_identity(trained); mine != 0 && head.step_id != mine)
    return Status::Invalid(path + ": checkpoint was trained by another training step (the activations, loss, optimizer "
                           "hyperparameters, schedule or recipe differ from " + trained.label() + "'s)");
  std::vector<std::pair<int, const uint8_t*>> found;
  std::vector<const uint8_t*> record(trained.tensors().size(), nullptr);  // by the trained model's tensor
  for (uint32_t i = 0; i < head.count; ++i) {
    uint32_t len = 0;
    uint64_t bytes = 0;
    std::string name;
    if (!r.get(&len) || len > 4096) return Status::Invalid(path + ": corrupt tensor record");
    name.resize(len);
    if (!r.take(name.data(), len) || !r.get(&bytes)) return Status::Invalid(path + ": corrupt tensor record");
    const int tt = trained.find_tensor(name), t = m.find_tensor(name);
    if (tt < 0 || !saved(trained.tensors()[tt]) || saved_bytes(trained.tensors()[tt]) != bytes)
      return Status::Invalid(path + ": tensor '" + name + "' does not match the model");
    record[tt] = r.here();
    // Else state this compilation does not keep (an optimizer's, for inference), or keeps apart.
    if (t >= 0 && saved(m.tensors()[t]) && !own_scale_state(m.tensors()[t], trained)) {
      if (!(m.tensors()[t].type == trained.tensors()[tt].type))
        return Status::Invalid(path + ": tensor '" + name + "' is " + type_str(trained.tensors()[tt].type) + ", " + m.label() +
                               " has " + type_str(m.tensors()[t].type));
      found.push_back({t, r.here()});
    }
    if (!r.skip(bytes)) return Status::Invalid(path + ": truncated tensor '" + name + "'");
  }
  uint32_t expected = 0;
  for (const TensorInfo& t : trained.tensors()) expected += saved(t);
  if (head.count != expected || r.here() != f.data() + n)
    return Status::Invalid(path + ": holds " + std::to_string(head.count) + " tensor records, the model has " + std::to_string(expected));
  std::vector<bool> loaded(m.tensors().size());
  for (auto [t, data] : found) loaded[t] = true;
  std::vector<std::pair<int, const OpInfoLoaded*>> from_master;  // (m's f32 parameter, the op that decodes it)
  const std::vector<const OpInfoLoaded*> dequantized = working_copy_ops(trained);
  for (size_t t = 0; t < loaded.size(); ++t) {
    const TensorInfo& mt = m.tensors()[t];
    if (!saved(mt) || loaded[t] || own_scale_state(mt, trained)) continue;
    const int tt = trained.find_tensor(mt.name);
    const OpInfoLoaded* op = tt >= 0 ? dequantized[tt] : nullptr;
    if (!op || mt.type.dtype != DType::f32 || mt.type.shape != trained.tensors()[op->in[0]].type.shape ||
        !record[op->in[0]] || !record[op->in[1]])
      return Status::Invalid(path + ": holds no tensor '" + mt.name + "' (" + m.label() + " keeps it)");
    from_master.push_back({static_cast<int>(t), op});
  }
  for (auto [t, data] : found)  // a ZeRO-1 rank keeps only its own share of the moments
    if (m.tensors()[t].bytes > 0) {
      SG_TRY(s.write(t, data, m.tensors()[t].bytes));
      f.release(static_cast<size_t>(data - f.data()), m.tensors()[t].bytes);
    }
  std::vector<float> value;
  for (auto [t, op] : from_master) {
    float scale;
    std::memcpy(&scale, record[op->in[1]] + sizeof(float) * op->attrs.i("slot"), sizeof scale);
    value.resize(static_cast<size_t>(numel(m.tensors()[t].type.shape)));
    cpu::load_span(trained.tensors()[op->in[0]].type.dtype, record[op->in[0]], 0, static_cast<int64_t>(value.size()),
                   1.f / scale, value.data());
    SG_TRY(s.write(t, value.data(), value.size() * sizeof(float)));
  }
  *meta = head.meta;
  return Status::Ok();
}

}  // namespace

Status load_checkpoint(Session& s, const std::string& dir, CheckpointMeta* meta, uint64_t step_id) {
  return load_into(s, dir, s.model(), step_id, meta);
}

Status load_checkpoint(Session& s, const std::string& dir, const Model& trained, CheckpointMeta* meta) {
  return load_into(s, dir, trained, 0, meta);
}

Status read_checkpoint_meta(const std::string& dir, CheckpointMeta* meta) {
  const std::string path = file_in(dir);
  std::vector<uint8_t> b;
  SG_TRY(read_file_prefix(path, kMaxHeader, &b));
  Reader r(b.data(), b.size());
  Header head;
  SG_TRY(read_header(r, path, &head));
  *meta = head.meta;
  return Status::Ok();
}

Status take_run_state(const Session& from, Session& to) {
  const Model &src = from.model(), &dst = to.model();
  std::vector<std::pair<int, int>> pairs;  // (to's tensor, from's)
  for (int t = 0; t < static_cast<int>(dst.tensors().size()); ++t) {
    const TensorInfo& d = dst.tensors()[t];
    if (!in_checkpoint(d) || d.role == Role::scale_state) continue;
    int f = src.find_tensor(d.name);
    if (f < 0 || !in_checkpoint(src.tensors()[f]))
      return Status::Invalid(dst.label() + ": tensor '" + d.name + "' (" + type_str(d.type) + ") has no counterpart in " +
                             src.label() + " to take its state from");
    if (!(src.tensors()[f].type == d.type))
      return Status::Invalid(dst.label() + ": tensor '" + d.name + "' is " + type_str(d.type) + ", " + src.label() +
                             "'s is " + type_str(src.tensors()[f].type) + " (compile both with the same --opt-level)");
    pairs.push_back({t, f});
  }
  std::vector<uint8_t> bytes;
  for (auto [t, f] : pairs) {
    bytes.resize(dst.tensors()[t].bytes);
    SG_TRY(from.read(f, bytes.data(), bytes.size()));
    SG_TRY(to.write(t, bytes.data(), bytes.size()));
  }
  return Status::Ok();
}

Status save_checkpoint(const Session& s, const std::string& dir, int64_t step) {
  CheckpointMeta meta;
  meta.step = step;
  return save_checkpoint(s, dir, meta);
}

Status load_checkpoint(Session& s, const std::string& dir, int64_t* step) {
  CheckpointMeta meta;
  SG_TRY(load_checkpoint(s, dir, &meta));
  *step = meta.step;
  return Status::Ok();
}

}  // namespace sgrt
