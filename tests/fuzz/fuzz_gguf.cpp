// Fuzzes the GGUF reader (GgufFile::open: header, metadata values of every
// type, tensor table, alignment, data ranges) and, for a file it accepts,
// every accessor: typed getters and summaries of each metadata entry, each
// tensor's bytes and its dequantization. Seeds: the tiny files of
// tests/data/gguf (scripts/make_gguf_reference.py).
#include <filesystem>

#include "fuzz_util.h"
#include "sgrt/gguf.h"

using namespace sgrt;

namespace {

std::string file() { return fuzz::scratch_dir() + "/model.gguf"; }

void read_every_value(const GgufFile& f) {
  std::string s;
  uint32_t u;
  float x;
  bool b;
  std::vector<std::string> strs;
  std::vector<int32_t> ints;
  std::vector<float> floats;
  for (const GgufKv& kv : f.metadata()) {
    if (kv.value_pos + kv.value_bytes > f.data_start()) fuzz::fail(kv.key + ": value runs into the data section");
    (void)f.value_summary(kv);
    (void)f.get_string(kv.key, &s);
    (void)f.get_u32(kv.key, &u);
    (void)f.get_f32(kv.key, &x);
    (void)f.get_bool(kv.key, &b);
    (void)f.get_string_array(kv.key, &strs);
    (void)f.get_i32_array(kv.key, &ints);
    (void)f.get_f32_array(kv.key, &floats);
  }
}

void read_every_tensor(const GgufFile& f) {
  std::vector<float> out;
  for (const GgufTensor& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) fuzz::fail(t.name + ": find_tensor finds another");
    if (f.data_start() + t.offset + t.bytes > f.file_size()) fuzz::fail(t.name + ": data past the end of the file");
    int64_t block_elems, block_bytes;
    if (!gguf_type_layout(uint32_t(t.type), &block_elems, &block_bytes)) fuzz::fail(t.name + ": accepted an unknown type");
    if (t.numel() % block_elems != 0 || uint64_t(t.numel() / block_elems * block_bytes) != t.bytes)
      fuzz::fail(t.name + ": byte size does not match the shape");
    out.assign(static_cast<size_t>(t.numel()), 0.0f);
    Status st = f.dequantize(t, out);
    if (st.ok() != gguf_type_supported(t.type)) fuzz::fail(t.name + ": dequantize disagrees with gguf_type_supported");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::vector<uint8_t> bytes;
  for (const auto& e : std::filesystem::directory_iterator(SGRT_SOURCE_DIR "/tests/data/gguf")) {
    if (e.path().extension() != ".gguf") continue;
    Status st = read_file(e.path().string(), &bytes);
    if (!st.ok()) fuzz::fail(st.message());
    fuzz::write_seed(e.path().filename().string(), bytes);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::write_or_die(file(), std::vector<uint8_t>(data, data + size));
  std::unique_ptr<GgufFile> f;
  Status st = GgufFile::open(file(), &f);
  if (!st.ok()) {
    if (st.message().rfind(file() + ": ", 0) != 0) fuzz::fail("a rejection that does not name the file: " + st.message());
    return 0;
  }
  read_every_value(*f);
  read_every_tensor(*f);
  return 0;
}
