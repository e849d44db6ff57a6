// A compiled graph's matmul on any backend, as users get it: bench/gemm_graph.lua
// (one n×n×n matmul) under a recipe, its "infer" program timed to completion
// (the Vulkan backend waits on its fence; CUDA's step ends with a read of the
// loss). So the figure includes the recipe's quantization of both operands and
// the launch overhead — the same on every backend, which makes the Vulkan/CUDA
// ratio fair. One JSON line per size and recipe: median TFLOP/s over the reps and,
// on a GPU, its percentage of an H200's dense peak for the recipe (pct_h200_peak).
//
//   bench_gemm_graph [--backend B] [--sizes 1024,4096] [--recipes fp32,bf16,fp8] [--reps N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "compile_script.h"
#include "time_program.h"
#include "sgrt/session.h"

using namespace sgrt;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_gemm_graph: %s\n", what.c_str());
  std::exit(1);
}

void check(const Status& st) {
  if (!st.ok()) die(st.message());
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

// Median seconds of the infer program at n under `recipe` (after two warm-ups).
double time_infer(const std::string& backend, int64_t n, const std::string& recipe, int reps) {
  std::shared_ptr<const Model> model;
  check(bench::compile_script("bench/gemm_graph.lua", {{"n", std::to_string(n)}}, recipe, false, &model));
  std::unique_ptr<Session> s;
  check(bench::open_session(model, backend, &s));
  std::vector<float> a(static_cast<size_t>(n * n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 2654435761u) >> 8 & 0xffff) / 32768.f - 1.f;
  check(s->write(model->find_tensor("a"), a.data(), a.size() * 4));
  double sec;
  check(bench::median_infer_seconds(*s, reps, &sec));
  return sec;
}

// Dense peak TFLOP/s of an H100/H200 SXM (the GPU of bench/RESULTS.md) for the
// tensor cores a recipe's GEMM runs on (FP32: no tensor cores, no TF32); 0: none.
double h200_peak_tflops(const std::string& recipe) {
  return recipe == "fp8" ? 1979 : recipe == "bf16" ? 989 : recipe == "fp32" ? 67 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend = "cpu", sizes = "1024,2048,4096", recipes = "fp32,bf16,fp8";
  int reps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--backend")) backend = argv[i + 1];
    else if (!std::strcmp(argv[i], "--sizes")) sizes = argv[i + 1];
    else if (!std::strcmp(argv[i], "--recipes")) recipes = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else die(std::string("unknown argument ") + argv[i] + " (--backend B, --sizes a,b, --recipes r,s, --reps N)");
  }
  if (argc % 2 == 0) die("every option takes a value (--backend B, --sizes a,b, --recipes r,s, --reps N)");
  if (reps < 1) die("--reps must be at least 1");
  for (const std::string& size : split(sizes)) {
    int64_t n = std::atoll(size.c_str());
    if (n < 1) die("bad size '" + size + "'");
    for (const std::string& recipe : split(recipes)) {
      double sec = time_infer(backend, n, recipe, reps);
      const char* coop = std::getenv("SGRT_VULKAN_COOP");  // Vulkan's opt-in tensor-core path
      const double tflops = 2.0 * n * n * n / sec * 1e-12, peak = h200_peak_tflops(recipe);
      std::printf("{\"bench\":\"gemm_graph\",\"backend\":\"%s%s\",\"n\":%lld,\"recipe\":\"%s\",\"reps\":%d,\"ms_median\":%.3f,"
                  "\"tflops_median\":%.3f",
                  backend.c_str(), backend == "vulkan" && coop && *coop && std::string(coop) != "0" ? ("+coop=" + std::string(coop)).c_str() : "",
                  static_cast<long long>(n), recipe.c_str(), reps, sec * 1e3, tflops);
      if (backend != "cpu" && peak > 0) std::printf(",\"pct_h200_peak\":%.1f", 100.0 * tflops / peak);
      std::printf("}\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
