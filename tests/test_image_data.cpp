// sg.data.images (sgrt_data with SGRT_IMAGES): PNG files written here with libpng's encoder
// and JPEG files with libjpeg's read back as the pixels written / 255, in the
// input's layout and channel count; a folder of class subfolders gives sorted
// class labels; a file that fails to decode, or has another size, is named;
// `sgrt predict` names the classes of new images from a checkpoint.
#include "sgrt/image_data.h"

#include <jpeglib.h>
#include <png.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <regex>

#include "harness.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

TensorInfo input(Shape shape) {
  TensorInfo t;
  t.name = "img";
  t.type = {std::move(shape), DType::f32};
  return t;
}

// Writes 8-bit pixels (h x w x channels, channels 1 or 3) as a PNG with libpng.
void write_png(const std::string& path, int w, int h, int channels, const std::vector<uint8_t>& px) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = w;
  img.height = h;
  img.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  REQUIRE(png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr));
}

// Writes gray pixels as a baseline JPEG of quality 100 with libjpeg.
void write_jpeg(const std::string& path, int w, int h, const std::vector<uint8_t>& px) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f);
  jpeg_stdio_dest(&c, f);
  c.image_width = w;
  c.image_height = h;
  c.input_components = 1;
  c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < h; ++y) {
    JSAMPROW row = const_cast<uint8_t*>(px.data()) + y * w;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::fclose(f);
}

// A pixel as the model sees it: times 1/255 in f32, as Fashion-MNIST's.
float scaled(uint8_t v) { return static_cast<float>(v) * (1.f / 255.f); }

std::vector<uint8_t> ramp(int n, int step) {
  std::vector<uint8_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * step % 256);
  return v;
}

}  // namespace

TEST_CASE("PNG: gray and RGB pixels / 255 in [H, W, C], [C, H, W] and [H, W] layouts") {
  test::TempDir d;
  const int w = 4, h = 3;
  std::vector<uint8_t> rgb = ramp(w * h * 3, 7), gray = ramp(w * h, 21);
  write_png(d.path + "/rgb.png", w, h, 3, rgb);
  write_png(d.path + "/gray.png", w, h, 1, gray);
  ImageLayout hwc, chw, g;
  REQUIRE(image_layout(input({2, h, w, 3}), &hwc).ok());
  REQUIRE(image_layout(input({2, 3, h, w}), &chw).ok());
  REQUIRE(image_layout(input({2, h, w}), &g).ok());
  CHECK(chw.channels_first);
  std::vector<float> a(w * h * 3), b(w * h * 3), c(w * h);
  REQUIRE(read_image(d.path + "/rgb.png", hwc, a.data()).ok());
  REQUIRE(read_image(d.path + "/rgb.png", chw, b.data()).ok());
  REQUIRE(read_image(d.path + "/gray.png", g, c.data()).ok());
  for (int p = 0; p < w * h; ++p)
    for (int ch = 0; ch < 3; ++ch) {
      CHECK(a[p * 3 + ch] == scaled(rgb[p * 3 + ch]));
      CHECK(b[ch * w * h + p] == scaled(rgb[p * 3 + ch]));
    }
  for (int p = 0; p < w * h; ++p) CHECK(c[p] == scaled(gray[p]));
  // A gray file into an RGB input: each channel the gray value.
  REQUIRE(read_image(d.path + "/gray.png", hwc, a.data()).ok());
  for (int p = 0; p < w * h; ++p) CHECK(a[p * 3 + 2] == scaled(gray[p]));
  // Another size is refused, naming the file: no resizing.
  ImageLayout big;
  REQUIRE(image_layout(input({2, 5, 5, 1}), &big).ok());
  Status st = read_image(d.path + "/gray.png", big, a.data());
  CHECK(st.message() == d.path + "/gray.png: 4x3 pixels, the input takes 5x5 (resize the files first)");
  CHECK(image_layout(input({2, 12}), &big).message().find("cannot hold images") != std::string::npos);
}

TEST_CASE("JPEG: quality-100 gray blocks decode within 2/255 of the pixels written") {
  test::TempDir d;
  const int w = 16, h = 8;
  std::vector<uint8_t> px(w * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) px[y * w + x] = x < 8 ? 40 : 220;  // two flat 8x8 blocks
  write_jpeg(d.path + "/a.jpg", w, h, px);
  ImageLayout l;
  REQUIRE(image_layout(input({1, h, w, 1}), &l).ok());
  std::vector<float> out(w * h);
  REQUIRE(read_image(d.path + "/a.jpg", l, out.data()).ok());
  for (int i = 0; i < w * h; ++i) CHECK(std::abs(out[i] * 255.f - px[i]) <= 2.f);
  ImageLayout square;
  REQUIRE(image_layout(input({1, 8, 8, 1}), &square).ok());
  CHECK(read_image(d.path + "/a.jpg", square, out.data()).message() ==
        d.path + "/a.jpg: 16x8 pixels, the input takes 8x8 (resize the files first)");
}

TEST_CASE("a folder of class subfolders: sorted classes, labels, names; bad files named") {
  test::TempDir d;
  for (const char* c : {"dog", "cat"}) REQUIRE(::mkdir((d.path + "/" + c).c_str(), 0755) == 0);
  write_png(d.path + "/cat/b.png", 2, 2, 1, {10, 20, 30, 40});
  write_png(d.path + "/cat/a.png", 2, 2, 1, {1, 2, 3, 4});
  write_jpeg(d.path + "/dog/z.jpeg", 2, 2, {255, 255, 255, 255});
  ExampleTable t;
  Status st = read_image_folder(d.path, input({8, 2, 2, 1}), &t);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(t.classes == std::vector<std::string>{"cat", "dog"});
  CHECK(t.names == std::vector<std::string>{"cat/a.png", "cat/b.png", "dog/z.jpeg"});
  std::vector<int32_t> labels(3);
  std::memcpy(labels.data(), t.labels.data(), 12);
  CHECK(labels == std::vector<int32_t>{0, 0, 1});
  std::vector<float> px(12);
  std::memcpy(px.data(), t.features.data(), 48);
  CHECK(px[4] == scaled(10));
  CHECK(px[0] == scaled(1));

  // Not a PNG inside: named, with the decoder's reason.
  test::TempDir bad;
  REQUIRE(::mkdir((bad.path + "/cat").c_str(), 0755) == 0);
  bad.file("cat/broken.png", "\x89PNG\r\n\x1a\n but not really");
  st = read_image_folder(bad.path, input({8, 2, 2, 1}), &t);
  CHECK(st.message().rfind(bad.path + "/cat/broken.png: cannot decode the PNG (", 0) == 0);
  bad.file("cat/broken.png", "");
  std::remove((bad.path + "/cat/broken.png").c_str());
  bad.file("cat/trunc.jpg", "\xff\xd8\xff\xe0 truncated");
  st = read_image_folder(bad.path, input({8, 2, 2, 1}), &t);
  CHECK(st.message().rfind(bad.path + "/cat/trunc.jpg: cannot decode the JPEG (", 0) == 0);
  std::remove((bad.path + "/cat/trunc.jpg").c_str());
  bad.file("cat/notes.txt", "hello");
  CHECK(read_image_folder(bad.path, input({8, 2, 2, 1}), &t).message() == bad.path + "/cat/notes.txt: not a .png, .jpg or .jpeg file");
  std::remove((bad.path + "/cat/notes.txt").c_str());
  CHECK(read_image_folder(bad.path, input({8, 2, 2, 1}), &t).message() == bad.path + "/cat: no images in this class folder");
}

TEST_CASE("sgrt train and predict: an image-folder classifier names the classes of new images") {
  test::TempDir d, fresh, work;
  for (const char* c : {"bright", "dark"}) REQUIRE(::mkdir((d.path + "/" + c).c_str(), 0755) == 0);
  for (int i = 0; i < 12; ++i) {
    write_png(d.path + "/dark/" + std::to_string(i) + ".png", 4, 4, 1, std::vector<uint8_t>(16, static_cast<uint8_t>(10 + 5 * i)));
    write_png(d.path + "/bright/" + std::to_string(i) + ".png", 4, 4, 1, std::vector<uint8_t>(16, static_cast<uint8_t>(190 + 5 * i)));
  }
  write_png(fresh.path + "/a.png", 4, 4, 1, std::vector<uint8_t>(16, 240));
  write_png(fresh.path + "/b.png", 4, 4, 1, std::vector<uint8_t>(16, 20));
  std::string model = work.file("img.lua",
                                 "local sg = require 'sg'\n"
                                 "local x = sg.input('x', {4, 4, 4, 1})\n"
                                 "local y = sg.input('y', {4}, 'i32')\n"
                                 "local logits = sg.nn.linear(sg.reshape(x, {4, 16}), 2, {name = 'fc'})\n"
                                 "sg.loss(sg.softmax_cross_entropy(logits, y))\n"
                                 "sg.metric('accuracy', sg.accuracy(logits, y))\n"
                                 "sg.output('logits', logits)\n"
                                 "sg.data.images{image = x, label = y}\n"
                                 "sg.optimizer.adamw{lr = 0.1}\n"
                                 "sg.train{epochs = 40}\n");
  std::string ck = work.path + "/ck";
  test::ToolResult r = test::run_tool({"train", model, "--data", d.path, "--checkpoint", ck});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.err.find(d.path + ": 24 images; classes 0 bright, 1 dark\n") != std::string::npos);
  CHECK(test::slurp(ck + "/classes.txt") == "bright\ndark\n");
  r = test::run_tool({"predict", "--checkpoint", ck, "--input", fresh.path});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(std::regex_match(r.out, std::regex("a\\.png\t0 bright\t[0-9.]+\nb\\.png\t1 dark\t[0-9.]+\n")));
}
