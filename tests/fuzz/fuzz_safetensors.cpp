// Fuzzes the safetensors reader (read_safetensors: length, JSON header, dtypes,
// shapes against byte ranges) and, for a file that parses, the import into a
// session of a tiny model (names and shapes matched before anything is written).
#include "fuzz_util.h"
#include "sgrt/safetensors.h"

using namespace sgrt;

namespace {

std::unique_ptr<Session> g_session;

std::string file() { return fuzz::scratch_dir() + "/weights.safetensors"; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_session = fuzz::tiny_session("sgd");
  Status st;
  std::vector<uint8_t> bytes;
  for (DType dt : {DType::f32, DType::bf16}) {
    if (st.ok()) st = export_safetensors(*g_session, file(), dt);
    if (st.ok()) st = read_file(file(), &bytes);
    if (st.ok()) fuzz::write_seed(std::string("tiny_") + dtype_name(dt), bytes);
  }
  if (!st.ok()) fuzz::fail(st.message());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::write_or_die(file(), std::vector<uint8_t>(data, data + size));
  std::vector<SafeTensor> ts;
  Status st = read_safetensors(file(), &ts);
  if (!st.ok()) {
    if (st.message().empty()) fuzz::fail("a rejection without a message");
    return 0;
  }
  for (const SafeTensor& t : ts)
    if (static_cast<int64_t>(t.values.size()) != numel(t.shape)) fuzz::fail(t.name + ": values do not fill its shape");
  (void)import_safetensors(*g_session, file());
  return 0;
}
