// Fuzzes the IDX reader (open_fashion_mnist) through a scratch folder of four
// files. Byte 0: bits 0-1 pick the file the rest replaces (train images, train
// labels, t10k images, t10k labels; the others hold 2 valid examples); bit 2
// gzips it first, so mutations reach the IDX parser behind zlib as well as
// zlib itself. A data set that opens must gather every example.
#include <zlib.h>

#include "fuzz_util.h"
#include "sgrt/dataset.h"

using namespace sgrt;

namespace {

constexpr int kN = 2, kPixels = 28 * 28;
const char* const kFiles[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                               "t10k-labels-idx1-ubyte"};

std::vector<uint8_t> idx_file(bool images) {
  std::vector<uint8_t> b = {0, 0, 8, uint8_t(images ? 3 : 1), 0, 0, 0, kN};
  if (images) b.insert(b.end(), {0, 0, 0, 28, 0, 0, 0, 28});
  for (int i = 0; i < kN * (images ? kPixels : 1); ++i) b.push_back(static_cast<uint8_t>(i * 7));
  return b;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (!f || gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) != static_cast<int>(bytes.size()) ||
      gzclose(f) != Z_OK)
    fuzz::fail("cannot write " + path);
}

std::vector<uint8_t> seed(uint8_t mode, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> s{mode};
  s.insert(s.end(), body.begin(), body.end());
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::write_seed("images", seed(0, idx_file(true)));
  fuzz::write_seed("labels", seed(1, idx_file(false)));
  fuzz::write_seed("images_gz", seed(4 | 2, idx_file(true)));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string& dir = fuzz::scratch_dir();
  int which = data[0] & 3;
  for (int f = 0; f < 4; ++f) {
    std::string path = dir + "/" + kFiles[f];
    if (f != which) fuzz::write_or_die(path, idx_file(f % 2 == 0));
    else if (data[0] & 4) write_gz(path, std::vector<uint8_t>(data + 1, data + size));
    else fuzz::write_or_die(path, std::vector<uint8_t>(data + 1, data + size));
  }
  std::unique_ptr<Dataset> d;
  Status st = open_fashion_mnist(dir, &d);
  if (st.ok() != static_cast<bool>(d)) fuzz::fail("open_fashion_mnist: status and data set disagree");
  if (!d) return 0;
  TensorInfo t;  // gather lays examples out by field; the tensor is not consulted
  for (Split s : {Split::train, Split::test}) {
    int64_t n = d->size(s);
    if (n <= 0) fuzz::fail("a data set opened with no examples");
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[i] = i;
    std::vector<float> px(static_cast<size_t>(n) * kPixels);
    std::vector<int32_t> labels(static_cast<size_t>(n));
    if (!d->gather(s, idx.data(), n, "image", t, px.data()).ok() || !d->gather(s, idx.data(), n, "label", t, labels.data()).ok())
      fuzz::fail("gather failed on an opened data set");
  }
  return 0;
}
