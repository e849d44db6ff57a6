// The GGUF reader against gguf-py (ggml's own Python package), through the
// dump scripts/make_gguf_reference.py wrote into tests/data/gguf: tiny files
// GGUFWriter wrote, their metadata as gguf-py packs and decodes it, and their
// tensors as gguf.quants.dequantize computes them (compared bit for bit).
// Malformed files are hand-built here from the format's definition; the real
// SmolLM2-135M file (scripts/get_models.sh) is checked when it is present.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "gguf_builder.h"
#include "harness.h"
#include "model_files.h"
#include "sgrt/file_io.h"
#include "sgrt/gguf.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

const std::string kData = SGRT_SOURCE_DIR "/tests/data/gguf/";

std::string unhex(const std::string& s) {  // "x68656c" -> bytes
  REQUIRE((!s.empty() && s[0] == 'x' && s.size() % 2 == 1));
  std::string out;
  for (size_t i = 1; i < s.size(); i += 2) out.push_back(static_cast<char>(std::stoi(s.substr(i, 2), nullptr, 16)));
  return out;
}

template <class T>
T from_le_hex(const std::string& hex) {  // "acc52737" -> the T with those bytes
  std::string b = unhex("x" + hex);
  REQUIRE(b.size() == sizeof(T));
  T v;
  std::memcpy(&v, b.data(), sizeof v);
  return v;
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Bit-identical, or both NaN (NaN payloads are not part of the contract).
bool same_float(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }

std::vector<float> read_expected() {
  std::vector<uint8_t> raw;
  Status st = read_file(kData + "expected.f32", &raw);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<float> v(raw.size() / 4);
  std::memcpy(v.data(), raw.data(), v.size() * 4);
  return v;
}

std::vector<std::vector<std::string>> reference_lines(const std::string& file) {
  std::ifstream in(kData + file);
  REQUIRE_MESSAGE(in, "cannot read " << kData + file);
  std::vector<std::vector<std::string>> lines;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::vector<std::string> words;
    for (std::string w; ss >> w;) words.push_back(w);
    lines.push_back(words);
  }
  return lines;
}

std::unique_ptr<GgufFile> open_ok(const std::string& path) {
  std::unique_ptr<GgufFile> f;
  Status st = GgufFile::open(path, &f);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return f;
}

std::vector<int64_t> dims_of(const std::string& csv) {
  std::vector<int64_t> d;
  std::istringstream ss(csv);
  for (std::string w; std::getline(ss, w, ',');) d.push_back(std::stoll(w));
  return d;
}

// The tensor of a "tensor NAME TYPE NE0,NE1,.. OFFSET BYTES ..." line, its
// table entry checked.
const GgufTensor* checked_tensor(const GgufFile& f, const std::vector<std::string>& w) {
  const GgufTensor* t = f.find_tensor(w[1]);
  REQUIRE(t != nullptr);
  CHECK(uint32_t(t->type) == std::stoul(w[2]));
  CHECK(t->shape == dims_of(w[3]));
  CHECK(t->offset == std::stoull(w[4]));
  CHECK(t->bytes == std::stoull(w[5]));
  return t;
}

// Checks one "kv" line: the value's bytes, and what the typed getters return
// against gguf-py's decoding.
void check_kv(const GgufFile& f, const std::vector<std::string>& w) {
  const std::string& key = w[1];
  INFO(f.path() << " key " << key);
  const GgufKv* kv = f.find(key);
  REQUIRE(kv != nullptr);
  CHECK(uint32_t(kv->type) == std::stoul(w[2]));
  std::span<const uint8_t> raw = f.raw_value(*kv);
  CHECK(std::string(raw.begin(), raw.end()) == unhex(w[3]));
  const GgufValueType t = kv->type;
  if (t == GgufValueType::STRING) {
    std::string s;
    REQUIRE(f.get_string(key, &s).ok());
    CHECK(s == unhex(w[4]));
  } else if (t == GgufValueType::F32 || t == GgufValueType::F64) {
    float v;
    REQUIRE(f.get_f32(key, &v).ok());
    float want = t == GgufValueType::F32 ? from_le_hex<float>(w[4]) : static_cast<float>(from_le_hex<double>(w[4]));
    CHECK(bits(v) == bits(want));
  } else if (t == GgufValueType::BOOL) {
    bool v;
    REQUIRE(f.get_bool(key, &v).ok());
    CHECK(v == (w[4] == "1"));
  } else if (t != GgufValueType::ARRAY) {  // integers: get_u32 takes every one that fits
    uint32_t v = 0;
    Status st = f.get_u32(key, &v);
    const bool fits = w[4][0] != '-' && std::stoull(w[4]) <= UINT32_MAX;
    CHECK(st.ok() == fits);
    if (fits) CHECK(v == std::stoull(w[4]));
    else CHECK(st.message().find("does not fit") != std::string::npos);
  } else if (w[4] == "nested") {
    CHECK(kv->elem_type == GgufValueType::ARRAY);
    std::vector<int32_t> v;
    Status st = f.get_i32_array(key, &v);
    CHECK(!st.ok());
    CHECK(st.message().find("an array of ARRAY") != std::string::npos);
  } else {
    const auto elem = GgufValueType(std::stoul(w[4]));
    const size_t n = std::stoul(w[5]);
    CHECK(kv->elem_type == elem);
    CHECK(kv->count == n);
    REQUIRE(w.size() == 6 + n);
    if (elem == GgufValueType::STRING) {
      std::vector<std::string> v;
      REQUIRE(f.get_string_array(key, &v).ok());
      REQUIRE(v.size() == n);
      for (size_t i = 0; i < n; ++i) CHECK(v[i] == unhex(w[6 + i]));
    } else if (elem == GgufValueType::F32 || elem == GgufValueType::F64) {
      std::vector<float> v;
      REQUIRE(f.get_f32_array(key, &v).ok());
      REQUIRE(v.size() == n);
      for (size_t i = 0; i < n; ++i) {
        float want = elem == GgufValueType::F32 ? from_le_hex<float>(w[6 + i])
                                                 : static_cast<float>(from_le_hex<double>(w[6 + i]));
        CHECK(bits(v[i]) == bits(want));
      }
    } else if (elem == GgufValueType::BOOL) {
      std::vector<int32_t> v;
      CHECK(!f.get_i32_array(key, &v).ok());
    } else {  // integer elements: get_i32_array takes the array when every one fits
      bool fits = true;
      for (size_t i = 0; i < n; ++i) fits = fits && std::stoll(w[6 + i]) >= INT32_MIN && std::stoll(w[6 + i]) <= INT32_MAX;
      std::vector<int32_t> v;
      Status st = f.get_i32_array(key, &v);
      CHECK(st.ok() == fits);
      if (fits)
        for (size_t i = 0; i < n; ++i) CHECK(v[i] == std::stoll(w[6 + i]));
    }
  }
}

// ---- hand-built files ------------------------------------------------------

using test::gstr;
using test::le;
using Builder = test::GgufBuilder;

struct Opened {
  Status status;
  std::unique_ptr<GgufFile> file;
};

Opened open_bytes(const std::string& bytes, const test::TempFile& f) {
  { std::ofstream(f.path, std::ios::binary | std::ios::trunc) << bytes; }
  Opened o;
  o.status = GgufFile::open(f.path, &o.file);
  return o;
}

// The file is refused with one line that names it and contains `what`.
void refused(const std::string& bytes, const std::string& what) {
  test::TempFile f(".gguf");
  Opened o = open_bytes(bytes, f);
  INFO("expected a refusal mentioning: " << what);
  REQUIRE_FALSE(o.status.ok());
  CHECK(o.status.code() == StatusCode::invalid_input);
  CHECK(o.status.message().rfind(f.path + ": ", 0) == 0);
  CHECK_MESSAGE(o.status.message().find(what) != std::string::npos, o.status.message());
  CHECK(o.status.message().find('\n') == std::string::npos);
}

// One valid F32 tensor of 8 elements at offset 0.
Builder one_tensor() {
  Builder b;
  b.u32("general.x", 1).tensor("w", {8}, 0, 0);
  b.data = std::string(32, '\1');
  return b;
}

std::string file_bytes(const std::string& path) {
  std::vector<uint8_t> v;
  Status st = read_file(path, &v);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return std::string(v.begin(), v.end());
}

}  // namespace

TEST_CASE("the tensor type table matches gguf-py's GGML_QUANT_SIZES") {
  int n = 0;
  for (const auto& w : reference_lines("reference.txt")) {
    if (w[0] != "quant") continue;
    uint32_t id = std::stoul(w[1]);
    INFO("type " << w[2]);
    REQUIRE(gguf_type_name(id) != nullptr);
    CHECK(std::string(gguf_type_name(id)) == w[2]);
    int64_t elems = 0, bytes = 0;
    REQUIRE(gguf_type_layout(id, &elems, &bytes));
    CHECK(elems == std::stoll(w[3]));
    // gguf-py still lists Q8_1 as two f32 + 32 int8 (40 bytes); ggml-common.h's
    // block_q8_1 is two f16 + 32 int8. Files never hold Q8_1 (a dot-product scratch type).
    CHECK(bytes == (w[2] == "Q8_1" ? 36 : std::stoll(w[4])));
    ++n;
  }
  CHECK(n >= 30);
  for (uint32_t removed : {4u, 5u, 31u, 36u, 1000u}) CHECK(gguf_type_name(removed) == nullptr);
}

TEST_CASE("tiny files: metadata and tensors equal gguf-py's, dequantized bit for bit") {
  const std::vector<float> expected = read_expected();
  std::unique_ptr<GgufFile> f;
  int files = 0, tensors = 0, kvs = 0;
  size_t n_kv = 0, n_tensors = 0;
  std::map<GgufType, int> types;
  auto finish_file = [&] {
    if (!f) return;
    CHECK(f->metadata().size() == n_kv);
    CHECK(f->tensors().size() == n_tensors);
  };
  for (const auto& w : reference_lines("reference.txt")) {
    if (w[0] == "file") {
      finish_file();
      f = open_ok(kData + w[1]);
      n_kv = std::stoul(w[2]);
      n_tensors = std::stoul(w[3]);
      CHECK(f->version() == 3);
      CHECK(f->alignment() == (w[1] == "tiny_bf16.gguf" ? 64u : 32u));
      ++files;
    } else if (w[0] == "kv") {
      check_kv(*f, w);
      ++kvs;
    } else if (w[0] == "tensor") {
      INFO(f->path() << " tensor " << w[1]);
      const GgufTensor* t = checked_tensor(*f, w);
      const size_t first = std::stoul(w[6]), count = std::stoul(w[7]);
      REQUIRE(static_cast<size_t>(t->numel()) == count);
      REQUIRE(first + count <= expected.size());
      std::vector<float> got(count);
      Status st = f->dequantize(*t, got);
      REQUIRE_MESSAGE(st.ok(), st.message());
      size_t wrong = 0, first_wrong = count;
      for (size_t i = 0; i < count; ++i)
        if (!same_float(got[i], expected[first + i])) first_wrong = std::min(first_wrong, i), ++wrong;
      CHECK_MESSAGE(wrong == 0, wrong << " of " << count << " differ, first at " << first_wrong << ": "
                                      << (first_wrong < count ? got[first_wrong] : 0.f) << " vs "
                                      << (first_wrong < count ? expected[first + first_wrong] : 0.f));
      // Row by row through the GEMM-side entry point: the same values.
      const int64_t row = t->shape[0];
      int64_t block_elems, block_bytes;
      REQUIRE(gguf_type_layout(uint32_t(t->type), &block_elems, &block_bytes));
      std::vector<float> rows(count);
      for (int64_t r = 0; r < t->numel() / row; ++r) {
        const uint8_t* src = f->data(*t).data() + r * (row / block_elems) * block_bytes;
        REQUIRE(gguf_dequantize_rows(t->type, src, row, rows.data() + r * row).ok());
      }
      CHECK(std::memcmp(rows.data(), got.data(), count * 4) == 0);
      ++types[t->type];
      ++tensors;
    }
  }
  finish_file();
  CHECK(files == 8);
  CHECK(types.size() == 8);
  CHECK(tensors >= 24);
  CHECK(kvs >= 8 * 25);
}

TEST_CASE("getters name the file and key on a missing key or another type") {
  auto f = open_ok(kData + "tiny_q4_0.gguf");
  std::string s;
  uint32_t u;
  float x;
  bool b;
  Status st = f->get_string("no.such.key", &s);
  CHECK(st.message() == f->path() + ": no metadata key 'no.such.key'");
  st = f->get_string("t.u32", &s);
  CHECK(st.message() == f->path() + ": metadata key 't.u32' is U32, expected a string");
  st = f->get_u32("t.string", &u);
  CHECK(st.message() == f->path() + ": metadata key 't.string' is STRING, expected an integer");
  CHECK(f->get_u32("t.i32", &u).message() ==
        f->path() + ": metadata key 't.i32' = -2000000000 does not fit in 32 unsigned bits");
  CHECK(f->get_f32("t.bool", &x).message() == f->path() + ": metadata key 't.bool' is BOOL, expected F32 or F64");
  CHECK(f->get_bool("t.u8", &b).message() == f->path() + ": metadata key 't.u8' is U8, expected a bool");
  std::vector<std::string> strs;
  CHECK(f->get_string_array("t.i32s", &strs).message() ==
        f->path() + ": metadata key 't.i32s' is an array of I32, expected an array of STRING");
  std::vector<float> fs;
  CHECK(!f->get_f32_array("t.string", &fs).ok());
  CHECK(f->value_summary(*f->find("t.strings")) == "[STRING x 5] \"<unk>\", \"\xC4\xA0the\", \"\", \"日本語\", \"a b\"");
  CHECK(f->value_summary(*f->find("t.u64")) == "9223372036854775813");
  CHECK(f->value_summary(*f->find("t.string"), 100) == "\"héllo wörld ✓ \\n\\ttabs 🙂\"");
}

TEST_CASE("every prefix of a file is refused, the whole file is read") {
  const std::string path = kData + "tiny_q4_0.gguf";
  const std::string bytes = file_bytes(path);
  auto whole = open_ok(path);
  uint64_t end = 0;  // where the last tensor's data ends: the rest is padding
  for (const GgufTensor& t : whole->tensors()) end = std::max(end, whole->data_start() + t.offset + t.bytes);
  REQUIRE(end <= bytes.size());
  test::TempFile f(".gguf");
  { std::ofstream(f.path, std::ios::binary) << bytes; }
  int accepted_short = 0;
  for (size_t n = bytes.size(); n-- > 0;) {  // cut one byte at a time
    REQUIRE(::truncate(f.path.c_str(), static_cast<off_t>(n)) == 0);
    Opened o;
    o.status = GgufFile::open(f.path, &o.file);
    if (n < end) {
      if (o.status.ok()) ++accepted_short;
      else CHECK(o.status.message().rfind(f.path + ": ", 0) == 0);
    } else {
      CHECK(o.status.ok());
    }
  }
  CHECK(accepted_short == 0);
}

TEST_CASE("a version 2 file reads like version 3") {
  std::string bytes = file_bytes(kData + "tiny_q8_0.gguf");
  bytes[4] = 2;
  test::TempFile f(".gguf");
  Opened o = open_bytes(bytes, f);
  REQUIRE_MESSAGE(o.status.ok(), o.status.message());
  CHECK(o.file->version() == 2);
  CHECK(o.file->tensors().size() == 4);
}

TEST_CASE("lying counts in a real file are refused") {
  const std::string bytes = file_bytes(kData + "tiny_f32.gguf");
  auto set_u64 = [&](size_t at, uint64_t v) {
    std::string b = bytes;
    std::memcpy(b.data() + at, &v, 8);
    return b;
  };
  uint64_t n_tensors, n_kv;
  std::memcpy(&n_tensors, bytes.data() + 8, 8);
  std::memcpy(&n_kv, bytes.data() + 16, 8);
  refused(set_u64(8, uint64_t(1) << 40), "tensor count 1099511627776 is impossible");
  refused(set_u64(16, uint64_t(1) << 60), "metadata count 1152921504606846976 is impossible");
  refused(set_u64(16, ~uint64_t(0)), "is impossible");
  // A fifth tensor read from the padding and data; the first tensor read as
  // metadata, and the table read from after it; the last entry read as a tensor.
  refused(set_u64(8, n_tensors + 1), "tensor 4 (empty name) has 2862087168 dimensions (at most 4)");
  refused(set_u64(16, n_kv + 1), "tensor 0's name at byte 971 claims 1407374883553280 bytes");
  refused(set_u64(16, n_kv - 1), "tensor t.nested has 9 dimensions (at most 4)");
  // The first key's length, and the last tensor's offset, made to lie.
  refused(set_u64(24, uint64_t(1) << 50), "metadata entry 0's key at byte 24 claims 1125899906842624 bytes");
  auto f = open_ok(kData + "tiny_f32.gguf");
  const GgufTensor& last = f->tensors().back();
  const size_t at = bytes.rfind(le<uint64_t>(last.offset), f->data_start());  // the table's last field
  REQUIRE(at != std::string::npos);
  refused(set_u64(at, 0), "tensors a and " + last.name + " overlap");
  refused(set_u64(at, uint64_t(1) << 40), "tensor " + last.name + ": data [1099511627776, +");
}

TEST_CASE("malformed headers are refused with what is wrong") {
  refused("", "not a GGUF file");
  refused("GGU", "not a GGUF file");
  refused("GGML" + std::string(20, '\0'), "not a GGUF file");
  refused("GGUF", "truncated: the version at byte 4 needs 4 bytes, 0 left");
  refused("GGUF" + le<uint32_t>(1) + std::string(16, '\0'), "GGUF version 1 is not supported");
  refused("GGUF" + le<uint32_t>(4) + std::string(16, '\0'), "unknown GGUF version 4");
  refused("GGUF" + le<uint32_t>(0x03000000) + std::string(16, '\0'), "big-endian GGUF (version 3)");
  refused("GGUF" + le<uint32_t>(3) + le<uint64_t>(0), "truncated: the metadata count at byte 16");

  Builder b;
  b.kv("k", GgufValueType(13), le<uint32_t>(0));
  refused(b.bytes(), "metadata key 'k' has unknown value type 13");
  b = Builder();
  b.kv("k", GgufValueType::ARRAY, le<uint32_t>(77) + le<uint64_t>(1));
  refused(b.bytes(), "metadata key 'k' has unknown value type 77");
  b = Builder();
  b.kv("k", GgufValueType::ARRAY, le<uint32_t>(uint32_t(GgufValueType::U32)) + le<uint64_t>(uint64_t(1) << 61));
  refused(b.bytes(), "metadata key 'k': element count 2305843009213693952 is impossible");
  b = Builder();
  b.kv("k", GgufValueType::STRING, le<uint64_t>(100) + "abc");
  refused(b.bytes(), "metadata key 'k' at byte");
  b = Builder();
  b.kv("k", GgufValueType::BOOL, std::string(1, '\2'));
  refused(b.bytes(), "metadata key 'k': bool at byte");
  b = Builder();
  b.kv("k", GgufValueType::ARRAY, le<uint32_t>(uint32_t(GgufValueType::BOOL)) + le<uint64_t>(2) + "\1\3");
  refused(b.bytes(), "is 3, not 0 or 1");
  b = Builder();
  std::string nested = le<uint32_t>(uint32_t(GgufValueType::U8)) + le<uint64_t>(0);
  for (int i = 0; i < 20; ++i) nested = le<uint32_t>(uint32_t(GgufValueType::ARRAY)) + le<uint64_t>(1) + nested;
  b.kv("deep", GgufValueType::ARRAY, nested);
  refused(b.bytes(), "metadata key 'deep': arrays nested deeper than 8");
  b = Builder();
  b.u32("k", 1).u32("k", 2);
  refused(b.bytes(), "metadata key 'k' appears twice");
  b = Builder();
  b.u32("general.alignment", 48);
  refused(b.bytes(), "general.alignment 48 is not a power of two");
  b = Builder();
  b.u32("general.alignment", 0);
  refused(b.bytes(), "general.alignment 0 is not a power of two");
  b = Builder();
  b.kv("general.alignment", GgufValueType::STRING, gstr("32"));
  refused(b.bytes(), "metadata key 'general.alignment' is STRING, expected an integer");
}

TEST_CASE("malformed tensor tables are refused with the tensor named") {
  Builder b = one_tensor();
  CHECK(open_bytes(b.bytes(), test::TempFile(".gguf")).status.ok());
  b = one_tensor();
  b.tensor("w", {8}, 0, 32).data += std::string(32, '\0');
  refused(b.bytes(), "tensor w appears twice");
  b = one_tensor();
  b.tensor("t", {1, 1, 1, 1, 1}, 0, 32);
  refused(b.bytes(), "tensor t has 5 dimensions (at most 4)");
  b = one_tensor();
  b.tensor("t", {uint64_t(1) << 62, uint64_t(1) << 62}, 0, 32);
  refused(b.bytes(), "tensor t: shape [4611686018427387904] x 4611686018427387904 overflows 64 bits");
  b = one_tensor();
  b.tensor("t", {~uint64_t(0)}, 0, 32);
  refused(b.bytes(), "tensor t: shape [] x 18446744073709551615 overflows");
  b = one_tensor();
  b.tensor("t", {uint64_t(1) << 61, 2}, 0, 32);  // 2^62 elements, 2^64 bytes
  refused(b.bytes(), "tensor t: byte size of shape [2305843009213693952, 2] overflows 64 bits");
  b = one_tensor();
  b.tensor("t", {8}, 4, 32);
  refused(b.bytes(), "tensor t has unknown GGUF tensor type 4");
  b = one_tensor();
  b.tensor("t", {8}, 99, 32);
  refused(b.bytes(), "tensor t has unknown GGUF tensor type 99");
  b = one_tensor();
  b.tensor("t", {33, 2}, uint32_t(GgufType::Q4_0), 32);
  refused(b.bytes(), "tensor t: rows of 33 elements are not whole Q4_0 blocks of 32");
  b = one_tensor();
  b.tensor("t", {8}, 0, 40);
  refused(b.bytes(), "tensor t: offset 40 is not a multiple of the alignment 32");
  b = one_tensor();
  b.tensor("t", {8}, 0, 32);  // no data behind it
  refused(b.bytes(), "tensor t: data [32, +32) runs past the end of the file (the data section holds 32 bytes)");
  b = one_tensor();
  b.tensor("t", {8}, 0, ~uint64_t(31));
  refused(b.bytes(), "runs past the end of the file");
  b = one_tensor();
  b.tensor("t", {16}, 0, 0).data += std::string(32, '\0');
  refused(b.bytes(), "tensors ");
  b = one_tensor();
  b.infos += le<uint64_t>(1000);  // a second name whose length runs out
  ++b.n_tensors;
  refused(b.bytes(), "tensor 1's name at byte");
}

TEST_CASE("empty tensors open and dequantize to nothing") {
  // Found by fuzz_gguf: a zero-element tensor reached memcpy with null pointers.
  Builder b;
  b.tensor("rows0", {0, 3}, uint32_t(GgufType::F32), 0).tensor("cols0", {32, 0}, uint32_t(GgufType::Q4_0), 0);
  test::TempFile f(".gguf");
  Opened o = open_bytes(b.bytes(), f);
  REQUIRE_MESSAGE(o.status.ok(), o.status.message());
  for (const GgufTensor& t : o.file->tensors()) {
    CHECK(t.numel() == 0);
    CHECK(t.bytes == 0);
    CHECK(o.file->dequantize(t, std::span<float>()).ok());
  }
}

TEST_CASE("unsupported tensor types are read, and refused by name at dequantize") {
  Builder b;
  b.tensor("blk.0.attn_q.weight", {256, 2}, uint32_t(GgufType::IQ2_XXS), 0);
  b.data = std::string(2 * 66, '\0');
  test::TempFile f(".gguf");
  Opened o = open_bytes(b.bytes(), f);
  REQUIRE_MESSAGE(o.status.ok(), o.status.message());
  const GgufTensor& t = o.file->tensors()[0];
  CHECK(t.bytes == 132);
  std::vector<float> out(512);
  Status st = o.file->dequantize(t, out);
  CHECK(st.code() == StatusCode::unsupported);
  CHECK(st.message() == f.path + ": tensor blk.0.attn_q.weight: GGUF type IQ2_XXS is not supported "
                                 "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)");
  std::vector<float> small(3);
  auto q = open_ok(kData + "tiny_q4_0.gguf");
  st = q->dequantize(q->tensors()[0], small);
  CHECK(st.message() == q->path() + ": tensor a has 480 elements, the output holds 3");
  CHECK(!gguf_dequantize_rows(GgufType::Q4_0, nullptr, 33, small.data()).ok());
}

TEST_CASE("SmolLM2-135M: the metadata issue 14 lists, every tensor as gguf-py reads it") {
  const std::string path = test::smollm2_gguf();
  if (path.empty()) {
    MESSAGE(test::kNoSmollm2);
    return;
  }
  const int64_t rss_before = test::rss_kib();
  auto f = open_ok(path);
  // Opening maps the file and reads its header: the 98 MB are not copied
  // (the vocabulary's strings, ~1.8 MB, are the only pages touched in bulk).
  CHECK((test::rss_kib() - rss_before) * 1024 < static_cast<int64_t>(f->file_size() / 16));
  auto u32 = [&](const char* key) {
    uint32_t v = 0;
    Status st = f->get_u32(key, &v);
    REQUIRE_MESSAGE(st.ok(), st.message());
    return v;
  };
  std::string s;
  REQUIRE(f->get_string("general.architecture", &s).ok());
  CHECK(s == "llama");
  CHECK(f->version() == 3);
  CHECK(u32("llama.block_count") == 30);
  CHECK(u32("llama.embedding_length") == 576);
  CHECK(u32("llama.feed_forward_length") == 1536);
  CHECK(u32("llama.attention.head_count") == 9);
  CHECK(u32("llama.attention.head_count_kv") == 3);
  CHECK(u32("llama.rope.dimension_count") == 64);
  CHECK(u32("llama.vocab_size") == 49152);
  float x;
  REQUIRE(f->get_f32("llama.rope.freq_base", &x).ok());
  CHECK(x == 1e5f);
  REQUIRE(f->get_f32("llama.attention.layer_norm_rms_epsilon", &x).ok());
  CHECK(x == 1e-5f);
  REQUIRE(f->get_string("tokenizer.ggml.model", &s).ok());
  CHECK(s == "gpt2");
  REQUIRE(f->get_string("tokenizer.ggml.pre", &s).ok());
  CHECK(s == "smollm");
  std::vector<std::string> tokens, merges;
  REQUIRE(f->get_string_array("tokenizer.ggml.tokens", &tokens).ok());
  REQUIRE(f->get_string_array("tokenizer.ggml.merges", &merges).ok());
  CHECK(tokens.size() == 49152);
  CHECK(merges.size() == 48900);
  std::vector<int32_t> token_type;
  REQUIRE(f->get_i32_array("tokenizer.ggml.token_type", &token_type).ok());
  CHECK(token_type.size() == 49152);
  CHECK(f->has("tokenizer.chat_template"));

  std::map<GgufType, int> types;
  for (const GgufTensor& t : f->tensors()) {
    ++types[t.type];
    if (t.type == GgufType::F32) CHECK_MESSAGE(t.name.ends_with("norm.weight"), t.name);
  }
  CHECK(f->tensors().size() == 272);
  CHECK(types[GgufType::Q4_1] == 210);
  CHECK(types[GgufType::Q8_0] == 1);
  CHECK(types[GgufType::F32] == 61);
  REQUIRE(f->find_tensor("token_embd.weight") != nullptr);
  CHECK(f->find_tensor("token_embd.weight")->type == GgufType::Q8_0);
  CHECK(f->find_tensor("output.weight") == nullptr);  // tied to the embedding

  // Against the dump gguf-py made of the same file.
  int kvs = 0, tensors = 0;
  std::vector<float> values;
  for (const auto& w : reference_lines("smollm2.txt")) {
    INFO(w[0] << " " << w[1]);
    if (w[0] == "kv") {
      const GgufKv* kv = f->find(w[1]);
      REQUIRE(kv != nullptr);
      CHECK(uint32_t(kv->type) == std::stoul(w[2]));
      CHECK(uint32_t(kv->elem_type) == std::stoul(w[3]));
      CHECK(kv->count == std::stoull(w[4]));
      std::span<const uint8_t> raw = f->raw_value(*kv);
      CHECK(crc32(0, raw.data(), static_cast<uInt>(raw.size())) == std::stoul(w[5], nullptr, 16));
      ++kvs;
    } else {
      const GgufTensor* t = checked_tensor(*f, w);
      values.resize(static_cast<size_t>(t->numel()));
      Status st = f->dequantize(*t, values);
      REQUIRE_MESSAGE(st.ok(), st.message());
      f->release(*t);  // as import_gguf does
      CHECK(crc32(0, reinterpret_cast<const Bytef*>(values.data()), static_cast<uInt>(values.size() * 4)) ==
            std::stoul(w[6], nullptr, 16));
      double sum = 0;
      for (float v : values) sum += v;
      CHECK(sum == doctest::Approx(std::stod(w[7])).epsilon(1e-9));
      ++tensors;
    }
  }
  CHECK(kvs == static_cast<int>(f->metadata().size()));
  CHECK(tensors == 272);
  // Every tensor's pages were released after use: beside the f32 buffer, less
  // than a quarter of the file stays resident (all of it would without release).
  const int64_t grown = (test::rss_kib() - rss_before) * 1024;
  CHECK_MESSAGE(grown < static_cast<int64_t>(values.capacity() * sizeof(float) + f->file_size() / 4), grown);
}

TEST_CASE("sgrt info FILE.gguf lists metadata and tensors; a broken file gets one line, exit 2") {
  test::ToolResult r = test::run_tool({"info", kData + "tiny_q4_k.gguf"});
  CHECK(r.code == 0);
  CHECK(r.out.find("GGUF v3, architecture sgrt-test, 26 metadata entries, 2 tensors, alignment 32") != std::string::npos);
  CHECK(r.out.find("t.strings") != std::string::npos);
  CHECK(r.out.find("tensors: Q4_K x2 (") != std::string::npos);
  CHECK(r.out.find("b.weight                         Q4_K     512 x 2") != std::string::npos);
  test::TempDir d;
  std::string bytes = file_bytes(kData + "tiny_q4_k.gguf");
  std::string bad = d.file("bad.gguf", bytes.substr(0, bytes.size() / 2));
  r = test::run_tool({"info", bad});
  CHECK(r.code == 2);
  CHECK(r.err.find(bad + ": truncated: ") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  r = test::run_tool({"info", kData + "tiny_q4_k.gguf", "--json"});
  CHECK(r.code == 2);
  CHECK(r.err.find("info FILE.gguf takes no flags") != std::string::npos);
}
