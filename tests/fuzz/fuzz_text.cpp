// Fuzzes the byte-level text data set (open_text_dataset) on a fuzzed corpus
// file; byte 0 odd: the rest is gzipped first (reaches both zlib and the
// windowing). A data set that opens must gather every window of both splits.
#include <zlib.h>

#include "fuzz_util.h"
#include "sgrt/dataset.h"

using namespace sgrt;

namespace {

constexpr int64_t kBlock = 8;
const char kModel[] = R"(
local sg = require "sg"
local t = sg.input("tokens", {2, 8}, "i32")
local y = sg.input("targets", {2, 8}, "i32")
local p = sg.param("p", {2}, "ones")
sg.loss(sg.mean(p * p))
sg.data.text{ tokens = t, targets = y }
sg.optimizer.sgd{ lr = 1e-2 }
)";

std::unique_ptr<Model> g_model;

std::string file() { return fuzz::scratch_dir() + "/corpus.txt"; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (Status st = Model::load_bytes(fuzz::compile_lua(kModel), "text.sg", &g_model); !st.ok()) fuzz::fail(st.message());
  std::string text = "0Deep in the jargon file, hackers wrote: the quick brown fox jumps over the lazy dog, twice; "
                     "then again, the quick brown fox jumps over the lazy dog.\n";
  fuzz::write_seed("plain", std::vector<uint8_t>(text.begin(), text.end()));
  text[0] = '1';
  fuzz::write_seed("gz", std::vector<uint8_t>(text.begin(), text.end()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) {
    gzFile f = gzopen(file().c_str(), "wb");
    if (!f || (size > 1 && gzwrite(f, data + 1, static_cast<unsigned>(size - 1)) <= 0) || gzclose(f) != Z_OK)
      fuzz::fail("cannot write " + file());
  } else {
    fuzz::write_or_die(file(), std::vector<uint8_t>(data + 1, data + size));
  }
  std::unique_ptr<Dataset> d;
  Status st = open_text_dataset(file(), *g_model, &d);
  if (st.ok() != static_cast<bool>(d)) fuzz::fail("open_text_dataset: status and data set disagree");
  if (!d) return 0;
  const TensorInfo& t = g_model->tensors()[g_model->find_tensor("tokens")];
  for (Split s : {Split::train, Split::test}) {
    int64_t n = d->size(s);
    if (n <= 0) fuzz::fail("a data set opened with no windows");
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[i] = i;
    std::vector<int32_t> out(static_cast<size_t>(n * kBlock));
    for (const char* field : {"tokens", "targets"})
      if (!d->gather(s, idx.data(), n, field, t, out.data()).ok()) fuzz::fail("gather failed on an opened data set");
  }
  return 0;
}
