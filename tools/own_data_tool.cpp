#include "own_data_tool.h"

#include <cstdio>

#include "sg_generated.h"
#include "sgrt/own_data.h"
#ifdef SGRT_WITH_IMAGES
#include "sgrt/image_data.h"
#endif

namespace sgrt::tool {
namespace {

#ifdef SGRT_WITH_IMAGES
std::string image_dir(const Model& m, const std::string& data_path) {
  const sg::DataBinding* d = m.root().data();
  if (!d || !d->dataset() || d->dataset()->str() != "images") return "";
  return !data_path.empty() ? data_path : d->path() ? d->path()->str() : "";
}

Status open_images(const Model& m, const std::string& dir, std::unique_ptr<Dataset>* out) {
  const TensorInfo* x = bound_input(m, "image");
  if (!x) return Status::Invalid(m.label() + ": sg.data.images binds no image input");
  ExampleTable t;
  SG_TRY(read_image_folder(dir, *x, &t));
  std::string classes;
  for (size_t i = 0; i < t.classes.size(); ++i) classes += (i ? ", " : "") + std::to_string(i) + " " + t.classes[i];
  std::fprintf(stderr, "%s: %lld images; classes %s\n", dir.c_str(), static_cast<long long>(t.count), classes.c_str());
  return open_example_dataset(std::move(t), "image", out).with_context(dir);
}
#endif

}  // namespace

ImageDatasetOpener image_opener() {
#ifdef SGRT_WITH_IMAGES
  return open_images;
#else
  return nullptr;
#endif
}

Status class_names_files(const Model& m, const std::string& data_path,
                         std::vector<std::pair<std::string, std::string>>* files) {
#ifdef SGRT_WITH_IMAGES
  std::string dir = image_dir(m, data_path);
  if (dir.empty()) return Status::Ok();
  std::vector<std::string> classes;
  SG_TRY(image_classes(dir, &classes));
  std::string text;
  for (const std::string& c : classes) text += c + "\n";
  files->push_back({kClassesFile, text});
#else
  (void)m, (void)data_path, (void)files;
#endif
  return Status::Ok();
}

}  // namespace sgrt::tool
