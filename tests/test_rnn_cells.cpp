// nn.gru_cell and nn.lstm_cell against PyTorch's equations written out in plain
// loops here (torch.nn.GRUCell / LSTMCell, gates stacked r, z, n and i, f, g, o
// in weight_ih [G H, in], weight_hh [G H, H]), on random weights and inputs, over
// two time steps that share the params by name.
// Bound: each output is a few f32 ops on sums of at most 9 products of O(1)
// terms, ~1e-6 from the double reference; 1e-5 absolute. A swapped gate, a
// transposed weight or a dropped bias is off by O(0.1). Gradients:
// test_gradcheck.cpp.
#include <cmath>
#include <random>

#include "harness.h"

using namespace sgrt;

namespace {

constexpr int B = 3, I = 5, H = 4;

const char* kCells = R"(
  local sg = require "sg"
  local x = sg.input("x", {3, 5})
  local h = sg.input("h", {3, 4})
  local c = sg.input("c", {3, 4})
  local hg = sg.nn.gru_cell(x, h, 4, {name = "gru"})
  local hl, cl = sg.nn.lstm_cell(x, h, c, 4, {name = "lstm"})
  -- A second time step of each: the same name shares the params.
  local x2 = sg.input("x2", {3, 5})
  local hg2 = sg.nn.gru_cell(x2, hg, 4, {name = "gru"})
  local hl2, cl2 = sg.nn.lstm_cell(x2, hl, cl, 4, {name = "lstm"})
  sg.output("gru_h", hg2)
  sg.output("lstm_h", hl2)
  sg.output("lstm_c", cl2)
  sg.loss(sg.sum(sg.sum(hg2 + hl2 + cl2)))
  sg.optimizer.sgd{ lr = 1e-30 }
)";

using Vec = std::vector<float>;
double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// Gate k's pre-activation for batch row b: W[k H + j, :] . v[b, :] + bias[k H + j].
double affine(const Vec& w, const Vec& bias, const Vec& v, int in, int b, int k, int j) {
  double s = bias[k * H + j];
  for (int t = 0; t < in; ++t) s += static_cast<double>(w[(k * H + j) * in + t]) * v[b * in + t];
  return s;
}

struct Cell {
  Vec w_ih, w_hh, b_ih, b_hh;
};

Cell read_cell(Session& s, const std::string& name) {
  return {test::read_f32(s, name + ".w_ih"), test::read_f32(s, name + ".w_hh"), test::read_f32(s, name + ".b_ih"),
          test::read_f32(s, name + ".b_hh")};
}

// torch.nn.GRUCell: r = s(x_r + h_r), z = s(x_z + h_z), n = tanh(x_n + r h_n), h' = (1 - z) n + z h.
Vec gru_step(const Cell& g, const Vec& x, const Vec& h) {
  Vec out(B * H);
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < H; ++j) {
      auto gi = [&](int k) { return affine(g.w_ih, g.b_ih, x, I, b, k, j); };
      auto gh = [&](int k) { return affine(g.w_hh, g.b_hh, h, H, b, k, j); };
      double r = sigmoid(gi(0) + gh(0)), z = sigmoid(gi(1) + gh(1));
      double n = std::tanh(gi(2) + r * gh(2));
      out[b * H + j] = static_cast<float>((1 - z) * n + z * h[b * H + j]);
    }
  return out;
}

// torch.nn.LSTMCell: gates i, f, g, o; c' = s(f) c + s(i) tanh(g), h' = s(o) tanh(c').
void lstm_step(const Cell& l, const Vec& x, Vec* h, Vec* c) {
  Vec h2(B * H), c2(B * H);
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < H; ++j) {
      auto pre = [&](int k) { return affine(l.w_ih, l.b_ih, x, I, b, k, j) + affine(l.w_hh, l.b_hh, *h, H, b, k, j); };
      double cn = sigmoid(pre(1)) * (*c)[b * H + j] + sigmoid(pre(0)) * std::tanh(pre(2));
      c2[b * H + j] = static_cast<float>(cn);
      h2[b * H + j] = static_cast<float>(sigmoid(pre(3)) * std::tanh(cn));
    }
  *h = h2;
  *c = c2;
}

Vec random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Vec v(n);
  for (float& e : v) e = u(rng);
  return v;
}

}  // namespace

TEST_CASE("gru_cell and lstm_cell compute PyTorch's equations over two steps sharing params; init U(+-1/sqrt(hidden))") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(kCells, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  const float bound = 1.f / std::sqrt(static_cast<float>(H));
  for (const char* cell : {"gru", "lstm"}) {
    const size_t gh = (std::string(cell) == "gru" ? 3 : 4) * H;
    for (auto [p, n] : {std::pair<const char*, size_t>{".w_ih", gh * I}, {".w_hh", gh * H}, {".b_ih", gh}, {".b_hh", gh}}) {
      Vec v = test::read_f32(*s, cell + std::string(p));
      CHECK(v.size() == n);
      for (float e : v) CHECK(std::abs(e) <= bound);
    }
  }
  std::mt19937 rng(7);
  for (const char* cell : {"gru", "lstm"})  // random weights of O(1), wider than the init: saturation matters
    for (const char* p : {".w_ih", ".w_hh", ".b_ih", ".b_hh"}) {
      std::string n = cell + std::string(p);
      test::write_vec(*s, n, random(test::read_f32(*s, n).size(), rng));
    }
  Vec x = random(B * I, rng), x2 = random(B * I, rng), h = random(B * H, rng), c = random(B * H, rng);
  test::write_vec(*s, "x", x);
  test::write_vec(*s, "x2", x2);
  test::write_vec(*s, "h", h);
  test::write_vec(*s, "c", c);
  test::run(*s, "infer");
  Vec gru_h = test::read_output(*s, "gru_h"), lstm_h = test::read_output(*s, "lstm_h"), lstm_c = test::read_output(*s, "lstm_c");
  Cell g = read_cell(*s, "gru"), l = read_cell(*s, "lstm");
  Vec gh = h, lh = h, lc = c;
  for (const Vec* xt : {&x, &x2}) {
    gh = gru_step(g, *xt, gh);
    lstm_step(l, *xt, &lh, &lc);
  }
  for (int i = 0; i < B * H; ++i) {
    CAPTURE(i);
    CHECK(std::abs(gru_h[i] - gh[i]) <= 1e-5);
    CHECK(std::abs(lstm_h[i] - lh[i]) <= 1e-5);
    CHECK(std::abs(lstm_c[i] - lc[i]) <= 1e-5);
  }
}

TEST_CASE("a cell name used again for another kind, sizes or bias is an error naming both") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.input("x", {3, 5})
    local h = sg.nn.gru_cell(x, sg.input("h", {3, 4}), 4, {name = "cell"})
    local y = sg.nn.gru_cell(x, h, 4, {name = "cell", bias = false})
  )", &m);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find(":5: nn.gru_cell: 'cell' was made by nn.gru_cell with other sizes or bias (cell.w_ih is [12, 5])") !=
        std::string::npos);
}
