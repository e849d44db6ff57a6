// dequant_matmul and the block-table embedding on the GPU backends (Vulkan,
// CUDA) against an independent host reference: the blocks decoded with
// formats/gguf_blocks.h and an f64 matmul. Sizes are awkward on purpose: x has
// batched leading dims and 74 rows (two 64-row tiles, the second partial), w
// [67, 160] (N not a multiple of 64; in the transpose_w mode the output width K =
// 160 is not either). The blocks are random bytes with chosen scales, so every
// q4_1 nibble value and negative q8_0 codes (down to -128) appear, one block of
// each table has d = 0 (q4_1: all its values are m) and one a subnormal f16 d.
//
// On CUDA both of dequant_matmul's paths (w decoded for cuBLASLt; the tiled
// kernel) run. Bound: a GEMM element accumulates Q <= 160 f32 products of exactly decoded
// values in some order: |y - ref| <= Q 2^-24 sum_q |x_q B_qp| (< 1e-5 of that
// sum). The embedding copies decoded values: equal bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <set>

#include "formats/gguf_blocks.h"
#include "harness.h"
#include "scoped_env.h"
#include "test_cuda_support.h"
#include "test_vulkan_support.h"

using namespace sgrt;

namespace {

constexpr int64_t kB = 2, kT = 37, kN = 67, kK = 160, kIds = 9;

// Graph: y = x @ dequant(w)^T, yt = xt @ dequant(w), e = embedding(w, ids); the
// frozen block param w is written raw after init.
std::shared_ptr<const Model> block_model(DType wt) {
  compiler::Graph g;
  g.infer_only = true;
  auto tensor = [&](const char* name, Shape shape, DType dt, sg::Role role) {
    compiler::Tensor t;
    t.name = name;
    t.type = TensorType{std::move(shape), dt};
    t.role = role;
    t.persistent = true;
    t.frozen = role == sg::Role::param;
    return g.add_tensor(std::move(t));
  };
  const int x = tensor("x", {kB, kT, kK}, DType::f32, sg::Role::input);
  const int xt = tensor("xt", {kB, kT, kN}, DType::f32, sg::Role::input);
  const int ids = tensor("ids", {kIds}, DType::i32, sg::Role::input);
  const int w = tensor("w", {kN, kK}, wt, sg::Role::param);
  Status st;
  const compiler::Loc loc{"test_dequant_matmul_gpu", __LINE__};
  Attrs trans;
  trans.set_i("transpose_w", 1);
  const int y = g.op1(OpCode::DequantMatMul, {x, w}, {}, loc, &st);
  REQUIRE_MESSAGE(st.ok(), st.message());
  const int yt = g.op1(OpCode::DequantMatMul, {xt, w}, trans, loc, &st);
  REQUIRE_MESSAGE(st.ok(), st.message());
  const int e = g.op1(OpCode::Embedding, {w, ids}, {}, loc, &st);
  REQUIRE_MESSAGE(st.ok(), st.message());
  int loss = e;  // eval needs a scalar loss: the embedding's sum
  for (int k = 0; k < 2; ++k) {
    Attrs axis;
    axis.set_i("axis", 0);
    loss = g.op1(OpCode::ReduceSum, {loss}, axis, loc, &st);
    REQUIRE_MESSAGE(st.ok(), st.message());
  }
  g.loss = loss;
  g.outputs = {{"y", y}, {"yt", yt}, {"e", e}};
  st = compiler::compile(g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Model> m;
  st = Model::load_bytes(compiler::serialize(g), "dequant_matmul.sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return std::shared_ptr<const Model>(std::move(m));
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = fmt::f16_encode(v);
  p[0] = static_cast<uint8_t>(h & 0xFF);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// Random blocks: codes uniform over all bytes, d (and q4_1's m) random; block 5
// has d = 0, block 6 a subnormal d.
std::vector<uint8_t> random_blocks(DType wt, std::mt19937& rng) {
  const int bb = dtype_block_bytes(wt);
  std::vector<uint8_t> w(dtype_bytes(wt, kN * kK));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (size_t b = 0; b * bb < w.size(); ++b) {
    uint8_t* p = w.data() + b * bb;
    for (int j = 0; j < bb; ++j) p[j] = static_cast<uint8_t>(byte(rng));
    put_f16(p, b == 5 ? 0.f : b == 6 ? -3e-6f : scale(rng));  // block 6: a subnormal f16 d
    if (wt == DType::q4_1) put_f16(p + 2, scale(rng) * 8);
  }
  return w;
}

// Decoded w [N, K] (the reference's own decode: gguf_blocks.h, one element at a time).
std::vector<double> decode(DType wt, const std::vector<uint8_t>& w) {
  std::vector<double> v(kN * kK);
  const int bb = dtype_block_bytes(wt);
  for (int64_t i = 0; i < kN * kK; ++i) {
    const uint8_t* block = w.data() + i / 32 * bb;
    v[i] = wt == DType::q8_0 ? fmt::q8_0_value(block, static_cast<int>(i % 32)) : fmt::q4_1_value(block, static_cast<int>(i % 32));
  }
  return v;
}

// The codes the blocks hold: every nibble of q4_1, negative q8_0 codes and -128.
void check_code_coverage(DType wt, const std::vector<uint8_t>& w) {
  const int bb = dtype_block_bytes(wt);
  std::set<int> codes;
  bool zero_scale = false;
  for (size_t b = 0; b * bb < w.size(); ++b) {
    const uint8_t* p = w.data() + b * bb;
    zero_scale |= p[0] == 0 && p[1] == 0;
    for (int j = 0; j < 32; ++j)
      codes.insert(wt == DType::q8_0 ? static_cast<int8_t>(p[2 + j]) : (j < 16 ? p[4 + j] & 0xF : p[4 + j - 16] >> 4));
  }
  CHECK(zero_scale);
  CHECK(fmt::f16_at(w.data() + 6 * bb) < 0.f);
  CHECK(std::fabs(fmt::f16_at(w.data() + 6 * bb)) < 6.1e-5f);  // below f16's smallest normal
  if (wt == DType::q4_1) CHECK(codes.size() == 16);
  else CHECK((codes.count(-128) && codes.count(-1) && codes.count(127)));
}

// y[m][p] = sum_q x[m][q] B[q][p] against f64, B[q][p] = wd[p][q] or (trans) wd[q][p].
void check_gemm(const std::vector<float>& y, const std::vector<float>& x, const std::vector<double>& wd, bool trans,
                const char* what) {
  const int64_t Q = trans ? kN : kK, P = trans ? kK : kN, M = kB * kT;
  REQUIRE(y.size() == static_cast<size_t>(M * P));
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t p = 0; p < P; ++p) {
      double ref = 0, mag = 0;
      for (int64_t q = 0; q < Q; ++q) {
        const double b = trans ? wd[q * kK + p] : wd[p * kK + q], t = x[m * Q + q] * b;
        ref += t;
        mag += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(y[m * P + p] - ref) / std::max(mag, 1e-30));
    }
  INFO(std::string(what) << ": worst |y - ref| / sum|x b| = " << worst);
  CHECK(worst <= 1e-5);
}

void check_backend(const std::string& backend, DType wt) {
  INFO(backend << ", w " << dtype_name(wt));
  std::mt19937 rng(wt == DType::q8_0 ? 7 : 11);
  const std::vector<uint8_t> w = random_blocks(wt, rng);
  check_code_coverage(wt, w);
  const std::vector<double> wd = decode(wt, w);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(kB * kT * kK), xt(kB * kT * kN);
  for (float& v : x) v = normal(rng);
  for (float& v : xt) v = normal(rng);
  // Row 1 holds blocks 5 (d = 0) and 6 (subnormal d); repeated and edge ids.
  const std::vector<int32_t> ids{0, kN - 1, 1, 3, 3, 40, 66, 1, 12};

  auto s = test::open_session(block_model(wt), backend);
  test::write_vec(*s, "w", w);
  test::write_vec(*s, "x", x);
  test::write_vec(*s, "xt", xt);
  test::write_vec(*s, "ids", ids);
  test::run(*s, "infer");
  check_gemm(test::read_output(*s, "y"), x, wd, false, "x @ dequant(w)^T");
  check_gemm(test::read_output(*s, "yt"), xt, wd, true, "x @ dequant(w) (transpose_w)");
  const std::vector<float> e = test::read_output(*s, "e");
  int64_t wrong = 0;
  for (int64_t r = 0; r < kIds; ++r)
    for (int64_t c = 0; c < kK; ++c) wrong += e[r * kK + c] != static_cast<float>(wd[ids[r] * kK + c]);
  CHECK_MESSAGE(wrong == 0, wrong << " embedding values differ from the decoded rows");

  // An id past the table is an error naming the op (CUDA reports it at the next read).
  std::vector<int32_t> bad = ids;
  bad[2] = kN;
  test::write_vec(*s, "ids", bad);
  int prog = -1;
  REQUIRE(s->find_program("infer", &prog).ok());
  Status st = s->run(prog);
  std::vector<float> out(e.size());
  // The output's tensor (the model names it "e" only among its outputs).
  for (const auto& [name, id] : s->model().outputs())
    if (st.ok() && name == "e") st = s->read(id, out.data(), out.size() * sizeof(float));
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("embedding") != std::string::npos);
  CHECK(st.message().find("outside") != std::string::npos);
}

}  // namespace

TEST_CASE("vulkan: dequant_matmul (both modes) and the block embedding match a decoded f64 reference") {
  if (!test::vulkan_device_present()) return;
  for (DType wt : {DType::q8_0, DType::q4_1}) check_backend("vulkan", wt);
}

TEST_CASE("cuda: dequant_matmul (both modes) and the block embedding match a decoded f64 reference") {
  if (!test::cuda_device_present()) return;
  // w decoded into scratch for cuBLASLt (the default at this size), then the tiled kernel.
  for (const char* decode : {"1", "0"}) {
    CAPTURE(std::string(decode));
    test::ScopedEnv e("SGRT_CUDA_DECODE_BASE", decode);
    for (DType wt : {DType::q8_0, DType::q4_1}) check_backend("cuda", wt);
  }
}
