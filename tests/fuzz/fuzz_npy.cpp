// Fuzzes the .npy reader (parse_npy_header, then read_npy into an f32 and an
// i32 input) on whole files. A header it accepts must describe exactly the
// bytes after it, and read_npy must then give one value per element.
#include <cstring>

#include "fuzz_util.h"
#include "sgrt/own_data.h"

using namespace sgrt;

namespace {

std::vector<uint8_t> npy(int major, const std::string& descr, const std::string& shape, size_t data_bytes) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t prefix = 8 + (major == 1 ? 2 : 4);
  dict += std::string((64 - (prefix + dict.size() + 1) % 64) % 64, ' ') + "\n";
  std::vector<uint8_t> f = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  for (size_t b = 0; b < prefix - 8; ++b) f.push_back(static_cast<uint8_t>((dict.size() >> (8 * b)) & 0xff));
  f.insert(f.end(), dict.begin(), dict.end());
  for (size_t i = 0; i < data_bytes; ++i) f.push_back(static_cast<uint8_t>(i * 37));
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::write_seed("f4_v1", npy(1, "<f4", "(3, 2)", 24));
  fuzz::write_seed("i8_v2", npy(2, "<i8", "(4,)", 32));
  fuzz::write_seed("u1_v3", npy(3, "|u1", "(2, 2, 2)", 8));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  NpyHeader h;
  if (!parse_npy_header(data, size, &h).ok()) return 0;
  if (h.shape.empty() || h.data_offset > size || static_cast<uint64_t>(h.count) * h.item_bytes != size - h.data_offset)
    fuzz::fail("an accepted header does not describe the bytes after it");
  if (h.count == 0 || h.count > (1 << 20)) return 0;
  const std::string path = fuzz::scratch_dir() + "/x.npy";
  fuzz::write_or_die(path, std::vector<uint8_t>(data, data + size));
  for (DType dtype : {DType::f32, DType::i32}) {
    TensorInfo t;
    t.name = "x";
    t.type = {{1, h.count / h.shape[0]}, dtype};
    std::vector<uint8_t> values;
    int64_t examples = 0;
    if (read_npy(path, t, &values, &examples).ok() &&
        (examples != h.shape[0] || values.size() != static_cast<size_t>(h.count) * 4))
      fuzz::fail("read_npy's values disagree with the header");
  }
  return 0;
}
