#include "sgrt/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

#include "formats/formats.h"
#include "json_reader.h"
#include "sgrt/file_io.h"
#include "sgrt/params.h"

namespace sgrt {
namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit on the JSON header

struct Format { const char* name; DType dtype; size_t bytes; };
constexpr Format kFormats[] = {{"F32", DType::f32, 4}, {"F16", DType::f16, 2}, {"BF16", DType::bf16, 2}};

const Format* format_named(const std::string& n) {
  for (const Format& f : kFormats) if (n == f.name) return &f;
  return nullptr;
}
const Format* format_of(DType d) {
  for (const Format& f : kFormats) if (d == f.dtype) return &f;
  return nullptr;
}

struct Entry {
  std::string name, dtype;
  std::vector<uint64_t> shape, offsets;
};

Status parse_header(std::string_view text, std::vector<Entry>* out) {
  JsonReader j(text);
  auto bad = [&](const std::string& what) { return Status::Invalid("malformed header: " + (what.empty() ? j.error() : what)); };
  if (!j.eat('{')) return bad("not a JSON object");
  if (j.eat('}')) return j.at_end() ? Status::Ok() : bad("text after the header object");
  do {
    Entry e;
    if (!j.string(&e.name) || !j.eat(':')) return bad("");
    if (e.name == "__metadata__") {
      if (!j.skip_value()) return bad("");
      continue;
    }
    if (!j.eat('{')) return bad("tensor '" + e.name + "' is not an object");
    bool has_dtype = false, has_shape = false, has_offsets = false;
    if (!j.eat('}')) {
      do {
        std::string key;
        if (!j.string(&key) || !j.eat(':')) return bad("");
        bool ok = key == "dtype" ? (has_dtype = true, j.string(&e.dtype))
                  : key == "shape" ? (has_shape = true, j.int_array(&e.shape))
                  : key == "data_offsets" ? (has_offsets = true, j.int_array(&e.offsets))
                  : j.skip_value();
        if (!ok) return bad("");
      } while (j.eat(','));
      if (!j.eat('}')) return bad("");
    }
    if (!has_dtype || !has_shape || !has_offsets || e.offsets.size() != 2)
      return bad("tensor '" + e.name + "' needs dtype, shape and data_offsets [begin, end]");
    out->push_back(std::move(e));
  } while (j.eat(','));
  if (!j.eat('}') || !j.at_end()) return bad("");
  return Status::Ok();
}

float decode(const Format& f, const uint8_t* p) {
  uint32_t u = 0;
  std::memcpy(&u, p, f.bytes);  // little-endian host
  switch (f.dtype) {
    case DType::f16: return fmt::f16_decode(u);
    case DType::bf16: return fmt::bf16_decode(u);
    default: return fmt::bits_float(u);
  }
}

void encode(const Format& f, float x, uint8_t* p) {
  uint32_t u = f.dtype == DType::f16 ? fmt::f16_encode(x) : f.dtype == DType::bf16 ? fmt::bf16_encode(x) : fmt::float_bits(x);
  std::memcpy(p, &u, f.bytes);
}

}  // namespace

Status read_safetensors(const std::string& path, std::vector<SafeTensor>* out) {
  std::vector<uint8_t> b;
  SG_TRY(read_file(path, &b));
  auto bad = [&](const std::string& what) { return Status::Invalid(path + ": " + what); };
  uint64_t n = 0;
  if (b.size() < 8) return bad("too short for a safetensors file (" + std::to_string(b.size()) + " bytes)");
  std::memcpy(&n, b.data(), 8);
  if (n > kMaxHeader || n > b.size() - 8) return bad("header length " + std::to_string(n) + " runs past the file's end");
  std::vector<Entry> entries;
  SG_TRY(parse_header(std::string_view(reinterpret_cast<const char*>(b.data() + 8), n), &entries).with_context(path));
  const uint8_t* data = b.data() + 8 + n;
  uint64_t data_bytes = b.size() - 8 - n;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  out->clear();
  for (const Entry& e : entries) {
    const Format* f = format_named(e.dtype);
    if (!f) return bad("tensor '" + e.name + "' has dtype " + e.dtype + " (this reader takes F32, F16, BF16)");
    uint64_t count = 1;
    for (uint64_t d : e.shape) {
      if (d != 0 && count > (1ull << 40) / d) return bad("tensor '" + e.name + "' is too large");
      count *= d;
    }
    uint64_t begin = e.offsets[0], end = e.offsets[1];
    if (begin > end || end > data_bytes || end - begin != count * f->bytes)
      return bad("tensor '" + e.name + "': data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] do not hold " + std::to_string(count) + " " + e.dtype + " values inside the " +
                 std::to_string(data_bytes) + "-byte data");
    ranges.push_back({begin, end});
    SafeTensor t;
    t.name = e.name;
    t.dtype = f->dtype;
    for (uint64_t d : e.shape) t.shape.push_back(static_cast<int64_t>(d));
    t.values.resize(count);
    for (uint64_t i = 0; i < count; ++i) t.values[i] = decode(*f, data + begin + i * f->bytes);
    out->push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) return bad("tensors' data ranges overlap");
  return Status::Ok();
}

Status read_safetensors_header(const std::string& path, std::vector<uint8_t>* out) {
  uint64_t n = 0;
  SG_TRY(read_file_prefix(path, 8, out));
  if (out->size() < 8) return Status::Invalid(path + ": too short for a safetensors file (" + std::to_string(out->size()) + " bytes)");
  std::memcpy(&n, out->data(), 8);
  if (n <= kMaxHeader) SG_TRY(read_file_prefix(path, 8 + n, out));
  if (n > kMaxHeader || out->size() != 8 + n)
    return Status::Invalid(path + ": header length " + std::to_string(n) + " runs past the file's end");
  return Status::Ok();
}

Status read_safetensors_names(const std::string& path, std::vector<std::string>* out) {
  std::vector<uint8_t> b;
  SG_TRY(read_safetensors_header(path, &b));
  std::vector<Entry> entries;
  SG_TRY(parse_header(std::string_view(reinterpret_cast<const char*>(b.data() + 8), b.size() - 8), &entries).with_context(path));
  out->clear();
  for (const Entry& e : entries) out->push_back(e.name);
  return Status::Ok();
}

Status write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors) {
  std::string header = "{";
  uint64_t offset = 0;
  for (const SafeTensor& t : tensors) {
    const Format* f = format_of(t.dtype);
    if (!f) return Status::Invalid(t.name + ": safetensors export takes f32, f16 or bf16");
    std::string shape;
    for (int64_t d : t.shape) {
      if (!shape.empty()) shape += ",";
      shape += std::to_string(d);
    }
    uint64_t bytes = t.values.size() * f->bytes;
    header += std::string(header.size() > 1 ? "," : "") + "\"" + t.name + "\":{\"dtype\":\"" + f->name +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::vector<uint8_t> b(8 + header.size() + offset);
  uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  uint8_t* p = b.data() + 8 + header.size();
  for (const SafeTensor& t : tensors) {
    const Format* f = format_of(t.dtype);
    for (float x : t.values) { encode(*f, x, p); p += f->bytes; }
  }
  return write_file_atomic(path, b.data(), b.size());
}

Status import_safetensors(Session& s, const std::string& path, ParamSet which) {
  std::vector<SafeTensor> file;
  SG_TRY(read_safetensors(path, &file));
  const Model& m = s.model();
  std::map<std::string, const SafeTensor*> by_name;
  for (const SafeTensor& t : file) by_name[t.name] = &t;
  std::vector<std::pair<int, const SafeTensor*>> plan;
  for (size_t id = 0; id < m.tensors().size(); ++id) {
    const TensorInfo& p = m.tensors()[id];
    if (!is_weight(p)) continue;
    auto it = by_name.find(p.name);
    if (which == ParamSet::trained && p.frozen) {
      if (it != by_name.end())
        return Status::Invalid(path + ": tensor '" + p.name + "' is a frozen parameter of " + m.label() +
                               " (this file should hold only the trained ones)");
      continue;
    }
    if (it == by_name.end() && which == ParamSet::all && may_keep_init(m, p)) continue;
    if (it == by_name.end()) return Status::Invalid(path + ": has no tensor '" + p.name + "' (a parameter of " + m.label() + ")");
    if (it->second->shape != p.type.shape)
      return Status::Invalid(path + ": tensor '" + p.name + "' is " + shape_str(it->second->shape) + ", " + m.label() +
                             " needs " + shape_str(p.type.shape));
    plan.push_back({static_cast<int>(id), it->second});
    by_name.erase(it);
  }
  if (!by_name.empty())
    return Status::Invalid(path + ": tensor '" + by_name.begin()->first + "' is not a parameter of " + m.label());
  std::vector<ParamBytes> encoded(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) SG_TRY(encode_param(s, plan[i].first, plan[i].second->values, &encoded[i]).with_context(path));
  for (const ParamBytes& e : encoded) SG_TRY(s.write(e.tensor, e.bytes.data(), e.bytes.size()));
  return Status::Ok();
}

Status export_safetensors(const Session& s, const std::string& path, DType dtype, ParamSet which) {
  if (!format_of(dtype)) return Status::Invalid(std::string("safetensors export takes f32, f16 or bf16, not ") + dtype_name(dtype));
  const Model& m = s.model();
  std::vector<SafeTensor> out;
  for (size_t id = 0; id < m.tensors().size(); ++id) {
    const TensorInfo& p = m.tensors()[id];
    if (!is_weight(p) || (which == ParamSet::trained && p.frozen)) continue;
    SafeTensor t;
    t.name = p.name;
    t.dtype = dtype;
    t.shape = p.type.shape;
    SG_TRY(read_param(s, static_cast<int>(id), &t.values));
    out.push_back(std::move(t));
  }
  return write_safetensors(path, out);
}

}  // namespace sgrt
