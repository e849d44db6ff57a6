#include "own_data_tool.h"

#include <cstdio>

#include "sg_generated.h"
#include "sgrt/own_data.h"
#ifdef SGRT_WITH_IMAGES
#include "sgrt/image_data.h"
#endif

namespace sgrt::tool {
namespace {

// The image folder the model reads (data_path, else its own), or "".
std::string image_dir(const Model& m, const std::string& data_path) {
  const sg::DataBinding* d = m.root().data();
  if (!d || !d->dataset() || d->dataset()->str() != "images") return "";
  return !data_path.empty() ? data_path : d->path() ? d->path()->str() : "";
}

Status classes_of(const std::string& dir, std::vector<std::string>* classes) {
#ifdef SGRT_WITH_IMAGES
  return image_classes(dir, classes);
#else
  (void)dir, (void)classes;
  return Status::Invalid("this build reads no images (built without libpng and libjpeg: SGRT_IMAGES)");
#endif
}

}  // namespace

Status open_own_data(const Model& m, const std::string& path, std::unique_ptr<Dataset>* out) {
  SG_TRY(open_own_dataset(m, path, out));
  if (image_dir(m, path).empty()) return Status::Ok();
  std::vector<std::string> classes;
  SG_TRY(classes_of(path, &classes));
  std::string list;
  for (size_t i = 0; i < classes.size(); ++i) list += (i ? ", " : "") + std::to_string(i) + " " + classes[i];
  std::fprintf(stderr, "%s: %lld images; classes %s\n", path.c_str(),
               static_cast<long long>((*out)->size(Split::train) + (*out)->size(Split::test)), list.c_str());
  return Status::Ok();
}

Status class_names_files(const Model& m, const std::string& data_path,
                         std::vector<std::pair<std::string, std::string>>* files) {
  std::string dir = image_dir(m, data_path);
  if (dir.empty()) return Status::Ok();
  std::vector<std::string> classes;
  SG_TRY(classes_of(dir, &classes));
  std::string text;
  for (const std::string& c : classes) text += c + "\n";
  files->push_back({kClassesFile, text});
  return Status::Ok();
}

}  // namespace sgrt::tool
