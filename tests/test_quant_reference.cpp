// MX and NVFP4 quantization against an independent implementation: the vectors
// scripts/make_quant_reference.py wrote with numpy and ml_dtypes' casts
// (tests/data/quant_reference.txt). The scales themselves must match (MX's E8M0
// exponent, NVFP4's tensor scale and "four over six" block scales), on random,
// heavy-tailed and boundary data and on blocks that are all zero, subnormal only,
// or hold a NaN or an infinity; then an nvfp4 matmul's output in an infer
// program, with no training step before it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cpu/quantize.h"
#include "formats/formats.h"
#include "harness.h"

using namespace sgrt;

namespace {

struct Case {
  std::string name, kind;
  int64_t rows = 0, cols = 0;
  float prev_ts = 0;
  std::vector<float> x;
  std::vector<uint8_t> scales, codes;
  float ts = 0;
  std::vector<float> eval;  // nvfp4 eval cases: x_dequant @ w_dequant^T
};

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

template <class T>
std::vector<T> hex_words(std::istringstream& in) {
  std::vector<T> v;
  std::string w;
  while (in >> w) v.push_back(static_cast<T>(std::stoul(w, nullptr, 16)));
  return v;
}

std::vector<float> hex_floats(std::istringstream& in) {
  std::vector<float> f;
  for (uint32_t u : hex_words<uint32_t>(in)) f.push_back(from_bits(u));
  return f;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::ifstream f(SGRT_SOURCE_DIR "/tests/data/quant_reference.txt");
    REQUIRE_MESSAGE(f.good(), "tests/data/quant_reference.txt is missing (scripts/make_quant_reference.py)");
    std::vector<Case> v;
    std::string line;
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string tag;
      in >> tag;
      if (tag == "case") {
        Case c;
        std::string prev;
        in >> c.name >> c.kind >> c.rows >> c.cols >> prev;
        c.prev_ts = from_bits(static_cast<uint32_t>(std::stoul(prev, nullptr, 16)));
        v.push_back(c);
      } else if (tag == "x") {
        v.back().x = hex_floats(in);
      } else if (tag == "scales") {
        v.back().scales = hex_words<uint8_t>(in);
      } else if (tag == "codes") {
        v.back().codes = hex_words<uint8_t>(in);
      } else if (tag == "ts") {
        v.back().ts = hex_floats(in).at(0);
      } else if (tag == "eval") {
        v.back().eval = hex_floats(in);
      }
    }
    return v;
  }();
  return all;
}

const Case& find(const std::string& name, const std::string& kind) {
  for (const Case& c : cases())
    if (c.name == name && c.kind == kind) return c;
  FAIL("no reference case " << name << " " << kind);
  return cases()[0];
}

std::vector<uint8_t> unpack_e2m1(const std::vector<uint8_t>& q, int64_t n) {
  std::vector<uint8_t> c(n);
  for (int64_t i = 0; i < n; ++i) c[i] = (q[i / 2] >> (4 * (i & 1))) & 0xF;
  return c;
}

DType mx_format(const std::string& kind) {
  return kind == "mx_e4m3" ? DType::e4m3 : kind == "mx_e5m2" ? DType::e5m2 : DType::e2m1;
}

}  // namespace

TEST_CASE("MX block scales and codes are the reference's; a block with a NaN or an inf gets the NaN scale") {
  int nan_scales = 0;
  for (const Case& c : cases()) {
    if (c.kind.rfind("mx_", 0) != 0) continue;
    CAPTURE(c.name);
    CAPTURE(c.kind);
    cpu::QuantParams p;
    p.fmt = mx_format(c.kind);
    const int64_t n = c.rows * c.cols;
    std::vector<uint8_t> q(dtype_bytes(p.fmt, n)), s(c.scales.size());
    const cpu::QuantStats st = cpu::quantize_mx(c.x.data(), c.rows, c.cols, p, q.data(), s.data());
    REQUIRE(st.error == nullptr);
    CHECK(s == c.scales);
    CHECK((p.fmt == DType::e2m1 ? unpack_e2m1(q, n) : q) == c.codes);
    for (uint8_t v : s) nan_scales += v == 0xFF;
  }
  CHECK(nan_scales == 3 * 3);  // the vectors hold the case: three bad blocks per format
}

TEST_CASE("NVFP4 tensor scale, block scales and codes are the reference's, also for zero, subnormal and NaN tensors") {
  for (const Case& c : cases()) {
    if (c.kind != "nvfp4") continue;
    CAPTURE(c.name);
    const int64_t n = c.rows * c.cols;
    std::vector<uint8_t> q(dtype_bytes(DType::e2m1, n)), s(c.scales.size());
    float ts = c.prev_ts;
    const cpu::QuantStats st = cpu::quantize_nvfp4(c.x.data(), c.rows, c.cols, {}, q.data(), s.data(), &ts);
    REQUIRE(st.error == nullptr);
    CHECK(bits_of(ts) == bits_of(c.ts));
    CHECK(s == c.scales);
    CHECK(unpack_e2m1(q, n) == c.codes);
  }
  // The vectors exercise both of four-over-six's choices: some blocks map their
  // amax to 4 (scale above amax / 6), others to 6.
  const Case& h = find("heavy", "nvfp4");
  int fours = 0, sixes = 0;
  for (size_t b = 0; b < h.scales.size(); ++b) {
    const int64_t r = static_cast<int64_t>(b) / (h.cols / 16), c0 = (static_cast<int64_t>(b) % (h.cols / 16)) * 16;
    float a = 0;
    for (int64_t i = 0; i < 16; ++i) a = std::max(a, std::fabs(h.x[r * h.cols + c0 + i]));
    const float six = a / (6 * h.ts);
    (fmt::e4m3_decode(h.scales[b]) > six * 1.2f ? fours : sixes)++;
  }
  CHECK(fours > 0);
  CHECK(sixes > 0);
}

TEST_CASE("an nvfp4 matmul's infer output is the reference's, before any training step, for x and 4 x") {
  std::shared_ptr<const Model> m;
  const Case& w = find("w_eval", "nvfp4");
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.input("x", {3, 40})
    local y = sg.input("y", {3}, "i32")
    local w = sg.param("w", {6, 40}, {"normal", 0, 1})
    local h = sg.matmul(x, w, { trans_b = true })
    sg.output("h", h)
    local logits = sg.nn.linear(h, 4, { name = "head" })  -- nvfp4 keeps the last layer
    sg.loss(sg.softmax_cross_entropy(logits, y))
    sg.optimizer.sgd{ lr = 0.1 }
    sg.recipe "nvfp4"
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  test::write_vec(*s, "w", w.x);
  test::write_vec(*s, "y", std::vector<int32_t>{0, 1, 2});
  for (const char* name : {"eval", "eval4"}) {
    INFO(name);
    const Case& c = find(name, "nvfp4");
    test::write_vec(*s, "x", c.x);
    test::run(*s, "infer");
    const std::vector<float> h = test::read_f32(*s, s->model().tensors()[s->model().outputs()[0].second].name);
    REQUIRE(h.size() == c.eval.size());
    double err = 0, norm = 0;  // the GEMM sums in another order: f32 rounding only
    for (size_t i = 0; i < h.size(); ++i) {
      err += (h[i] - c.eval[i]) * double(h[i] - c.eval[i]);
      norm += c.eval[i] * double(c.eval[i]);
    }
    CHECK(norm > 0);
    CHECK(std::sqrt(err / norm) < 1e-6);
  }
}
