#include "sgrt/gguf_export.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "formats/gguf_blocks.h"
#include "lora_merge.h"
#include "sgrt/file_io.h"
#include "sgrt/gguf.h"
#include "sgrt/gguf_weights.h"
#include "sgrt/params.h"

namespace sgrt {
namespace {

// One tensor of the output: the base's entry (name, ne), its parameter, its type.
struct Planned {
  const GgufTensor* base;
  int param;
  GgufType type;
  bool merged;
  uint64_t bytes = 0, offset = 0;
};

GgufType gguf_type_of(DType d) {
  switch (d) {
    case DType::f16: return GgufType::F16;
    case DType::bf16: return GgufType::BF16;
    case DType::q8_0: return GgufType::Q8_0;
    case DType::q4_1: return GgufType::Q4_1;
    default: return GgufType::F32;
  }
}

// llama.cpp's llama_ftype ("mostly X") for the type most matrix elements have.
uint32_t file_type_of(GgufType t) {
  switch (t) {
    case GgufType::F16: return 1;
    case GgufType::Q4_1: return 3;
    case GgufType::Q8_0: return 7;
    case GgufType::BF16: return 32;
    default: return 0;  // all F32
  }
}

template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_str(std::string& s, std::string_view v) {
  put<uint64_t>(s, v.size());
  s.append(v);
}
uint64_t aligned(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Checks the model against the base file and picks each tensor's type.
Status plan(const Model& m, const GgufFile& base, const GgufExportOptions& o, const std::map<int, LoraJoin>& joins,
            const std::set<int>& adapters, std::vector<Planned>* out) {
  const std::string& path = base.path();
  std::vector<bool> bound(m.tensors().size(), false);
  for (const GgufTensor& t : base.tensors()) {
    const int id = m.find_tensor(t.name);
    if (id < 0 || !is_weight(m.tensors()[id]))
      return Status::Invalid(path + ": tensor '" + t.name + "' is not a parameter of " + m.label());
    const TensorInfo& p = m.tensors()[id];
    const Shape ne_reversed(t.shape.rbegin(), t.shape.rend());
    if (ne_reversed != p.type.shape)
      return Status::Invalid(path + ": tensor '" + t.name + "' is " + shape_str(ne_reversed) + " (ggml ne reversed), " +
                             m.label() + " has " + shape_str(p.type.shape));
    Planned e{&t, id, GgufType::F32, joins.count(id) > 0};
    if (t.shape.size() > 1) e.type = dtype_is_block(p.type.dtype) && !e.merged ? gguf_type_of(p.type.dtype) : gguf_type_of(o.matrix_dtype);
    int64_t block_elems = 1, block_bytes = 0;
    gguf_type_layout(static_cast<uint32_t>(e.type), &block_elems, &block_bytes);
    if (t.shape[0] % block_elems)
      return Status::Invalid(t.name + ": a row of " + std::to_string(t.shape[0]) + " elements is not whole " +
                             gguf_type_name(static_cast<uint32_t>(e.type)) + " blocks of " + std::to_string(block_elems) +
                             "; choose --dtype f32, f16 or bf16");
    e.bytes = static_cast<uint64_t>(t.numel() / block_elems * block_bytes);
    bound[id] = true;
    out->push_back(e);
  }
  for (size_t id = 0; id < m.tensors().size(); ++id) {
    const TensorInfo& p = m.tensors()[id];
    if (is_weight(p) && !bound[id] && !adapters.count(static_cast<int>(id)))
      return Status::Invalid(path + ": has no tensor '" + p.name + "' (a parameter of " + m.label() + ")");
  }
  uint64_t at = 0;
  for (Planned& e : *out) {
    e.offset = at;
    at = aligned(at + e.bytes, base.alignment());
  }
  return Status::Ok();
}

// The base's metadata, general.file_type set to `file_type` (added if absent).
std::string header(const GgufFile& base, const std::vector<Planned>& tensors, uint32_t file_type) {
  constexpr std::string_view kFileType = "general.file_type";
  std::string kvs;
  uint64_t n_kv = 0;
  auto file_type_kv = [&] {
    put_str(kvs, kFileType);
    put(kvs, static_cast<uint32_t>(GgufValueType::U32));
    put(kvs, file_type);
    ++n_kv;
  };
  for (const GgufKv& kv : base.metadata()) {
    if (kv.key == kFileType) {
      file_type_kv();
      continue;
    }
    put_str(kvs, kv.key);
    put(kvs, static_cast<uint32_t>(kv.type));
    const auto raw = base.raw_value(kv);
    kvs.append(reinterpret_cast<const char*>(raw.data()), raw.size());
    ++n_kv;
  }
  if (!base.has(kFileType)) file_type_kv();
  std::string h = "GGUF";
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors.size());
  put<uint64_t>(h, n_kv);
  h += kvs;
  for (const Planned& e : tensors) {
    put_str(h, e.base->name);
    put<uint32_t>(h, static_cast<uint32_t>(e.base->shape.size()));
    for (int64_t d : e.base->shape) put<uint64_t>(h, static_cast<uint64_t>(d));
    put<uint32_t>(h, static_cast<uint32_t>(e.type));
    put<uint64_t>(h, e.offset);
  }
  h.append(aligned(h.size(), base.alignment()) - h.size(), '\0');
  return h;
}

// A tensor's bytes as its planned type: a kept block param's own bytes, or
// its f32 values (merged here, one weight at a time, or read where the
// optimizer keeps them) encoded.
Status tensor_bytes(const Session& s, const Planned& e, const std::map<int, LoraJoin>& joins, std::vector<uint8_t>* out) {
  const TensorInfo& p = s.model().tensors()[e.param];
  out->resize(e.bytes);
  if (!e.merged && dtype_is_block(p.type.dtype)) return s.read(e.param, out->data(), out->size());
  std::vector<float> v;
  SG_TRY(e.merged ? merged_weight(s, joins.at(e.param), &v) : read_param(s, e.param, &v));
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]) || (e.type == GgufType::F16 && std::fabs(v[i]) > 65504.0f))
      return Status::Invalid(p.name + ": element " + std::to_string(i) + " is " + std::to_string(v[i]) + ", which " +
                             gguf_type_name(static_cast<uint32_t>(e.type)) + " cannot hold" +
                             (std::isfinite(v[i]) ? "; choose --dtype f32 or bf16" : ""));
  uint8_t* dst = out->data();
  switch (e.type) {
    case GgufType::F32: std::memcpy(dst, v.data(), e.bytes); break;
    case GgufType::Q8_0: fmt::gguf_encode_blocks(true, v.data(), static_cast<int64_t>(v.size()), dst); break;
    default:  // F16, BF16: little-endian halves
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h = e.type == GgufType::F16 ? fmt::f16_encode(v[i]) : fmt::bf16_encode(v[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
  }
  return Status::Ok();
}

}  // namespace

Status export_gguf(const Session& s, const std::string& base_gguf, const GgufExportOptions& opts, const std::string& path,
                   GgufExportSummary* summary) {
  const DType md = opts.matrix_dtype;
  if (md != DType::f32 && md != DType::f16 && md != DType::bf16 && md != DType::q8_0)
    return Status::Invalid(std::string("GGUF export writes matrices as f32, f16, bf16 or q8_0, not ") + dtype_name(md));
  std::error_code same_err;
  if (std::filesystem::equivalent(base_gguf, path, same_err))
    return Status::Invalid(path + ": is the base GGUF the export reads; write to another file");
  std::unique_ptr<GgufFile> base;
  SG_TRY(GgufFile::open(base_gguf, &base));
  SG_TRY(check_gguf_architecture(*base));
  const Model& m = s.model();
  std::map<int, LoraJoin> joins;
  std::set<int> adapters;
  if (opts.merge_lora) {
    SG_TRY(joins_by_weight(m, &joins, &adapters));
  } else if (int a = first_adapter(m); a >= 0) {
    return Status::Invalid(m.label() + ": has LoRA adapters (" + m.tensors()[a].name +
                           ", ...); a GGUF holds the model's own weights: merge them in (--merge)");
  }
  std::vector<Planned> tensors;
  SG_TRY(plan(m, *base, opts, joins, adapters, &tensors));
  int64_t elements[64] = {};  // per GgufType id, over the matrices
  for (const Planned& e : tensors)
    if (e.base->shape.size() > 1) elements[static_cast<uint32_t>(e.type)] += e.base->numel();
  GgufType most = GgufType::F32;
  for (const Planned& e : tensors)
    if (elements[static_cast<uint32_t>(e.type)] > elements[static_cast<uint32_t>(most)]) most = e.type;
  const std::string h = header(*base, tensors, file_type_of(most));
  std::unique_ptr<AtomicFile> out;
  SG_TRY(AtomicFile::create(path, &out));
  SG_TRY(out->write(h.data(), h.size()));
  std::vector<uint8_t> bytes;
  uint64_t written = 0;
  for (const Planned& e : tensors) {
    SG_TRY(tensor_bytes(s, e, joins, &bytes));
    bytes.resize(aligned(bytes.size(), base->alignment()), 0);
    SG_TRY(out->write(bytes.data(), bytes.size()));
    written += bytes.size();
  }
  SG_TRY(out->commit());
  if (summary) {
    *summary = {static_cast<int>(tensors.size()), static_cast<int>(joins.size()), 0, h.size() + written};
    for (const Planned& e : tensors) summary->kept_blocks += !e.merged && dtype_is_block(m.tensors()[e.param].type.dtype);
  }
  return Status::Ok();
}

}  // namespace sgrt
