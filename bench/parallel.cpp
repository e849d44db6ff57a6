// The CPU thread pool's cost per parallel_for (cpu/parallel.h) against GCC's
// OpenMP runtime (libgomp, `#pragma omp parallel for`) on the pattern a training
// step makes: one call after another, two chunks of `work` ns each, `gap` ns of
// serial work between calls. Overhead = wall time per call minus work and gap;
// medians of interleaved repetitions, one JSON line per case. Run it twice:
// with OMP_WAIT_POLICY=passive (libgomp's threads sleep between calls, so they
// leave the cores to the pool's) and without (libgomp's default: its threads
// spin for long, its best figure, but they then compete with the pool's).
//
//   [OMP_WAIT_POLICY=passive] bench_parallel [--threads T] [--calls N] [--reps R]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

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

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, calls = 2000, reps = 7;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (!std::strcmp(argv[i], "--threads")) threads = next();
    else if (!std::strcmp(argv[i], "--calls")) calls = next();
    else if (!std::strcmp(argv[i], "--reps")) reps = next();
    else {
      std::fprintf(stderr, "bench_parallel: unknown argument %s (--threads T, --calls N, --reps R)\n", argv[i]);
      return 2;
    }
  }
  if (threads < 2 || calls < 1 || reps < 1) {
    std::fprintf(stderr, "bench_parallel: needs --threads >= 2, --calls >= 1, --reps >= 1\n");
    return 2;
  }
  sgrt::cpu::set_num_threads(threads);
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
