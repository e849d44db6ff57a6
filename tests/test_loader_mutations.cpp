// Regression tests for what the fuzz targets (tests/fuzz) found in the
// loaders; test_model_loader.cpp covers every truncation and byte flip of a
// model. Each case rebuilds the finding's input from a valid file, so it keeps
// working as the formats evolve; the sanitizer build (scripts/test.sh) is what
// turns a regression of the misalignment cases into a failure.
#include <cstring>

#include "harness.h"
#include "sg_generated.h"
#include "sgrt/dataset.h"
#include "sgrt/file_io.h"
#include "sgrt/model_file.h"
#include "sgrt/safetensors.h"
#include "sgrt/session.h"

using namespace sgrt;

namespace {

const char kModel[] = R"(
local sg = require "sg"
local x = sg.input("image", {2, 4})
local y = sg.input("label", {2}, "i32")
local logits = sg.nn.linear(x, 3, { name = "fc" })
sg.loss(sg.softmax_cross_entropy(logits, y))
sg.optimizer.adamw{ lr = 1e-2 }
)";

std::vector<uint8_t> payload() {
  compiler::Graph g;
  Status st = test::compile_graph(kModel, &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<uint8_t> b = compiler::serialize(g);
  REQUIRE(b.size() >= kFooterBytes);
  b.erase(b.end() - static_cast<std::ptrdiff_t>(kFooterBytes), b.end());
  return b;
}

Status load(std::vector<uint8_t> payload, std::unique_ptr<Model>* m) {
  append_footer(&payload);
  return Model::load_bytes(std::move(payload), "mutant.sg", m);
}

// A field of a tensor table inside `p`, for patching in place.
uint8_t* field_of(std::vector<uint8_t>& p, const sg::Tensor* t, flatbuffers::voffset_t vt) {
  auto* table = reinterpret_cast<const flatbuffers::Table*>(t);
  const uint8_t* f = table->GetAddressOf(vt);
  REQUIRE(f != nullptr);
  return p.data() + (f - p.data());
}

}  // namespace

TEST_CASE("fuzz_model: a tensor offset off the arena alignment is rejected (was a misaligned float store)") {
  std::vector<uint8_t> p = payload();
  const sg::Model* root = sg::GetModel(p.data());
  const sg::Tensor* victim = nullptr;
  for (const sg::Tensor* t : *root->tensors())
    if (t->bytes() > 0 && t->offset() >= kTensorAlignment) victim = t;
  REQUIRE(victim != nullptr);
  uint8_t* f = field_of(p, victim, sg::Tensor::VT_OFFSET);
  uint64_t off = victim->offset() - 1;
  std::memcpy(f, &off, sizeof off);
  std::unique_ptr<Model> m;
  Status st = load(p, &m);
  REQUIRE(!st.ok());
  CHECK(st.message().find("not a multiple of 64") != std::string::npos);
}

TEST_CASE("a block-format tensor that is not a param of whole blocks is rejected") {
  // The label input i32 [2] relabelled q4_1 (a non-default dtype, so the field is
  // in the buffer): without the check, dtype_bytes would floor it to 0 blocks.
  std::vector<uint8_t> p = payload();
  const sg::Model* root = sg::GetModel(p.data());
  const sg::Tensor* victim = nullptr;
  for (const sg::Tensor* t : *root->tensors())
    if (t->dtype() == sg::DType::i32 && t->role() == sg::Role::input) victim = t;
  REQUIRE(victim != nullptr);
  *field_of(p, victim, sg::Tensor::VT_DTYPE) = static_cast<uint8_t>(DType::q4_1);
  std::unique_ptr<Model> m;
  Status st = load(p, &m);
  REQUIRE(!st.ok());
  CHECK(st.message().find("q4_1 tensor must be a param of whole 32-element blocks") != std::string::npos);
}

TEST_CASE("fuzz_model: a shape vector with misaligned int64 elements loads bytewise (was a misaligned load)") {
  // The Verifier checks the 4-byte length prefix's alignment only; place a
  // copy of the first tensor's shape at 8k (elements at 8k + 4) and point the
  // field at it.
  std::vector<uint8_t> p = payload();
  const sg::Tensor* t0 = sg::GetModel(p.data())->tensors()->Get(0);
  const Shape want(t0->shape()->begin(), t0->shape()->end());
  size_t field = field_of(p, t0, sg::Tensor::VT_SHAPE) - p.data();
  p.resize((p.size() + 7) / 8 * 8);
  size_t at = p.size();
  uint32_t len = static_cast<uint32_t>(want.size());
  p.insert(p.end(), reinterpret_cast<uint8_t*>(&len), reinterpret_cast<uint8_t*>(&len) + 4);
  p.insert(p.end(), reinterpret_cast<const uint8_t*>(want.data()),
           reinterpret_cast<const uint8_t*>(want.data() + want.size()));
  uint32_t rel = static_cast<uint32_t>(at - field);
  std::memcpy(p.data() + field, &rel, sizeof rel);
  std::unique_ptr<Model> m;
  Status st = load(p, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(m->tensors()[0].type.shape == want);
}

TEST_CASE("fuzz_model: dimensions whose product overflows are rejected (was signed overflow in numel)") {
  std::vector<uint8_t> p = payload();
  const sg::Tensor* victim = nullptr;
  for (const sg::Tensor* t : *sg::GetModel(p.data())->tensors())
    if (t->shape() && t->shape()->size() == 2) victim = t;
  REQUIRE(victim != nullptr);
  // Each dimension is within the per-dimension bound; their product is 2^80.
  uint8_t* dims = p.data() + (victim->shape()->Data() - p.data());
  for (int i = 0; i < 2; ++i) {
    int64_t d = int64_t(1) << 40;
    std::memcpy(dims + 8 * i, &d, sizeof d);
  }
  std::unique_ptr<Model> m;
  Status st = load(p, &m);
  REQUIRE(!st.ok());
  CHECK(st.message().find("invalid shape [1099511627776, 1099511627776]") != std::string::npos);
}

namespace {

// The payload with its memory plan's arena_bytes set to `bytes`.
std::vector<uint8_t> with_arena(uint64_t bytes) {
  std::vector<uint8_t> p = payload();
  auto* plan = reinterpret_cast<const flatbuffers::Table*>(sg::GetModel(p.data())->memory());
  const uint8_t* f = plan->GetAddressOf(sg::MemoryPlan::VT_ARENA_BYTES);
  REQUIRE(f != nullptr);
  std::memcpy(p.data() + (f - p.data()), &bytes, sizeof bytes);
  return p;
}

}  // namespace

TEST_CASE("probe: an arena size that overflows when rounded up is rejected (was a 64-byte arena, written far past)") {
  for (uint64_t bytes : {UINT64_MAX, UINT64_MAX - 31, UINT64_MAX - 254}) {
    std::unique_ptr<Model> m;
    Status st = load(with_arena(bytes), &m);
    INFO(bytes << ": " << st.message());
    REQUIRE(!st.ok());
    CHECK(st.message().find("arena is too large to allocate") != std::string::npos);
  }
  std::unique_ptr<Model> m;  // the largest arena that rounds up without overflow loads
  REQUIRE(load(with_arena(UINT64_MAX - 255), &m).ok());
  CHECK(m->arena_alloc_bytes() == UINT64_MAX - 255);
}

TEST_CASE("a huge declared arena loads, and a backend with an arena limit refuses it before allocating") {
  const uint64_t huge = uint64_t(1) << 50;
  std::unique_ptr<Model> m;
  Status st = load(with_arena(huge), &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(m->arena_alloc_bytes() == huge);
  std::unique_ptr<Backend> be;
  REQUIRE(make_backend("cpu", &be).ok());
  be->limit_arena(16 << 20);
  std::unique_ptr<Session> s;
  st = Session::create(std::move(m), std::move(be), &s);
  REQUIRE(!st.ok());
  CHECK(st.message().find("cpu backend: the 1125899906842624-byte arena exceeds the limit of 16777216 bytes") !=
        std::string::npos);
}

namespace {

struct IdxDir {
  std::string dir;
  IdxDir() {
    char tmpl[] = "/tmp/sgrt_idx_XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    dir = tmpl;
  }
  ~IdxDir() {
    for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                          "t10k-labels-idx1-ubyte"})
      std::remove((dir + "/" + f).c_str());
    ::rmdir(dir.c_str());
  }
  void put(const char* name, const std::vector<uint8_t>& b) {
    REQUIRE(write_file_atomic(dir + "/" + name, b.data(), b.size()).ok());
  }
};

std::vector<uint8_t> images_header(uint32_t n, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> b = {0, 0, 8, 3};
  for (uint32_t v : {n, rows, cols})
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
  return b;
}

Status open_with_images(const std::vector<uint8_t>& images) {
  IdxDir d;
  d.put("train-images-idx3-ubyte", images);
  d.put("train-labels-idx1-ubyte", {0, 0, 8, 1, 0, 0, 0, 1, 3});
  std::unique_ptr<Dataset> data;
  return open_fashion_mnist(d.dir, &data);
}

}  // namespace

TEST_CASE("fuzz_idx: dimensions whose product overflows are rejected (was signed overflow)") {
  Status st = open_with_images(images_header(0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu));
  REQUIRE(!st.ok());
  CHECK(st.message().find("implausible IDX dimensions") != std::string::npos);
}

TEST_CASE("fuzz_idx: a header that claims 2 GiB of pixels is truncated, not allocated (was a 2 GiB allocation)") {
  Status st = open_with_images(images_header(2739000, 28, 28));  // just under 2^31 bytes of pixels
  REQUIRE(!st.ok());
  CHECK_MESSAGE(st.message().find("truncated: expected 2147376000 bytes of data, got 0") != std::string::npos, st.message());
}

TEST_CASE("fuzz_lua: a bad argument to the sg core unwinds C++ frames (was a leak: luaL_check* longjmps)") {
  // Under the sanitizer build LeakSanitizer fails this test if the long name
  // (a heap string) is skipped by a longjmp.
  const std::string name(64, 'n');
  compiler::Graph g;
  Status st = test::compile_graph("local sg = require 'sg'\nsg.input('" + name + "', 'i32')\n", &g);
  REQUIRE(!st.ok());
  CHECK_MESSAGE(st.message().find(":2: argument #2: table expected, got string") != std::string::npos, st.message());
  st = test::compile_graph("local sg = require 'sg'\nsg.param('" + name + "', {2}, {'uniform', {}, 1})\n", &g);
  REQUIRE(!st.ok());
  CHECK_MESSAGE(st.message().find(":2: argument #4: number expected, got table") != std::string::npos, st.message());
}

TEST_CASE("fuzz_lua: a step count or seed of inf or NaN is an error (was an undefined float-to-int cast)") {
  const std::string head = "local sg = require 'sg'\nlocal x = sg.input('x', {2, 4})\nlocal y = sg.input('y', {2}, 'i32')\n"
                           "sg.loss(sg.softmax_cross_entropy(sg.nn.linear(x, 3), y))\n";
  for (const std::string& tail : {std::string("sg.optimizer.adamw{ lr = 1e-3, schedule = sg.schedule.cosine{ warmup = 1/0 } }\n"),
                                  std::string("sg.optimizer.sgd{ lr = 0.1 }\nsg.train{ steps = 0/0 }\n"),
                                  std::string("sg.optimizer.sgd{ lr = 0.1 }\nsg.train{ seed = -2^64 }\n")}) {
    compiler::Graph g;
    Status st = test::compile_graph(head + tail, &g);
    REQUIRE(!st.ok());
    CHECK_MESSAGE(st.message().find("is not a usable count") != std::string::npos, st.message());
  }
}

TEST_CASE("fuzz_safetensors: a bad \\u escape in a header name is a Status (was an exception from std::stoul)") {
  for (const std::string& name : {std::string("\\uZZZZ"), std::string("\\u+123"), std::string("\\u 123"), std::string("\\\0", 2)}) {
    std::string header = "{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    std::vector<uint8_t> b(8);
    uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    b.insert(b.end(), header.begin(), header.end());
    b.insert(b.end(), 4, 0);
    test::TempFile f(".safetensors");
    REQUIRE(write_file_atomic(f.path, b.data(), b.size()).ok());
    std::vector<SafeTensor> ts;
    Status st = read_safetensors(f.path, &ts);
    REQUIRE(!st.ok());
    CHECK_MESSAGE(st.message().find("bad") != std::string::npos, st.message());
  }
}
