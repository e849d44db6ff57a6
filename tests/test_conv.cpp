// Convolution and pooling (nn.conv2d, depthwise, nn.max_pool2d, nn.avg_pool2d:
// im2col and a GEMM or a reduction) against direct loops written here, one
// output element at a time from the definition, never through patches; and the
// errors a bad window gets. Gradients: tests/test_gradcheck.cpp.
#include <algorithm>
#include <cmath>
#include <random>

#include "harness.h"

using namespace sgrt;

namespace {

// x [N, H, W, C], row-major.
struct Image {
  int64_t n, h, w, c;
  std::vector<float> v;
  float at(int64_t b, int64_t y, int64_t x, int64_t ch) const {  // 0 outside: zero padding
    if (y < 0 || y >= h || x < 0 || x >= w) return 0.f;
    return v[((b * h + y) * w + x) * c + ch];
  }
};

Image random_image(int64_t n, int64_t h, int64_t w, int64_t c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Image im{n, h, w, c, std::vector<float>(n * h * w * c)};
  for (float& x : im.v) x = u(rng);
  return im;
}

// Compiles `layer` (a Lua expression over the input x) and runs infer on x;
// the session stays open so the test reads the layer's initialized parameters.
struct Run {
  std::unique_ptr<Session> s;
  std::vector<float> y;
  Shape y_shape;
};

Run run_layer(const Image& x, const std::string& layer) {
  std::string src = "local sg = require \"sg\"\nlocal x = sg.input(\"x\", {" + std::to_string(x.n) + ", " +
                    std::to_string(x.h) + ", " + std::to_string(x.w) + ", " + std::to_string(x.c) +
                    "})\nlocal p = sg.param(\"p\", {1})\nlocal y = " + layer +
                    "\nsg.output(\"y\", y)\nsg.loss(sg.sum(sg.reshape(y * sg.broadcast_to(p, y:shape()), {-1})))\n"
                    "sg.optimizer.sgd{ lr = 1e-30 }\n";
  INFO("model:\n" << src);
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(src, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  Run r;
  r.s = test::open_session(m);
  test::write_vec(*r.s, "x", x.v);
  test::run(*r.s, "infer");
  r.y = test::read_output(*r.s, "y");
  r.y_shape = m->tensors()[m->outputs()[0].second].type.shape;
  return r;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5).scale(1.0));
  }
}

Status compile_error(const std::string& body) {
  std::shared_ptr<const Model> m;
  return test::compile_lua("local sg = require \"sg\"\nlocal nn = sg.nn\n" + body +
                               "\nsg.loss(sg.sum(sg.reshape(y, {-1})))\nsg.optimizer.sgd{ lr = 0.1 }\n",
                           &m);
}

}  // namespace

TEST_CASE("conv2d: the forward pass of a direct convolution (stride 2x1, padding 1, a 3x2 kernel, bias)") {
  const int64_t kh = 3, kw = 2, sh = 2, sw = 1, ph = 1, pw = 1, cout = 4;
  Image x = random_image(2, 7, 6, 3, 11);
  Run r = run_layer(x, "sg.nn.conv2d(x, 4, {kernel = {3, 2}, stride = {2, 1}, padding = 1, name = \"c\"})");
  // Weights [out, KH*KW*C] in (kh, kw, c) order (docs/dsl.md), bias [out].
  std::vector<float> w = test::read_f32(*r.s, "c.w"), b = test::read_f32(*r.s, "c.b");
  REQUIRE(w.size() == static_cast<size_t>(cout * kh * kw * x.c));
  const int64_t ho = (x.h + 2 * ph - kh) / sh + 1, wo = (x.w + 2 * pw - kw) / sw + 1;
  REQUIRE(r.y_shape == Shape{x.n, ho, wo, cout});
  std::vector<float> want;
  for (int64_t n = 0; n < x.n; ++n)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox)
        for (int64_t o = 0; o < cout; ++o) {
          double acc = b[o];
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx)
              for (int64_t ci = 0; ci < x.c; ++ci)
                acc += double(x.at(n, oy * sh - ph + ky, ox * sw - pw + kx, ci)) * w[o * kh * kw * x.c + (ky * kw + kx) * x.c + ci];
          want.push_back(static_cast<float>(acc));
        }
  check_close(r.y, want);
  // Kaiming-uniform like nn.linear: |w| <= 1/sqrt(fan_in), fan_in = KH*KW*C.
  const float bound = 1.f / std::sqrt(float(kh * kw * x.c));
  for (float v : w) CHECK(std::abs(v) <= bound);
}

TEST_CASE("conv2d depthwise (groups = C, two outputs per channel): a direct per-channel convolution") {
  const int64_t k = 3, m = 2;
  Image x = random_image(2, 5, 6, 3, 12);
  Run r = run_layer(x, "sg.nn.conv2d(x, 6, {groups = 3, padding = 1, name = \"d\"})");
  std::vector<float> w = test::read_f32(*r.s, "d.w"), b = test::read_f32(*r.s, "d.b");  // w [KH*KW, C, M]
  REQUIRE(w.size() == static_cast<size_t>(k * k * x.c * m));
  REQUIRE(r.y_shape == Shape{x.n, x.h, x.w, x.c * m});
  std::vector<float> want;
  for (int64_t n = 0; n < x.n; ++n)
    for (int64_t oy = 0; oy < x.h; ++oy)
      for (int64_t ox = 0; ox < x.w; ++ox)
        for (int64_t ci = 0; ci < x.c; ++ci)
          for (int64_t j = 0; j < m; ++j) {  // output channel ci * M + j reads input channel ci only
            double acc = b[ci * m + j];
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx)
                acc += double(x.at(n, oy - 1 + ky, ox - 1 + kx, ci)) * w[((ky * k + kx) * x.c + ci) * m + j];
            want.push_back(static_cast<float>(acc));
          }
  check_close(r.y, want);
  for (float v : w) CHECK(std::abs(v) <= 1.f / 3.f);  // fan_in = KH*KW*C / groups = 9
}

TEST_CASE("max_pool2d and avg_pool2d: direct window maxima and means") {
  Image x = random_image(2, 7, 5, 3, 13);
  // reduce(the k x k window's values, zeros in the padding) for each output element.
  auto pool = [&](int64_t k, int64_t stride, int64_t pad, float (*reduce)(const std::vector<float>&)) {
    std::vector<float> out, win;
    const int64_t ho = (x.h + 2 * pad - k) / stride + 1, wo = (x.w + 2 * pad - k) / stride + 1;
    for (int64_t n = 0; n < x.n; ++n)
      for (int64_t oy = 0; oy < ho; ++oy)
        for (int64_t ox = 0; ox < wo; ++ox)
          for (int64_t ch = 0; ch < x.c; ++ch) {
            win.clear();
            for (int64_t dy = 0; dy < k; ++dy)
              for (int64_t dx = 0; dx < k; ++dx) win.push_back(x.at(n, oy * stride - pad + dy, ox * stride - pad + dx, ch));
            out.push_back(reduce(win));
          }
    return out;
  };
  SUBCASE("max, kernel 2, stride 2 (the default): odd sizes drop the last row and column") {
    Run r = run_layer(x, "sg.nn.max_pool2d(x)");
    REQUIRE(r.y_shape == Shape{2, 3, 2, 3});
    check_close(r.y, pool(2, 2, 0, [](const std::vector<float>& w) { return *std::max_element(w.begin(), w.end()); }));
  }
  SUBCASE("avg, kernel 3, stride 2, padding 1: padding counts as zeros") {
    Run r = run_layer(x, "sg.nn.avg_pool2d(x, {kernel = 3, stride = 2, padding = 1})");
    REQUIRE(r.y_shape == Shape{2, 4, 3, 3});
    check_close(r.y, pool(3, 2, 1, [](const std::vector<float>& w) {
      double s = 0;
      for (float v : w) s += v;
      return static_cast<float>(s / static_cast<double>(w.size()));
    }));
  }
}

TEST_CASE("a bad window or input is refused with a line naming the op") {
  struct Bad {
    const char* body;
    const char* message;
  };
  for (const Bad& c : {
           Bad{"local y = sg.im2col(sg.input(\"x\", {2, 8, 3}), {2, 2}, {1, 1}, {0, 0})", "im2col: expects x [N, H, W, C] (rank 4), got [2, 8, 3]"},
           Bad{"local y = sg.im2col(sg.input(\"x\", {1, 4, 4, 2}), {5, 2}, {1, 1}, {0, 0})", "im2col: the 5x2 window is larger than the padded input 4x4"},
           Bad{"local y = sg.im2col(sg.input(\"x\", {1, 4, 4, 2}), {2, 2}, {0, 1}, {0, 0})", "im2col: attr stride must be two integers in [1, 65536]"},
           Bad{"local y = sg.im2col(sg.input(\"x\", {1, 4, 4, 2}), {2, 2, 2}, {1, 1}, {0, 0})", "im2col: attr kernel must be two integers"},
           Bad{"local y = sg.im2col(sg.input(\"x\", {1, 4, 4, 2}), {2, 2}, {1, 1}, {2, 0})", "im2col: padding [2, 0] must be smaller than the kernel [2, 2]"},
           Bad{"local y = nn.conv2d(sg.input(\"x\", {1, 4, 4, 4}), 8, {groups = 2})", "nn.conv2d: groups must be 1 or the input's 4 channels"},
           Bad{"local y = nn.conv2d(sg.input(\"x\", {1, 4, 4, 4}), 6, {groups = 4})", "out_channels a multiple of 4"},
           Bad{"local y = nn.max_pool2d(sg.input(\"x\", {1, 4, 4, 4}), {padding = 1})", "nn.max_pool2d: padding must be 0"},
           Bad{"local y = nn.avg_pool2d(sg.input(\"x\", {1, 4, 4, 4}), {kernal = 3})", "did you mean 'kernel'?"},
           Bad{"local y = nn.conv2d(sg.input(\"x\", {16, 16}), 8)", "nn.conv2d: x must be [N, H, W, C] (channels last), got rank 2"},
           Bad{"local y = nn.conv2d(sg.input(\"x\", {1, 4, 4, 4}), 8, {stride = 1.5})", "nn.conv2d: stride must be an integer or {rows, cols}"},
       }) {
    Status st = compile_error(c.body);
    INFO(c.body);
    REQUIRE_FALSE(st.ok());
    CHECK_MESSAGE(st.message().find(c.message) != std::string::npos, st.message());
  }
}
