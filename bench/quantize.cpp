// The CPU quantizers against the element-by-element loop they replaced, and
// against a memory pass: per-row and per-tensor FP8 (E4M3), MXFP8 and NVFP4 of an
// f32 [rows, cols] activation, one thread. The scalar loop is formats.h's encode
// per element after a scalar amax (what cpu/quantize.cpp ran before it was
// vectorized); the memory pass reads the f32 tensor once and writes its bytes
// (std::transform to uint8 by truncation). Medians of interleaved repetitions
// of the thread's CPU time (so a loaded machine slows the figures less than the
// wall clock); one JSON line per case with GB/s of f32 input and the ratios.
//
//   bench_quantize [--rows R] [--cols C] [--reps N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/parallel.h"
#include "cpu/quantize.h"
#include "formats/formats.h"

using namespace sgrt;

namespace {

double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double seconds(const std::function<void()>& f) {
  const double t0 = cpu_now();
  f();
  return cpu_now() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 1000, cols = 784;
  int reps = 21;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows")) rows = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--cols")) cols = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  cpu::set_num_threads(1);
  const int64_t n = rows * cols;
  std::vector<float> x(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> q(n), scales(n / 16 + rows + 1);
  std::vector<int32_t> exps(rows, 0);
  std::vector<float> tile_scales(rows * (cols / 128 + 1));
  float ts = 0;
  cpu::QuantParams p, sr;
  sr.stochastic = true;  // nvfp4-train's gradients
  // The replaced loop: scalar amax over the tensor, then encode each element.
  auto scalar_tensor = [&] {
    float a = 0;
    for (int64_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
    bool kept;
    const float m = fmt::exp2i(cpu::scale_exponent(a, fmt::kE4M3Max, 0, 0, &kept));
    for (int64_t i = 0; i < n; ++i) q[i] = fmt::e4m3_encode(x[i] * m);
  };
  struct Case {
    const char* name;
    std::function<void()> run;
  };
  const std::vector<Case> cases = {
      {"memory_pass", [&] { std::transform(x.begin(), x.end(), q.begin(), [](float v) { return uint8_t(int(v)); }); }},
      {"scalar_e4m3_tensor", scalar_tensor},
      {"e4m3_tensor", [&] { cpu::quantize(x.data(), rows, cols, cpu::QuantAxis::tensor, p, true, q.data(), exps.data()); }},
      {"e4m3_row", [&] { cpu::quantize(x.data(), rows, cols, cpu::QuantAxis::row, p, true, q.data(), exps.data()); }},
      {"mxfp8", [&] { cpu::quantize_mx(x.data(), rows, cols, p, q.data(), scales.data()); }},
      {"nvfp4", [&] { cpu::quantize_nvfp4(x.data(), rows, cols, p, q.data(), scales.data(), &ts); }},
      {"nvfp4_stochastic", [&] { cpu::quantize_nvfp4(x.data(), rows, cols, sr, q.data(), scales.data(), &ts); }},
      {"fp8_tiles_1x128", [&] { cpu::quantize_fp8_tiles(x.data(), rows, cols, 1, p, q.data(), tile_scales.data()); }},
      {"fp8_blocks_128x128", [&] { cpu::quantize_fp8_tiles(x.data(), rows, cols, 128, p, q.data(), tile_scales.data()); }},
      {"nvfp4_16x16", [&] { cpu::quantize_nvfp4_16x16(x.data(), rows, cols, p, q.data(), scales.data(), &ts); }},
  };
  std::vector<std::vector<double>> t(cases.size());
  for (int r = 0; r < reps; ++r)
    for (size_t c = 0; c < cases.size(); ++c) t[c].push_back(seconds(cases[c].run));
  std::vector<double> med;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  for (size_t c = 0; c < cases.size(); ++c)
    std::printf("{\"case\":\"%s\",\"isa\":\"%s\",\"rows\":%lld,\"cols\":%lld,\"ms\":%.3f,\"gb_per_s\":%.2f,"
                "\"vs_memory_pass\":%.2f,\"speedup_vs_scalar\":%.1f}\n",
                cases[c].name, cpu::isa_name(cpu::active_isa()), static_cast<long long>(rows),
                static_cast<long long>(cols), med[c] * 1e3, n * 4 / med[c] / 1e9, med[c] / med[0], med[1] / med[c]);
  return 0;
}
