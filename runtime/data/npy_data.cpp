// sg.data.npy: NumPy .npy arrays (own_data.h). The format: the magic
// "\x93NUMPY", major and minor version bytes, the header's length (2 bytes
// little endian in version 1, 4 in versions 2 and 3), then the header, a
// Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (N, ...), }
// padded with spaces and a newline, then the array's bytes.
#include <cstring>
#include <limits>

#include "sgrt/checked_math.h"
#include "sgrt/mapped_file.h"
#include "sgrt/own_data.h"

namespace sgrt {
namespace {

constexpr size_t kMaxHeaderBytes = 1 << 16;  // numpy writes a few dozen bytes

// A cursor over the header dict; each take_* skips blanks first.
class HeaderReader {
 public:
  explicit HeaderReader(std::string s) : s_(std::move(s)) {}
  void blanks() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n')) ++p_;
  }
  bool take(char c) {
    blanks();
    if (p_ < s_.size() && s_[p_] == c) return ++p_, true;
    return false;
  }
  bool take_word(const char* w) {
    blanks();
    size_t n = std::strlen(w);
    if (s_.compare(p_, n, w) != 0) return false;
    p_ += n;
    return true;
  }
  bool take_string(std::string* out) {
    blanks();
    if (p_ >= s_.size() || (s_[p_] != '\'' && s_[p_] != '"')) return false;
    size_t end = s_.find(s_[p_], p_ + 1);
    if (end == std::string::npos) return false;
    *out = s_.substr(p_ + 1, end - p_ - 1);
    p_ = end + 1;
    return true;
  }
  bool take_int(int64_t* out) {
    blanks();
    size_t start = p_;
    int64_t v = 0;
    while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return false;
      v = v * 10 + (s_[p_++] - '0');
    }
    *out = v;
    return p_ > start;
  }
  bool at_end() {
    blanks();
    return p_ == s_.size();
  }

 private:
  std::string s_;
  size_t p_ = 0;
};

// (N, ...): "(N,)" for one dimension, a trailing comma allowed.
bool take_shape(HeaderReader& r, std::vector<int64_t>* shape) {
  shape->clear();
  if (!r.take('(')) return false;
  if (r.take(')')) return true;
  for (;;) {
    int64_t d;
    if (shape->size() >= 32 || !r.take_int(&d)) return false;
    shape->push_back(d);
    if (r.take(')')) return true;
    if (!r.take(',')) return false;
    if (r.take(')')) return true;
  }
}

Status parse_dict(HeaderReader& r, NpyHeader* out) {
  bool have_descr = false, have_order = false, have_shape = false;
  if (!r.take('{')) return Status::Invalid("the header is not a dict");
  for (;;) {
    if (r.take('}')) break;
    std::string key, descr;
    if (!r.take_string(&key) || !r.take(':')) return Status::Invalid("malformed header dict");
    if (key == "descr") {
      if (!r.take_string(&descr)) return Status::Invalid("'descr' is not a string");
      if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|' && descr[0] != '='))
        return Status::Invalid("dtype '" + descr + "' is not little-endian (descr must start with '<' or '|')");
      out->kind = descr[1];
      std::string code = descr.substr(1);
      if (code != "f4" && code != "f8" && code != "i1" && code != "u1" && code != "i4" && code != "i8")
        return Status::Invalid("dtype '" + descr + "' is not one of f4 f8 i1 u1 i4 i8");
      out->item_bytes = descr[2] - '0';
      have_descr = true;
    } else if (key == "fortran_order") {
      if (r.take_word("True")) return Status::Invalid("the array is in Fortran order; save it in C order (np.ascontiguousarray)");
      if (!r.take_word("False")) return Status::Invalid("'fortran_order' is not True or False");
      have_order = true;
    } else if (key == "shape") {
      if (!take_shape(r, &out->shape)) return Status::Invalid("'shape' is not a tuple of non-negative integers");
      have_shape = true;
    } else {
      return Status::Invalid("unknown header key '" + key + "'");
    }
    if (r.take(',')) continue;
    if (r.take('}')) break;
    return Status::Invalid("malformed header dict");
  }
  if (!r.at_end()) return Status::Invalid("text after the header dict");
  if (!have_descr || !have_order || !have_shape) return Status::Invalid("the header lacks descr, fortran_order or shape");
  return Status::Ok();
}

// One element of the array as the input's dtype (4 bytes); false: out of range.
bool convert(const uint8_t* p, const NpyHeader& h, DType to, uint8_t* dst) {
  double v;
  int64_t i = 0;
  switch (h.kind == 'f' ? 10 + h.item_bytes : h.item_bytes * (h.kind == 'u' ? -1 : 1)) {
    case 14: { float f; std::memcpy(&f, p, 4); v = f; break; }
    case 18: std::memcpy(&v, p, 8); break;
    case 1: i = static_cast<int8_t>(p[0]); v = static_cast<double>(i); break;
    case -1: i = p[0]; v = static_cast<double>(i); break;
    case 4: { int32_t x; std::memcpy(&x, p, 4); i = x; v = x; break; }
    default: std::memcpy(&i, p, 8); v = static_cast<double>(i); break;
  }
  if (to == DType::f32) {
    float f = static_cast<float>(v);
    std::memcpy(dst, &f, 4);
    return true;
  }
  if (i < std::numeric_limits<int32_t>::min() || i > std::numeric_limits<int32_t>::max()) return false;
  int32_t x = static_cast<int32_t>(i);
  std::memcpy(dst, &x, 4);
  return true;
}

// "y.npy" beside "data/x.npy" is "data/y.npy"; an absolute name stays.
std::string beside(const std::string& file, const std::string& name) {
  size_t slash = file.rfind('/');
  return name.empty() || name[0] == '/' || slash == std::string::npos ? name : file.substr(0, slash + 1) + name;
}

}  // namespace

Status parse_npy_header(const uint8_t* data, size_t size, NpyHeader* out) {
  *out = NpyHeader{};
  if (size < 8 || std::memcmp(data, "\x93NUMPY", 6) != 0) return Status::Invalid("not a .npy file (no \\x93NUMPY magic)");
  int major = data[6];
  if (major < 1 || major > 3) return Status::Invalid("format version " + std::to_string(major) + " (this reader takes 1 to 3)");
  size_t len_bytes = major == 1 ? 2 : 4;
  if (size < 8 + len_bytes) return Status::Invalid("truncated header");
  size_t len = 0;
  for (size_t b = 0; b < len_bytes; ++b) len |= static_cast<size_t>(data[8 + b]) << (8 * b);
  if (len > kMaxHeaderBytes || 8 + len_bytes + len > size)
    return Status::Invalid("the header's length " + std::to_string(len) + " runs past the file's end");
  out->data_offset = 8 + len_bytes + len;
  std::string text(reinterpret_cast<const char*>(data) + 8 + len_bytes, len);
  HeaderReader r(text);
  SG_TRY(parse_dict(r, out));
  int64_t elements = 1, bytes;
  for (int64_t d : out->shape)
    if (!checked_mul<int64_t>(elements, d, &elements)) return Status::Invalid("the shape's element count overflows");
  if (out->shape.empty()) return Status::Invalid("a 0-dimensional array holds no examples");
  if (!checked_mul<int64_t>(elements, out->item_bytes, &bytes) ||
      static_cast<uint64_t>(bytes) > size - out->data_offset)
    return Status::Invalid("the shape needs " + std::to_string(elements) + " elements of " +
                           std::to_string(out->item_bytes) + " bytes, more than the file's " +
                           std::to_string(size - out->data_offset) + " bytes of data");
  if (static_cast<uint64_t>(bytes) != size - out->data_offset)
    return Status::Invalid("the file holds " + std::to_string(size - out->data_offset - bytes) + " bytes past the array");
  out->count = elements;
  return Status::Ok();
}

Status read_npy(const std::string& path, const TensorInfo& t, std::vector<uint8_t>* values, int64_t* examples) {
  if (t.type.shape.empty() || (t.type.dtype != DType::f32 && t.type.dtype != DType::i32))
    return Status::Invalid("input " + t.name + " " + type_str(t.type) + " cannot be read from .npy (f32 or i32 [batch, ...])");
  MappedFile f;
  SG_TRY(MappedFile::open(path, &f));
  NpyHeader h;
  SG_TRY(parse_npy_header(f.data(), f.size(), &h).with_context(path));
  int64_t per = numel(t.type.shape) / t.type.shape[0], rows = h.shape[0];
  if (rows == 0 || h.count / rows != per) {
    std::string shape;
    for (int64_t d : h.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    return Status::Invalid(path + ": shape (" + shape + ") is not examples of " + std::to_string(per) + " values, as input " +
                           t.name + " " + type_str(t.type) + " holds");
  }
  if (h.kind == 'f' && t.type.dtype == DType::i32)
    return Status::Invalid(path + ": " + (h.item_bytes == 4 ? "f4" : "f8") + " values cannot fill i32 input " + t.name + " (save integers)");
  values->resize(static_cast<size_t>(h.count) * 4);
  const uint8_t* src = f.data() + h.data_offset;
  for (int64_t i = 0; i < h.count; ++i)
    if (!convert(src + i * h.item_bytes, h, t.type.dtype, values->data() + i * 4))
      return Status::Invalid(path + ": element " + std::to_string(i) + " is out of i32's range");
  *examples = rows;
  return Status::Ok();
}

Status read_npy_examples(const std::string& path, const Model& model, ExampleTable* out) {
  const TensorInfo* x = bound_input(model, "features");
  const TensorInfo* y = bound_input(model, "label");
  std::string labels = beside(path, data_option(model, "labels"));
  if (!x) return Status::Invalid(model.label() + ": sg.data.npy binds no features input");
  if (y && labels.empty()) return Status::Invalid(model.label() + ": sg.data.npy binds a label but names no labels = \"y.npy\"");
  *out = ExampleTable{};
  SG_TRY(read_npy(path, *x, &out->features, &out->count));
  out->feature_dtype = x->type.dtype;
  out->feature_width = numel(x->type.shape) / x->type.shape[0];
  if (!y) return Status::Ok();
  int64_t n = 0;
  SG_TRY(read_npy(labels, *y, &out->labels, &n));
  if (n != out->count)
    return Status::Invalid(labels + ": " + std::to_string(n) + " labels for " + std::to_string(out->count) + " examples in " + path);
  out->label_dtype = y->type.dtype;
  out->label_width = numel(y->type.shape) / y->type.shape[0];
  return Status::Ok();
}

}  // namespace sgrt
