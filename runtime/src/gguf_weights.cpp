#include "sgrt/gguf_weights.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "fnv1a.h"
#include "formats/gguf_blocks.h"
#include "sgrt/params.h"
#include "sgrt/safetensors.h"

namespace sgrt {
namespace {

bool is_gguf_name(const std::string& path) { return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0; }

Shape row_major(const GgufTensor& t) { return Shape(t.shape.rbegin(), t.shape.rend()); }

// A block-format param (a frozen quantized base) takes a tensor of its own format as is.
bool stores_file_blocks(DType param, GgufType file) {
  return (param == DType::q8_0 && file == GgufType::Q8_0) || (param == DType::q4_1 && file == GgufType::Q4_1);
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// A block-format param from a tensor of another type (a Q8_0 embedding into a
// q4_1 base): decoded and re-encoded by ggml's reference quantizer a few rows
// at a time, so no f32 copy of the whole tensor is made.
Status reencode_blocks(Session& s, int id, const GgufFile& f, const GgufTensor& t) {
  const DType dt = s.model().tensors()[id].type.dtype;
  const int64_t width = t.shape[0], rows = t.numel() / width, chunk = std::max<int64_t>(1, 65536 / width);
  const size_t row_bytes = t.bytes / static_cast<size_t>(rows);
  const uint8_t* src = f.data(t).data();
  std::vector<uint8_t> out;
  std::vector<float> rowsf;
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r) * width;
    rowsf.resize(static_cast<size_t>(n));
    out.resize(dtype_bytes(dt, n));
    SG_TRY(gguf_dequantize_rows(t.type, src + r * row_bytes, n, rowsf.data()));
    fmt::gguf_encode_blocks(dt == DType::q8_0, rowsf.data(), n, out.data());
    SG_TRY(s.write_range(id, dtype_bytes(dt, r * width), out.data(), out.size()));
    f.release(t, r * row_bytes, (n / width) * row_bytes);
  }
  return Status::Ok();
}

// A tensor of the param's own block format, copied bit for bit a MiB at a
// time, each piece's file pages dropped once written: the file's copy of a
// large weight (SmolLM2's 30 MB embedding) never sits in memory whole beside
// the arena (docs/llama.md's peak RSS).
Status copy_blocks(Session& s, int id, const GgufFile& f, const GgufTensor& t) {
  const uint8_t* src = f.data(t).data();
  for (uint64_t at = 0, piece = uint64_t(1) << 20; at < t.bytes; at += piece) {
    const uint64_t n = std::min(piece, t.bytes - at);
    SG_TRY(s.write_range(id, at, src + at, n));
    f.release(t, at, n);
  }
  return Status::Ok();
}

}  // namespace

Status check_gguf_architecture(const GgufFile& f) {
  std::string arch;
  SG_TRY(f.get_string("general.architecture", &arch));
  if (arch != kGgufArchitecture)
    return Status::Invalid(f.path() + ": architecture '" + arch + "' is not supported (" + kGgufArchitecture + ")");
  return Status::Ok();
}

Status import_gguf(Session& s, const std::string& path) {
  std::unique_ptr<GgufFile> f;
  SG_TRY(GgufFile::open(path, &f));
  SG_TRY(check_gguf_architecture(*f));
  const Model& m = s.model();
  std::vector<std::pair<int, const GgufTensor*>> plan;
  size_t bound = 0;
  for (size_t id = 0; id < m.tensors().size(); ++id) {
    const TensorInfo& p = m.tensors()[id];
    if (p.role != Role::param) continue;
    const GgufTensor* t = f->find_tensor(p.name);
    if (!t && may_keep_init(m, p)) continue;
    if (!t) return Status::Invalid(path + ": has no tensor '" + p.name + "' (a parameter of " + m.label() + ")");
    if (row_major(*t) != p.type.shape)
      return Status::Invalid(path + ": tensor '" + p.name + "' is " + shape_str(row_major(*t)) + " (ggml ne reversed), " +
                             m.label() + " needs " + shape_str(p.type.shape));
    if (!gguf_type_supported(t->type))
      return Status::Invalid(path + ": tensor '" + p.name + "' has type " + gguf_type_name(static_cast<uint32_t>(t->type)) +
                             "; supported: " + gguf_supported_type_names());
    plan.push_back({static_cast<int>(id), t});
    ++bound;
  }
  if (bound != f->tensors().size())
    for (const GgufTensor& t : f->tensors())
      if (std::none_of(plan.begin(), plan.end(), [&](auto& e) { return e.second == &t; }))
        return Status::Invalid(path + ": tensor '" + t.name + "' is not a parameter of " + m.label());
  // One tensor's f32 copy at a time: the dequantized file never sits in memory twice.
  std::vector<float> values;
  ParamBytes bytes;
  for (auto& [id, t] : plan) {
    const DType dt = m.tensors()[id].type.dtype;
    if (dtype_is_block(dt)) {
      if (stores_file_blocks(dt, t->type)) SG_TRY(copy_blocks(s, id, *f, *t));  // bit for bit
      else SG_TRY(reencode_blocks(s, id, *f, *t).with_context(path));
      f->release(*t);
      continue;
    }
    values.resize(static_cast<size_t>(t->numel()));
    SG_TRY(f->dequantize(*t, values));
    f->release(*t);  // the file's pages would otherwise stay resident beside the f32 weights
    SG_TRY(encode_param(s, id, values, &bytes).with_context(path));
    SG_TRY(s.write(bytes.tensor, bytes.bytes.data(), bytes.bytes.size()));
  }
  return Status::Ok();
}

Status import_weights(Session& s, const std::string& path) {
  return is_gguf_name(path) ? import_gguf(s, path) : import_safetensors(s, path);
}

Status weights_file_tensors(const Model& m, const std::string& path, std::vector<bool>* out) {
  std::vector<std::string> names;
  if (is_gguf_name(path)) {
    std::unique_ptr<GgufFile> f;
    SG_TRY(GgufFile::open(path, &f));
    for (const GgufTensor& t : f->tensors()) names.push_back(t.name);
  } else {
    SG_TRY(read_safetensors_names(path, &names));
  }
  out->assign(m.tensors().size(), false);
  for (const std::string& name : names) {
    const int id = m.find_tensor(name);
    if (id < 0 || !is_weight(m.tensors()[id])) continue;  // the import refuses the file
    if (const int v = value_tensor(m, id); v >= 0) (*out)[v] = true;
  }
  return Status::Ok();
}

Status weights_file_identity(const std::string& path, uint64_t* id) {
  if (is_gguf_name(path)) {
    std::unique_ptr<GgufFile> f;
    SG_TRY(GgufFile::open(path, &f));
    *id = fnv1a(f->header_bytes().data(), f->header_bytes().size());
    return Status::Ok();
  }
  std::vector<uint8_t> b;
  SG_TRY(read_safetensors_header(path, &b));
  *id = fnv1a(b.data(), b.size());
  return Status::Ok();
}

Status llama_config(const GgufFile& f, std::map<std::string, std::string>* out) {
  SG_TRY(check_gguf_architecture(f));
  auto& c = *out;
  const std::pair<const char*, const char*> ints[] = {
      {"n_layer", "llama.block_count"},         {"n_embd", "llama.embedding_length"},
      {"n_head", "llama.attention.head_count"}, {"ffn", "llama.feed_forward_length"},
      {"context", "llama.context_length"}};
  for (auto& [name, key] : ints) {
    uint32_t v;
    SG_TRY(f.get_u32(key, &v));
    c[name] = std::to_string(v);
  }
  uint32_t kv = 0;
  if (f.has("llama.attention.head_count_kv")) SG_TRY(f.get_u32("llama.attention.head_count_kv", &kv));
  c["n_kv_head"] = kv ? std::to_string(kv) : c["n_head"];
  float base = 10000.f, eps;
  if (f.has("llama.rope.freq_base")) SG_TRY(f.get_f32("llama.rope.freq_base", &base));
  SG_TRY(f.get_f32("llama.attention.layer_norm_rms_epsilon", &eps));
  c["rope_base"] = num(base);
  c["eps"] = num(eps);
  const GgufTensor* emb = f.find_tensor("token_embd.weight");
  if (!emb || emb->shape.size() != 2) return Status::Invalid(f.path() + ": has no 2-D tensor 'token_embd.weight'");
  c["vocab"] = std::to_string(emb->shape[1]);
  c["tie"] = f.find_tensor("output.weight") ? "false" : "true";
  return Status::Ok();
}

}  // namespace sgrt
