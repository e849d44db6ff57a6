// The C API (sgrt.h): results equal the C++ session's; every misuse (NULL
// pointers, wrong names, dtypes, shapes and byte counts, calls out of order,
// missing backends, bad files) returns a status and a message, never a crash.
#include <cstring>

#include "harness.h"
#include "sgrt/checkpoint.h"
#include "sgrt/sgrt.h"

using namespace sgrt;
using namespace sgrt::test;

namespace {

const char kLua[] = R"(
local sg = require "sg"
local nn = sg.nn
local x = sg.input("image", {4, 16})
local y = sg.input("label", {4}, "i32")
local logits = nn.linear(nn.linear(x, 8, {name = "fc1"}):relu(), 3, {name = "fc2"})
sg.loss(sg.softmax_cross_entropy(logits, y))
sg.metric("accuracy", sg.accuracy(logits, y))
sg.output("logits", logits)
sg.optimizer.adamw{ lr = 1e-2 }
)";

const int64_t kImage[2] = {4, 16}, kLabel[1] = {4};

std::vector<uint8_t> model_bytes() {
  compiler::Graph g;
  Status st = compile_graph(kLua, &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return compiler::serialize(g);
}

std::vector<float> image(int k) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>((i * 7 + k * 13) % 11) / 11.f - 0.4f;
  return x;
}
const std::vector<int32_t> kLabels{0, 2, 1, 2};

// A session with the model loaded on the cpu.
struct Loaded {
  sgrt_session* s = nullptr;
  Loaded() {
    REQUIRE(sgrt_create(&s) == SGRT_OK);
    std::vector<uint8_t> b = model_bytes();
    REQUIRE_MESSAGE(sgrt_load_memory(s, b.data(), b.size(), "cpu") == SGRT_OK, sgrt_last_error());
  }
  ~Loaded() { sgrt_destroy(s); }
  void feed(int k) {
    std::vector<float> x = image(k);
    REQUIRE(sgrt_set_input(s, "image", SGRT_F32, kImage, 2, x.data(), x.size() * sizeof(float)) == SGRT_OK);
    REQUIRE(sgrt_set_input(s, "label", SGRT_I32, kLabel, 1, kLabels.data(), kLabels.size() * sizeof(int32_t)) == SGRT_OK);
  }
  float step(const char* program, int k) {
    feed(k);
    REQUIRE_MESSAGE(sgrt_run(s, program) == SGRT_OK, sgrt_last_error());
    float loss = 0;
    REQUIRE(sgrt_get_metric(s, "loss", &loss) == SGRT_OK);
    return loss;
  }
};

bool error_mentions(const char* what) { return std::strstr(sgrt_last_error(), what) != nullptr; }

}  // namespace

TEST_CASE("C API: version, backends, and losses bit-identical to the C++ session") {
  CHECK(sgrt_api_version() == SGRT_API_VERSION);
  CHECK(std::strncmp(sgrt_backends(), "cpu", 3) == 0);

  Loaded c;
  REQUIRE(sgrt_reset(c.s, 7, 20) == SGRT_OK);
  std::unique_ptr<Model> m;
  REQUIRE(Model::load_bytes(model_bytes(), "test.sg", &m).ok());
  auto s = open_session(std::move(m), "cpu", 7);
  REQUIRE(s->init(7, 20).ok());
  for (int k = 0; k < 4; ++k) {
    write_vec(*s, "image", image(k));
    write_vec(*s, "label", kLabels);
    float ref = loss_of(*s, "train_step");
    CHECK(c.step("train_step", k) == ref);
  }
  sgrt_tensor_info info;
  REQUIRE(sgrt_tensor(c.s, "logits", &info) == SGRT_OK);
  CHECK(info.dtype == SGRT_F32);
  CHECK(info.rank == 2);
  CHECK(info.shape[0] == 4);
  CHECK(info.shape[1] == 3);
  CHECK(info.bytes == 48);
  c.feed(9);
  write_vec(*s, "image", image(9));
  run(*s, "infer");
  REQUIRE(sgrt_run(c.s, "infer") == SGRT_OK);
  std::vector<float> got(12);
  REQUIRE(sgrt_get_output(c.s, "logits", got.data(), 48) == SGRT_OK);
  CHECK(got == read_f32(*s, s->model().tensors()[s->model().outputs()[0].second].name));
  CHECK(std::strcmp(sgrt_last_error(), "") == 0);
}

TEST_CASE("C API: checkpoints and export round-trip through files") {
  Loaded c;
  for (int k = 0; k < 3; ++k) c.step("train_step", k);
  char dir[] = "/tmp/sgrt_capi_XXXXXX";
  REQUIRE(mkdtemp(dir));
  REQUIRE(sgrt_save_checkpoint(c.s, dir, 3) == SGRT_OK);
  float saved = c.step("eval", 5);
  c.step("train_step", 4);
  CHECK(c.step("eval", 5) != saved);
  int64_t step = 0;
  REQUIRE_MESSAGE(sgrt_load_checkpoint(c.s, dir, &step) == SGRT_OK, sgrt_last_error());
  CHECK(step == 3);
  CHECK(c.step("eval", 5) == saved);

  std::string deploy = std::string(dir) + "/deploy.sg";
  REQUIRE_MESSAGE(sgrt_export(c.s, deploy.c_str(), SGRT_EXPORT_INFER_ONLY, "fp8") == SGRT_OK, sgrt_last_error());
  Loaded d;
  REQUIRE(sgrt_load_file(d.s, deploy.c_str(), NULL) == SGRT_OK);
  CHECK(d.step("eval", 5) == doctest::Approx(saved).epsilon(0.05));
  CHECK(sgrt_run(d.s, "train_step") == SGRT_INVALID_ARGUMENT);  // stripped
  CHECK(error_mentions("train_step"));
  std::remove(deploy.c_str());
  std::remove((std::string(dir) + "/checkpoint.sgck").c_str());
  rmdir(dir);
}

TEST_CASE("C API: NULL arguments") {
  Loaded c;
  float f;
  int64_t step;
  sgrt_tensor_info info;
  std::vector<float> x = image(0);
  CHECK(sgrt_create(NULL) == SGRT_INVALID_ARGUMENT);
  CHECK(error_mentions("sgrt_create: argument 'out' is NULL"));
  CHECK(sgrt_load_file(NULL, "x.sg", "cpu") == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_load_file(c.s, NULL, "cpu") == SGRT_INVALID_ARGUMENT);
  CHECK(error_mentions("'path'"));
  CHECK(sgrt_load_memory(c.s, NULL, 10, "cpu") == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_reset(NULL, 0, 0) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_tensor(c.s, NULL, &info) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_tensor(c.s, "logits", NULL) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_set_input(c.s, NULL, SGRT_F32, kImage, 2, x.data(), x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_set_input(c.s, "image", SGRT_F32, NULL, 2, x.data(), x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_set_input(c.s, "image", SGRT_F32, kImage, 2, NULL, x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);
  CHECK(error_mentions("'data'"));
  CHECK(sgrt_run(c.s, NULL) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_get_output(c.s, "logits", NULL, 48) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_get_metric(c.s, "loss", NULL) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_get_metric(NULL, "loss", &f) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_save_checkpoint(c.s, NULL, 0) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_load_checkpoint(c.s, "/tmp", NULL) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_load_checkpoint(NULL, "/tmp", &step) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_export(c.s, NULL, 0, NULL) == SGRT_INVALID_ARGUMENT);
  sgrt_destroy(NULL);
}

TEST_CASE("C API: calls out of order") {
  sgrt_session* s = nullptr;
  REQUIRE(sgrt_create(&s) == SGRT_OK);
  float f;
  int64_t step;
  sgrt_tensor_info info;
  std::vector<float> x = image(0), out(12);
  CHECK(sgrt_run(s, "train_step") == SGRT_BAD_STATE);
  CHECK(error_mentions("no graph loaded"));
  CHECK(sgrt_set_input(s, "image", SGRT_F32, kImage, 2, x.data(), x.size() * sizeof(float)) == SGRT_BAD_STATE);
  CHECK(sgrt_tensor(s, "image", &info) == SGRT_BAD_STATE);
  CHECK(sgrt_get_output(s, "logits", out.data(), 48) == SGRT_BAD_STATE);
  CHECK(sgrt_get_metric(s, "loss", &f) == SGRT_BAD_STATE);
  CHECK(sgrt_reset(s, 0, 0) == SGRT_BAD_STATE);
  CHECK(sgrt_save_checkpoint(s, "/tmp", 0) == SGRT_BAD_STATE);
  CHECK(sgrt_load_checkpoint(s, "/tmp", &step) == SGRT_BAD_STATE);
  CHECK(sgrt_export(s, "/tmp/never.sg", 0, NULL) == SGRT_BAD_STATE);
  sgrt_destroy(s);

  Loaded c;  // loaded, nothing run yet: outputs hold no result
  CHECK(sgrt_get_output(c.s, "logits", out.data(), 48) == SGRT_BAD_STATE);
  CHECK(error_mentions("no program has run"));
  CHECK(sgrt_get_metric(c.s, "loss", &f) == SGRT_BAD_STATE);
  c.step("eval", 0);
  CHECK(sgrt_get_output(c.s, "logits", out.data(), 48) == SGRT_OK);
  CHECK(sgrt_reset(c.s, 1, 10) == SGRT_OK);  // a reset forgets the results again
  CHECK(sgrt_get_metric(c.s, "loss", &f) == SGRT_BAD_STATE);
  CHECK(sgrt_reset(c.s, 1, -1) == SGRT_INVALID_ARGUMENT);
}

TEST_CASE("C API: wrong names, dtypes, shapes and byte counts") {
  Loaded c;
  std::vector<float> x = image(0), out(12);
  const int64_t wide[2] = {4, 17}, flat[1] = {64};
  CHECK(sgrt_set_input(c.s, "image", SGRT_F32, wide, 2, x.data(), x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);
  CHECK(error_mentions("input 'image' is f32[4, 16], got f32[4, 17]"));
  CHECK(sgrt_set_input(c.s, "image", SGRT_F32, flat, 1, x.data(), x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_set_input(c.s, "image", SGRT_BF16, kImage, 2, x.data(), x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_set_input(c.s, "image", static_cast<sgrt_dtype>(42), kImage, 2, x.data(), x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);
  CHECK(error_mentions("invalid dtype"));
  CHECK(sgrt_set_input(c.s, "image", SGRT_F32, kImage, 99, x.data(), x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_set_input(c.s, "image", SGRT_F32, kImage, -1, x.data(), x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_set_input(c.s, "pixels", SGRT_F32, kImage, 2, x.data(), x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);
  CHECK(error_mentions("no input named 'pixels'"));
  CHECK(sgrt_set_input(c.s, "logits", SGRT_F32, kImage, 2, x.data(), x.size() * sizeof(float)) == SGRT_INVALID_ARGUMENT);  // not an input
  // A buffer one element short or long of the input is refused before a byte is read.
  for (size_t n : {x.size() - 1, x.size() + 1, size_t{0}}) {
    std::vector<float> buf(n + 1);
    CHECK(sgrt_set_input(c.s, "image", SGRT_F32, kImage, 2, buf.data(), n * sizeof(float)) == SGRT_INVALID_ARGUMENT);
    CHECK(error_mentions(("input 'image' is 256 bytes, the buffer " + std::to_string(n * sizeof(float))).c_str()));
  }
  c.step("eval", 0);
  CHECK(sgrt_get_output(c.s, "logits", out.data(), 44) == SGRT_INVALID_ARGUMENT);
  CHECK(error_mentions("48"));
  CHECK(sgrt_get_output(c.s, "nope", out.data(), 48) == SGRT_INVALID_ARGUMENT);
  float f;
  CHECK(sgrt_get_metric(c.s, "logits", &f) == SGRT_INVALID_ARGUMENT);
  CHECK(error_mentions("not a scalar"));
  CHECK(sgrt_get_metric(c.s, "accuracy", &f) == SGRT_OK);
  CHECK(sgrt_run(c.s, "sample") == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_export(c.s, "/tmp/never.sg", 0, "fp16") == SGRT_INVALID_ARGUMENT);
  CHECK(sgrt_export(c.s, "/tmp/never.sg", 0, "fp8") == SGRT_INVALID_ARGUMENT);  // needs infer-only
  CHECK(sgrt_export(c.s, "/tmp/never.sg", 8, NULL) == SGRT_INVALID_ARGUMENT);
}

TEST_CASE("C API: bad files and missing backends leave the loaded graph usable") {
  Loaded c;
  float before = c.step("eval", 1);
  CHECK(sgrt_load_file(c.s, "/nonexistent/model.sg", "cpu") == SGRT_IO_ERROR);
  CHECK(error_mentions("/nonexistent/model.sg"));
  const char junk[] = "definitely not a scaled graph";
  CHECK(sgrt_load_memory(c.s, junk, sizeof junk, "cpu") == SGRT_INVALID_ARGUMENT);
  std::vector<uint8_t> b = model_bytes();
  b[b.size() / 2] ^= 0x40;  // the checksum catches it
  CHECK(sgrt_load_memory(c.s, b.data(), b.size(), "cpu") == SGRT_INVALID_ARGUMENT);
  b = model_bytes();
  for (const char* missing : {"cuda", "tpu"}) {
    if (std::strstr(sgrt_backends(), missing)) continue;
    CHECK(sgrt_load_memory(c.s, b.data(), b.size(), missing) == SGRT_UNSUPPORTED);
    CHECK(error_mentions("not built into this sgrt"));
  }
  int64_t step;
  CHECK(sgrt_load_checkpoint(c.s, "/nonexistent", &step) == SGRT_IO_ERROR);
  CHECK(c.step("eval", 1) == before);
#if !defined(__SANITIZE_ADDRESS__)
  // An allocation that cannot succeed: std::bad_alloc is caught inside.
  CHECK(sgrt_load_memory(c.s, junk, size_t(1) << 62, "cpu") == SGRT_OUT_OF_MEMORY);
  CHECK(error_mentions("out of memory"));
#endif
}
