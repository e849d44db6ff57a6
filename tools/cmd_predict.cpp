// `sgrt predict`: a trained classifier's class for each example of a CSV,
// .npy, PNG/JPEG file or folder of images.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "json.h"
#include "model_source.h"
#include "own_data_tool.h"
#include "sg_generated.h"
#include "sgrt/checkpoint.h"
#include "sgrt/export.h"
#include "sgrt/file_io.h"
#include "sgrt/own_data.h"
#include "sgrt/session.h"
#ifdef SGRT_WITH_IMAGES
#include "sgrt/image_data.h"
#endif

namespace sgrt::tool {
namespace {

#ifdef SGRT_WITH_IMAGES
constexpr const char* kInputs = "a .csv, .tsv or .npy file, a PNG or JPEG file, or a folder of images";
#else
constexpr const char* kInputs = "a .csv, .tsv or .npy file (this build reads no images: SGRT_IMAGES)";
#endif

bool has_suffix(std::string s, const char* suffix) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The input the model's data set fills with example features.
Status feature_input(const Model& m, const TensorInfo** out) {
  *out = bound_input(m, "features");
  if (!*out) *out = bound_input(m, "image");
  if (!*out) return Status::Invalid(m.label() + ": binds no features or image input to its data set (sg.data...)");
  return Status::Ok();
}

// The examples of `path` as x's dtype and layout, in file order.
Status read_examples(const std::string& path, const Model& m, const TensorInfo& x, ExampleTable* t) {
  if (has_suffix(path, ".csv") || has_suffix(path, ".tsv")) {
    CsvOptions o;  // a CSV model's own delimiter and label column; else the defaults
    SG_TRY(csv_options(m, &o));
    o.header = -1;  // new examples may come with or without the header line
    return read_csv(path, o, x, nullptr, t);
  }
  if (has_suffix(path, ".npy")) {
    *t = ExampleTable{};
    return read_npy(path, x, &t->features, &t->count);
  }
#ifdef SGRT_WITH_IMAGES
  if (is_dir(path)) {
    std::vector<std::string> classes;
    if (image_classes(path, &classes).ok()) return read_image_folder(path, x, t);
  }
  if (is_dir(path) || has_suffix(path, ".png") || has_suffix(path, ".jpg") || has_suffix(path, ".jpeg"))
    return read_image_files(path, x, t);
#endif
  return Status::Invalid(path + ": --input takes " + kInputs);
}

// The classifier's scores: the output named "logits", else the only output; f32 [batch, classes].
Status logits_output(const Model& m, int* out) {
  const auto& outs = m.outputs();
  auto it = std::find_if(outs.begin(), outs.end(), [](const auto& o) { return o.first == "logits"; });
  if (it == outs.end() && outs.size() == 1) it = outs.begin();
  if (it == outs.end()) return Status::Invalid(m.label() + ": has no output named logits (sg.output(\"logits\", t))");
  const TensorInfo& t = m.tensors()[it->second];
  if (t.type.dtype != DType::f32 || t.type.shape.size() != 2)
    return Status::Invalid(m.label() + ": output " + it->first + " " + type_str(t.type) + " is not classifier scores (f32 [batch, classes])");
  *out = it->second;
  return Status::Ok();
}

std::vector<std::string> class_names(const Args& a) {
  std::vector<uint8_t> bytes;
  std::vector<std::string> names;
  if (!a.has("--checkpoint") || !read_file(a.get("--checkpoint") + "/" + kClassesFile, &bytes).ok()) return names;
  std::string line;
  for (uint8_t b : bytes)
    if (b == '\n') names.push_back(std::move(line)), line.clear();
    else line += static_cast<char>(b);
  return names;
}

// The most likely class of one row of scores and its softmax probability.
std::pair<int64_t, double> top_class(const float* z, int64_t classes) {
  int64_t best = std::max_element(z, z + classes) - z;
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c]) - z[best]);
  return {best, 1.0 / sum};
}

}  // namespace

Status cmd_predict(int argc, char** argv) {
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  if (!a.has("--input")) return Status::Invalid("predict needs --input FILE (a .csv, .npy, image or folder of images)");
  std::shared_ptr<const Model> m, trained;  // a script compiled without its training step; as it was trained
  SG_TRY(load_inference_model(&a, "MODEL.sg", {}, &m, &trained));
  SG_TRY(apply_threads(a));
  const TensorInfo* x;
  int logits;
  SG_TRY(feature_input(*m, &x));
  SG_TRY(logits_output(*m, &logits));
  ExampleTable t;
  SG_TRY(read_examples(a.get("--input"), *m, *x, &t));
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend(a.get("--backend", "cpu"), &be));
  std::unique_ptr<Session> s;
  SG_TRY(Session::create(m, std::move(be), &s));
  if (!a.has("--checkpoint") && !carries_weights(*m))
    return Status::Invalid("predict needs --checkpoint DIR (from sgrt train --checkpoint DIR)");
  SG_TRY(s->init(0, 0, checkpoint_supplied(a, s->model(), trained.get())));
  CheckpointMeta meta;
  if (a.has("--checkpoint")) SG_TRY(load_checkpoint(*s, a.get("--checkpoint"), *trained, &meta));
  int program;
  if (!s->find_program("infer", &program).ok()) SG_TRY(s->find_program("eval", &program));

  const std::vector<std::string> names = class_names(a);
  const bool json = a.has("--json");
  const int64_t batch = x->type.shape[0], row = static_cast<int64_t>(x->bytes) / batch;
  const int64_t classes = m->tensors()[logits].type.shape[1];
  std::vector<uint8_t> staging(x->bytes);
  std::vector<float> z(static_cast<size_t>(batch * classes));
  for (int64_t first = 0; first < t.count; first += batch) {
    const int64_t n = std::min(batch, t.count - first);  // the last batch is padded with zeros
    std::fill(staging.begin(), staging.end(), 0);
    std::memcpy(staging.data(), t.features.data() + first * row, static_cast<size_t>(n * row));
    SG_TRY(s->write(static_cast<int>(x - m->tensors().data()), staging.data(), staging.size()));
    SG_TRY(s->run(program));
    SG_TRY(s->read(logits, z.data(), z.size() * sizeof(float)));
    for (int64_t r = 0; r < n; ++r) {
      auto [c, p] = top_class(z.data() + r * classes, classes);
      const int64_t i = first + r;
      std::string example = t.names.empty() ? std::to_string(i) : t.names[i];
      std::string name = c < static_cast<int64_t>(names.size()) ? names[c] : "";
      if (json) {
        std::printf("{\"example\":%s,\"class\":%lld,%s\"probability\":%.6f}\n",
                    t.names.empty() ? example.c_str() : json_str(example).c_str(),
                    static_cast<long long>(c), name.empty() ? "" : ("\"name\":" + json_str(name) + ",").c_str(), p);
      } else {
        std::printf("%s\t%lld%s%s\t%.4f\n", example.c_str(), static_cast<long long>(c), name.empty() ? "" : " ",
                    name.c_str(), p);
      }
    }
  }
  return Status::Ok();
}

}  // namespace sgrt::tool
