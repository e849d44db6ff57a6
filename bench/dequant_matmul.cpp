// dequant_matmul on a backend: x [m, k] against a frozen q8_0 / q4_1 base w [n, k]
// (the QLoRA base's forward, x @ dequant(w)^T, and its input gradient,
// transpose_w), next to the f32 matmul of the same shapes (its peer: an f32 base),
// each timed as bench_gemm_graph times a graph: the "infer" program run to
// completion (a read waits for it). The three weights of a mode take turns for
// 3 rounds, so load from other processes hits them alike. One JSON line per
// dtype and mode: the median ms over the rounds' medians, TFLOP/s (2 m n k per
// product) and vs_f32 (the f32 matmul's time over this one's: 1 is parity).
//
//   bench_dequant_matmul [--backend B] [--m 512] [--n 4096] [--k 4096] [--reps N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "compile.h"
#include "serialize.h"
#include "sgrt/session.h"
#include "time_program.h"

using namespace sgrt;

namespace {

// A failure ends the bench with its message: exit 2 for bad arguments, else 1.
void check(const Status& st, int code = 1) {
  if (st.ok()) return;
  std::fprintf(stderr, "bench_dequant_matmul: %s\n", st.message().c_str());
  std::exit(code);
}

// y = dequant_matmul(x, w) with x [m, k] (or [m, n] with transpose_w), w [n, k] of
// wt; for an f32 w, y = matmul(x, w) with trans_b = !transpose_w.
std::shared_ptr<const Model> model(DType wt, bool trans, int64_t m, int64_t n, int64_t k) {
  compiler::Graph g;
  g.infer_only = true;
  compiler::Tensor in;  // x, then w: a frozen param
  in.name = "x", in.type = {{m, trans ? n : k}, DType::f32}, in.role = sg::Role::input, in.persistent = true;
  const int x = g.add_tensor(in);
  in.name = "w", in.type = {{n, k}, wt}, in.role = sg::Role::param, in.frozen = true;
  const int w = g.add_tensor(in);
  const compiler::Loc loc{"bench_dequant_matmul", __LINE__};
  Attrs at;
  if (wt == DType::f32) at.set_i("trans_b", trans ? 0 : 1);
  else at.set_i("transpose_w", trans ? 1 : 0);
  Status st;
  int y = g.op1(wt == DType::f32 ? OpCode::MatMul : OpCode::DequantMatMul, {x, w}, at, loc, &st);
  check(st);
  g.outputs = {{"y", y}};
  for (int r = 0; r < 2; ++r) {  // eval needs a scalar loss
    Attrs axis;
    axis.set_i("axis", 0);
    y = g.op1(OpCode::ReduceSum, {y}, axis, loc, &st);
    check(st);
  }
  g.loss = y;
  check(compiler::compile(g));
  std::unique_ptr<Model> mdl;
  check(Model::load_bytes(compiler::serialize(g), "bench_dequant_matmul.sg", &mdl));
  return std::shared_ptr<const Model>(std::move(mdl));
}

// A session of the product, its w holding arbitrary bytes with a small f16 scale
// per block (f32: small values; the speed does not depend on them).
std::unique_ptr<Session> open_product(const std::string& backend, DType wt, bool trans, int64_t m, int64_t n, int64_t k) {
  std::shared_ptr<const Model> mdl = model(wt, trans, m, n, k);
  std::unique_ptr<Session> s;
  check(bench::open_session(mdl, backend, &s));
  const int wid = mdl->find_tensor("w"), xid = mdl->find_tensor("x");
  std::vector<uint8_t> w(mdl->tensors()[wid].bytes);
  if (wt == DType::f32) {
    std::vector<float> v(w.size() / 4);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 2654435761u) >> 24) / 4096.f - 1.f / 32;
    std::memcpy(w.data(), v.data(), w.size());
  } else {
    const int bb = dtype_block_bytes(wt);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(i % static_cast<size_t>(bb) < 2 ? (i % 2 ? 0x20 : 0) : (i * 2654435761u) >> 24);
  }
  check(s->write(wid, w.data(), w.size()));
  std::vector<float> x(mdl->tensors()[xid].bytes / 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) >> 8 & 0xffff) / 32768.f - 1.f;
  check(s->write(xid, x.data(), x.size() * 4));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend = "cpu";
  int64_t m = 512, n = 4096, k = 4096;
  int reps = 10;
  const char* usage = " (--backend B, --m M, --n N, --k K (a multiple of 32), --reps R)";
  if (argc % 2 == 0) check(Status::Invalid(std::string("every option takes a value") + usage), 2);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--backend")) backend = argv[i + 1];
    else if (!std::strcmp(argv[i], "--m")) m = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--n")) n = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--k")) k = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else check(Status::Invalid(std::string("unknown argument ") + argv[i] + usage), 2);
  }
  if (m < 1 || n < 1 || k < 32 || k % 32 || reps < 1) check(Status::Invalid(std::string("bad sizes or reps") + usage), 2);
  constexpr int kRounds = 3;
  const DType kWeights[] = {DType::f32, DType::q8_0, DType::q4_1};  // f32 first: the peer
  for (bool trans : {false, true}) {
    std::unique_ptr<Session> s[3];
    for (int i = 0; i < 3; ++i) s[i] = open_product(backend, kWeights[i], trans, m, n, k);
    std::vector<double> rounds[3];
    for (int r = 0; r < kRounds; ++r)
      for (int i = 0; i < 3; ++i) {
        double sec;
        check(bench::median_infer_seconds(*s[i], reps, &sec));
        rounds[i].push_back(sec);
      }
    double f32_sec = 0;
    for (int i = 0; i < 3; ++i) {
      std::sort(rounds[i].begin(), rounds[i].end());
      const double sec = rounds[i][kRounds / 2];
      if (i == 0) f32_sec = sec;
      std::printf("{\"bench\":\"dequant_matmul\",\"backend\":\"%s\",\"w\":\"%s\",\"transpose_w\":%d,\"m\":%lld,\"n\":%lld,"
                  "\"k\":%lld,\"reps\":%d,\"rounds\":%d,\"ms_median\":%.3f,\"tflops_median\":%.3f,\"vs_f32\":%.2f}\n",
                  backend.c_str(), dtype_name(kWeights[i]), trans ? 1 : 0, static_cast<long long>(m), static_cast<long long>(n),
                  static_cast<long long>(k), reps, kRounds, sec * 1e3, 2.0 * m * n * k / sec * 1e-12, f32_sec / sec);
    }
    std::fflush(stdout);
  }
  return 0;
}
