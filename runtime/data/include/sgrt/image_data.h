// sg.data.images: a folder of class subfolders of PNG and JPEG files, decoded
// with libpng and libjpeg (sgrt_data built with SGRT_IMAGES).
#pragma once
#include <string>
#include <vector>

#include "sgrt/own_data.h"

namespace sgrt {

// The image input's layout: [batch, H, W, C] (C = 1 or 3), [batch, C, H, W]
// (C = 1 or 3, when the last dimension is neither), or [batch, H, W] (gray).
struct ImageLayout {
  int64_t height = 0, width = 0, channels = 0;
  bool channels_first = false;
};
Status image_layout(const TensorInfo& t, ImageLayout* out);

// One PNG or JPEG file, converted to the layout's channels (gray or RGB), its
// size exactly H x W (no resizing), pixels / 255 into out[H * W * C].
Status read_image(const std::string& path, const ImageLayout& l, float* out);

// The class subfolders of dir, sorted (label i is classes[i]).
Status image_classes(const std::string& dir, std::vector<std::string>* classes);
// Every image of dir's class subfolders (sorted by class, then file name):
// features as f32 of `image`'s layout, labels i32, names "class/file", classes.
Status read_image_folder(const std::string& dir, const TensorInfo& image, ExampleTable* out);
// Image files given directly: one file, or a folder of them (no classes).
Status read_image_files(const std::string& path, const TensorInfo& image, ExampleTable* out);

}  // namespace sgrt
