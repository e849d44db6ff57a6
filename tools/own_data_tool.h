// The sgrt tool's side of a user's own data (sgrt_data, sgrt/own_data.h):
// its opener for open_dataset, and the class names a checkpoint keeps for
// sgrt predict.
#pragma once
#include <string>
#include <vector>

#include "sgrt/dataset.h"

namespace sgrt::tool {

// open_own_dataset, and for an image folder one line on stderr with the
// number of images and the classes with their labels.
Status open_own_data(const Model& m, const std::string& path, std::unique_ptr<Dataset>* out);

// The checkpoint file of an image model's class names, one a line by label.
constexpr const char* kClassesFile = "classes.txt";
// (kClassesFile, its text) when the model reads an image folder at data_path
// (or its own path); nothing otherwise.
Status class_names_files(const Model& m, const std::string& data_path,
                         std::vector<std::pair<std::string, std::string>>* files);

}  // namespace sgrt::tool
