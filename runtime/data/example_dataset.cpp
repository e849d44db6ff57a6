// A user's examples in memory as a Dataset (own_data.h).
#include <cstring>
#include <numeric>

#include "sg_generated.h"
#include "sgrt/own_data.h"
#include "sgrt/rng.h"

namespace sgrt {
namespace {

constexpr uint64_t kOrderSeed = 0x0DA7A5E7;  // fixed: the test split is the same every run

class ExampleDataset final : public Dataset {
 public:
  ExampleDataset(ExampleTable t, std::string feature_field) : t_(std::move(t)), feature_field_(std::move(feature_field)) {
    order_.resize(static_cast<size_t>(t_.count));
    std::iota(order_.begin(), order_.end(), 0);
    for (int64_t i = t_.count - 1; i > 0; --i)
      std::swap(order_[i], order_[rng_u64(kOrderSeed, 0, i) % static_cast<uint64_t>(i + 1)]);
    test_ = std::max<int64_t>(1, t_.count / 10);
  }

  int64_t size(Split s) const override { return s == Split::train ? t_.count - test_ : test_; }

  Status check_field(const std::string& field, const TensorInfo& t) const override {
    bool features = field == feature_field_;
    if (!features && field != "label") return Status::Invalid("this data set has no field '" + field + "'");
    int64_t width = features ? t_.feature_width : t_.label_width;
    DType dtype = features ? t_.feature_dtype : t_.label_dtype;
    if (t.type.shape.empty() || numel(t.type.shape) / t.type.shape[0] != width || t.type.dtype != dtype)
      return Status::Invalid("input " + t.name + " " + type_str(t.type) + " cannot hold the data set's " + field + " (" +
                             dtype_name(dtype) + ", " + std::to_string(width) + " per example)");
    return Status::Ok();
  }

  Status gather(Split s, const int64_t* idx, int64_t n, const std::string& field, const TensorInfo&,
                void* dst) const override {
    bool features = field == feature_field_;
    const std::vector<uint8_t>& src = features ? t_.features : t_.labels;
    size_t row = static_cast<size_t>(features ? t_.feature_width : t_.label_width) * 4;
    int64_t first = s == Split::train ? 0 : t_.count - test_;
    for (int64_t r = 0; r < n; ++r) {
      if (idx[r] < 0 || idx[r] >= size(s)) return Status::Runtime("example index out of range");
      std::memcpy(static_cast<uint8_t*>(dst) + r * row, src.data() + order_[first + idx[r]] * row, row);
    }
    return Status::Ok();
  }

 private:
  ExampleTable t_;
  std::string feature_field_;
  std::vector<int64_t> order_;
  int64_t test_ = 0;
};

}  // namespace

const TensorInfo* bound_input(const Model& model, const std::string& field) {
  if (const sg::DataBinding* d = model.root().data(); d && d->fields())
    for (const sg::DataField* f : *d->fields())
      if (f->field()->str() == field) return &model.tensors()[f->tensor()];
  return nullptr;
}

std::string data_option(const Model& model, const std::string& key, const std::string& def) {
  if (const sg::DataBinding* d = model.root().data(); d && d->options())
    for (const sg::DataOption* o : *d->options())
      if (o->key()->str() == key) return o->value()->str();
  return def;
}

Status open_example_dataset(ExampleTable table, const std::string& feature_field, std::unique_ptr<Dataset>* out) {
  if (table.count < 2)
    return Status::Invalid("the data set has " + std::to_string(table.count) +
                           " examples; it needs at least 2 (one to train on, one to test)");
  *out = std::make_unique<ExampleDataset>(std::move(table), feature_field);
  return Status::Ok();
}

}  // namespace sgrt
