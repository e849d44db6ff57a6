// models/gpt.lua against PyTorch: tests/data/gpt_reference.bin holds a tiny GPT's
// weights (by sgrt tensor name), one batch, the loss, every parameter's gradient
// and the losses after 3 AdamW steps, computed in float64 by
// scripts/make_gpt_reference.py (the file format is documented there). sgrt runs
// in FP32, so each gradient must agree to a relative error (L2 norm of the
// difference over the L2 norm of the reference) of 1e-4, and each loss likewise.
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "harness.h"

using namespace sgrt;

namespace {

struct RefParam {
  std::string name;
  Shape shape;
  std::vector<float> value, grad;
};

struct Reference {
  uint32_t n_layer, n_embd, n_head, block, batch, vocab, adam_steps, total_steps;
  float lr, beta1, beta2, eps, weight_decay, min_lr_ratio;
  std::vector<int32_t> tokens, targets;
  std::vector<RefParam> params;
  std::vector<float> losses;
};

class Reader {
 public:
  explicit Reader(std::vector<char> b) : b_(std::move(b)) {}
  template <class T>
  T get() {
    T v;
    REQUIRE(pos_ + sizeof(T) <= b_.size());
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <class T>
  std::vector<T> vec(size_t n) {
    std::vector<T> v(n);
    for (T& x : v) x = get<T>();
    return v;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::vector<char> b_;
  size_t pos_ = 0;
};

Reference load_reference() {
  std::ifstream f(SGRT_SOURCE_DIR "/tests/data/gpt_reference.bin", std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "tests/data/gpt_reference.bin is missing (scripts/make_gpt_reference.py)");
  Reader r(std::vector<char>(std::istreambuf_iterator<char>(f), {}));
  char magic[8];
  for (char& c : magic) c = r.get<char>();
  REQUIRE(std::string(magic, 8) == "SGGPTREF");
  REQUIRE(r.get<uint32_t>() == 1);
  Reference ref;
  for (uint32_t* p : {&ref.n_layer, &ref.n_embd, &ref.n_head, &ref.block, &ref.batch, &ref.vocab, &ref.adam_steps})
    *p = r.get<uint32_t>();
  for (float* p : {&ref.lr, &ref.beta1, &ref.beta2, &ref.eps, &ref.weight_decay, &ref.min_lr_ratio}) *p = r.get<float>();
  ref.total_steps = r.get<uint32_t>();
  ref.tokens = r.vec<int32_t>(ref.batch * ref.block);
  ref.targets = r.vec<int32_t>(ref.batch * ref.block);
  uint32_t n = r.get<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) {
    RefParam p;
    std::vector<char> name = r.vec<char>(r.get<uint32_t>());
    p.name.assign(name.begin(), name.end());
    for (uint32_t d = 0, rank = r.get<uint32_t>(); d < rank; ++d) p.shape.push_back(r.get<uint32_t>());
    p.value = r.vec<float>(numel(p.shape));
    p.grad = r.vec<float>(numel(p.shape));
    ref.params.push_back(std::move(p));
  }
  ref.losses = r.vec<float>(r.get<uint32_t>());
  REQUIRE(r.done());
  return ref;
}

// ||got - want|| / ||want||, the norm floored at 1e-5: the key biases' exact
// gradient is zero (softmax ignores a shift shared by a row's scores), so there
// both sides hold rounding noise (~1e-18 in float64, ~1e-9 in FP32) and only an
// absolute bound makes sense; every other gradient here has a norm above 1e-3.
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-5);
}

}  // namespace

TEST_CASE("models/gpt.lua matches PyTorch: loss, every gradient, and 3 AdamW steps") {
  Reference ref = load_reference();
  std::ifstream src(SGRT_SOURCE_DIR "/models/gpt.lua");
  std::string lua(std::istreambuf_iterator<char>(src), {});
  auto s_ = [](auto v) { return std::to_string(v); };
  // The script's AdamW (beta2 0.99, weight decay 0.1, cosine to 0.1) is what the dump used.
  CHECK(ref.beta2 == doctest::Approx(0.99));
  CHECK(ref.weight_decay == doctest::Approx(0.1));
  CHECK(ref.min_lr_ratio == doctest::Approx(0.1));
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(lua, &m,
                                {{"n_layer", s_(ref.n_layer)}, {"n_embd", s_(ref.n_embd)}, {"n_head", s_(ref.n_head)},
                                 {"block", s_(ref.block)}, {"batch", s_(ref.batch)}, {"vocab", s_(ref.vocab)},
                                 {"warmup", "0"}, {"lr", std::to_string(ref.lr)}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m, "cpu", 1);
  REQUIRE(s->init(1, ref.total_steps).ok());

  // Every sgrt parameter is in the dump, with PyTorch's layout.
  size_t n_params = 0;
  for (const TensorInfo& t : m->tensors()) n_params += t.role == Role::param;
  CHECK(n_params == ref.params.size());
  for (const RefParam& p : ref.params) {
    INFO(p.name);
    REQUIRE(m->find_tensor(p.name) >= 0);
    CHECK(m->tensors()[m->find_tensor(p.name)].type.shape == p.shape);
    test::write_vec(*s, p.name, p.value);
  }
  test::write_vec(*s, "tokens", ref.tokens);
  test::write_vec(*s, "targets", ref.targets);

  float loss = test::loss_of(*s, "train_step");
  CHECK(std::fabs(loss - ref.losses[0]) <= 1e-4 * std::fabs(ref.losses[0]));
  double worst = 0;
  for (const RefParam& p : ref.params) {
    double e = rel_error(test::read_f32(*s, p.name + ".grad"), p.grad);
    INFO(p.name << " gradient relative error " << e);
    CHECK(e <= 1e-4);
    worst = std::max(worst, e);
  }
  MESSAGE("loss " << loss << " vs " << ref.losses[0] << "; worst gradient relative error " << worst);

  // train_step reports the loss before its update: steps 2..n give losses 1..n-1, eval the last.
  for (uint32_t k = 1; k <= ref.adam_steps; ++k) {
    float l = test::loss_of(*s, k < ref.adam_steps ? "train_step" : "eval");
    INFO("after " << k << " AdamW steps: " << l << " vs " << ref.losses[k]);
    CHECK(std::fabs(l - ref.losses[k]) <= 1e-4 * std::fabs(ref.losses[k]));
  }
}
