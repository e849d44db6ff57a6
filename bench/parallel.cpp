// The CPU thread pool's cost per parallel_for (cpu/parallel.h) against GCC's
// OpenMP runtime (libgomp, `#pragma omp parallel for`) on the pattern a training
// step makes: one call after another, two chunks of `work` ns each, `gap` ns of
// serial work between calls. Overhead = wall time per call minus work and gap;
// medians of interleaved repetitions, one JSON line per case. Run it twice:
// with OMP_WAIT_POLICY=passive (libgomp's threads sleep between calls, so they
// leave the cores to the pool's) and without (libgomp's default: its threads
// spin for long, its best figure, but they then compete with the pool's).
//
// First (before OpenMP starts its threads), products after idle: B bursts of 12
// back-to-back 256x576x1536 f32 products (the SmolLM2 LoRA step's commonest),
// each burst after 100 ms asleep, as a step's products follow loading, a save
// or a data wait. A call below 0.6x the 90th-percentile rate counts as slow:
// with the pool's threads sharing one core it runs at one core's speed.
//
//   [OMP_WAIT_POLICY=passive] bench_parallel [--threads T] [--calls N] [--reps R] [--bursts B]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/parallel.h"

namespace {

using Clock = std::chrono::steady_clock;

void busy_ns(long ns) {
  const auto until = Clock::now() + std::chrono::nanoseconds(ns);
  while (Clock::now() < until) {
  }
}

// Microseconds per call beyond the work itself.
double overhead_us(const std::function<void()>& call, int calls, long work, long gap) {
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) {
    call();
    busy_ns(gap);
  }
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
  return us - (work + gap) / 1000.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Each product's GFLOP/s, over `bursts` bursts of 12 after 100 ms asleep.
std::vector<double> products_after_idle(int bursts) {
  constexpr int64_t M = 256, N = 576, K = 1536;
  std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), c(M * N);
  std::vector<double> rates;
  for (int burst = 0; burst < bursts; ++burst) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (int call = 0; call < 12; ++call) {
      const auto t0 = Clock::now();
      sgrt::cpu::gemm_f32(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
      rates.push_back(2e-9 * M * N * K / std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  return rates;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, calls = 2000, reps = 7, bursts = 12;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (!std::strcmp(argv[i], "--threads")) threads = next();
    else if (!std::strcmp(argv[i], "--calls")) calls = next();
    else if (!std::strcmp(argv[i], "--reps")) reps = next();
    else if (!std::strcmp(argv[i], "--bursts")) bursts = next();
    else {
      std::fprintf(stderr, "bench_parallel: unknown argument %s (--threads T, --calls N, --reps R, --bursts B)\n",
                   argv[i]);
      return 2;
    }
  }
  if (threads < 2 || calls < 1 || reps < 1 || bursts < 0) {
    std::fprintf(stderr, "bench_parallel: needs --threads >= 2, --calls >= 1, --reps >= 1, --bursts >= 0\n");
    return 2;
  }
  sgrt::cpu::set_num_threads(threads);
  if (bursts > 0) {
    std::vector<double> rates = products_after_idle(bursts);
    std::sort(rates.begin(), rates.end());
    const double p90 = rates[rates.size() * 9 / 10];
    const auto slow = std::count_if(rates.begin(), rates.end(), [&](double r) { return r < 0.6 * p90; });
    std::printf("{\"bench\":\"products_after_idle\",\"threads\":%d,\"product\":\"256x576x1536\",\"bursts\":%d,"
                "\"calls\":%zu,\"median_gflops\":%.1f,\"p90_gflops\":%.1f,\"slow_calls\":%ld}\n",
                threads, bursts, rates.size(), median(rates), p90, static_cast<long>(slow));
    std::fflush(stdout);
  }
  omp_set_num_threads(threads);
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  for (long work : {2000L, 20000L})
    for (long gap : {1000L, 20000L, 200000L}) {
      auto sgrt_call = [&] { sgrt::cpu::parallel_for(threads, 1, [&](int64_t, int64_t) { busy_ns(work); }); };
      auto omp_call = [&] {
#pragma omp parallel for schedule(static, 1)
        for (int c = 0; c < threads; ++c) busy_ns(work);
      };
      std::vector<double> ours, omp;
      for (int r = 0; r < reps; ++r) {  // interleaved, so both see the same machine
        ours.push_back(overhead_us(sgrt_call, calls, work, gap));
        omp.push_back(overhead_us(omp_call, calls, work, gap));
      }
      const double a = median(ours), b = median(omp);
      std::printf("{\"bench\":\"parallel_for\",\"threads\":%d,\"work_ns\":%ld,\"gap_ns\":%ld,\"sgrt_overhead_us\":%.2f,"
                  "\"openmp_overhead_us\":%.2f,\"omp_wait_policy\":\"%s\",\"reps\":%d,\"calls\":%d}\n",
                  threads, work, gap, a, b, policy ? policy : "default", reps, calls);
    }
  return 0;
}
