// open_own_dataset: sg.data.csv, npy and images read whole, then served from memory.
#include "sg_generated.h"
#include "sgrt/own_data.h"
#ifdef SGRT_WITH_IMAGES
#include "sgrt/image_data.h"
#endif

namespace sgrt {

Status open_own_dataset(const Model& model, const std::string& path, std::unique_ptr<Dataset>* out) {
  const std::string name = model.root().data()->dataset()->str();
  const char* feature_field = name == "images" ? "image" : "features";
  const TensorInfo* x = bound_input(model, feature_field);
  if (!x) return Status::Invalid(model.label() + ": sg.data." + name + " binds no " + feature_field + " input");
  ExampleTable t;
  if (name == "npy") {
    SG_TRY(read_npy_examples(path, model, &t));
  } else if (name == "csv") {
    CsvOptions o;
    SG_TRY(csv_options(model, &o));
    SG_TRY(read_csv(path, o, *x, bound_input(model, "label"), &t));
  } else {
#ifdef SGRT_WITH_IMAGES
    SG_TRY(read_image_folder(path, *x, &t));
#else
    return Status::Invalid(model.label() + ": this build reads no images (built without libpng and libjpeg: SGRT_IMAGES)");
#endif
  }
  return open_example_dataset(std::move(t), feature_field, out).with_context(path);
}

}  // namespace sgrt
