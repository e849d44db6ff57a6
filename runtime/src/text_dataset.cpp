// The byte-level text data set (see dataset.h).
#include <zlib.h>

#include <algorithm>

#include "sg_generated.h"
#include "sgrt/dataset.h"

namespace sgrt {
namespace {

constexpr int64_t kMaxValWindows = 512;  // a fixed, bounded validation set

// The whole file; gzread passes plain files through unchanged. A gzip stream
// must be whole: a bad CRC fails gzread, and a stream cut short reads as a
// plain end of file that only gzclose reports (Z_BUF_ERROR).
Status read_all(const std::string& path, std::vector<uint8_t>* out) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status::Io(path + ": cannot open the text corpus (is jargon-text installed, or --data right?)");
  uint8_t buf[1 << 16];
  int got;
  while ((got = gzread(f, buf, sizeof buf)) > 0) out->insert(out->end(), buf, buf + got);
  std::string why;
  if (got < 0) {
    int code;
    why = gzerror(f, &code);
  }
  int closed = gzclose(f);
  if (got < 0) return Status::Invalid(path + ": corrupt or unreadable (" + why + ")");
  if (closed == Z_BUF_ERROR) return Status::Invalid(path + ": truncated: the gzip stream ends before its end marker");
  return Status::Ok();
}

class TextDataset final : public Dataset {
 public:
  TextDataset(std::vector<uint8_t> bytes, int64_t block) : bytes_(std::move(bytes)), block_(block) {
    int64_t n = static_cast<int64_t>(bytes_.size());
    split_ = n * 9 / 10;
    int64_t val = std::min(kMaxValWindows, (n - split_ - 1) / block_);
    for (int64_t k = 0; k < val; ++k) val_starts_.push_back(split_ + k * block_);
  }

  int64_t size(Split s) const override {
    return s == Split::train ? split_ - block_ : static_cast<int64_t>(val_starts_.size());
  }

  Status check_field(const std::string& field, const TensorInfo& t) const override {
    if (field != "tokens" && field != "targets") return Status::Invalid("the text data set has no field '" + field + "'");
    if (t.type.dtype != DType::i32 || t.type.shape.size() != 2 || t.type.shape[1] != block_)
      return Status::Invalid("input " + t.name + " " + type_str(t.type) + " cannot hold text windows (i32 [batch, " +
                             std::to_string(block_) + "])");
    return Status::Ok();
  }

  Status gather(Split s, const int64_t* idx, int64_t n, const std::string& field, const TensorInfo& t,
                void* dst) const override {
    int32_t* out = static_cast<int32_t*>(dst);
    int64_t shift = field == "targets" ? 1 : 0;
    for (int64_t r = 0; r < n; ++r) {
      if (idx[r] < 0 || idx[r] >= size(s)) return Status::Runtime("text window index out of range");
      int64_t start = s == Split::train ? idx[r] : val_starts_[idx[r]];
      const uint8_t* src = bytes_.data() + start + shift;
      for (int64_t j = 0; j < block_; ++j) out[r * block_ + j] = src[j];
    }
    return Status::Ok();
  }

 private:
  std::vector<uint8_t> bytes_;
  int64_t block_, split_ = 0;
  std::vector<int64_t> val_starts_;
};

}  // namespace

Status open_text_dataset(const std::string& path, const Model& model, std::unique_ptr<Dataset>* out) {
  const sg::DataBinding* d = model.root().data();
  if (!d->fields() || d->fields()->size() == 0) return Status::Invalid(model.label() + ": the text data set binds no inputs");
  const TensorInfo& t = model.tensors()[d->fields()->Get(0)->tensor()];
  if (t.type.shape.size() != 2) return Status::Invalid(model.label() + ": text inputs must be i32 [batch, block], got " + type_str(t.type));
  int64_t block = t.type.shape[1];
  std::vector<uint8_t> bytes;
  SG_TRY(read_all(path, &bytes));
  int64_t n = static_cast<int64_t>(bytes.size());
  if (n == 0) return Status::Invalid(path + ": the text corpus is empty");
  // Both splits need one window of block + 1 bytes.
  if (n * 9 / 10 < block + 1 || n - n * 9 / 10 < block + 1)
    return Status::Invalid(path + ": the corpus has " + std::to_string(n) + " bytes, too few for windows of " +
                           std::to_string(block + 1) + " bytes in both the 90% train and the 10% validation split (" +
                           "needs about " + std::to_string(10 * (block + 1)) + ")");
  *out = std::make_unique<TextDataset>(std::move(bytes), block);
  return Status::Ok();
}

}  // namespace sgrt
