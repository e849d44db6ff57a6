// PNG (libpng's simplified API) and JPEG (libjpeg) files as model inputs.
#include "sgrt/image_data.h"

#include <dirent.h>
#include <jpeglib.h>
#include <png.h>
#include <sys/stat.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

namespace sgrt {
namespace {

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string lower_extension(const std::string& name) {
  size_t dot = name.rfind('.');
  std::string e = dot == std::string::npos ? "" : name.substr(dot + 1);
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

// The entries of dir (no dot files), sorted; dirs: subfolders, else files.
Status list(const std::string& dir, bool dirs, std::vector<std::string>* out) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return Status::Io(dir + ": cannot open the folder");
  out->clear();
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.' && is_dir(dir + "/" + e->d_name) == dirs) out->push_back(e->d_name);
  ::closedir(d);
  std::sort(out->begin(), out->end());
  return Status::Ok();
}

// 8-bit gray or RGB pixels, h x w x channels.
struct Pixels {
  int64_t h = 0, w = 0;
  std::vector<uint8_t> data;
};

// Another size is refused before any pixel is decoded (a header may claim any size).
Status wrong_size(const std::string& path, int64_t w, int64_t h, const ImageLayout& l) {
  return Status::Invalid(path + ": " + std::to_string(w) + "x" + std::to_string(h) + " pixels, the input takes " +
                         std::to_string(l.width) + "x" + std::to_string(l.height) + " (resize the files first)");
}

Status decode_png(const std::string& path, const ImageLayout& l, Pixels* out) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, path.c_str()))
    return Status::Invalid(path + ": cannot decode the PNG (" + img.message + ")");
  if (img.width != l.width || img.height != l.height) {
    png_image_free(&img);
    return wrong_size(path, img.width, img.height, l);
  }
  img.format = l.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  out->h = img.height;
  out->w = img.width;
  out->data.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out->data.data(), 0, nullptr)) {
    std::string why = img.message;
    png_image_free(&img);
    return Status::Invalid(path + ": cannot decode the PNG (" + why + ")");
  }
  return Status::Ok();
}

// libjpeg reports errors through error_exit: jump back with its message.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr c) {
  JpegError* e = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Plain C data only between setjmp and longjmp; `data` is sized beforehand for
// the layout's h x w: another size (*w, *h) stops after the header.
bool jpeg_decode(std::FILE* f, const ImageLayout& l, JpegError* err, jpeg_decompress_struct* c, std::vector<uint8_t>* data,
                 int64_t* w, int64_t* h) {
  const int channels = static_cast<int>(l.channels);
  c->err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = jpeg_fail;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(c);
    return false;
  }
  jpeg_create_decompress(c);
  jpeg_stdio_src(c, f);
  jpeg_read_header(c, TRUE);
  c->out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(c);
  *w = c->output_width;
  *h = c->output_height;
  if (c->output_components != channels) {
    std::snprintf(err->message, sizeof err->message, "%d color components, not %d", c->output_components, channels);
    jpeg_destroy_decompress(c);
    return false;
  }
  if (*w != l.width || *h != l.height) {
    jpeg_destroy_decompress(c);
    return true;
  }
  while (c->output_scanline < c->output_height) {
    JSAMPROW row = data->data() + static_cast<size_t>(c->output_scanline) * c->output_width * channels;
    jpeg_read_scanlines(c, &row, 1);
  }
  jpeg_finish_decompress(c);
  jpeg_destroy_decompress(c);
  return true;
}

Status decode_jpeg(const std::string& path, const ImageLayout& l, Pixels* out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::Io(path + ": cannot open");
  JpegError err;
  jpeg_decompress_struct c;
  out->data.assign(static_cast<size_t>(l.height * l.width * l.channels), 0);
  bool ok = jpeg_decode(f, l, &err, &c, &out->data, &out->w, &out->h);
  std::fclose(f);
  if (!ok) return Status::Invalid(path + ": cannot decode the JPEG (" + err.message + ")");
  if (out->w != l.width || out->h != l.height) return wrong_size(path, out->w, out->h, l);
  return Status::Ok();
}

}  // namespace

Status image_layout(const TensorInfo& t, ImageLayout* out) {
  const Shape& s = t.type.shape;
  bool ok = t.type.dtype == DType::f32;
  if (ok && s.size() == 3) *out = {s[1], s[2], 1, false};
  else if (ok && s.size() == 4 && (s[3] == 1 || s[3] == 3)) *out = {s[1], s[2], s[3], false};
  else if (ok && s.size() == 4 && (s[1] == 1 || s[1] == 3)) *out = {s[2], s[3], s[1], true};
  else ok = false;
  if (!ok)
    return Status::Invalid("input " + t.name + " " + type_str(t.type) +
                           " cannot hold images (f32 [batch, H, W, C], [batch, C, H, W] with C 1 or 3, or [batch, H, W])");
  return Status::Ok();
}

Status read_image(const std::string& path, const ImageLayout& l, float* out) {
  std::string ext = lower_extension(path);
  Pixels px;
  if (ext == "png") SG_TRY(decode_png(path, l, &px));
  else if (ext == "jpg" || ext == "jpeg") SG_TRY(decode_jpeg(path, l, &px));
  else return Status::Invalid(path + ": not a .png, .jpg or .jpeg file");
  const int64_t plane = l.height * l.width;
  for (int64_t p = 0; p < plane; ++p)
    for (int64_t c = 0; c < l.channels; ++c)
      out[l.channels_first ? c * plane + p : p * l.channels + c] = px.data[p * l.channels + c] * (1.f / 255.f);
  return Status::Ok();
}

Status image_classes(const std::string& dir, std::vector<std::string>* classes) {
  SG_TRY(list(dir, true, classes));
  if (classes->empty()) return Status::Invalid(dir + ": no class subfolders (one folder of images per class)");
  return Status::Ok();
}

namespace {

// Appends the images `files` (paths) to t, labelled `label` (< 0: no label).
Status append_images(const std::vector<std::string>& files, const std::vector<std::string>& names, const ImageLayout& l,
                     int32_t label, ExampleTable* t) {
  const size_t bytes = static_cast<size_t>(l.height * l.width * l.channels) * 4;
  for (size_t i = 0; i < files.size(); ++i) {
    t->features.resize(t->features.size() + bytes);
    SG_TRY(read_image(files[i], l, reinterpret_cast<float*>(t->features.data() + t->features.size() - bytes)));
    if (label >= 0) t->labels.insert(t->labels.end(), reinterpret_cast<uint8_t*>(&label), reinterpret_cast<uint8_t*>(&label) + 4);
    t->names.push_back(names[i]);
    ++t->count;
  }
  return Status::Ok();
}

}  // namespace

Status read_image_folder(const std::string& dir, const TensorInfo& image, ExampleTable* out) {
  ImageLayout l;
  SG_TRY(image_layout(image, &l));
  *out = ExampleTable{};
  out->feature_width = l.height * l.width * l.channels;
  out->label_width = 1;
  SG_TRY(image_classes(dir, &out->classes));
  for (size_t c = 0; c < out->classes.size(); ++c) {
    std::vector<std::string> files, paths, names;
    SG_TRY(list(dir + "/" + out->classes[c], false, &files));
    if (files.empty()) return Status::Invalid(dir + "/" + out->classes[c] + ": no images in this class folder");
    for (const std::string& f : files) {
      paths.push_back(dir + "/" + out->classes[c] + "/" + f);
      names.push_back(out->classes[c] + "/" + f);
    }
    SG_TRY(append_images(paths, names, l, static_cast<int32_t>(c), out));
  }
  return Status::Ok();
}

Status read_image_files(const std::string& path, const TensorInfo& image, ExampleTable* out) {
  ImageLayout l;
  SG_TRY(image_layout(image, &l));
  *out = ExampleTable{};
  out->feature_width = l.height * l.width * l.channels;
  std::vector<std::string> files{path}, names{path};
  if (is_dir(path)) {
    SG_TRY(list(path, false, &names));
    files.clear();
    for (const std::string& n : names) files.push_back(path + "/" + n);
  }
  return append_images(files, names, l, -1, out);
}

}  // namespace sgrt
