// Every GEMM against an FP64 GEMM of the dequantized inputs, within an
// accumulation-order tolerance: odd sizes, every transpose, every dtype mix and
// scale mode, on every ISA path this CPU has (forced through set_isa_limit).
#include <atomic>
#include <chrono>
#include <fstream>
#include <doctest/doctest.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu/core_affinity.h"
#include "cpu/cpu_features.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "formats/formats.h"
#include "kernel_checks.h"

using namespace sgrt;
using namespace sgrt::cpu;

namespace {

// A stored matrix of `rows x cols` with leading dimension cols + pad, random codes.
struct Mat {
  DType dt;
  int64_t rows, cols, ld;
  std::vector<uint8_t> bytes;

  Mat(DType t, int64_t r, int64_t c, std::mt19937& rng) : dt(t), rows(r), cols(c), ld(c + 3) {
    const int64_t n = rows * ld;
    bytes.assign(dtype_bytes(t, n) + 4, 0);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t code = rng();
      switch (t) {
        case DType::f32: { float v = u(rng); std::memcpy(&bytes[4 * i], &v, 4); break; }
        case DType::bf16: { uint16_t v = fmt::bf16_encode(u(rng)); std::memcpy(&bytes[2 * i], &v, 2); break; }
        case DType::e4m3: bytes[i] = (code & 0x7F) == 0x7F ? 0x3C : code & 0xFF; break;
        case DType::e5m2: bytes[i] = (code & 0x7C) == 0x7C ? 0x3C : code & 0xFF; break;
        case DType::e2m1: bytes[i / 2] |= (code & 0xF) << (4 * (i & 1)); break;
        default: break;
      }
    }
  }
  void set_zero(int64_t r, int64_t c) {  // every format's zero is the all-zero code
    const int64_t i = r * ld + c;
    if (dt == DType::e2m1) bytes[i / 2] &= 0xF0 >> (4 * (i & 1));
    else std::memset(&bytes[dtype_bytes(dt, i)], 0, dtype_bytes(dt, 1));
  }
  double at(int64_t r, int64_t c) const {
    const int64_t i = r * ld + c;
    switch (dt) {
      case DType::f32: { float v; std::memcpy(&v, &bytes[4 * i], 4); return v; }
      case DType::bf16: { uint16_t v; std::memcpy(&v, &bytes[2 * i], 2); return fmt::bf16_decode(v); }
      case DType::e4m3: return fmt::e4m3_decode(bytes[i]);
      case DType::e5m2: return fmt::e5m2_decode(bytes[i]);
      default: return fmt::e2m1_decode(bytes[i / 2] >> (4 * (i & 1)));
    }
  }
};

// An operand of logical shape op(X) = [outer, K], with its scales.
struct Operand {
  Mat m;
  GemmOperand g;
  std::vector<float> f32_scale;
  std::vector<int32_t> exps;
  std::vector<uint8_t> codes;

  Operand(DType t, bool trans, bool is_b, int64_t outer, int64_t K, std::mt19937& rng)
      // A stored [M,K] or [K,M] (trans); B stored [K,N] or [N,K] (trans).
      : m(t, (trans != is_b) ? K : outer, (trans != is_b) ? outer : K, rng) {
    g.data = m.bytes.data();
    g.dtype = t;
    g.trans = trans;
    g.ld = m.ld;
    stored_outer_major = (trans == is_b);
    this->K = K;
  }
  bool stored_outer_major;
  int64_t K;

  void set_zero(int64_t o, int64_t k) { stored_outer_major ? m.set_zero(o, k) : m.set_zero(k, o); }
  double value(int64_t o, int64_t k) const {
    const double v = stored_outer_major ? m.at(o, k) : m.at(k, o);
    return v * scale(o, k);
  }
  double scale(int64_t o, int64_t k) const {
    double s = g.tensor_scale;
    switch (g.scale_mode) {
      case OperandScale::none: return s;
      case OperandScale::tensor: return s * f32_scale[0];
      case OperandScale::outer: return s * std::ldexp(1.0, -exps[o]);
      case OperandScale::inner: return s * f32_scale[k];
      case OperandScale::block: {
        const uint8_t c = codes[o * g.scale_ld + k / g.block];
        return s * (g.scale_dtype == DType::e8m0 ? fmt::e8m0_decode(c) : fmt::e4m3_decode(c));
      }
    }
    return s;
  }
};

enum class Scales { none, tensor, outer, inner, mx, nvfp4 };

void set_scales(Operand& op, Scales s, int64_t outer, int64_t K, std::mt19937& rng) {
  GemmOperand& g = op.g;
  switch (s) {
    case Scales::none: break;
    case Scales::tensor:
      op.f32_scale = {0.37f};
      g.scale_mode = OperandScale::tensor; g.scale = op.f32_scale.data();
      break;
    case Scales::outer:  // the quantizer's exponents: multiplier 2^-e
      for (int64_t i = 0; i < outer; ++i) op.exps.push_back(static_cast<int32_t>(rng() % 9) - 4);
      g.scale_mode = OperandScale::outer; g.scale = op.exps.data(); g.scale_dtype = DType::i32;
      break;
    case Scales::inner:  // powers of two, exact on the BF16 path
      for (int64_t k = 0; k < K; ++k) op.f32_scale.push_back(std::ldexp(1.0f, static_cast<int>(rng() % 7) - 3));
      g.scale_mode = OperandScale::inner; g.scale = op.f32_scale.data();
      break;
    case Scales::mx:
    case Scales::nvfp4: {
      const bool mx = s == Scales::mx;
      g.scale_mode = OperandScale::block;
      g.block = mx ? 32 : 16;
      g.scale_ld = (K + g.block - 1) / g.block + 1;  // padded rows of scales
      g.scale_dtype = mx ? DType::e8m0 : DType::e4m3;
      for (int64_t i = 0; i < outer * g.scale_ld; ++i)
        op.codes.push_back(static_cast<uint8_t>(mx ? 123 + rng() % 9 : 0x20 + rng() % 0x30));
      g.scale = op.codes.data();
      if (!mx) g.tensor_scale = 0.011f;
      break;
    }
  }
}

struct Case {
  DType ta, tb;
  Scales sa, sb;
};

// Runs one GEMM and compares with FP64; returns the number of elements off.
int64_t check_gemm(const Case& cs, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                   float beta, std::mt19937& rng) {
  Operand a(cs.ta, trans_a, false, M, K, rng), b(cs.tb, trans_b, true, N, K, rng);
  set_scales(a, cs.sa, M, K, rng);
  set_scales(b, cs.sb, N, K, rng);
  const int64_t ldc = N + 2;
  std::vector<float> C(M * ldc), C0;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& c : C) c = beta == 0.0f ? NAN : u(rng);  // beta == 0 must not read C
  C0 = C;
  const float alpha = 0.75f;
  REQUIRE(gemm(M, N, K, alpha, a.g, b.g, beta, C.data(), ldc) == nullptr);
  int64_t bad = 0;
  std::vector<double> av(M * K), bv(N * K);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) av[i * K + k] = a.value(i, k);
  for (int64_t j = 0; j < N; ++j)
    for (int64_t k = 0; k < K; ++k) bv[j * K + k] = b.value(j, k);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = av[i * K + k] * bv[j * K + k];
        ref += p;
        mag += std::fabs(p);
      }
      const double c0 = beta == 0.0f ? 0.0 : beta * double(C0[i * ldc + j]);
      ref = alpha * ref + c0;
      // FP32 accumulation of K products plus the epilogue's few roundings.
      const double tol = (K + 4) * std::ldexp(1.0, -24) * (std::fabs(alpha) * mag + std::fabs(c0)) + 1e-30;
      bad += !(std::fabs(C[i * ldc + j] - ref) <= tol);
    }
  }
  return bad;
}

// M = 1 with B stored [N, K] is the matrix-vector path (gemm_problem.h's is_gemv):
// K past 16-element steps and their tails, and past the blocked path's K block.
const int64_t kShapes[][3] = {{1, 1, 1},   {7, 33, 65}, {33, 7, 129}, {65, 129, 33}, {129, 65, 7},
                              {1, 129, 65}, {129, 1, 33}, {65, 65, 1}, {33, 40, 1601}, {3, 3100, 5},
                              {1, 300, 1601}};

void run_cases(const std::vector<Case>& cases) {
  std::mt19937 rng(42);
  for (Isa isa : test::isa_paths()) {
    set_isa_limit(isa);
    for (const Case& c : cases)
      for (const auto& s : kShapes)
        for (int t = 0; t < 4; ++t) {
          const float beta = (t + s[0]) % 2 ? 0.0f : 0.5f;
          CAPTURE(std::string(isa_name(isa)));
          CAPTURE(int(c.ta));
          CAPTURE(int(c.tb));
          CAPTURE(int(c.sa));
          CAPTURE(int(c.sb));
          CAPTURE(s[0]); CAPTURE(s[1]); CAPTURE(s[2]); CAPTURE(t);
          CHECK(check_gemm(c, s[0], s[1], s[2], t & 1, t & 2, beta, rng) == 0);
        }
  }
  set_isa_limit(kTopIsa);
}

}  // namespace

TEST_CASE("f32 and bf16 GEMMs match FP64") {
  run_cases({{DType::f32, DType::f32, Scales::none, Scales::none},
             {DType::bf16, DType::bf16, Scales::none, Scales::none},
             {DType::f32, DType::e4m3, Scales::none, Scales::tensor}});
}

TEST_CASE("FP8 GEMMs (any E4M3/E5M2 mix, per-tensor / per-row / MX block scales) match FP64") {
  run_cases({{DType::e4m3, DType::e4m3, Scales::tensor, Scales::tensor},
             {DType::e4m3, DType::e5m2, Scales::outer, Scales::outer},
             {DType::e5m2, DType::e4m3, Scales::mx, Scales::mx},
             {DType::e5m2, DType::e5m2, Scales::none, Scales::outer}});
}

TEST_CASE("FP4 GEMMs (per-row x per-input-channel, MXFP4, NVFP4) match FP64") {
  run_cases({{DType::e2m1, DType::e2m1, Scales::outer, Scales::inner},
             {DType::e2m1, DType::e2m1, Scales::mx, Scales::mx},
             {DType::e2m1, DType::e2m1, Scales::nvfp4, Scales::nvfp4},
             {DType::bf16, DType::e2m1, Scales::none, Scales::outer}});
}

TEST_CASE("gemm_f32 covers every transpose and equals gemm()") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t M = 37, N = 45, K = 29;
  std::vector<float> A(K * M), B(K * N);
  for (float& x : A) x = u(rng);
  for (float& x : B) x = u(rng);
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    std::vector<float> C(M * N, NAN);
    gemm_f32(ta, tb, M, N, K, 2.0f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.0f, C.data(), N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double ref = 0;
        for (int64_t k = 0; k < K; ++k) ref += double(A[ta ? k * M + i : i * K + k]) * B[tb ? j * K + k : k * N + j];
        CHECK(std::fabs(C[i * N + j] - 2 * ref) < 1e-4);
      }
  }
}

TEST_CASE("a product with few columns (run transposed) equals those columns of a wide one, to the bit") {
  // N < 16 runs as C^T = op(B)^T op(A)^T (gemm.cpp); each element's K sum and its
  // merge with rs, cs and beta must not notice. B's first `narrow` columns of a
  // 40-column product are the narrow product's. (Plain f32 operands take the
  // skinny path instead: test_gemm_skinny.cpp.)
  std::mt19937 rng(11);
  const int64_t M = 53, K = 300, wide = 40;
  for (DType t : {DType::e4m3, DType::bf16}) {
    for (int64_t narrow : {1, 7, 10, 15}) {
      for (int tr = 0; tr < 4; ++tr) {
        CAPTURE(dtype_name(t));
        CAPTURE(narrow);
        CAPTURE(tr);
        Operand a(t, tr & 1, false, M, K, rng), bw(t, tr & 2, true, wide, K, rng);
        // Tensor scales of 0.37: with alpha, rs and cs are not powers of two, so the
        // merge's order of multiplication shows.
        set_scales(a, t == DType::bf16 ? Scales::none : Scales::tensor, M, K, rng);
        set_scales(bw, t == DType::bf16 ? Scales::none : Scales::tensor, wide, K, rng);
        std::vector<float> Cw(M * wide), Cn(M * narrow);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < wide; ++j) Cw[i * wide + j] = 0.25f * static_cast<float>((i * 7 + j) % 13);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < narrow; ++j) Cn[i * narrow + j] = Cw[i * wide + j];
        // The narrow B is the wide one's first columns: the same storage, ld and
        // per-column scales, read for fewer outer indices.
        REQUIRE(gemm(M, wide, K, 1.5f, a.g, bw.g, 0.5f, Cw.data(), wide) == nullptr);
        REQUIRE(gemm(M, narrow, K, 1.5f, a.g, bw.g, 0.5f, Cn.data(), narrow) == nullptr);
        int64_t differ = 0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < narrow; ++j) differ += std::memcmp(&Cn[i * narrow + j], &Cw[i * wide + j], 4) != 0;
        CHECK(differ == 0);
      }
    }
  }
}

namespace {

// The epilogue tests' cases: every ISA path, f32 and e4m3, full and edge tiles,
// sums over several K blocks (K = 1601), a transposed narrow product (N = 10),
// each with variant v = 0 and 1: body(t, M, N, K, v, rng).
template <class F>
void epilogue_cases(uint32_t seed, F&& body) {
  std::mt19937 rng(seed);
  const int64_t shapes[][3] = {{37, 45, 29}, {70, 96, 1601}, {53, 10, 300}, {1, 33, 65}, {129, 65, 7}};
  for (Isa isa : test::isa_paths()) {
    set_isa_limit(isa);
    for (DType t : {DType::f32, DType::e4m3})
      for (const auto& sh : shapes)
        for (int v : {0, 1}) {
          CAPTURE(std::string(isa_name(isa)));
          CAPTURE(dtype_name(t));
          CAPTURE(sh[0]); CAPTURE(sh[1]); CAPTURE(sh[2]); CAPTURE(v);
          body(t, sh[0], sh[1], sh[2], v, rng);
        }
  }
  set_isa_limit(kTopIsa);
}

}  // namespace

TEST_CASE("a product's last rows in a cut tile equal those rows of a taller product, to the bit") {
  // M = 256 leaves 4 rows of a 14-row tile (AVX-512) or of a 6-row one (AVX2,
  // NEON): they run on the 4- and 8-row kernels or micro_edge, the taller
  // product's (M = 336, a multiple of every MR) on full tiles. Each row's sum
  // and merge (alpha, scales, beta, several K blocks) must not notice.
  std::mt19937 rng(29);
  const int64_t tall = 336, N = 70, K = 1601;
  for (Isa isa : test::isa_paths()) {
    set_isa_limit(isa);
    for (DType t : {DType::f32, DType::e4m3})
      for (int64_t M : {256, 260, 262, 255}) {
        CAPTURE(std::string(isa_name(isa)));
        CAPTURE(dtype_name(t));
        CAPTURE(M);
        Operand a(t, M % 2, false, tall, K, rng), b(t, true, true, N, K, rng);
        set_scales(a, t == DType::f32 ? Scales::none : Scales::outer, tall, K, rng);
        set_scales(b, t == DType::f32 ? Scales::none : Scales::tensor, N, K, rng);
        std::vector<float> ct(tall * N), cm(M * N);
        for (int64_t i = 0; i < tall * N; ++i) ct[i] = 0.25f * static_cast<float>(i % 13);
        std::copy(ct.begin(), ct.begin() + M * N, cm.begin());
        // The shorter A is the taller one's first rows: the same storage, ld and
        // per-row scales, read for fewer outer indices.
        REQUIRE(gemm(tall, N, K, 1.5f, a.g, b.g, 0.5f, ct.data(), N) == nullptr);
        REQUIRE(gemm(M, N, K, 1.5f, a.g, b.g, 0.5f, cm.data(), N) == nullptr);
        CHECK(std::memcmp(cm.data(), ct.data(), cm.size() * 4) == 0);
      }
  }
  set_isa_limit(kTopIsa);
}

TEST_CASE("a bias in the epilogue equals the product plus a separate add, to the bit") {
  // The CPU backend fuses add(matmul, broadcast_to(b)) into the GEMM
  // (runtime/src/product_fusion.h): the bias after the whole K sum; v: beta 0.5.
  std::uniform_real_distribution<float> u(-1, 1);
  epilogue_cases(5, [&](DType t, int64_t M, int64_t N, int64_t K, int v, std::mt19937& rng) {
    const float beta = v ? 0.5f : 0.0f;
    Operand a(t, false, false, M, K, rng), b(t, true, true, N, K, rng);
    set_scales(a, t == DType::f32 ? Scales::none : Scales::tensor, M, K, rng);
    set_scales(b, t == DType::f32 ? Scales::none : Scales::outer, N, K, rng);
    std::vector<float> bias(N), fused(M * N), separate(M * N);
    for (float& x : bias) x = 3.0f * u(rng);
    for (size_t i = 0; i < fused.size(); ++i) fused[i] = separate[i] = u(rng);
    REQUIRE(gemm(M, N, K, 1.5f, a.g, b.g, beta, fused.data(), N, bias.data()) == nullptr);
    REQUIRE(gemm(M, N, K, 1.5f, a.g, b.g, beta, separate.data(), N) == nullptr);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) separate[i * N + j] += bias[j];
    CHECK(test::differing_floats(fused, separate) == 0);
  });
}

TEST_CASE("a ReLU or a ReLU mask in the epilogue equals the product then relu / relu_grad, to the bit") {
  // The CPU backend fuses relu(matmul) and relu_grad(y, matmul) into the GEMM
  // (runtime/src/product_fusion.h): after the whole K sum and the bias (v: with a
  // bias). The mask holds negatives, zeros of both signs and NaNs, which keep
  // nothing; the product's own NaN (a NaN in A) must become 0 under relu.
  std::uniform_real_distribution<float> u(-1, 1);
  epilogue_cases(17, [&](DType t, int64_t M, int64_t N, int64_t K, int v, std::mt19937& rng) {
    Operand a(t, false, false, M, K, rng), b(t, true, true, N, K, rng);
    if (t == DType::f32) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(&a.m.bytes[4 * (M / 2) * a.m.ld], &nan, 4);  // row M / 2 is NaN
    }
    std::vector<float> bias(N), mask(M * N), plain(M * N), relu(M * N), masked(M * N);
    for (float& x : bias) x = 3.0f * u(rng);
    for (float& x : mask) {
      const float choices[] = {u(rng), -u(rng), 0.f, -0.f, std::numeric_limits<float>::quiet_NaN()};
      x = choices[rng() % 5];
    }
    const float* bp = v ? bias.data() : nullptr;
    REQUIRE(gemm(M, N, K, 1.5f, a.g, b.g, 0.f, plain.data(), N, bp) == nullptr);
    REQUIRE(gemm(M, N, K, 1.5f, a.g, b.g, 0.f, relu.data(), N, bp, Triangle::none, Activation{true, nullptr}) == nullptr);
    REQUIRE(gemm(M, N, K, 1.5f, a.g, b.g, 0.f, masked.data(), N, bp, Triangle::none, Activation{false, mask.data()}) ==
            nullptr);
    std::vector<float> want_relu(M * N), want_masked(M * N);
    for (size_t i = 0; i < plain.size(); ++i) {
      want_relu[i] = plain[i] > 0.f ? plain[i] : 0.f;
      want_masked[i] = mask[i] > 0.f ? plain[i] : 0.f;
    }
    CHECK(test::differing_floats(relu, want_relu) == 0);
    CHECK(test::differing_floats(masked, want_masked) == 0);
  });
}

TEST_CASE("a triangular A or C: the product skips tiles and terms, never bits") {
  // Causal attention (attention.cpp) names the triangle its [T, T] tiles have. The
  // terms a triangular A lets a row's sum skip are exact zeros at its start or end,
  // so every element must equal the full product's to the bit: odd sizes, sums
  // that span several K blocks (K = 1000), rows past K (a_upper's sum is then
  // empty), beta, every ISA, f32 and the FP8 (BF16 pairs) path. A lower C leaves
  // tiles above the diagonal as they were: a sentinel there must survive (M = 65:
  // the last row tile ends on the diagonal of a column panel's first column).
  std::mt19937 rng(13);
  const int64_t shapes[][3] = {{128, 128, 128}, {45, 70, 37}, {200, 40, 1000}, {300, 40, 200}, {129, 65, 7}, {65, 70, 9}};
  for (Isa isa : test::isa_paths()) {
    set_isa_limit(isa);
    for (DType t : {DType::f32, DType::e4m3})
      for (const auto& sh : shapes)
        for (Triangle tri : {Triangle::a_lower, Triangle::a_upper, Triangle::c_lower})
          for (float beta : {0.0f, 0.5f}) {
            const int64_t M = sh[0], N = sh[1], K = sh[2];
            CAPTURE(std::string(isa_name(isa)));
            CAPTURE(dtype_name(t));
            CAPTURE(M); CAPTURE(N); CAPTURE(K); CAPTURE(int(tri)); CAPTURE(beta);
            Operand a(t, tri == Triangle::a_upper, false, M, K, rng), b(t, false, true, N, K, rng);
            for (int64_t m = 0; m < M; ++m)
              for (int64_t k = 0; k < K; ++k)
                if ((tri == Triangle::a_lower && k > m) || (tri == Triangle::a_upper && k < m)) a.set_zero(m, k);
            const float sentinel = 1234.5f;
            std::vector<float> full(M * N, sentinel), part(M * N, sentinel);
            REQUIRE(gemm(M, N, K, 1.5f, a.g, b.g, beta, full.data(), N) == nullptr);
            REQUIRE(gemm(M, N, K, 1.5f, a.g, b.g, beta, part.data(), N, nullptr, tri) == nullptr);
            int64_t differ = 0, kept = 0;
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n) {
                if (tri == Triangle::c_lower && n > m) kept += part[m * N + n] == sentinel;
                else differ += std::memcmp(&full[m * N + n], &part[m * N + n], 4) != 0;
              }
            CHECK(differ == 0);
            if (tri == Triangle::c_lower && N > 64) CHECK(kept > 0);
          }
  }
  set_isa_limit(kTopIsa);
}

TEST_CASE("A's all-zero rows are skipped without changing a bit") {
  // gemm() multiplies only the rows of an A (f32, bf16, e4m3, e5m2; none, tensor
  // or outer scales) that hold a non-zero (gemm.cpp's multiply_nonzero_rows; a
  // fine-tune's masked prompt and padding rows). Each result must be the full
  // product's to the bit: the full product here is the same A with its zero rows
  // holding a tiny code, so none is skipped, and its other rows must come out the
  // same (no row's sum depends on another row). A zero row holds +0 (alpha > 0),
  // then the bias, then relu. Patterns: prompt and padding rows around each
  // sequence's response, every third row, one row (with B stored [N, K], which
  // alone would take the matrix-vector sums), none, too few zero rows to skip; -0
  // is a zero, a NaN is not. K = 65536 gathers its 262 non-zero f32 rows in two
  // chunks (64 MiB each at most: 256 rows).
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t shapes[][3] = {{64, 70, 300}, {40, 33, 1601}, {200, 16, 16}, {300, 16, 65536}};
  const std::pair<DType, Scales> kinds[] = {
      {DType::f32, Scales::none}, {DType::bf16, Scales::none}, {DType::e4m3, Scales::tensor}, {DType::e5m2, Scales::outer}};
  for (Isa isa : test::isa_paths()) {
    set_isa_limit(isa);
    for (const auto& [dt, sc] : kinds)
      for (const auto& sh : shapes)
        for (int pattern = 0; pattern < 5; ++pattern)
          for (int v = 0; v < 3; ++v) {  // nothing, a bias, a bias and relu
            const int64_t M = sh[0], N = sh[1], K = sh[2];
            if (K > 4096 && (dt != DType::f32 || pattern > 0 || v > 0 || isa != test::isa_paths().back())) continue;  // one large case
            CAPTURE(std::string(isa_name(isa)));
            CAPTURE(std::string(dtype_name(dt)));
            CAPTURE(M); CAPTURE(N); CAPTURE(K); CAPTURE(pattern); CAPTURE(v);
            auto zero = [&](int64_t m) {
              switch (pattern) {
                case 0: return M == 300 ? m % 8 == 0 : m % 16 < 5 || m % 16 >= 11;  // prompt, response, padding
                case 1: return m % 3 != 1 && m != 3;  // row 3: zeros and a NaN
                case 2: return m != M / 2;
                case 3: return false;
                default: return m == 3;  // 1 of M: not worth skipping
              }
            };
            Operand a(dt, false, false, M, K, rng), b(dt, pattern == 2, true, N, K, rng);
            set_scales(a, sc, M, K, rng);
            Operand full = a;
            full.g.data = full.m.bytes.data();
            if (sc == Scales::tensor) full.g.scale = full.f32_scale.data();
            if (sc == Scales::outer) full.g.scale = full.exps.data();
            const size_t width = dtype_bytes(dt, 1);
            // Element (m, k)'s code: bits (1: the smallest positive code; the sign bit: -0).
            auto set = [&](Operand& op, int64_t m, int64_t k, uint32_t bits) {
              std::memcpy(&op.m.bytes[(m * op.m.ld + k) * width], &bits, width);
            };
            const uint32_t sign = 1u << (8 * width - 1);
            for (int64_t m = 0; m < M; ++m)
              if (zero(m))
                for (int64_t k = 0; k < K; ++k) set(a, m, k, k % 2 ? sign : 0), set(full, m, k, 1);
            if (pattern == 1)  // row 3: zeros and a NaN (every format's all-ones magnitude)
              for (Operand* op : {&a, &full})
                for (int64_t k = 0; k < K; ++k) set(*op, 3, k, k == K - 1 ? sign - 1 : 0);
            std::vector<float> bias(N);
            for (float& x : bias) x = 3.0f * u(rng);
            const float* bp = v ? bias.data() : nullptr;
            const Activation act{v == 2, nullptr};
            const int64_t ldc = N + 1;
            std::vector<float> skipped(M * ldc, 1234.5f), dense(M * ldc, 1234.5f);
            REQUIRE(gemm(M, N, K, 1.5f, a.g, b.g, 0.0f, skipped.data(), ldc, bp, Triangle::none, act) == nullptr);
            REQUIRE(gemm(M, N, K, 1.5f, full.g, b.g, 0.0f, dense.data(), ldc, bp, Triangle::none, act) == nullptr);
            int64_t differ = 0, zero_rows_wrong = 0;
            for (int64_t m = 0; m < M; ++m)
              for (int64_t j = 0; j < ldc; ++j) {
                const float got = skipped[m * ldc + j];
                if (j == N) differ += got != 1234.5f;  // past the row: untouched
                else if (!zero(m)) differ += std::memcmp(&got, &dense[m * ldc + j], 4) != 0;
                else {
                  float want = v ? 0.0f + bias[j] : 0.0f;
                  if (v == 2) want = want > 0.f ? want : 0.f;
                  zero_rows_wrong += std::memcmp(&got, &want, 4) != 0;
                }
              }
            CHECK(differ == 0);
            CHECK(zero_rows_wrong == 0);
          }
  }
  set_isa_limit(kTopIsa);
}

TEST_CASE("results do not depend on the thread count") {
  std::mt19937 rng(3);
  for (DType t : {DType::f32, DType::e4m3})
    for (int64_t M : {300, 1}) {  // blocked and matrix-vector
      CAPTURE(dtype_name(t));
      CAPTURE(M);
      Operand a(t, false, false, M, 900, rng), b(t, true, true, 200, 900, rng);
      std::vector<float> c1(M * 200), c2(M * 200);
      set_num_threads(1);
      REQUIRE(gemm(M, 200, 900, 1.0f, a.g, b.g, 0.0f, c1.data(), 200) == nullptr);
      set_num_threads(2);
      REQUIRE(gemm(M, 200, 900, 1.0f, a.g, b.g, 0.0f, c2.data(), 200) == nullptr);
      set_num_threads(0);
      CHECK(std::memcmp(c1.data(), c2.data(), c1.size() * 4) == 0);
    }
}

#if defined(__aarch64__)
// Both kernels sum each element's K products in order with fused multiply-adds and
// scale the sums alike, so on AArch64 a single K block (K <= KC = 256) with beta == 0
// must come out of NEON exactly as from the portable kernel. Merging into C (beta,
// later K blocks) is one more fused multiply-add whose operand pairing the compiler
// picks in the portable kernel: there the FP64 bounds above apply to both.
TEST_CASE("NEON f32 GEMM equals the portable kernel to the bit") {
  std::mt19937 rng(11);
  for (const auto& s : kShapes)
    for (int t = 0; t < 4 && s[2] <= 256; ++t) {
      Operand a(DType::f32, t & 1, false, s[0], s[2], rng), b(DType::f32, t & 2, true, s[1], s[2], rng);
      std::vector<float> c[2];
      for (int path = 0; path < 2; ++path) {
        c[path].assign(s[0] * s[1], NAN);
        set_isa_limit(path ? Isa::neon : Isa::generic);
        REQUIRE(gemm(s[0], s[1], s[2], 1.5f, a.g, b.g, 0.0f, c[path].data(), s[1]) == nullptr);
      }
      CAPTURE(s[0]); CAPTURE(s[1]); CAPTURE(s[2]); CAPTURE(t);
      CHECK(std::memcmp(c[0].data(), c[1].data(), c[0].size() * 4) == 0);
    }
  set_isa_limit(kTopIsa);
}
#endif

TEST_CASE("bad arguments are rejected, not crashed on") {
  float c = 1.0f, x = 1.0f;
  GemmOperand a, b;
  a.data = b.data = &x;
  a.ld = b.ld = 1;
  CHECK(gemm(1, 1, 1, 1.0f, a, b, 0.0f, &c, 1) == nullptr);
  CHECK(c == 1.0f);
  CHECK(gemm(1, 1, 0, 1.0f, a, b, 0.5f, &c, 1) == nullptr);  // empty sum: C = beta * C
  CHECK(c == 0.5f);
  CHECK(gemm(0, 1, 1, 1.0f, a, b, 0.0f, nullptr, 1) == nullptr);
  a.ld = 0;
  CHECK(gemm(1, 1, 2, 1.0f, a, b, 0.0f, &c, 1) != nullptr);
  a.ld = 2;
  a.dtype = DType::i32;
  CHECK(gemm(1, 1, 2, 1.0f, a, b, 0.0f, &c, 1) != nullptr);
  a.dtype = DType::e4m3;
  a.scale_mode = OperandScale::block;
  a.scale = &x;
  CHECK(gemm(1, 1, 2, 1.0f, a, b, 0.0f, &c, 1) != nullptr);  // block == 0
}

TEST_CASE("parallel_for: fixed chunks, each index once, nested calls run inline") {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 5, 64, 1000}) {
      for (int64_t grain : {1, 7, 64, 5000}) {
        std::vector<int> hits(n, 0);
        std::vector<int64_t> begins;
        std::mutex mu;
        parallel_for(n, grain, [&](int64_t b, int64_t e) {
          {
            std::lock_guard<std::mutex> lk(mu);
            begins.push_back(b);
          }
          CHECK(b % grain == 0);
          CHECK(e == std::min(n, b + grain));
          for (int64_t i = b; i < e; ++i) ++hits[i];
          // Nested: inline inside a pool chunk; where the outer call ran serially
          // (one chunk) the inner one may use the pool.
          std::atomic<int> inner{0}, elsewhere{0};
          const std::thread::id me = std::this_thread::get_id();
          parallel_for(4, 1, [&](int64_t, int64_t) {
            ++inner;
            elsewhere += std::this_thread::get_id() != me;
          });
          CHECK(inner.load() == 4);
          if (n > grain) CHECK(elsewhere.load() == 0);
        });
        CHECK(static_cast<int64_t>(begins.size()) == (n + grain - 1) / grain);
        for (int h : hits) CHECK(h == 1);
      }
    }
  }
  set_num_threads(0);
  CHECK(num_threads() >= 1);
}

// A helper may wake after the caller has taken every chunk (another thread on its
// core): the call must not wait for it, and it must never run a chunk of a call
// that has returned. More threads than cores and a spinning thread make late
// helpers common; each chunk checks that its own call is the one in progress.
TEST_CASE("parallel_for: every chunk runs once, inside its call, with helpers late to join") {
  set_num_threads(3);
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  std::atomic<int> current{-1}, outside{0}, wrong_count{0};
  for (int call = 0; call < 20000; ++call) {
    const int64_t n = 1 + call % 5;
    std::atomic<int> hits[5] = {};
    current.store(call);
    parallel_for(n, 1, [&, call](int64_t b, int64_t) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(2);
      while (std::chrono::steady_clock::now() < until) {  // long enough for a helper to join
      }
      if (current.load() != call) ++outside;
      ++hits[b];
    });
    current.store(-1);
    for (int64_t c = 0; c < n; ++c) wrong_count += hits[c].load() != 1;
  }
  stop.store(true);
  busy.join();
  set_num_threads(0);
  CHECK(outside.load() == 0);
  CHECK(wrong_count.load() == 0);
}

// The pool's default size: cores a thread's mask allows, capped by cgroup v2's
// quota (cpu.max: "QUOTA PERIOD" in microseconds, or "max PERIOD").
TEST_CASE("usable_cores follows the affinity mask; cpu_max_cores reads a cgroup's quota") {
  CHECK(cpu_max_cores("max 100000\n") == 0);
  CHECK(cpu_max_cores("100000 100000\n") == 1);
  CHECK(cpu_max_cores("50000 100000\n") == 1);   // half a core still needs a thread
  CHECK(cpu_max_cores("150000 100000\n") == 2);  // rounded up
  CHECK(cpu_max_cores("400000 100000") == 4);
  CHECK(cpu_max_cores("") == 0);
  CHECK(cpu_max_cores("100000") == 0);
  CHECK(cpu_max_cores("-1 100000") == 0);
  CHECK(usable_cores() >= 1);
  cpu_set_t mask, one;
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  CHECK(usable_cores() <= CPU_COUNT(&mask));
  if (CPU_COUNT(&mask) < 2) {
    MESSAGE("skipped the one-core mask: this thread's mask allows one core");
    return;
  }
  CPU_ZERO(&one);
  int first = 0;
  while (!CPU_ISSET(first, &mask)) ++first;
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const int on_one = usable_cores();
  sched_setaffinity(0, sizeof mask, &mask);
  CHECK(on_one == 1);
}

// The pool's helper leaves its caller's core this way: it must land elsewhere and
// keep the affinity mask it had (a mask left short would ban it from a core).
TEST_CASE("move_off_cpu moves the thread to another core and restores its mask") {
  auto allowed = [] {  // this thread's mask as the kernel reports it
    std::ifstream f("/proc/thread-self/status");
    std::string line;
    while (std::getline(f, line) && line.find("Cpus_allowed_list:") != 0) {
    }
    return line;
  };
  const std::string before = allowed();
  const int cpu = current_cpu();
  if (cpu < 0 || std::thread::hardware_concurrency() < 2) {
    MESSAGE("skipped: no core numbers here, or a single core");
    return;
  }
  const int moved = move_off_cpu(cpu);
  if (moved < 0) {
    MESSAGE("skipped: this thread's affinity mask (" << before << ") allows one core");
    return;
  }
  CHECK(moved != cpu);
  CHECK(allowed() == before);
  CHECK(move_off_cpu(-1) == -1);
}
