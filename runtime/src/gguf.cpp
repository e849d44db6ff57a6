// GGUF parsing and validation (see sgrt/gguf.h for the layout). Nothing is
// copied out of the mapping but keys and tensor names; every count, length,
// shape and offset is checked against the bytes that are really there before
// it is used, and every size computation is checked for overflow.
#include "sgrt/gguf.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>

namespace sgrt {
namespace {

constexpr int kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;   // arrays of arrays: real files nest at most once
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;       // empty key, type, a 1-byte value
constexpr uint64_t kMinTensorBytes = 8 + 4 + 4 + 8;  // empty name, n_dims 0, type, offset

template <class T>
T load(const uint8_t* p) {  // little-endian host
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Bytes of a fixed-size value; 0 for STRING and ARRAY, -1 for unknown types.
int value_bytes(uint32_t t) {
  static constexpr int kBytes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return t < std::size(kBytes) ? kBytes[t] : -1;
}

// The least a value of type t can take: bounds a count before it is trusted.
uint64_t min_value_bytes(uint32_t t) {
  return t == uint32_t(GgufValueType::STRING) ? 8 : t == uint32_t(GgufValueType::ARRAY) ? 12 : uint64_t(value_bytes(t));
}

std::string value_type_text(uint32_t t) {
  const char* n = gguf_value_type_name(t);
  return n ? n : "unknown value type " + std::to_string(t);
}

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::U16: case GgufValueType::I16:
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::U64: case GgufValueType::I64:
      return true;
    default: return false;
  }
}

// An integer value widened to int64; false for a U64 above INT64_MAX.
bool load_integer(GgufValueType t, const uint8_t* p, int64_t* out) {
  switch (t) {
    case GgufValueType::U8: *out = load<uint8_t>(p); return true;
    case GgufValueType::I8: *out = load<int8_t>(p); return true;
    case GgufValueType::U16: *out = load<uint16_t>(p); return true;
    case GgufValueType::I16: *out = load<int16_t>(p); return true;
    case GgufValueType::U32: *out = load<uint32_t>(p); return true;
    case GgufValueType::I32: *out = load<int32_t>(p); return true;
    case GgufValueType::I64: *out = load<int64_t>(p); return true;
    case GgufValueType::U64: {
      uint64_t u = load<uint64_t>(p);
      *out = static_cast<int64_t>(u);
      return u <= uint64_t(std::numeric_limits<int64_t>::max());
    }
    default: return false;
  }
}

// A string value at p: u64 length, then the bytes (already bounds-checked).
std::string_view load_string(const uint8_t* p) {
  return {reinterpret_cast<const char*>(p + 8), static_cast<size_t>(load<uint64_t>(p))};
}

// Walks the mapping front to back; every read checks the bytes are there and
// records the first failure with the offset it happened at.
class Reader {
 public:
  Reader(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const std::string& error() const { return err_; }

  bool fail(const std::string& what) {
    if (err_.empty()) err_ = what;
    return false;
  }
  bool need(uint64_t n, const std::string& what) {
    if (n <= left()) return true;
    return fail("truncated: " + what + " at byte " + std::to_string(pos_) + " needs " + std::to_string(n) +
                " bytes, " + std::to_string(left()) + " left");
  }
  bool skip(uint64_t n, const std::string& what) {
    if (!need(n, what)) return false;
    pos_ += n;
    return true;
  }
  template <class T>
  bool read(T* out, const std::string& what) {
    if (!need(sizeof(T), what)) return false;
    *out = load<T>(base_ + pos_);
    pos_ += sizeof(T);
    return true;
  }
  // Messages are built only on failure: this runs once per vocabulary token.
  bool string(std::string_view* out, const std::string& what) {
    if (left() < 8) return need(8, what + "'s length");
    const uint64_t n = load<uint64_t>(base_ + pos_);
    pos_ += 8;
    if (n > left())
      return fail(what + " at byte " + std::to_string(pos_ - 8) + " claims " + std::to_string(n) +
                  " bytes, only " + std::to_string(left()) + " left in the file");
    *out = {reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(n)};
    pos_ += n;
    return true;
  }
  // A count of items that take at least `min_bytes` each must fit in what is left.
  bool count_fits(uint64_t count, uint64_t min_bytes, const std::string& what) {
    if (min_bytes == 0 || count <= left() / min_bytes) return true;
    return fail(what + " " + std::to_string(count) + " is impossible: " + std::to_string(left()) +
                " bytes left hold at most " + std::to_string(left() / min_bytes));
  }
  // Checks (and steps over) `count` values of type t: strings inside the
  // file, bools 0 or 1, known types, nesting bounded.
  bool values(uint32_t t, uint64_t count, int depth, const std::string& what) {
    int fixed = value_bytes(t);
    if (fixed < 0) return fail(what + " has " + value_type_text(t));
    if (!count_fits(count, min_value_bytes(t), what + ": element count")) return false;
    if (t == uint32_t(GgufValueType::BOOL)) {
      for (uint64_t i = 0; i < count; ++i)
        if (base_[pos_ + i] > 1)
          return fail(what + ": bool at byte " + std::to_string(pos_ + i) + " is " + std::to_string(base_[pos_ + i]) +
                      ", not 0 or 1");
    }
    if (fixed > 0) return skip(count * uint64_t(fixed), what);
    for (uint64_t i = 0; i < count; ++i) {
      if (t == uint32_t(GgufValueType::STRING)) {
        std::string_view s;
        if (!string(&s, what)) return false;
        continue;
      }
      uint32_t elem;
      uint64_t n;
      if (depth >= kMaxArrayDepth) return fail(what + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      if (!read(&elem, what + ": array element type") || !read(&n, what + ": array length")) return false;
      if (!values(elem, n, depth + 1, what)) return false;
    }
    return true;
  }

 private:
  const uint8_t* base_;
  uint64_t size_, pos_ = 0;
  std::string err_;
};

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

int64_t GgufTensor::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

Status GgufFile::open(const std::string& path, std::unique_ptr<GgufFile>* out) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  SG_TRY(MappedFile::open(path, &f->map_));
  SG_TRY(f->parse());
  *out = std::move(f);
  return Status::Ok();
}

Status GgufFile::parse() {
  auto bad = [&](const std::string& what) { return Status::Invalid(path_ + ": " + what); };
  Reader r(map_.data(), map_.size());
  if (map_.size() < 4 || std::memcmp(map_.data(), "GGUF", 4) != 0) return bad("not a GGUF file (no \"GGUF\" magic)");
  r.skip(4, "magic");
  uint64_t n_tensors = 0, n_kv = 0;
  if (!r.read(&version_, "the version")) return bad(r.error());
  if (version_ == 1) return bad("GGUF version 1 is not supported (versions 2 and 3 are)");
  if ((version_ & 0xFFFF) == 0 && version_ != 0)
    return bad("big-endian GGUF (version " + std::to_string(__builtin_bswap32(version_)) + ") is not supported");
  if (version_ != 2 && version_ != 3) return bad("unknown GGUF version " + std::to_string(version_) + " (2 and 3 are read)");
  if (!r.read(&n_tensors, "the tensor count") || !r.read(&n_kv, "the metadata count") ||
      !r.count_fits(n_kv, kMinKvBytes, "metadata count") || !r.count_fits(n_tensors, kMinTensorBytes, "tensor count"))
    return bad(r.error());

  kvs_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string_view key;
    uint32_t type;
    std::string what = "metadata entry " + std::to_string(i);
    if (!r.string(&key, what + "'s key")) return bad(r.error());
    what = "metadata key '" + std::string(key) + "'";
    if (!r.read(&type, what + "'s type")) return bad(r.error());
    GgufKv kv{std::string(key), GgufValueType(type), GgufValueType(type), 1, r.pos(), 0};
    if (type == uint32_t(GgufValueType::ARRAY)) {
      uint32_t elem;
      if (!r.read(&elem, what + "'s element type") || !r.read(&kv.count, what + "'s length")) return bad(r.error());
      kv.elem_type = GgufValueType(elem);
    }
    bool ok = type == uint32_t(GgufValueType::ARRAY) ? r.values(uint32_t(kv.elem_type), kv.count, 1, what)
                                                     : r.values(type, 1, 0, what);
    if (!ok) return bad(r.error());
    kv.value_bytes = r.pos() - kv.value_pos;
    kvs_.push_back(std::move(kv));
  }
  for (size_t i = 0; i < kvs_.size(); ++i)
    if (!kv_index_.emplace(kvs_[i].key, i).second) return bad("metadata key '" + kvs_[i].key + "' appears twice");

  if (has("general.alignment")) {
    uint32_t a = 0;
    SG_TRY(get_u32("general.alignment", &a));
    if (a == 0 || (a & (a - 1)) != 0) return bad("general.alignment " + std::to_string(a) + " is not a power of two");
    alignment_ = a;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    std::string_view name;
    if (!r.string(&name, "tensor " + std::to_string(i) + "'s name")) return bad(r.error());
    GgufTensor t{std::string(name), {}, GgufType::F32, 0, 0};
    const std::string what = name.empty() ? "tensor " + std::to_string(i) + " (empty name)" : "tensor " + t.name;
    uint32_t n_dims, type;
    if (!r.read(&n_dims, what + ": dimension count")) return bad(r.error());
    if (n_dims > kMaxDims) return bad(what + " has " + std::to_string(n_dims) + " dimensions (at most 4)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne;
      if (!r.read(&ne, what + ": dimension")) return bad(r.error());
      if (ne > uint64_t(std::numeric_limits<int64_t>::max()) || mul_overflows(numel, ne, &numel) ||
          numel > uint64_t(std::numeric_limits<int64_t>::max()))
        return bad(what + ": shape " + shape_text(t.shape) + " x " + std::to_string(ne) + " overflows 64 bits");
      t.shape.push_back(static_cast<int64_t>(ne));
    }
    if (!r.read(&type, what + ": type") || !r.read(&t.offset, what + ": offset")) return bad(r.error());
    int64_t block_elems, block_bytes;
    if (!gguf_type_layout(type, &block_elems, &block_bytes))
      return bad(what + " has unknown GGUF tensor type " + std::to_string(type));
    t.type = GgufType(type);
    const int64_t row = n_dims ? t.shape[0] : 1;
    if (row % block_elems != 0)
      return bad(what + ": rows of " + std::to_string(row) + " elements are not whole " + gguf_type_name(type) +
                 " blocks of " + std::to_string(block_elems));
    if (mul_overflows(numel / uint64_t(block_elems), uint64_t(block_bytes), &t.bytes))
      return bad(what + ": byte size of shape " + shape_text(t.shape) + " overflows 64 bits");
    if (t.offset % alignment_ != 0)
      return bad(what + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                 std::to_string(alignment_));
    tensors_.push_back(std::move(t));
  }
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (!tensor_index_.emplace(tensors_[i].name, i).second) return bad("tensor " + tensors_[i].name + " appears twice");

  // The data section starts at the next multiple of the alignment.
  uint64_t pad = (alignment_ - r.pos() % alignment_) % alignment_;
  if (add_overflows(r.pos(), pad, &data_start_)) return bad("data section offset overflows");
  const uint64_t data_bytes = data_start_ <= map_.size() ? map_.size() - data_start_ : 0;
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : tensors_) {
    uint64_t end;
    if (add_overflows(t.offset, t.bytes, &end) || data_start_ > map_.size() || end > data_bytes)
      return bad("tensor " + t.name + ": data [" + std::to_string(t.offset) + ", +" + std::to_string(t.bytes) +
                 ") runs past the end of the file (the data section holds " + std::to_string(data_bytes) + " bytes)");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
      return bad("tensors " + by_offset[i - 1]->name + " and " + by_offset[i]->name + " overlap");
  return Status::Ok();
}

const GgufKv* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

// The entry for `key`, of array-ness and element type accepted by `accept`.
template <class Accept>
Status lookup(const GgufFile& f, std::string_view key, bool array, const char* expected, Accept accept,
              const GgufKv** out) {
  const GgufKv* kv = f.find(key);
  if (!kv) return Status::Invalid(f.path() + ": no metadata key '" + std::string(key) + "'");
  const bool is_array = kv->type == GgufValueType::ARRAY;
  if (is_array != array || !accept(kv->elem_type)) {
    std::string got = is_array ? "an array of " + value_type_text(uint32_t(kv->elem_type)) : value_type_text(uint32_t(kv->type));
    return Status::Invalid(f.path() + ": metadata key '" + std::string(key) + "' is " + got + ", expected " + expected);
  }
  *out = kv;
  return Status::Ok();
}

bool is_float(GgufValueType t) { return t == GgufValueType::F32 || t == GgufValueType::F64; }

float load_float(GgufValueType t, const uint8_t* p) {
  return t == GgufValueType::F32 ? load<float>(p) : static_cast<float>(load<double>(p));
}

}  // namespace

Status GgufFile::get_string(std::string_view key, std::string* out) const {
  const GgufKv* kv = nullptr;
  SG_TRY(lookup(*this, key, false, "a string", [](GgufValueType t) { return t == GgufValueType::STRING; }, &kv));
  *out = std::string(load_string(map_.data() + kv->value_pos));
  return Status::Ok();
}

Status GgufFile::get_u32(std::string_view key, uint32_t* out) const {
  const GgufKv* kv = nullptr;
  SG_TRY(lookup(*this, key, false, "an integer", is_integer, &kv));
  int64_t v;
  if (!load_integer(kv->type, map_.data() + kv->value_pos, &v) || v < 0 || v > int64_t(UINT32_MAX))
    return Status::Invalid(path_ + ": metadata key '" + std::string(key) + "' = " + value_summary(*kv) +
                           " does not fit in 32 unsigned bits");
  *out = static_cast<uint32_t>(v);
  return Status::Ok();
}

Status GgufFile::get_bool(std::string_view key, bool* out) const {
  const GgufKv* kv = nullptr;
  SG_TRY(lookup(*this, key, false, "a bool", [](GgufValueType t) { return t == GgufValueType::BOOL; }, &kv));
  *out = map_.data()[kv->value_pos] != 0;
  return Status::Ok();
}

Status GgufFile::get_f32(std::string_view key, float* out) const {
  const GgufKv* kv = nullptr;
  SG_TRY(lookup(*this, key, false, "F32 or F64", is_float, &kv));
  *out = load_float(kv->type, map_.data() + kv->value_pos);
  return Status::Ok();
}

Status GgufFile::get_string_array(std::string_view key, std::vector<std::string>* out) const {
  const GgufKv* kv = nullptr;
  SG_TRY(lookup(*this, key, true, "an array of STRING", [](GgufValueType t) { return t == GgufValueType::STRING; }, &kv));
  out->clear();
  out->reserve(kv->count);
  const uint8_t* p = elements(*kv);
  for (uint64_t i = 0; i < kv->count; ++i) {
    std::string_view s = load_string(p);
    out->emplace_back(s);
    p += 8 + s.size();
  }
  return Status::Ok();
}

Status GgufFile::get_i32_array(std::string_view key, std::vector<int32_t>* out) const {
  const GgufKv* kv = nullptr;
  SG_TRY(lookup(*this, key, true, "an array of integers", is_integer, &kv));
  const int width = value_bytes(uint32_t(kv->elem_type));
  out->resize(kv->count);
  for (uint64_t i = 0; i < kv->count; ++i) {
    int64_t v;
    if (!load_integer(kv->elem_type, elements(*kv) + i * width, &v) || v < INT32_MIN || v > INT32_MAX)
      return Status::Invalid(path_ + ": metadata key '" + std::string(key) + "': element " + std::to_string(i) +
                             " does not fit in 32 signed bits");
    (*out)[i] = static_cast<int32_t>(v);
  }
  return Status::Ok();
}

Status GgufFile::get_f32_array(std::string_view key, std::vector<float>* out) const {
  const GgufKv* kv = nullptr;
  SG_TRY(lookup(*this, key, true, "an array of F32 or F64", is_float, &kv));
  const int width = value_bytes(uint32_t(kv->elem_type));
  out->resize(kv->count);
  for (uint64_t i = 0; i < kv->count; ++i) (*out)[i] = load_float(kv->elem_type, elements(*kv) + i * width);
  return Status::Ok();
}

std::string GgufFile::value_summary(const GgufKv& kv, size_t max_chars) const {
  auto scalar = [&](GgufValueType t, const uint8_t* p) -> std::string {
    char buf[64];
    int64_t i;
    if (t == GgufValueType::U64) std::snprintf(buf, sizeof buf, "%" PRIu64, load<uint64_t>(p));
    else if (load_integer(t, p, &i)) std::snprintf(buf, sizeof buf, "%" PRId64, i);
    else if (t == GgufValueType::BOOL) return *p ? "true" : "false";
    else if (is_float(t)) std::snprintf(buf, sizeof buf, "%.9g", t == GgufValueType::F32 ? load<float>(p) : load<double>(p));
    else {
      std::string s = "\"";
      for (char c : load_string(p)) {  // one line: control characters escaped
        if (c == '\n') s += "\\n";
        else if (c == '\t') s += "\\t";
        else if (static_cast<unsigned char>(c) >= 0x20) s += c;
        else {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\x%02x", static_cast<unsigned>(c));
          s += esc;
        }
      }
      if (s.size() <= max_chars) return s + "\"";
      size_t cut = max_chars;
      while (cut > 1 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
      return s.substr(0, cut) + "...\"";
    }
    return buf;
  };
  if (kv.type != GgufValueType::ARRAY) return scalar(kv.type, map_.data() + kv.value_pos);
  std::string s = "[" + value_type_text(uint32_t(kv.elem_type)) + " x " + std::to_string(kv.count) + "]";
  if (kv.elem_type == GgufValueType::ARRAY) return s;
  const uint8_t* p = elements(kv);
  for (uint64_t i = 0; i < kv.count && s.size() < max_chars; ++i) {
    s += (i ? ", " : " ") + scalar(kv.elem_type, p);
    p += kv.elem_type == GgufValueType::STRING ? 8 + load<uint64_t>(p) : uint64_t(value_bytes(uint32_t(kv.elem_type)));
    if (i + 1 < kv.count && s.size() >= max_chars) s += ", ...";
  }
  return s;
}

std::span<const uint8_t> GgufFile::raw_value(const GgufKv& kv) const {
  return {map_.data() + kv.value_pos, static_cast<size_t>(kv.value_bytes)};
}

const uint8_t* GgufFile::elements(const GgufKv& kv) const {
  return map_.data() + kv.value_pos + (kv.type == GgufValueType::ARRAY ? 12 : 0);  // after element type, count
}

std::span<const uint8_t> GgufFile::data(const GgufTensor& t) const {
  return {map_.data() + data_start_ + t.offset, static_cast<size_t>(t.bytes)};
}

Status GgufFile::dequantize(const GgufTensor& t, std::span<float> out) const {
  const std::string ctx = path_ + ": tensor " + t.name;
  if (static_cast<uint64_t>(t.numel()) != out.size())
    return Status::Invalid(ctx + " has " + std::to_string(t.numel()) + " elements, the output holds " +
                           std::to_string(out.size()));
  return gguf_dequantize_rows(t.type, data(t).data(), t.numel(), out.data()).with_context(ctx);
}

}  // namespace sgrt
