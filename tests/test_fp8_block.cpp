// The fp8-block recipe (DeepSeek-V3's blockwise FP8) against an independent
// reference: the CUDA toolkit's host E4M3 conversions and the definition in
// docs/numerics.md, written here with plain loops. Scales are FP32 amax / 448
// per 1x128 tile along K (activations, gradients) or per 128x128 block
// (weights); the GEMM sums each 128-element K chunk of the codes in FP32 and
// adds it times its two scales. Shapes where K is not a multiple of 128 (300,
// 136, 10) exercise the partial last tile; a batch of 160 makes the weight
// gradient's K differ from every other dimension, so a tile along the wrong
// axis changes the scales' shape and values.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <random>

#include "backend_compare.h"
#include "cpu/quantize.h"
#include "fashion.h"
#include "harness.h"
#include "sgrt/quant.h"

using namespace sgrt;

namespace {

constexpr float kE4M3Max = 448.0f;  // NUMERICS.md §1
constexpr int64_t kTile = 128;

// The definition: a tile with a NaN or an infinity gets a NaN scale and
// multiplier 1; one whose amax / 448 is not a normal float (all zero, tiny)
// scale 1 and multiplier 1; otherwise scale amax / 448 and multiplier 1 / scale,
// each rounded once in f32.
struct TileRef {
  float scale, mult;
};
TileRef tile_ref(float amax) {
  if (std::isnan(amax) || std::isinf(amax)) return {std::numeric_limits<float>::quiet_NaN(), 1.f};
  const float scale = amax / kE4M3Max;
  if (!std::isnormal(scale)) return {1.f, 1.f};
  return {scale, 1.f / scale};
}

// Expected scales of x [rows, cols] in tiles of tile_rows x 128: [ceil(rows / tile_rows), ceil(cols / 128)].
std::vector<TileRef> expected_tiles(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t tile_rows) {
  const int64_t nb = (cols + kTile - 1) / kTile, groups = (rows + tile_rows - 1) / tile_rows;
  std::vector<TileRef> t;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      float amax = 0;
      for (int64_t r = g * tile_rows; r < std::min(rows, (g + 1) * tile_rows); ++r)
        for (int64_t c = b * kTile; c < std::min(cols, (b + 1) * kTile); ++c) {
          const float a = std::fabs(x[r * cols + c]);
          if (std::isnan(a) || a > amax) amax = std::isnan(amax) ? amax : a;
        }
      t.push_back(tile_ref(amax));
    }
  return t;
}

const char* kMlp = R"(
  local sg = require "sg"
  local cfg = sg.config{ recipe = "fp8-block" }
  local x = sg.input("x", {160, 300})
  local y = sg.input("y", {160}, "i32")
  local h = sg.nn.linear(x, 136, { name = "fc1" })
  local logits = sg.nn.linear(h:relu(), 10, { name = "fc2" })
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.optimizer.sgd{ lr = 0.1 }
  sg.recipe(cfg.recipe)
)";

}  // namespace

#ifdef SGRT_HAVE_CUDA_ORACLE
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace {

uint8_t e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
double e4m3_value(uint8_t c) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3))); }

// x [rows, cols]: rows of magnitudes 1e-3 .. 1e3, an all-zero stretch, a NaN and
// an infinity, then the quantizer's scales and codes against the definition.
void check_quantizer(int64_t tile_rows) {
  const int64_t rows = 200, cols = 300;
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = n(rng) * std::pow(10.f, static_cast<float>(r % 7 - 3));
  for (int64_t c = 0; c < kTile; ++c) x[9 * cols + c] = 1e-37f * static_cast<float>(c % 3);  // tile (9, 0): amax / 448 subnormal
  for (int64_t r = 128; r < rows; ++r)  // tiles (r, 2) / block (1, 2): all zero
    for (int64_t c = 256; c < cols; ++c) x[r * cols + c] = 0.f;
  x[5 * cols + 130] = std::numeric_limits<float>::quiet_NaN();  // tile (5, 1) / block (0, 1)
  x[140 * cols + 10] = std::numeric_limits<float>::infinity();  // tile (140, 0) / block (1, 0)
  const std::vector<TileRef> want = expected_tiles(x, rows, cols, tile_rows);
  const int64_t nb = (cols + kTile - 1) / kTile;
  std::vector<float> scales(want.size(), -1.f);
  std::vector<uint8_t> q(x.size());
  cpu::QuantParams p;
  const cpu::QuantStats st = cpu::quantize_fp8_tiles(x.data(), rows, cols, tile_rows, p, q.data(), scales.data());
  REQUIRE(st.error == nullptr);
  int64_t kept = 0, non_finite = 0, code_errors = 0;
  for (size_t t = 0; t < want.size(); ++t) {
    INFO("tile " << t / nb << ", " << t % nb);
    if (std::isnan(want[t].scale)) {
      CHECK(std::isnan(scales[t]));
      ++non_finite;
      ++kept;
      continue;
    }
    CHECK(scales[t] == want[t].scale);
    kept += want[t].scale == 1.f && want[t].mult == 1.f;
    const int64_t g = static_cast<int64_t>(t) / nb, b = static_cast<int64_t>(t) % nb;
    for (int64_t r = g * tile_rows; r < std::min(rows, (g + 1) * tile_rows); ++r)
      for (int64_t c = b * kTile; c < std::min(cols, (b + 1) * kTile); ++c)
        code_errors += q[r * cols + c] != e4m3(x[r * cols + c] * want[t].mult);
  }
  CHECK(code_errors == 0);
  CHECK(non_finite == 2);
  CHECK(kept == st.kept_scales);
  CHECK(kept >= 3);  // the two non-finite tiles and at least one all-zero one
  CHECK(st.saturated == 0);
  CHECK(scales.size() == static_cast<size_t>(((rows + tile_rows - 1) / tile_rows) * nb));
}

// One qmatmul operand as the test sees it: the f32 source in its stored layout.
struct Source {
  std::vector<float> x;
  int64_t rows = 0, cols = 0;
  std::string name;
};

}  // namespace

TEST_CASE("fp8-block: the 1x128 tile quantizer's scales and codes against the definition") { check_quantizer(1); }

TEST_CASE("fp8-block: the 128x128 block quantizer's scales and codes against the definition") {
  check_quantizer(kTile);
}

TEST_CASE("fp8-block: one training step's scales, codes and K-chunked GEMMs, tiles along K in all three GEMMs") {
  compiler::Graph g;
  Status st = test::compile_graph(kMlp, &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  test::split_programs(&g);
  std::shared_ptr<const Model> m = test::load_graph(g);
  auto s = test::open_session(m, "cpu", 3);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(160 * 300);
  for (float& v : x) v = nd(rng);
  std::fill(x.begin() + 7 * 300, x.begin() + 8 * 300, 0.f);  // a zero row: zero tiles, scale 1
  test::write_vec(*s, "x", x);
  std::vector<int32_t> labels(160);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
  test::write_vec(*s, "y", labels);
  std::map<int, Source> sources;
  std::map<int, std::string> origin;  // a transposed copy's source tensor, by name
  auto origin_of = [&](int id) { return origin.count(id) ? origin[id] : m->tensors()[id].name; };
  std::multiset<int64_t> ks;
  // A weight's codes and scales by its name and stored rows (its transpose: the other dimension).
  std::map<std::pair<std::string, int64_t>, std::pair<std::vector<uint8_t>, std::vector<float>>> weight_q;
  int gemms = 0, blocks = 0, tiles = 0;
  for (size_t i = 0;; ++i) {
    const int p = m->find_program("train_step#" + std::to_string(i));
    if (p < 0) break;
    const OpInfoLoaded& op = m->programs()[p].ops[0];
    if (op.code == OpCode::Quantize) {
      Source& src = sources[op.out[0]];
      src.x = test::read_as<float>(*s, op.in[0]);
      src.cols = m->tensors()[op.out[0]].type.shape.back();
      src.rows = static_cast<int64_t>(src.x.size()) / src.cols;
      src.name = origin_of(op.in[0]);
    }
    if (op.code == OpCode::Transpose || op.code == OpCode::Reshape) origin[op.out[0]] = origin_of(op.in[0]);
    test::run(*s, "train_step#" + std::to_string(i));
    if (op.code != OpCode::QMatMul) continue;
    ++gemms;
    INFO("qmatmul at " << op.loc);
    // K-major on both sides: op(A) = A stored [M, K], op(B) = B^T with B stored [N, K].
    CHECK(op.attrs.i("trans_a") == 0);
    CHECK(op.attrs.i("trans_b") == 1);
    const Source* side[2];
    std::vector<uint8_t> codes[2];
    std::vector<float> scales[2];
    int64_t per_scale[2];
    for (int t = 0; t < 2; ++t) {
      REQUIRE(sources.count(op.in[t * 3]) == 1);
      side[t] = &sources[op.in[t * 3]];
      const bool weight = side[t]->name == "fc1.w" || side[t]->name == "fc2.w";
      INFO("operand " << m->tensors()[op.in[t * 3]].name << " of " << side[t]->name);
      const QuantGranularity gr = op.quant[t].granularity;
      CHECK(gr == (weight ? QuantGranularity::block128x128 : QuantGranularity::tile1x128));
      (weight ? blocks : tiles)++;
      per_scale[t] = gr == QuantGranularity::block128x128 ? kTile : 1;
      codes[t] = test::bytes_of(*s, op.in[t * 3]);
      scales[t] = test::read_as<float>(*s, op.in[t * 3 + 1]);
      const std::vector<TileRef> want = expected_tiles(side[t]->x, side[t]->rows, side[t]->cols, per_scale[t]);
      REQUIRE(scales[t].size() == want.size());
      const int64_t nb = (side[t]->cols + kTile - 1) / kTile;
      int64_t scale_errors = 0, code_errors = 0;
      for (size_t j = 0; j < want.size(); ++j) scale_errors += scales[t][j] != want[j].scale;
      for (int64_t r = 0; r < side[t]->rows; ++r)
        for (int64_t c = 0; c < side[t]->cols; ++c) {
          const float mult = want[(r / per_scale[t]) * nb + c / kTile].mult;
          code_errors += codes[t][r * side[t]->cols + c] != e4m3(side[t]->x[r * side[t]->cols + c] * mult);
        }
      CHECK(scale_errors == 0);
      CHECK(code_errors == 0);
      if (weight) weight_q[{side[t]->name, side[t]->rows}] = {codes[t], scales[t]};
    }
    const Source &a = *side[0], &b = *side[1];
    REQUIRE(a.cols == b.cols);
    const int64_t M = a.rows, N = b.rows, K = a.cols, nb = (K + kTile - 1) / kTile;
    ks.insert(K);
    // The product the definition gives: per chunk the exact sum of code products,
    // times the chunk's two scales, summed over the chunks (in double here).
    std::vector<float> y = test::read_as<float>(*s, op.out[0]);
    REQUIRE(static_cast<int64_t>(y.size()) == M * N);
    double worst = 0;
    for (int64_t mi = 0; mi < M; ++mi)
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < nb; ++c) {
          double chunk = 0, chunk_mag = 0;
          for (int64_t k = c * kTile; k < std::min(K, (c + 1) * kTile); ++k) {
            const double term = e4m3_value(codes[0][mi * K + k]) * e4m3_value(codes[1][n * K + k]);
            chunk += term;
            chunk_mag += std::fabs(term);
          }
          const double sc = static_cast<double>(scales[0][(mi / per_scale[0]) * nb + c]) *
                            scales[1][(n / per_scale[1]) * nb + c];
          ref += chunk * sc;
          mag += chunk_mag * std::fabs(sc);
        }
        worst = std::max(worst, std::fabs(y[mi * N + n] - ref) / (mag + 1e-30));
      }
    CHECK(worst < 1e-5);  // f32 sums of the same products in another order
  }
  // fc1 and fc2 forward (K 300, 136), fc2's data gradient (K 10), both weight
  // gradients (K = the batch, 160).
  CHECK(gemms == 5);
  CHECK(ks == std::multiset<int64_t>{10, 136, 160, 160, 300});
  CHECK(blocks == 3);  // fc1.w, fc2.w forward; fc2.w transposed in its data gradient
  CHECK(tiles == 7);
  // The data gradient's weight is the forward's quantized weight transposed
  // (square blocks: the same codes, the same scales).
  const int64_t out = 10, in = 136;  // fc2.w [10, 136]; its transpose [136, 10]
  const auto fwd = weight_q.find({"fc2.w", out}), bwd = weight_q.find({"fc2.w", in});
  REQUIRE(fwd != weight_q.end());
  REQUIRE(bwd != weight_q.end());
  int64_t mismatches = 0;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) mismatches += fwd->second.first[o * in + k] != bwd->second.first[k * out + o];
  CHECK(mismatches == 0);
  CHECK(bwd->second.second == std::vector<float>{fwd->second.second[0], fwd->second.second[1]});
}
#else
TEST_CASE("CUDA oracle present") {
  FAIL("cuda_fp8.h not found: the fp8-block tests need the CUDA toolkit headers (SGRT_CUDA_INCLUDE)");
}
#endif

TEST_CASE("fp8-block trains the Fashion-MNIST MLP within half a point of fp32") {
  const float ref = test::mlp_recipe_accuracy("fp32"), block = test::mlp_recipe_accuracy("fp8-block");
  MESSAGE("300 steps, batch 100: fp32 " << ref << ", fp8-block " << block);
  CHECK(ref > 0.80f);
  CHECK(block > ref - 0.005f);
}
