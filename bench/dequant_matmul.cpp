// dequant_matmul on a backend: x [m, k] against a frozen q8_0 / q4_1 base w [n, k]
// (the QLoRA base's forward, x @ dequant(w)^T, and its input gradient,
// transpose_w), timed as bench_gemm_graph times a graph: the "infer" program run
// to completion (a read waits for it). One JSON line per dtype and mode: median
// ms and TFLOP/s (2 m n k per product). bench_gemm_graph's fp32 matmul is the
// f32 peer on the same backend.
//
//   bench_dequant_matmul [--backend B] [--m 512] [--n 4096] [--k 4096] [--reps N]
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

// y = dequant_matmul(x, w) with x [m, k] (or [m, n] with transpose_w), w [n, k] of wt.
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
  at.set_i("transpose_w", trans ? 1 : 0);
  Status st;
  int y = g.op1(OpCode::DequantMatMul, {x, w}, at, loc, &st);
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

// Median seconds of the infer program (after two warm-ups); w holds arbitrary
// bytes with a small f16 scale per block (the speed does not depend on values).
double time_infer(const std::string& backend, DType wt, bool trans, int64_t m, int64_t n, int64_t k, int reps) {
  std::shared_ptr<const Model> mdl = model(wt, trans, m, n, k);
  std::unique_ptr<Session> s;
  check(bench::open_session(mdl, backend, &s));
  const int wid = mdl->find_tensor("w"), xid = mdl->find_tensor("x");
  std::vector<uint8_t> w(mdl->tensors()[wid].bytes);
  const int bb = dtype_block_bytes(wt);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(i % static_cast<size_t>(bb) < 2 ? (i % 2 ? 0x20 : 0) : (i * 2654435761u) >> 24);
  check(s->write(wid, w.data(), w.size()));
  std::vector<float> x(mdl->tensors()[xid].bytes / 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) >> 8 & 0xffff) / 32768.f - 1.f;
  check(s->write(xid, x.data(), x.size() * 4));
  double sec;
  check(bench::median_infer_seconds(*s, reps, &sec));
  return sec;
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
  for (DType wt : {DType::q8_0, DType::q4_1})
    for (bool trans : {false, true}) {
      const double sec = time_infer(backend, wt, trans, m, n, k, reps);
      std::printf("{\"bench\":\"dequant_matmul\",\"backend\":\"%s\",\"w\":\"%s\",\"transpose_w\":%d,\"m\":%lld,\"n\":%lld,"
                  "\"k\":%lld,\"reps\":%d,\"ms_median\":%.3f,\"tflops_median\":%.3f}\n",
                  backend.c_str(), dtype_name(wt), trans ? 1 : 0, static_cast<long long>(m), static_cast<long long>(n),
                  static_cast<long long>(k), reps, sec * 1e3, 2.0 * m * n * k / sec * 1e-12);
      std::fflush(stdout);
    }
  return 0;
}
