// Views of one data set that hold out the end of its training split for
// evaluation during training (sgrt train --val-split).
#include <algorithm>
#include <cmath>

#include "sgrt/dataset.h"

namespace sgrt {
namespace {

// Training examples [0, keep) of `inner`; its test split unchanged.
class TrainHead final : public Dataset {
 public:
  TrainHead(std::shared_ptr<const Dataset> inner, int64_t keep) : inner_(std::move(inner)), keep_(keep) {}
  int64_t size(Split s) const override { return s == Split::train ? keep_ : inner_->size(s); }
  Status gather(Split s, const int64_t* idx, int64_t n, const std::string& field, const TensorInfo& t,
                void* dst) const override {
    if (s == Split::train)
      for (int64_t r = 0; r < n; ++r)
        if (idx[r] < 0 || idx[r] >= keep_) return Status::Runtime("training example index out of range");
    return inner_->gather(s, idx, n, field, t, dst);
  }
  Status check_field(const std::string& f, const TensorInfo& t) const override { return inner_->check_field(f, t); }

 private:
  std::shared_ptr<const Dataset> inner_;
  int64_t keep_;
};

// Its "test" split: training examples keep, keep + stride, ... of `inner`.
class HeldOut final : public Dataset {
 public:
  HeldOut(std::shared_ptr<const Dataset> inner, int64_t first, int64_t stride, int64_t count)
      : inner_(std::move(inner)), first_(first), stride_(stride), count_(count) {}
  int64_t size(Split s) const override { return s == Split::test ? count_ : 0; }
  Status gather(Split s, const int64_t* idx, int64_t n, const std::string& field, const TensorInfo& t,
                void* dst) const override {
    if (s != Split::test) return Status::Runtime("the validation view has no training split");
    std::vector<int64_t> mapped(n);
    for (int64_t r = 0; r < n; ++r) {
      if (idx[r] < 0 || idx[r] >= count_) return Status::Runtime("validation example index out of range");
      mapped[r] = first_ + idx[r] * stride_;
    }
    return inner_->gather(Split::train, mapped.data(), n, field, t, dst);
  }
  Status check_field(const std::string& f, const TensorInfo& t) const override { return inner_->check_field(f, t); }

 private:
  std::shared_ptr<const Dataset> inner_;
  int64_t first_, stride_, count_;
};

}  // namespace

Status split_validation(std::shared_ptr<const Dataset> data, double fraction, int64_t max_examples,
                        std::unique_ptr<Dataset>* train, std::unique_ptr<Dataset>* validation) {
  if (!(fraction > 0 && fraction < 1)) return Status::Invalid("--val-split expects a fraction between 0 and 1");
  int64_t n = data->size(Split::train);
  int64_t held = static_cast<int64_t>(std::floor(static_cast<double>(n) * fraction));
  if (held < 1 || held >= n)
    return Status::Invalid("--val-split " + std::to_string(fraction) + " of " + std::to_string(n) +
                           " training examples leaves no validation or no training examples");
  int64_t stride = max_examples > 0 && held > max_examples ? (held + max_examples - 1) / max_examples : 1;
  *train = std::make_unique<TrainHead>(data, n - held);
  *validation = std::make_unique<HeldOut>(data, n - held, stride, (held + stride - 1) / stride);
  return Status::Ok();
}

}  // namespace sgrt
