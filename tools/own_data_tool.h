// The sgrt tool's side of a user's own data: image folders (sgrt_images,
// when built) and the class names a checkpoint keeps for sgrt predict.
#pragma once
#include <string>
#include <vector>

#include "sgrt/dataset.h"

namespace sgrt::tool {

// open_dataset's opener for sg.data.images (prints the classes with their
// labels); null in a build without SGRT_IMAGES.
ImageDatasetOpener image_opener();

// The checkpoint file of an image model's class names, one a line by label.
constexpr const char* kClassesFile = "classes.txt";
// (kClassesFile, its text) when the model reads an image folder at data_path
// (or its own path); nothing otherwise.
Status class_names_files(const Model& m, const std::string& data_path,
                         std::vector<std::pair<std::string, std::string>>* files);

}  // namespace sgrt::tool
