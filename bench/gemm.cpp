// GEMM throughput per dtype at square sizes, side by side with OpenBLAS sgemm, as
// JSON lines: one "peak" line saying how the FP32 peak was derived, then one line
// per (size, dtype) with the median GFLOP/s, the ratio to OpenBLAS and % of peak.
// --shapes times f32 products of the training steps' own shapes instead: each
// MxNxK with an optional "t" per transposed operand (1000x500x784nt: A [1000,784],
// B stored [500,784]), `gemm_f32` against `cblas_sgemm` alternately (`cblas_sgemv`
// for one row of A: 1x1536x576nt is a decode step's x @ W^T).
//
// Both libraries keep their idle threads spinning for a while after a call (sgrt's
// pool up to 1 ms; OpenBLAS's pthread build 2^28 TSC cycles, ~0.1 s), and a
// spinning thread takes a core from the other library's next call. So the
// contenders run in blocks of back-to-back calls, as a training step makes them,
// the blocks alternating (3 rounds) so that load from other processes hits both
// alike; each block starts after settle() (every other thread of the process
// asleep) and one untimed call.
//
// --beside-busy P (with --shapes) runs P other processes that keep a core busy
// each, as a user's machine has, and adds both libraries on one thread: what T
// threads still gain over one on cores shared with P busy processes.
//
// --zero-rows F (with --shapes) zeroes a fraction F of A's rows, the last ones of
// every 64 (a fine-tune's padding: its gradients' rows are exactly zero), which
// sgrt's GEMM skips and OpenBLAS multiplies; GFLOP/s still count every row.
//
//   bench_gemm [--sizes 256,512,1024,2048,4096 | --shapes MxNxK[nn|nt|tn|tt],...] [--reps N] [--threads N]
//              [--beside-busy P] [--zero-rows F]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "cpu/cpu_features.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "formats/formats.h"

#ifdef SGRT_HAVE_OPENBLAS
#include <cblas.h>
#endif

using namespace sgrt;
using Clock = std::chrono::steady_clock;

namespace {

double cpuinfo_mhz() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("cpu MHz", 0) == 0) return std::atof(line.substr(line.find(':') + 1).c_str());
  return 0;
}

// A chain of dependent integer adds runs at one per cycle: time 2^25 of them, best
// of several trials.
double measured_mhz() {
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    uint64_t x = 0;
    const auto t0 = Clock::now();
    for (int i = 0; i < (1 << 19); ++i) {
#if defined(__x86_64__)
#define ADD4 "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
      asm volatile(ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 : "+r"(x));
#undef ADD4
#endif
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(x) / s / 1e6);
  }
  return best;
}

// FP32 FLOP per cycle of one core: independent FMA chains (enough to cover latency
// x pipes) for the widest vectors the CPU has, timed against the measured clock.
#if defined(__x86_64__)
volatile float g_fma_operand = 0.999f;  // unknown to the compiler: nothing folds
#define SGRT_FMA_RATE(NAME, TARGET, V, SET1, FMA, LANES)                    \
  __attribute__((target(TARGET))) double NAME() {                          \
    const V m = SET1(g_fma_operand);                                        \
    V acc[16];                                                              \
    for (V& a : acc) a = m;                                                 \
    const int64_t iters = 1 << 19;                                          \
    const auto t0 = Clock::now();                                           \
    for (int64_t i = 0; i < iters; ++i) {                                   \
      _Pragma("GCC unroll 16") for (int j = 0; j < 16; ++j) acc[j] = FMA(acc[j], m, m); \
    }                                                                       \
    const double s = std::chrono::duration<double>(Clock::now() - t0).count(); \
    for (int j = 1; j < 16; ++j) acc[0] = FMA(acc[0], m, acc[j]);           \
    float out[LANES];                                                       \
    std::memcpy(out, &acc[0], sizeof(out));                                 \
    g_fma_operand = out[0] > 1e30f ? out[0] : g_fma_operand;                \
    return 2.0 * LANES * 16 * iters / s;                                    \
  }
SGRT_FMA_RATE(fma_rate_512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, 16)
SGRT_FMA_RATE(fma_rate_256, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, 8)
#undef SGRT_FMA_RATE
#endif

int measured_flop_per_cycle(double mhz) {
  double rate = 0;  // best of several short trials: other processes only slow some down
  int lanes = 1;
#if defined(__x86_64__)
  for (int trial = 0; trial < 8; ++trial) {
    if (cpu::detected_isa() >= cpu::Isa::avx512) rate = std::max(rate, fma_rate_512()), lanes = 16;
    else if (cpu::detected_isa() >= cpu::Isa::avx2) rate = std::max(rate, fma_rate_256()), lanes = 8;
  }
#endif
  // The nearest power of two, within what the vector width allows: one or two FMA
  // pipes of full width (2 FLOP per lane each) or half width.
  int f = lanes;
  while (f < 4 * lanes && rate / (mhz * 1e6) > f * 1.41) f *= 2;
  return f;
}

template <class F>
double seconds(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Waits (up to 2 s) until no other thread of this process is running or runnable:
// /proc/self/task/*/stat's state after the command's ")". Returns false if some
// thread still was.
bool settle() {
#if defined(__linux__)
  const std::string self = std::to_string(gettid());
  for (const auto until = Clock::now() + std::chrono::seconds(2); Clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(1))) {
    bool busy = false;
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
      if (task.path().filename() == self) continue;
      std::ifstream f(task.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const size_t close = stat.rfind(')');
      busy |= close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'R';
    }
    if (!busy) return true;
  }
  return false;
#else
  return true;
#endif
}

// settle(), one untimed call, then `calls` timed ones appended to t; counts the
// blocks whose settle gave up.
template <class F>
void timed_block(F&& f, int calls, std::vector<double>* t, int* unsettled) {
  if (!settle()) ++*unsettled;
  f();
  for (int i = 0; i < calls; ++i) t->push_back(seconds(f));
}

constexpr int kRounds = 3;
int block_calls(int reps) { return (reps + kRounds - 1) / kRounds; }

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// An n x n operand quantized to `dt` with a per-tensor power-of-two scale.
struct Operand {
  std::vector<uint8_t> bytes;
  float scale = 1.0f;
  cpu::GemmOperand g;
  Operand(const std::vector<float>& x, int64_t n, DType dt) {
    const float fmax = dt == DType::e5m2 ? fmt::kE5M2Max : dt == DType::e2m1 ? fmt::kE2M1Max : fmt::kE4M3Max;
    const float s = dt == DType::f32 || dt == DType::bf16 ? 1.0f : fmax / 4.0f;  // |x| <= 4
    bytes.assign(dtype_bytes(dt, n * n), 0);
    for (int64_t i = 0; i < n * n; ++i) {
      const float v = x[i] * s;
      switch (dt) {
        case DType::f32: std::memcpy(&bytes[4 * i], &x[i], 4); break;
        case DType::bf16: { const uint16_t b = fmt::bf16_encode(v); std::memcpy(&bytes[2 * i], &b, 2); break; }
        case DType::e4m3: bytes[i] = fmt::e4m3_encode(v); break;
        case DType::e5m2: bytes[i] = fmt::e5m2_encode(v); break;
        default: bytes[i / 2] |= fmt::e2m1_encode(v) << (4 * (i & 1)); break;
      }
    }
    scale = 1.0f / s;
    g.data = bytes.data();
    g.dtype = dt;
    g.ld = n;
    g.scale_mode = cpu::OperandScale::tensor;
    g.scale = &scale;
  }
  Operand(const Operand&) = delete;
  Operand& operator=(const Operand&) = delete;
};

std::vector<int64_t> parse_sizes(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoll(p));
    p = std::strchr(p, ',');
    if (!p) break;
    ++p;
  }
  return v;
}

// `count` child processes, each spinning until this object ends them, the i-th
// on the i-th last core of this thread's affinity mask: the same cores taken in
// every run.
class BusyProcesses {
 public:
  explicit BusyProcesses(int count) {
#if defined(__linux__)
    cpu_set_t mask;
    std::vector<int> cores;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &mask)) cores.push_back(c);
    for (int i = 0; i < count; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        if (!cores.empty()) {
          cpu_set_t one;
          CPU_ZERO(&one);
          CPU_SET(cores[cores.size() - 1 - i % cores.size()], &one);
          sched_setaffinity(0, sizeof one, &one);
        }
        volatile uint64_t spin = 0;
        for (;;) spin = spin + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
#endif
  }
  ~BusyProcesses() {
#if defined(__linux__)
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
#endif
  }
  int count() const { return static_cast<int>(pids_.size()); }

 private:
  std::vector<int> pids_;
};

struct Shape3 {
  int64_t m, n, k;
  bool ta, tb;
  std::string text;
};

// "1000x500x784nt,..." -> shapes; false on a malformed one.
bool parse_shapes(const char* s, std::vector<Shape3>* out) {
  std::string all(s);
  for (size_t at = 0; at <= all.size();) {
    const size_t end = std::min(all.find(',', at), all.size());
    const std::string one = all.substr(at, end - at);
    long long m, n, k;
    int used = 0;
    if (std::sscanf(one.c_str(), "%lldx%lldx%lld%n", &m, &n, &k, &used) != 3 || m <= 0 || n <= 0 || k <= 0) return false;
    const std::string t = one.substr(used);
    if (!t.empty() && t != "nn" && t != "nt" && t != "tn" && t != "tt") return false;
    out->push_back({m, n, k, !t.empty() && t[0] == 't', !t.empty() && t[1] == 't', one});
    at = end + 1;
  }
  return !out->empty();
}

// f32 at the given shapes, against OpenBLAS in the same process, rep by rep;
// beside `busy` busy processes, each library on one thread too.
void run_shapes(const std::vector<Shape3>& shapes, int reps, int busy, double zero_rows) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int threads = cpu::num_threads();
  const BusyProcesses others(busy);
  for (const Shape3& s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    int64_t zeroed = 0;  // A's rows r with r % 64 >= 64 (1 - F), stored [m, k] or [k, m]
    for (int64_t r = 0; r < s.m; ++r)
      if (r % 64 >= 64 * (1.0 - zero_rows)) {
        for (int64_t k = 0; k < s.k; ++k) a[s.ta ? k * lda + r : r * lda + k] = 0.0f;
        ++zeroed;
      }
    auto ours = [&] { cpu::gemm_f32(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n); };
    // One row of A: OpenBLAS's matrix-vector routine, its best at that shape.
    const bool vector = s.m == 1 && !s.ta;
    auto blas = [&] {
#ifdef SGRT_HAVE_OPENBLAS
      if (vector)  // c = op(B)^T a: B stored [n, k] (tb) is y = B a; stored [k, n], y = B^T a
        cblas_sgemv(CblasRowMajor, s.tb ? CblasNoTrans : CblasTrans, s.tb ? s.n : s.k, s.tb ? s.k : s.n, 1.0f, b.data(),
                    ldb, a.data(), 1, 0.0f, c.data(), 1);
      else
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                    1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n);
#endif
    };
    auto on_threads = [&](int n) {
      cpu::set_num_threads(n);
#ifdef SGRT_HAVE_OPENBLAS
      openblas_set_num_threads(n);
#endif
    };
    std::vector<double> tb, to, tb1, to1;  // OpenBLAS, sgrt; on one thread
    int unsettled = 0;
    for (int round = 0; round < kRounds; ++round) {
      timed_block(blas, block_calls(reps), &tb, &unsettled);
      timed_block(ours, block_calls(reps), &to, &unsettled);
      if (busy == 0) continue;
      on_threads(1);
      timed_block(blas, block_calls(reps), &tb1, &unsettled);
      timed_block(ours, block_calls(reps), &to1, &unsettled);
      on_threads(threads);
    }
    const double flop = 2.0 * s.m * s.n * s.k, gf = flop / median(to) * 1e-9;
#ifdef SGRT_HAVE_OPENBLAS
    const double gblas = flop / median(tb) * 1e-9;
#else
    const double gblas = 0;
#endif
    std::printf("{\"bench\":\"gemm_shape\",\"shape\":\"%s\",\"threads\":%d,\"reps\":%d,\"median_ms\":%.3f,"
                "\"zero_rows\":%lld,\"gflops\":%.1f,\"openblas\":\"%s\",\"openblas_gflops\":%.1f,\"ratio_vs_openblas\":%.2f,",
                s.text.c_str(), threads, static_cast<int>(to.size()), median(to) * 1e3, static_cast<long long>(zeroed),
                gf, vector ? "sgemv" : "sgemm", gblas, gblas > 0 ? gf / gblas : 0.0);
    if (busy > 0) {  // the ratio against OpenBLAS at its best of the two
      const double gf1 = flop / median(to1) * 1e-9, gblas1 = gblas > 0 ? flop / median(tb1) * 1e-9 : 0.0;
      std::printf("\"busy_processes\":%d,\"gflops_1thread\":%.1f,\"openblas_gflops_1thread\":%.1f,"
                  "\"threads_vs_1thread\":%.2f,\"openblas_threads_vs_1thread\":%.2f,\"best_vs_best_openblas\":%.2f,",
                  others.count(), gf1, gblas1, gf / gf1, gblas1 > 0 ? gblas / gblas1 : 0.0,
                  gblas > 0 ? std::max(gf, gf1) / std::max(gblas, gblas1) : 0.0);
    }
    std::printf("\"unsettled\":%d}\n", unsettled);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {256, 512, 1024, 2048, 4096};
  std::vector<Shape3> shapes;
  int reps = 0;  // 0: by size
  int busy = 0;
  double zero_rows = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--sizes")) sizes = parse_sizes(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--shapes") && parse_shapes(argv[i + 1], &shapes)) continue;
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) cpu::set_num_threads(std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--beside-busy")) busy = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--zero-rows") && (zero_rows = std::atof(argv[i + 1])) >= 0 && zero_rows <= 1) continue;
    else {
      std::fprintf(stderr, "usage: bench_gemm [--sizes a,b,.. | --shapes MxNxK[nn|nt|tn|tt],..] [--reps N] [--threads N] "
                           "[--beside-busy P] [--zero-rows F (0 to 1)]\n");
      return 2;
    }
  }
  const int cores = cpu::num_threads();
#ifdef SGRT_HAVE_OPENBLAS
  openblas_set_num_threads(cores);
#endif
  const double mhz_info = cpuinfo_mhz(), mhz = measured_mhz();
  const int fpc = measured_flop_per_cycle(mhz);
  const double peak = cores * mhz * 1e-3 * fpc;
  std::printf("{\"event\":\"peak\",\"cores\":%d,\"cpuinfo_mhz\":%.0f,\"measured_mhz\":%.0f,\"flop_per_cycle\":%d,"
              "\"peak_gflops\":%.1f,\"peak_gflops_at_32_flop_per_cycle\":%.1f,\"isa\":\"%s\",\"derivation\":\"peak = "
              "cores x clock x FP32 FLOP/cycle; clock measured by a dependent integer add chain (1 add/cycle); "
              "FLOP/cycle measured by 16 independent FMA chains of the widest vector, rounded to a power of two "
              "(Zen 4: 32 = 2 x 256-bit FMA pipes; Zen 5: 64)\"}\n",
              cores, mhz_info, mhz, fpc, peak, cores * mhz * 1e-3 * 32, cpu::isa_name(cpu::active_isa()));
  std::fflush(stdout);
  if (!shapes.empty()) {
    run_shapes(shapes, reps > 0 ? reps : 9, busy, zero_rows);
    return 0;
  }

  const struct { const char* name; DType a, b; } kinds[] = {
      {"f32", DType::f32, DType::f32},     {"bf16", DType::bf16, DType::bf16},
      {"e4m3", DType::e4m3, DType::e4m3},  {"e4m3xe5m2", DType::e4m3, DType::e5m2},
      {"e2m1", DType::e2m1, DType::e2m1}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  constexpr int kKinds = sizeof(kinds) / sizeof(kinds[0]);
  for (int64_t n : sizes) {
    const int r = reps > 0 ? reps : n <= 1024 ? 9 : 3;
    std::vector<float> x(n * n), y(n * n), c(n * n);
    for (float& v : x) v = u(rng);
    for (float& v : y) v = u(rng);
    std::deque<Operand> ops;  // stable addresses: each operand points at itself
    for (const auto& k : kinds) {
      ops.emplace_back(x, n, k.a);
      ops.emplace_back(y, n, k.b);
    }
    auto ours = [&](int k) { cpu::gemm(n, n, n, 1.0f, ops[2 * k].g, ops[2 * k + 1].g, 0.0f, c.data(), n); };
    auto blas = [&] {
#ifdef SGRT_HAVE_OPENBLAS
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, x.data(), n, y.data(), n, 0.0f, c.data(), n);
#endif
    };
    std::vector<double> tb;
    std::vector<std::vector<double>> t(kKinds);
    int unsettled = 0;
    for (int round = 0; round < kRounds; ++round) {
      timed_block(blas, block_calls(r), &tb, &unsettled);
      for (int k = 0; k < kKinds; ++k) timed_block([&] { ours(k); }, block_calls(r), &t[k], &unsettled);
    }
    const double flop = 2.0 * n * n * n;
#ifdef SGRT_HAVE_OPENBLAS
    const double gblas = flop / median(tb) * 1e-9;
#else
    const double gblas = 0;
#endif
    for (int k = 0; k < kKinds; ++k) {
      const double s = median(t[k]), gf = flop / s * 1e-9;
      std::printf("{\"bench\":\"gemm\",\"n\":%lld,\"dtype\":\"%s\",\"reps\":%d,\"median_ms\":%.3f,\"gflops\":%.1f,"
                  "\"openblas_sgemm_gflops\":%.1f,\"ratio_vs_openblas\":%.2f,\"pct_fp32_peak\":%.1f,"
                  "\"unsettled\":%d}\n",
                  static_cast<long long>(n), kinds[k].name, static_cast<int>(t[k].size()), s * 1e3, gf, gblas,
                  gblas > 0 ? gf / gblas : 0.0, 100 * gf / peak, unsettled);
    }
    std::fflush(stdout);
  }
  return 0;
}
