#include "lt_gemm.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda_status.h"

namespace sgrt::cuda {
namespace {

// Largest power of two dividing the address, at most 256 (what cuBLASLt asks about).
uint32_t alignment(uintptr_t addr) {
  uintptr_t a = addr & (~addr + 1);
  return a == 0 || a > 256 ? 256u : static_cast<uint32_t>(a);
}

const char* type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return "f32";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_16F: return "f16";
    case CUDA_R_8F_E4M3: return "e4m3";
    case CUDA_R_8F_E5M2: return "e5m2";
    default: return "?";
  }
}

const char* scale_mode_name(cublasLtMatmulMatrixScale_t m) {
  switch (m) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return " vec128";
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return " blk128x128";
    default: return "";
  }
}

// The GEMM in a failure message: what cuBLASLt was asked, in matmul's terms.
std::string describe(const GemmSpec& s) {
  auto n = [](int64_t v) { return std::to_string(v); };
  return " (M=" + n(s.m) + ", N=" + n(s.n) + ", K=" + n(s.k) + ", A " + type_name(s.type_a) + (s.trans_a ? "^T" : "") +
         scale_mode_name(s.scale_mode_a) + " ld " + n(s.lda) + ", B " + type_name(s.type_b) + (s.trans_b ? "^T" : "") +
         scale_mode_name(s.scale_mode_b) + " ld " + n(s.ldb) + ", C " + type_name(s.type_c) + " ld " +
         n(s.ldc) + "; alignment A " + n(alignment(s.addr_a)) + ", B " + n(alignment(s.addr_b)) + ", C " +
         n(alignment(s.addr_c)) + (s.scale_a ? ", scale pointers" : "") + (s.fast_accum ? ", fast accumulation" : "") + ")";
}

// What plan_fastest() keys its cache on: the GEMM as cuBLASLt sees it.
std::string tuning_key(const GemmSpec& s) {
  int dev = 0;
  cudaGetDevice(&dev);
  return "device " + std::to_string(dev) + describe(s) + " workspace " + std::to_string(s.workspace_bytes);
}

std::mutex tuned_mutex;
std::map<std::string, int> tuned_ranks;  // tuning_key -> chosen algo_rank

// A stream, two events and a temporary C for timing candidates; freed on scope
// exit, after the stream drained (so tuning ends within prepare).
struct Timer {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  float* c = nullptr;
  ~Timer() {
    if (stream) cudaStreamSynchronize(stream);
    cudaFree(c);
    if (stop) cudaEventDestroy(stop);
    if (start) cudaEventDestroy(start);
    if (stream) cudaStreamDestroy(stream);
  }
  Status open(size_t c_bytes) {
    SG_CUDA(cudaStreamCreate(&stream));  // blocking: after prepare's memsets of the arena and scratch
    SG_CUDA(cudaEventCreate(&start));
    SG_CUDA(cudaEventCreate(&stop));
    return cuda_status(cudaMalloc(reinterpret_cast<void**>(&c), c_bytes), "cudaMalloc(autotune C)");
  }
  // Milliseconds per run of `reps` back-to-back runs of g.
  Status time(const LtGemm& g, const GemmSpec& s, int reps, float* ms) {
    const void* a = reinterpret_cast<const void*>(s.addr_a);
    const void* b = reinterpret_cast<const void*>(s.addr_b);
    SG_CUDA(cudaEventRecord(start, stream));
    for (int i = 0; i < reps; ++i) SG_TRY(g.run(a, b, c, stream));
    SG_CUDA(cudaEventRecord(stop, stream));
    SG_CUDA(cudaEventSynchronize(stop));
    SG_CUDA(cudaEventElapsedTime(ms, start, stop));
    *ms /= static_cast<float>(reps);
    return Status::Ok();
  }
  // The best of three timed batches after one warm-up, each batch about 1 ms long.
  Status best_of(const LtGemm& g, const GemmSpec& s, float* ms) {
    float warm = 0.f;
    SG_TRY(time(g, s, 1, &warm));
    const int reps = std::clamp(static_cast<int>(1.f / std::max(warm, 1e-3f)), 1, 50);
    *ms = 1e30f;
    for (int t = 0; t < 3; ++t) {
      float m = 0.f;
      SG_TRY(time(g, s, reps, &m));
      *ms = std::min(*ms, m);
    }
    return Status::Ok();
  }
};

}  // namespace

LtGemm::~LtGemm() {
  if (lc_) cublasLtMatrixLayoutDestroy(lc_);
  if (lb_) cublasLtMatrixLayoutDestroy(lb_);
  if (la_) cublasLtMatrixLayoutDestroy(la_);
  if (op_) cublasLtMatmulDescDestroy(op_);
}

Status LtGemm::plan(cublasLtHandle_t lt, const GemmSpec& s, std::unique_ptr<LtGemm>* out) {
  std::unique_ptr<LtGemm> g(new LtGemm());
  g->lt_ = lt;
  g->spec_ = s;
  // Column-major view: D[N,M] = opA(B) @ opB(A) with m' = N, n' = M.
  cublasOperation_t ta = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  SG_CUBLAS(cublasLtMatmulDescCreate(&g->op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  SG_CUBLAS(cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  SG_CUBLAS(cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (s.scale_b)  // cuBLASLt's A is our B
    SG_CUBLAS(cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &s.scale_b, sizeof s.scale_b));
  if (s.scale_a)
    SG_CUBLAS(cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &s.scale_a, sizeof s.scale_a));
  for (auto [mode, attr] : {std::pair{s.scale_mode_b, CUBLASLT_MATMUL_DESC_A_SCALE_MODE},
                            std::pair{s.scale_mode_a, CUBLASLT_MATMUL_DESC_B_SCALE_MODE}})
    if (mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
      SG_CUBLAS(cublasLtMatmulDescSetAttribute(g->op_, attr, &mode, sizeof mode));
  if (s.fast_accum) {
    int8_t on = 1;
    SG_CUBLAS(cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof on));
  }
  uint64_t n = static_cast<uint64_t>(s.n), m = static_cast<uint64_t>(s.m), k = static_cast<uint64_t>(s.k);
  SG_CUBLAS(cublasLtMatrixLayoutCreate(&g->la_, s.type_b, s.trans_b ? k : n, s.trans_b ? n : k, s.ldb));
  SG_CUBLAS(cublasLtMatrixLayoutCreate(&g->lb_, s.type_a, s.trans_a ? m : k, s.trans_a ? k : m, s.lda));
  SG_CUBLAS(cublasLtMatrixLayoutCreate(&g->lc_, s.type_c, n, m, s.ldc));

  cublasLtMatmulPreference_t pref;
  SG_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  uint32_t al[4] = {alignment(s.addr_b), alignment(s.addr_a), alignment(s.addr_c), alignment(s.addr_c)};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  Status st = cublas_status(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                 &s.workspace_bytes, sizeof s.workspace_bytes),
                            "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  for (int i = 0; i < 4 && st.ok(); ++i)
    st = cublas_status(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]),
                       "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
  std::vector<cublasLtMatmulHeuristicResult_t> found_algos(std::max(s.candidates, s.algo_rank + 1));
  int found = 0;
  if (st.ok())
    st = cublas_status(cublasLtMatmulAlgoGetHeuristic(lt, g->op_, g->la_, g->lb_, g->lc_, g->lc_, pref,
                                                      static_cast<int>(found_algos.size()), found_algos.data(), &found),
                       "cublasLtMatmulAlgoGetHeuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  if (!st.ok() || found == 0)
    return Status::Unsupported("cublasLt has no algorithm for this GEMM" + describe(s) +
                               (st.ok() ? std::string() : ": " + st.message()));
  if (s.algo_rank < 0 || s.algo_rank >= found)
    return Status::Unsupported("cublasLt offers " + std::to_string(found) + " algorithms for this GEMM, not rank " +
                               std::to_string(s.algo_rank) + describe(s));
  g->algo_ = found_algos[s.algo_rank].algo;
  g->candidates_ = found;
  *out = std::move(g);
  return Status::Ok();
}

Status LtGemm::plan_fastest(cublasLtHandle_t lt, const GemmSpec& spec, bool log, std::unique_ptr<LtGemm>* out) {
  GemmSpec s = spec;
  s.algo_rank = 0;
  const std::string key = tuning_key(s);
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(tuned_mutex);
    auto it = tuned_ranks.find(key);
    if (it != tuned_ranks.end()) cached = true, s.algo_rank = it->second;
  }
  if (cached) return plan(lt, s, out);
  std::unique_ptr<LtGemm> best;
  SG_TRY(plan(lt, s, &best));
  const int found = best->candidates_;
  int rank = 0;
  float best_ms = 0.f, first_ms = 0.f;
  Timer timer;
  // Nothing to choose from, or no memory to choose: the heuristic's first. A
  // candidate that cannot run here is passed over, the first too (should none
  // run, the first stays and its error comes at run time).
  if (found > 1 && timer.open(sizeof(float) * static_cast<size_t>(s.m) * static_cast<size_t>(s.ldc)).ok()) {
    if (timer.best_of(*best, s, &first_ms).ok()) best_ms = first_ms;
    for (int r = 1; r < found; ++r) {
      GemmSpec c = s;
      c.algo_rank = r;
      std::unique_ptr<LtGemm> g;
      float ms = 0.f;
      if (!plan(lt, c, &g).ok() || !timer.best_of(*g, c, &ms).ok()) continue;
      if (best_ms == 0.f || ms < 0.98f * best_ms) best_ms = ms, rank = r, best = std::move(g);
    }
  }
  cudaGetLastError();  // a failed candidate's launch error is not the caller's
  if (log) {
    const double tflops = best_ms > 0 ? 2.0 * static_cast<double>(s.m) * s.n * s.k / (best_ms * 1e9) : 0;
    std::fprintf(stderr, "sgrt cuda: GEMM%s: algorithm %d of %d (%s), %.3f ms = %.1f TFLOP/s (the first %.3f ms)\n",
                 describe(s).c_str(), rank, found, best->config().c_str(), best_ms, tflops, first_ms);
  }
  {
    std::lock_guard<std::mutex> lock(tuned_mutex);
    tuned_ranks[key] = rank;
  }
  *out = std::move(best);
  return Status::Ok();
}

std::string LtGemm::config() const {
  struct Field { const char* name; cublasLtMatmulAlgoConfigAttributes_t attr; size_t bytes; };
  const Field fields[] = {{"algo", CUBLASLT_ALGO_CONFIG_ID, 4},
                          {"tile", CUBLASLT_ALGO_CONFIG_TILE_ID, 4},
                          {"stages", CUBLASLT_ALGO_CONFIG_STAGES_ID, 4},
                          {"cluster", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2},
                          {"split-k", CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4},
                          {"swizzle", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 4},
                          {"custom", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 4}};
  std::string out;
  for (const Field& f : fields) {
    uint32_t v32 = 0;
    uint16_t v16 = 0;
    size_t written = 0;
    void* v = f.bytes == 2 ? static_cast<void*>(&v16) : static_cast<void*>(&v32);
    const bool ok = cublasLtMatmulAlgoConfigGetAttribute(&algo_, f.attr, v, f.bytes, &written) == CUBLAS_STATUS_SUCCESS;
    out += (out.empty() ? "" : " ") + std::string(f.name) + " " +
           (ok ? std::to_string(f.bytes == 2 ? v16 : v32) : std::string("?"));
  }
  return out;
}

Status LtGemm::run(const void* a, const void* b, void* c, cudaStream_t stream) const {
  const float one = 1.f, zero = 0.f;
  Status st = cublas_status(cublasLtMatmul(lt_, op_, &one, b, la_, a, lb_, &zero, c, lc_, c, lc_, &algo_,
                                           spec_.workspace, spec_.workspace_bytes, stream),
                            "cublasLtMatmul");
  if (st.ok()) return st;
  GemmSpec at_run = spec_;  // the addresses of this call
  at_run.addr_a = reinterpret_cast<uintptr_t>(a), at_run.addr_b = reinterpret_cast<uintptr_t>(b);
  at_run.addr_c = reinterpret_cast<uintptr_t>(c);
  return Status::Runtime(st.message() + describe(at_run));
}

}  // namespace sgrt::cuda
