// The CPU backend's fusions (runtime/src/product_fusion.h):
//  - a linear layer's output equals the product from gemm_f32 plus a separate
//    add, to the bit, fused or not (the product also read elsewhere: not fused);
//  - a product added to a tensor (and a bias after it) equals the product plus
//    separate adds, fused or not, on the GEMM path and on the sparse path (FP4's
//    outlier compensation), whose sum is written out here in its documented order;
//  - every linear layer with a bias in the GPT's programs is fused, under fp32
//    (matmul) and fp8 (qmatmul), and under fp4 every compensation with its bias;
//  - at O1-O3, where the plan may give a bias's bytes to the layer's output, and
//    under fp4, the fused GPT trains to the bits of the unfused one;
//  - the MLP's ReLU and relu_grad go into their products (the GEMM's side is
//    test_gemm.cpp's), and it trains to the unfused one's bits, on the dense
//    and the sparse product.
#include <random>

#include "backends.h"
#include "cpu/gemm.h"
#include "product_fusion.h"
#include "harness.h"

using namespace sgrt;

namespace {

// x [5, 40] @ w^T + b, w [24, 40]; product_read_twice: the product is an output too.
std::string linear_model(bool product_read_twice) {
  return std::string(R"(
local sg = require "sg"
local x = sg.input("x", {5, 40})
local w = sg.param("w", {24, 40}, { "uniform", -1, 1 })
local b = sg.param("b", {24}, { "uniform", -1, 1 })
local p = sg.matmul(x, w, { trans_b = true })
local y = p + b
sg.output("y", y)
sg.loss(sg.mean(sg.mean(y)))
)") + (product_read_twice ? "sg.output(\"p\", p)\n" : "") + "sg.optimizer.sgd{ lr = 0.1 }\n";
}

const ProgramInfo& program_of(const Model& m, const std::string& name) {
  for (const ProgramInfo& p : m.programs())
    if (p.name == name) return p;
  FAIL("no program " << name);
  return m.programs().front();
}

int fusions(const Model& m, const std::string& program) {
  return static_cast<int>(find_bias_fusions(m, program_of(m, program)).size());
}

// y = r + x @ w^T (+ b), x [5, 40], r [5, 48], w [48, 40]: 48 outputs, a block of the
// sparse product's 32 columns and a tail.
std::string addend_model(bool bias) {
  return std::string(R"(
local sg = require "sg"
local x = sg.input("x", {5, 40})
local r = sg.input("r", {5, 48})
local w = sg.param("w", {48, 40}, { "uniform", -1, 1 })
local b = sg.param("b", {48}, { "uniform", -1, 1 })
local y = r + sg.matmul(x, w, { trans_b = true })
)") + (bias ? "y = y + b\n" : "") + R"(
sg.output("y", y)
sg.loss(sg.mean(sg.mean(y)) + sg.mean(b))
sg.optimizer.sgd{ lr = 0.1 }
)";
}

// Sessions on the fused and the unfused CPU backend.
std::unique_ptr<Session> session(const std::shared_ptr<const Model>& m, bool fused) {
  std::unique_ptr<Backend> be;
  REQUIRE(make_cpu_backend(&be, fused).ok());
  std::unique_ptr<Session> s;
  REQUIRE(Session::create(m, std::move(be), &s).ok());
  REQUIRE(s->init(1, 100).ok());
  return s;
}

// A step's inputs, the same into both sessions.
using Feed = void (*)(Session* const (&s)[2], std::mt19937& rng);

// The small GPT's tokens and targets.
void feed_gpt(Session* const (&s)[2], std::mt19937& rng) {
  for (const char* input : {"tokens", "targets"}) {
    std::vector<int32_t> v(4 * 16);
    for (int32_t& t : v) t = static_cast<int32_t>(rng() % 256);
    for (Session* x : s) test::write_vec(*x, input, v);
  }
}

// Trains the model three steps fused and unfused: the loss and every persistent
// tensor (weights, masters, moments, scales) the same to the bit.
void trains_the_same(const std::shared_ptr<const Model>& m, Feed feed = feed_gpt) {
  std::unique_ptr<Session> s[2] = {session(m, false), session(m, true)};
  std::mt19937 rng(3);
  float loss[2] = {};
  for (int step = 0; step < 3; ++step) {
    feed({s[0].get(), s[1].get()}, rng);
    for (int i = 0; i < 2; ++i) loss[i] = test::loss_of(*s[i], "train_step");
    CHECK(std::memcmp(&loss[0], &loss[1], 4) == 0);
  }
  const std::vector<TensorInfo>& ts = m->tensors();
  int differ = 0;
  for (size_t id = 0; id < ts.size(); ++id) {
    if (!ts[id].persistent || ts[id].bytes == 0) continue;
    std::vector<uint8_t> a(ts[id].bytes), b(ts[id].bytes);
    REQUIRE(s[0]->read(static_cast<int>(id), a.data(), a.size()).ok());
    REQUIRE(s[1]->read(static_cast<int>(id), b.data(), b.size()).ok());
    if (a != b) {
      ++differ;
      INFO("differs: " << ts[id].name);
      CHECK(a == b);
    }
  }
  CHECK(differ == 0);
}

const std::map<std::string, std::string> kSmallGpt{{"n_layer", "2"}, {"n_embd", "64"}, {"n_head", "2"},
                                                   {"block", "16"}, {"batch", "4"}};

}  // namespace

TEST_CASE("a linear layer equals gemm_f32 plus a separate add, to the bit, fused or not") {
  for (bool twice : {false, true}) {
    CAPTURE(twice);
    std::shared_ptr<const Model> m;
    Status st = test::compile_lua(linear_model(twice), &m);
    REQUIRE_MESSAGE(st.ok(), st.message());
    CHECK(fusions(*m, "infer") == (twice ? 0 : 1));
    auto s = test::open_session(m);
    std::vector<float> x(5 * 40);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    test::write_vec(*s, "x", x);
    test::run(*s, "infer");
    std::vector<float> w = test::read_f32(*s, "w"), b = test::read_f32(*s, "b"), y = test::read_output(*s, "y");
    std::vector<float> expect(5 * 24);
    cpu::gemm_f32(false, true, 5, 24, 40, 1.0f, x.data(), 40, w.data(), 40, 0.0f, expect.data(), 24);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 24; ++j) expect[i * 24 + j] += b[j];
    REQUIRE(y.size() == expect.size());
    CHECK(std::memcmp(y.data(), expect.data(), y.size() * 4) == 0);
  }
}

TEST_CASE("every biased linear layer of the GPT is fused, under matmul and qmatmul") {
  // models/gpt.lua: per block q, k, v, the attention projection and the MLP's two
  // layers carry a bias; the tied head has none.
  for (const char* recipe : {"fp32", "fp8"}) {
    CAPTURE(recipe);
    auto m = test::compile_model_file("models/gpt.lua", {{"n_layer", "2"}, {"n_embd", "32"}, {"n_head", "2"},
                                                         {"block", "8"}, {"batch", "2"}}, false, recipe);
    for (const char* program : {"train_step", "eval", "infer"}) {
      CAPTURE(program);
      CHECK(fusions(*m, program) == 6 * 2);
    }
  }
}

TEST_CASE("at O1-O3 the fused GPT trains to the unfused one's bits, its biases staged where they overlap the output") {
  // A bias is then a transient working copy, and the memory plan may hand its
  // bytes to the add's output: the fused product must read it from the copy made
  // before it writes (BiasFusion::stage_bias), or the layers after the first rows
  // add garbage. Three training steps with the fusion and without it must leave
  // every persistent tensor (weights, masters, moments, scales) and the loss the
  // same to the bit.
  for (const char* level : {"O1", "O2", "O3"}) {
    CAPTURE(level);
    auto m = test::compile_model_file("models/gpt.lua", kSmallGpt, false, "fp32", level);
    int staged = 0;
    for (const ProgramInfo& p : m->programs()) {
      std::vector<BiasFusion> f = find_bias_fusions(*m, p);
      if (p.name == "train_step") CHECK(f.size() == 6 * 2);
      for (const BiasFusion& x : f) staged += x.stage_bias;
    }
    CHECK(staged > 0);
    trains_the_same(m);
  }
}

TEST_CASE("a product added to a tensor, and a bias after it, equal separate adds, fused or not, dense or sparse") {
  for (bool bias : {false, true})
    for (bool sparse : {false, true}) {
      CAPTURE(bias);
      CAPTURE(sparse);
      std::shared_ptr<const Model> m;
      Status st = test::compile_lua(addend_model(bias), &m);
      REQUIRE_MESSAGE(st.ok(), st.message());
      const ProgramInfo& infer = program_of(*m, "infer");
      std::vector<AddendFusion> f = find_addend_fusions(*m, infer, find_bias_fusions(*m, infer));
      REQUIRE(f.size() == 1);
      CHECK((f[0].bias_add >= 0) == bias);
      // Sparse: 8 of 200 non-zero, under the sparse product's 1/16.
      std::vector<float> x(5 * 40, 0.f), r(5 * 48);
      for (size_t i = 0; i < x.size(); ++i)
        if (!sparse || i % 25 == 3) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
      for (size_t i = 0; i < r.size(); ++i) r[i] = std::cos(0.11f * static_cast<float>(i)) * 5.0f;
      std::vector<float> y[2];
      for (int fused = 0; fused < 2; ++fused) {
        auto s = session(m, fused == 1);
        test::write_vec(*s, "x", x);
        test::write_vec(*s, "r", r);
        test::run(*s, "infer");
        y[fused] = test::read_output(*s, "y");
        if (fused == 0) continue;
        std::vector<float> w = test::read_f32(*s, "w"), b = test::read_f32(*s, "b"), expect(5 * 48);
        if (sparse) {  // each row's sum from 0 over its non-zeros in increasing column
          for (int i = 0; i < 5; ++i)
            for (int j = 0; j < 48; ++j) {
              float acc = 0.f;
              for (int c = 0; c < 40; ++c)
                if (x[i * 40 + c] != 0.f) acc += x[i * 40 + c] * w[j * 40 + c];
              expect[i * 48 + j] = acc;
            }
        } else {
          cpu::gemm_f32(false, true, 5, 48, 40, 1.0f, x.data(), 40, w.data(), 40, 0.0f, expect.data(), 48);
        }
        for (int i = 0; i < 5 * 48; ++i) expect[i] = r[i] + expect[i];
        if (bias)
          for (int i = 0; i < 5 * 48; ++i) expect[i] += b[i % 48];
        REQUIRE(y[1].size() == expect.size());
        CHECK(std::memcmp(y[1].data(), expect.data(), expect.size() * 4) == 0);
      }
      CHECK(std::memcmp(y[0].data(), y[1].data(), y[1].size() * 4) == 0);
    }
}

TEST_CASE("under fp4 every compensation is fused with its bias, and the GPT trains to the unfused one's bits") {
  // Per block q, k, v, the attention projection and the MLP's two layers clamp
  // their activation; each compensation add is followed by the layer's bias.
  for (const char* level : {"fp32", "O2"}) {
    CAPTURE(level);
    auto m = test::compile_model_file("models/gpt.lua", kSmallGpt, false, "fp4", level);
    const ProgramInfo& train = program_of(*m, "train_step");
    std::vector<AddendFusion> f = find_addend_fusions(*m, train, find_bias_fusions(*m, train));
    CHECK(f.size() == 6 * 2);
    CHECK(std::all_of(f.begin(), f.end(), [](const AddendFusion& x) { return x.bias_add >= 0; }));
    trains_the_same(m);
  }
}

TEST_CASE("the MLP's ReLU and its relu_grad are fused into their products, and it trains to the unfused one's bits") {
  // models/fashion_mlp.lua: relu(x W1^T + b1) in every program; in training,
  // relu_grad(h, dh) two ops after the product that writes dh (dW2's product
  // runs in between). At batch 1000 the plan gives relu_grad's output the bytes
  // of dlogits, which dh's product reads: the product then writes the masked dh
  // over its own output, which dW1's product and db1's sum read instead. Images
  // with half their pixels zero, as Fashion-MNIST's background, and with under
  // 1/16 non-zero (the sparse product, which applies the ReLU after its sum).
  // (Under fp8 the plan gives the ReLU's output the bytes of tensors the
  // products read: nothing fuses there.)
  static int batch = 0, step = 0;
  for (int b : {24, 1000}) {
    CAPTURE(b);
    batch = b;
    auto m = test::compile_model_file("models/fashion_mlp.lua", {{"batch", std::to_string(b)}, {"hidden", "40"}});
    for (const ProgramInfo& p : m->programs()) {
      CAPTURE(p.name);
      const std::vector<BiasFusion> bias = find_bias_fusions(*m, p);
      std::vector<ActivationFusion> f = find_activation_fusions(*m, p, bias, find_addend_fusions(*m, p, bias));
      CHECK(f.size() == (p.name == "train_step" ? 2u : 1u));
      for (const ActivationFusion& x : f) CHECK(x.in_place == (x.mask >= 0 && b == 1000));
      CHECK(std::count_if(f.begin(), f.end(), [](const ActivationFusion& x) { return x.mask < 0; }) == 1);
    }
    trains_the_same(m, [](Session* const (&s)[2], std::mt19937& rng) {
      const int every = step++ % 2 ? 20 : 2;  // odd steps sparse
      std::vector<float> image(batch * 784);
      std::vector<int32_t> label(batch);
      for (size_t i = 0; i < image.size(); ++i) image[i] = i % every ? 0.f : static_cast<float>(rng() % 256) / 255.f;
      for (int32_t& l : label) l = static_cast<int32_t>(rng() % 10);
      for (Session* x : s) {
        test::write_vec(*x, "image", image);
        test::write_vec(*x, "label", label);
      }
    });
  }
}
