// FP8 GEMM throughput on cuBLASLt (sgrt's qmatmul path: E4M3 x E4M3, K-major
// operands, per-tensor scale pointers, FP32 accumulation and output; also with
// BF16 output) against
// cuBLASLt BF16 on the same shapes. One JSON line per shape and dtype: median and
// best TFLOP/s over the reps, the ratio to BF16 and the share of the H100/H200 SXM
// dense peaks (FP8 1979, BF16 989 TFLOP/s). "algo" is cuBLASLt's first heuristic
// choice; "tuned" lines time each of the heuristic's candidates, up to
// kBenchCandidates (sgrt's prepare times the first kLtCandidates), and keep the
// fastest; "config" names its kernel (LtGemm::config). At the largest size each
// candidate's median goes to stderr.
// Usage: bench_gemm_cuda [max size, default 8192] [reps, default 30]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "cuda/lt_gemm.h"

using namespace sgrt;
using namespace sgrt::cuda;

namespace {

constexpr double kPeakFp8 = 1979e12, kPeakBf16 = 989e12;
// More than the runtime times: whether a candidate past its kLtCandidates wins.
constexpr int kBenchCandidates = 32;

// Codes of uniform values in [-1, 1] (a hash per index: no host transfer).
__global__ void fill_kernel(uint8_t* p, int64_t n, int bytes) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float v = static_cast<float>(fmt::mix32(static_cast<uint32_t>(i) * 2654435761u) >> 8) / 8388608.f - 1.f;
    if (bytes == 1) p[i] = fmt::e4m3_encode(v);
    else reinterpret_cast<uint16_t*>(p)[i] = fmt::bf16_encode(v);
  }
}

bool ok(Status st, const char* what) {
  if (!st.ok()) std::fprintf(stderr, "bench_gemm_cuda: %s: %s\n", what, st.message().c_str());
  return st.ok();
}

bool check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "bench_gemm_cuda: %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

struct Result { double median, best; };

// Times `reps` runs of one planned GEMM (after warm-up), each between CUDA events.
bool time_gemm(const LtGemm& g, const void* a, const void* b, float* c, int reps, cudaStream_t s, Result* r) {
  struct Events {  // destroyed on every return: a failing candidate leaves nothing behind
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    ~Events() {
      if (e0) cudaEventDestroy(e0);
      if (e1) cudaEventDestroy(e1);
    }
  } ev;
  if (!check(cudaEventCreate(&ev.e0), "cudaEventCreate") || !check(cudaEventCreate(&ev.e1), "cudaEventCreate")) return false;
  for (int i = 0; i < 3; ++i) if (!ok(g.run(a, b, c, s), "warm-up")) return false;
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(ev.e0, s);
    if (!ok(g.run(a, b, c, s), "cublasLtMatmul")) return false;
    cudaEventRecord(ev.e1, s);
    if (!check(cudaEventSynchronize(ev.e1), "cudaEventSynchronize")) return false;
    float t = 0;
    cudaEventElapsedTime(&t, ev.e0, ev.e1);
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  r->median = ms[ms.size() / 2] * 1e-3;
  r->best = ms.front() * 1e-3;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_n = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 30;
  cudaDeviceProp prop{};
  if (!check(cudaGetDeviceProperties(&prop, 0), "no CUDA device")) return 1;
  cudaStream_t s;
  cublasLtHandle_t lt;
  if (!check(cudaStreamCreate(&s), "cudaStreamCreate") || cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
  const int64_t cap = max_n * max_n;
  uint8_t *a, *b, *ws;
  float *c, *one;
  if (!check(cudaMalloc(&a, 2 * cap), "cudaMalloc") || !check(cudaMalloc(&b, 2 * cap), "cudaMalloc") ||
      !check(cudaMalloc(&c, 4 * cap), "cudaMalloc") || !check(cudaMalloc(&ws, kLtWorkspaceBytes), "cudaMalloc") ||
      !check(cudaMalloc(&one, sizeof(float)), "cudaMalloc"))
    return 1;
  const float h_one = 1.f;
  cudaMemcpy(one, &h_one, sizeof h_one, cudaMemcpyHostToDevice);
  for (int64_t n = 1024; n <= max_n; n *= 2) {
    // The last case writes BF16 (half the output traffic; Transformer Engine's
    // usual FP8 GEMM): what the hardware gives, not what sgrt's f32 tensors take.
    struct Case { const char* name; cudaDataType_t t; int bytes; bool fast; double peak; bool bf16_out; };
    const Case cases[] = {{"bf16", CUDA_R_16BF, 2, false, kPeakBf16, false},
                          {"e4m3", CUDA_R_8F_E4M3, 1, false, kPeakFp8, false},
                          {"e4m3_fast_accum", CUDA_R_8F_E4M3, 1, true, kPeakFp8, false},
                          {"e4m3_fast_accum", CUDA_R_8F_E4M3, 1, true, kPeakFp8, true}};
    double bf16_median[2] = {0, 0};  // heuristic's first choice, tuned
    for (const Case& k : cases) {
      fill_kernel<<<1024, 256, 0, s>>>(a, n * n, k.bytes);
      fill_kernel<<<1024, 256, 0, s>>>(b, n * n, k.bytes);
      GemmSpec g;
      g.m = g.n = g.k = n;
      g.type_a = g.type_b = k.t;
      g.type_c = k.bf16_out ? CUDA_R_16BF : CUDA_R_32F;
      g.trans_a = false, g.trans_b = true;  // K-major: cuBLASLt's TN, the FP8 layout
      g.lda = g.ldb = n, g.ldc = n;
      if (k.bytes == 1) g.scale_a = g.scale_b = one;
      g.fast_accum = k.fast;
      g.addr_a = reinterpret_cast<uintptr_t>(a), g.addr_b = reinterpret_cast<uintptr_t>(b);
      g.addr_c = reinterpret_cast<uintptr_t>(c);
      g.workspace = ws, g.workspace_bytes = kLtWorkspaceBytes;
      g.candidates = kBenchCandidates;  // one list, whichever rank is timed
      const double flop = 2.0 * n * n * n;
      Result first{}, tuned{};
      std::string first_config, tuned_config;
      int tuned_rank = 0, candidates = 0;
      for (g.algo_rank = 0; g.algo_rank < kBenchCandidates; ++g.algo_rank) {
        std::unique_ptr<LtGemm> plan;
        Status st = LtGemm::plan(lt, g, &plan);
        if (!st.ok() && g.algo_rank > 0) break;  // fewer candidates than asked for
        Result r{};
        if (!ok(st, k.name)) return 1;
        candidates = g.algo_rank + 1;
        if (!time_gemm(*plan, a, b, c, reps, s, &r)) {
          if (g.algo_rank == 0) return 1;
          cudaGetLastError();  // a candidate that cannot run here: the others still can
          continue;
        }
        if (n == max_n)
          std::fprintf(stderr, "bench_gemm_cuda: %lld^3 %s, %s out, candidate %d (%s): %.1f TFLOP/s median\n",
                       static_cast<long long>(n), k.name, k.bf16_out ? "bf16" : "f32", g.algo_rank, plan->config().c_str(),
                       flop / r.median / 1e12);
        if (g.algo_rank == 0) first = tuned = r, first_config = tuned_config = plan->config();
        else if (r.median < tuned.median) tuned = r, tuned_rank = g.algo_rank, tuned_config = plan->config();
      }
      for (int t = 0; t < 2; ++t) {
        const Result& r = t == 0 ? first : tuned;
        const double tf = flop / r.median / 1e12;
        if (k.bytes == 2) bf16_median[t] = r.median;
        std::printf("{\"bench\":\"gemm_cuda\",\"gpu\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"dtype\":\"%s\",\"out\":\"%s\","
                    "\"algo\":\"%s\",\"rank\":%d,\"candidates\":%d,\"config\":\"%s\",\"reps\":%d,\"tflops_median\":%.1f,"
                    "\"tflops_best\":%.1f,\"vs_bf16\":%.2f,\"pct_peak\":%.1f}\n",
                    prop.name, static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n), k.name,
                    k.bf16_out ? "bf16" : "f32", t == 0 ? "heuristic" : "tuned", t == 0 ? 0 : tuned_rank, candidates,
                    (t == 0 ? first_config : tuned_config).c_str(), reps, tf, flop / r.best / 1e12, bf16_median[t] / r.median,
                    100.0 * tf * 1e12 / k.peak);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
