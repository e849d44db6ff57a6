// GGUF files (ggml's model format, versions 2 and 3), read through one
// read-only memory mapping:
//   "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count × (string key | u32 value type | value)
//   tensor_count × (string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset)
//   padding to general.alignment (default 32) | tensor data
// Strings are u64 length + bytes; arrays are u32 element type + u64 count +
// elements (arrays of arrays allowed); everything little endian.
// open() validates the whole layout, so the accessors never read out of bounds.
// docs/gguf.md lists the checks and the supported tensor types.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sgrt/mapped_file.h"
#include "sgrt/status.h"

namespace sgrt {

// ggml's tensor types (ggml.h); the numbering has holes for removed types.
// Every type whose block layout is known is parsed; dequantize() takes the
// ones gguf_type_supported() says.
enum class GgufType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};

// Metadata value types (gguf.h's gguf_type).
enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> shape;  // ggml order: ne[0] varies fastest (a row), at most 4 dims
  GgufType type;
  uint64_t offset;  // from the start of the data section
  uint64_t bytes;
  int64_t numel() const;
};

// One metadata entry. Its value stays in the mapping; the typed getters read it.
struct GgufKv {
  std::string key;
  GgufValueType type;
  GgufValueType elem_type;  // arrays: the elements' type (ARRAY when nested); else == type
  uint64_t count;           // arrays: number of elements; else 1
  uint64_t value_pos;       // file offset of the value's encoding (after the type; arrays: from the element type)
  uint64_t value_bytes;     // its length
};

class GgufFile {
 public:
  // Maps `path` and validates everything; every error names the file.
  static Status open(const std::string& path, std::unique_ptr<GgufFile>* out);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_start() const { return data_start_; }  // file offset of the data section
  uint64_t file_size() const { return map_.size(); }
  // Everything before the data section (header, metadata, tensor table), as in the file.
  std::span<const uint8_t> header_bytes() const { return {map_.data(), static_cast<size_t>(data_start_)}; }

  const std::vector<GgufKv>& metadata() const { return kvs_; }
  const GgufKv* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Each getter fails with a message naming the file and key when the key is
  // missing or holds another type.
  Status get_string(std::string_view key, std::string* out) const;
  Status get_u32(std::string_view key, uint32_t* out) const;  // any integer type whose value fits
  Status get_bool(std::string_view key, bool* out) const;
  Status get_f32(std::string_view key, float* out) const;     // F32, or F64 rounded to nearest
  Status get_string_array(std::string_view key, std::vector<std::string>* out) const;
  Status get_i32_array(std::string_view key, std::vector<int32_t>* out) const;  // integer elements that fit
  Status get_f32_array(std::string_view key, std::vector<float>* out) const;    // F32 or F64 elements
  // A one-line rendering of a value, for `sgrt info`: scalars in full, strings
  // up to `max_chars`, arrays as their type and length plus the first elements.
  std::string value_summary(const GgufKv& kv, size_t max_chars = 60) const;
  std::span<const uint8_t> raw_value(const GgufKv& kv) const;  // the value's encoding, as in the file

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  std::span<const uint8_t> data(const GgufTensor& t) const;  // raw bytes inside the mapping
  // numel(t) floats in storage order (ne[0] fastest); `out` must have exactly that size.
  Status dequantize(const GgufTensor& t, std::span<float> out) const;
  // Drops t's bytes from resident memory (read again from the file if used).
  void release(const GgufTensor& t) const { release(t, 0, t.bytes); }
  // The same for bytes [at, at + bytes) of t (whole pages inside them).
  void release(const GgufTensor& t, uint64_t at, uint64_t bytes) const { map_.release(data_start_ + t.offset + at, bytes); }

 private:
  GgufFile() = default;
  Status parse();
  const uint8_t* elements(const GgufKv& kv) const;  // an array's first element

  std::string path_;
  MappedFile map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32, data_start_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_, tensor_index_;  // views into kvs_/tensors_
};

// ggml's name of a tensor type ("Q4_1"); "type N" style text for unknown ids is
// the caller's: this returns nullptr for ids ggml does not define.
const char* gguf_type_name(uint32_t type);
const char* gguf_value_type_name(uint32_t type);
// Elements per block and bytes per block; false for unknown ids.
bool gguf_type_layout(uint32_t type, int64_t* block_elems, int64_t* block_bytes);
bool gguf_type_supported(GgufType type);  // dequantize() decodes it
// "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K"
const char* gguf_supported_type_names();

// Decodes `n` elements (a multiple of the type's block size) from `src` into
// `dst`: the row decoder dequantize() uses, for GEMMs that unpack a row at a time.
Status gguf_dequantize_rows(GgufType type, const uint8_t* src, int64_t n, float* dst);

}  // namespace sgrt
