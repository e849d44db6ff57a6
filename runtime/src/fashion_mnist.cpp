// IDX reader for (Fashion-)MNIST: big-endian header, then uint8 data.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "sgrt/dataset.h"

namespace sgrt {
namespace {

constexpr int64_t kPixels = 28 * 28;
constexpr int kClasses = 10;
constexpr int64_t kMaxIdxBytes = int64_t(1) << 31;

// Prefers NAME.gz, then NAME.
std::string find_idx(const std::string& dir, const std::string& name) {
  std::string gz = dir + "/" + name + ".gz";
  return ::access(gz.c_str(), R_OK) == 0 ? gz : dir + "/" + name;
}

// Reads an IDX file of uint8 with the expected rank; dims out.
Status read_idx(const std::string& path, int rank, std::vector<int64_t>* dims, std::vector<uint8_t>* data) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status::Io(path + ": cannot open (is dataset-fashion-mnist installed, or --data right?)");
  uint8_t hdr[4 + 4 * 3];
  int hlen = 4 + 4 * rank;
  Status st;
  if (gzread(f, hdr, hlen) != hlen) st = Status::Invalid(path + ": truncated IDX header");
  else if (hdr[0] != 0 || hdr[1] != 0 || hdr[2] != 0x08 || hdr[3] != rank)
    st = Status::Invalid(path + ": not an IDX file of uint8 with " + std::to_string(rank) + " dimensions");
  int64_t total = 1;
  dims->clear();
  for (int d = 0; st.ok() && d < rank; ++d) {
    const uint8_t* p = hdr + 4 + 4 * d;
    int64_t v = (int64_t(p[0]) << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    dims->push_back(v);
    if (v == 0 || total > kMaxIdxBytes / v) st = Status::Invalid(path + ": implausible IDX dimensions");
    else total *= v;
  }
  // Grows with the data actually read: a header cannot make us allocate more.
  data->clear();
  uint8_t buf[1 << 16];
  while (st.ok() && static_cast<int64_t>(data->size()) < total) {
    int got = gzread(f, buf, static_cast<unsigned>(std::min<int64_t>(sizeof buf, total - data->size())));
    if (got <= 0) break;
    data->insert(data->end(), buf, buf + got);
  }
  if (st.ok() && static_cast<int64_t>(data->size()) != total)
    st = Status::Invalid(path + ": truncated: expected " + std::to_string(total) + " bytes of data, got " + std::to_string(data->size()));
  gzclose(f);
  return st;
}

struct Part {
  int64_t count = 0;
  std::vector<uint8_t> pixels, labels;
};

Status load_part(const std::string& dir, const std::string& prefix, Part* p) {
  std::vector<int64_t> idims, ldims;
  std::string ipath = find_idx(dir, prefix + "-images-idx3-ubyte"), lpath = find_idx(dir, prefix + "-labels-idx1-ubyte");
  SG_TRY(read_idx(ipath, 3, &idims, &p->pixels));
  SG_TRY(read_idx(lpath, 1, &ldims, &p->labels));
  if (idims[1] * idims[2] != kPixels) return Status::Invalid(ipath + ": images are not 28x28");
  if (idims[0] != ldims[0])
    return Status::Invalid(lpath + ": " + std::to_string(ldims[0]) + " labels for " + std::to_string(idims[0]) + " images");
  for (size_t i = 0; i < p->labels.size(); ++i)
    if (p->labels[i] >= kClasses) return Status::Invalid(lpath + ": label " + std::to_string(p->labels[i]) + " at index " + std::to_string(i) + " is not in 0..9");
  p->count = idims[0];
  return Status::Ok();
}

class FashionMnist final : public Dataset {
 public:
  Part train, test;

  int64_t size(Split s) const override { return part(s).count; }

  Status check_field(const std::string& field, const TensorInfo& t) const override {
    int64_t per = numel(t.type.shape) / t.type.shape[0];
    if (field == "image" && (t.type.dtype != DType::f32 || per != kPixels))
      return Status::Invalid("input " + t.name + " " + type_str(t.type) + " cannot hold Fashion-MNIST images (f32, 784 per example)");
    if (field == "label" && (t.type.dtype != DType::i32 || per != 1))
      return Status::Invalid("input " + t.name + " " + type_str(t.type) + " cannot hold Fashion-MNIST labels (i32, 1 per example)");
    if (field != "image" && field != "label") return Status::Invalid("Fashion-MNIST has no field '" + field + "'");
    return Status::Ok();
  }

  Status gather(Split s, const int64_t* idx, int64_t n, const std::string& field, const TensorInfo& t,
                void* dst) const override {
    const Part& p = part(s);
    for (int64_t r = 0; r < n; ++r)
      if (idx[r] < 0 || idx[r] >= p.count) return Status::Runtime("example index out of range");
    if (field == "image") {
      float* out = static_cast<float*>(dst);
      for (int64_t r = 0; r < n; ++r) {
        const uint8_t* px = p.pixels.data() + idx[r] * kPixels;
        for (int64_t j = 0; j < kPixels; ++j) out[r * kPixels + j] = static_cast<float>(px[j]) * (1.f / 255.f);
      }
    } else {
      int32_t* out = static_cast<int32_t*>(dst);
      for (int64_t r = 0; r < n; ++r) out[r] = p.labels[idx[r]];
    }
    return Status::Ok();
  }

 private:
  const Part& part(Split s) const { return s == Split::train ? train : test; }
};

}  // namespace

Status open_fashion_mnist(const std::string& dir, std::unique_ptr<Dataset>* out) {
  auto d = std::make_unique<FashionMnist>();
  SG_TRY(load_part(dir, "train", &d->train));
  SG_TRY(load_part(dir, "t10k", &d->test));
  *out = std::move(d);
  return Status::Ok();
}

}  // namespace sgrt
