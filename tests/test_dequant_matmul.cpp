// dequant_matmul and embedding on a frozen q8_0 / q4_1 base (the CPU kernels)
// against an independent reference: each element decoded from the raw block
// bytes in f64 (f16 scales through fmt::f16_decode), then an f64 matmul. Odd
// sizes (one row, K past the GEMM's K block, N not a multiple of the register
// tile), both modes, every ISA path this CPU has, 1 and 2 threads bit-identical;
// the input gradient (transpose_w) against finite differences of the forward op.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "formats/formats.h"
#include "formats/gguf_blocks.h"

using namespace sgrt;
using namespace sgrt::cpu;

namespace {

// A random block matrix [rows, cols]: ggml's encoder on random f32 rows.
struct BlockMat {
  DType dt;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  BlockMat(DType t, int64_t r, int64_t c, std::mt19937& rng) : dt(t), rows(r), cols(c), bytes(dtype_bytes(t, r * c)) {
    std::normal_distribution<float> nd(0.0f, 0.5f);
    float x[32];
    for (int64_t b = 0; b < r * c / 32; ++b) {
      for (float& v : x) v = nd(rng);
      uint8_t* blk = bytes.data() + b * dtype_block_bytes(t);
      if (t == DType::q8_0) fmt::q8_0_encode_block(x, blk);
      else fmt::q4_1_encode_block(x, blk);
    }
  }
  // Element (r, c) from the raw bytes, in f64: q8_0 = i8 * d; q4_1 = nibble * d + m.
  double at(int64_t r, int64_t c) const {
    const int64_t i = r * cols + c;
    const uint8_t* blk = bytes.data() + i / 32 * dtype_block_bytes(dt);
    const int j = static_cast<int>(i % 32);
    const double d = fmt::f16_decode(static_cast<uint32_t>(blk[0] | blk[1] << 8));
    if (dt == DType::q8_0) return static_cast<int8_t>(blk[2 + j]) * d;
    const double m = fmt::f16_decode(static_cast<uint32_t>(blk[2] | blk[3] << 8));
    const int nib = j < 16 ? blk[4 + j] & 0xF : blk[4 + j - 16] >> 4;
    return nib * d + m;
  }
};

// Runs the CPU kernel: dequant_matmul(x [m, in], w) -> [m, out].
std::vector<float> run_op(const std::vector<float>& x, int64_t m, const BlockMat& w, bool transpose_w) {
  const int64_t in = transpose_w ? w.rows : w.cols, out = transpose_w ? w.cols : w.rows;
  const TensorType tx{{m, in}, DType::f32}, tw{{w.rows, w.cols}, w.dt}, ty{{m, out}, DType::f32};
  Attrs at;
  at.set_i("transpose_w", transpose_w);
  std::vector<float> y(m * out, std::nanf(""));
  const CpuKernel k = find_cpu_kernel(OpCode::DequantMatMul, {DType::f32, w.dt}, {DType::f32});
  REQUIRE(static_cast<bool>(k));
  OpArgs a{OpCode::DequantMatMul, &at,
           {{const_cast<float*>(x.data()), &tx, m * in}, {const_cast<uint8_t*>(w.bytes.data()), &tw, w.rows * w.cols}},
           {{y.data(), &ty, m * out}}};
  REQUIRE(k(a).ok());
  return y;
}

std::vector<float> random_x(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}

// Largest |y - ref| / (sum |x| |w| over the reduction), against f64.
double worst_error(const std::vector<float>& y, const std::vector<float>& x, int64_t m, const BlockMat& w, bool t) {
  const int64_t in = t ? w.rows : w.cols, out = t ? w.cols : w.rows;
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double ref = 0, mag = 1e-30;
      for (int64_t k = 0; k < in; ++k) {
        const double wv = t ? w.at(k, j) : w.at(j, k);
        ref += x[i * in + k] * wv;
        mag += std::fabs(x[i * in + k] * wv);
      }
      worst = std::max(worst, std::fabs(y[i * out + j] - ref) / mag);
    }
  return worst;
}

const DType kBlockTypes[] = {DType::q8_0, DType::q4_1};

// The f32 matmul kernel on w's values decoded by BlockMat::at: x @ w^T, or x @ w.
std::vector<float> run_f32_matmul(const std::vector<float>& x, int64_t m, const BlockMat& w, bool transpose_w) {
  const int64_t in = transpose_w ? w.rows : w.cols, out = transpose_w ? w.cols : w.rows;
  std::vector<float> wf(w.rows * w.cols);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) wf[r * w.cols + c] = static_cast<float>(w.at(r, c));
  const TensorType tx{{m, in}, DType::f32}, tw{{transpose_w ? in : out, transpose_w ? out : in}, DType::f32}, ty{{m, out}, DType::f32};
  Attrs at;
  at.set_i("trans_b", !transpose_w);
  std::vector<float> y(m * out, std::nanf(""));
  const CpuKernel k = find_cpu_kernel(OpCode::MatMul, {DType::f32, DType::f32}, {DType::f32});
  REQUIRE(static_cast<bool>(k));
  OpArgs a{OpCode::MatMul, &at, {{const_cast<float*>(x.data()), &tx, m * in}, {wf.data(), &tw, w.rows * w.cols}}, {{y.data(), &ty, m * out}}};
  REQUIRE(k(a).ok());
  return y;
}

}  // namespace

TEST_CASE("dequant_matmul matches an f64 matmul of the decoded blocks and the f32 matmul to the bit, both modes, every ISA") {
  // The f32 matmul of the same values sums them in the same order, so a bit of
  // difference is in the decode (a wrong nibble, a scale) or in placing the
  // decoded values in the packed panels (a row past the tile's, a K chunk's tail).
  std::mt19937 rng(7);
  // {m, n, k}: w is [n, k]; k a multiple of 32, with a 32-step tail past 64-step
  // chunks (416, 96) and past the K block (416, 1056); n short of and past whole
  // register tiles.
  const int64_t shapes[][3] = {{1, 5, 32}, {1, 97, 416}, {7, 33, 96}, {37, 1, 64}, {130, 45, 416}, {3, 300, 32}, {64, 96, 1056}};
  for (Isa isa : kIsas) {
    if (isa > detected_isa()) continue;
    set_isa_limit(isa);
    for (DType dt : kBlockTypes)
      for (const auto& s : shapes)
        for (bool t : {false, true}) {
          CAPTURE(std::string(isa_name(isa)));
          CAPTURE(std::string(dtype_name(dt)));
          CAPTURE(s[0]); CAPTURE(s[1]); CAPTURE(s[2]); CAPTURE(t);
          const BlockMat w(dt, s[1], s[2], rng);
          const int64_t in = t ? s[1] : s[2];
          const std::vector<float> x = random_x(s[0] * in, rng);
          const std::vector<float> y = run_op(x, s[0], w, t), ref = run_f32_matmul(x, s[0], w, t);
          CHECK(worst_error(y, x, s[0], w, t) < 2e-6);
          // (One row times a row-major f32 W is matmul's own gemv, summing in another
          // order; so would an f32 product of at most 16 columns over K >= 128, its
          // skinny path, which no shape here is.)
          if (s[0] > 1 || !t) CHECK(std::memcmp(y.data(), ref.data(), sizeof(float) * y.size()) == 0);
        }
  }
  set_isa_limit(kTopIsa);
}

TEST_CASE("dequant_matmul does not depend on the thread count: 1 and 2 threads give the same bits") {
  std::mt19937 rng(11);
  for (DType dt : kBlockTypes)
    for (bool t : {false, true})
      for (int64_t m : {1, 67}) {
        const BlockMat w(dt, 200, 448, rng);
        const std::vector<float> x = random_x(m * (t ? 200 : 448), rng);
        set_num_threads(1);
        const std::vector<float> y1 = run_op(x, m, w, t);
        set_num_threads(2);
        const std::vector<float> y2 = run_op(x, m, w, t);
        set_num_threads(0);
        CHECK(std::memcmp(y1.data(), y2.data(), sizeof(float) * y1.size()) == 0);
      }
}

TEST_CASE("transpose_w is the input gradient: finite differences through the forward op") {
  // L(x) = sum(g * dequant_matmul(x, w)); dL/dx = dequant_matmul(g, w, transpose_w).
  std::mt19937 rng(3);
  for (DType dt : kBlockTypes) {
    const int64_t m = 3, n = 9, k = 64;
    const BlockMat w(dt, n, k, rng);
    std::vector<float> x = random_x(m * k, rng);
    const std::vector<float> g = random_x(m * n, rng);
    const std::vector<float> dx = run_op(g, m, w, true);
    auto loss = [&] {
      const std::vector<float> y = run_op(x, m, w, false);
      double l = 0;
      for (size_t i = 0; i < y.size(); ++i) l += static_cast<double>(g[i]) * y[i];
      return l;
    };
    for (int64_t i : {int64_t{0}, int64_t{37}, m * k - 1}) {
      const float x0 = x[i], h = 1.0f / 64;  // exact steps: x0 +- h is exact for |x0| < 1
      x[i] = x0 + h;
      const double lp = loss();
      x[i] = x0 - h;
      const double lm = loss();
      x[i] = x0;
      CAPTURE(i);
      CHECK(dx[i] == doctest::Approx((lp - lm) / (2 * h)).epsilon(1e-4));
    }
  }
}

TEST_CASE("embedding gathers rows of a q8_0 / q4_1 table exactly as decoded") {
  std::mt19937 rng(5);
  for (DType dt : kBlockTypes) {
    const BlockMat table(dt, 50, 96, rng);
    const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
    const TensorType tt{{50, 96}, dt}, ti{{5}, DType::i32}, ty{{5, 96}, DType::f32};
    std::vector<float> y(5 * 96);
    Attrs none;
    const CpuKernel k = find_cpu_kernel(OpCode::Embedding, {dt, DType::i32}, {DType::f32});
    REQUIRE(static_cast<bool>(k));
    OpArgs a{OpCode::Embedding, &none,
             {{const_cast<uint8_t*>(table.bytes.data()), &tt, 50 * 96}, {const_cast<int32_t*>(ids.data()), &ti, 5}}, {{y.data(), &ty, 5 * 96}}};
    REQUIRE(k(a).ok());
    // Products of an 8-bit code and an f16 scale are exact in f32, so the f64
    // value rounded once is ggml's f32 value, bit for bit.
    int mismatches = 0;
    for (int r = 0; r < 5; ++r)
      for (int c = 0; c < 96; ++c) mismatches += y[r * 96 + c] != static_cast<float>(table.at(ids[r], c));
    CHECK(mismatches == 0);
    // An id outside the table is refused, naming it.
    std::vector<int32_t> bad = {50};
    const TensorType tb{{1}, DType::i32};
    OpArgs ab{OpCode::Embedding, &none, {{const_cast<uint8_t*>(table.bytes.data()), &tt, 50 * 96}, {bad.data(), &tb, 1}}, {{y.data(), &ty, 96}}};
    CHECK(k(ab).message().find("id 50") != std::string::npos);
  }
}
