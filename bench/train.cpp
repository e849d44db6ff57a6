// Training-step throughput of every recipe against fp32 and against PyTorch, in one
// run: the GPT of models/gpt.lua (n_layer 4, n_head 4, n_embd 256, block 128, batch
// 16) and the Fashion-MNIST MLP of models/fashion_mlp.lua (784-500-10, batch 1000,
// AdamW) by default; on request (--models) the main job's step, a LoRA fine-tune of
// SmolLM2-135M's shape (models/llama.lua, random base weights: rank 8 on the seven
// projections, batch 4 x block 64, as models/smollm2_lora.lua) with an f32 base
// (`lora`) and a QLoRA base (`qlora`: q4_1 projections, q8_0 tied embedding);
// each under fp32, fp8, fp8-static, fp8-row, fp8-block, mxfp8, fp4, nvfp4,
// nvfp4-train, fp32 with each optimizer state level O1-O3, and fp8 with each level
// (MS-AMP's O1-O3 proper: FP8 GEMMs with the state levels), next to the same model
// in PyTorch (scripts/make_gpt_reference.py --bench, scripts/llama_lora_torch.py for
// `lora`; Debian's python3-torch; skipped with a note when missing; `qlora` has
// no peer: PyTorch has no 4-bit GGUF blocks). PyTorch runs at its
// best on the CPU: OMP_WAIT_POLICY=passive, and OPENBLAS_CORETYPE=SkylakeX where
// the CPU has AVX-512 (Debian's OpenBLAS otherwise picks its 256-bit Haswell
// kernel), and on as many threads as sgrt: OPENBLAS_NUM_THREADS too, since
// torch.set_num_threads does not reach the generic libblas.so.3 Debian's torch
// calls (without it PyTorch's "1 thread" ran its GEMMs on every core). On a GPU
// backend PyTorch runs on CUDA. Both models also run in ONNX Runtime training
// (scripts/ort_train_bench.py, on as many intra-op threads; the GPT exported from
// the PyTorch one) where scripts/setup_ort.sh installed it; a note says so when
// it did not.
//
// Repetitions are interleaved (rep 1 of every recipe and of PyTorch, then rep 2,
// ...), each the median step of a fresh session after one untimed step; every
// figure printed is the median over the repetitions. One JSON line per thread
// count, model and recipe: step_s, throughput, vs_fp32 (this step's time over
// fp32's: <= 1 means the recipe pays for itself), vs_pytorch and vs_onnxruntime
// (the peer's step time over this one: > 1 means sgrt is faster); the load average is printed
// before and after. A model whose ops the backend lacks gets a line naming them;
// one the backend cannot prepare (e.g. a Vulkan device that can neither bind
// the arena nor reach it by address) a line with the reason.
//
// --profile: after the timed repetitions, one more session of each recipe times
// every op (as `sgrt train --profile`, docs/profiling.md; not in the figures) and
// prints where its train_step went, on stderr.
//
// Defaults: --threads 1,2 --reps 3 --steps 3 on the CPU (the MLP times 10x the
// steps); --threads 2 --reps 1 on a GPU backend.
//
//   bench_train [--backend cpu|vulkan|cuda] [--threads 1,2] [--reps R] [--steps N]
//               [--models gpt,mlp,lora,qlora] [--recipes fp32,fp8,...,O2,fp8+O2] [--no-pytorch] [--no-onnxruntime]
//               [--profile]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compile_script.h"
#include "cpu/cpu_features.h"
#include "cpu/parallel.h"
#include "json.h"
#include "profile_report.h"
#include "sgrt/session.h"

using namespace sgrt;

namespace {

struct Workload {
  std::string name, model;
  std::map<std::string, std::string> set;
  std::vector<std::pair<std::string, int>> inputs;  // i32 input -> value range (0: f32 in [0, 1))
  int64_t items_per_step;                           // tokens or samples
  const char* unit;
  int steps;               // timed steps per repetition (after one untimed)
  std::string torch_args;  // a script in scripts/ and its arguments, less --threads/--steps/--device; empty: no peer
  std::string ort_args;    // ort_train_bench.py's, less --threads/--steps; empty: no such peer
};

// A recipe, "O1".."O3" (fp32 with that optimizer state level), or "recipe+Ok"
// (the recipe with level Ok: MS-AMP's levels pair FP8 GEMMs with the state).
struct Variant {
  std::string name;
  bool level_only() const { return name.size() == 2 && name[0] == 'O'; }
  std::string recipe() const { return level_only() ? "fp32" : name.substr(0, name.find('+')); }
  std::string opt_state() const {
    const size_t plus = name.find('+');
    return level_only() ? name : plus == std::string::npos ? "" : name.substr(plus + 1);
  }
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_train: %s\n", what.c_str());
  std::exit(1);
}

void check(const Status& st) {
  if (!st.ok()) die(st.message());
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) v.push_back(item);
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return "?";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

// Median seconds per train_step (read to completion) of a fresh session, after one
// untimed step, in *seconds. *device_bytes: what the backend holds on its device
// (arena and kernel workspace, allocated once at prepare, so also its peak; 0 on
// the CPU). A session the backend cannot prepare is the returned error; with
// `profile`, where the steps' time went goes to stderr.
Status time_steps(const Workload& w, const std::shared_ptr<const Model>& model, const std::string& backend,
                  bool profile, double* seconds, uint64_t* device_bytes) {
  std::unique_ptr<Backend> be;
  check(make_backend(backend, &be));
  if (profile) check(be->request_profile());
  std::unique_ptr<Session> s;
  SG_TRY(Session::create(model, std::move(be), &s));
  check(s->init(1, 1000));
  std::mt19937 rng(7);
  for (auto& [name, range] : w.inputs) {
    int id = model->find_tensor(name);
    if (id < 0) die(w.model + " has no input " + name);
    int64_t n = numel(model->tensors()[id].type.shape);
    if (range > 0) {
      std::vector<int32_t> v(n);
      for (int32_t& x : v) x = static_cast<int32_t>(rng() % range);
      check(s->write(id, v.data(), v.size() * 4));
    } else {
      std::vector<float> v(n);
      for (float& x : v) x = static_cast<float>(rng() % 256) / 255.f;
      check(s->write(id, v.data(), v.size() * 4));
    }
  }
  int prog;
  check(s->find_program("train_step", &prog));
  std::vector<double> t;
  for (int i = 0; i <= w.steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    check(s->run(prog));
    float loss;
    check(s->read_scalar(model->loss(), &loss));
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) t.push_back(dt);
  }
  *device_bytes = s->backend().device_bytes();
  *seconds = median(t);
  if (profile) tool::print_profile(*model, backend.c_str(), s->backend().profile(), stderr);
  return Status::Ok();
}

// A peer's median step in seconds from the last JSON line `cmd` prints (0 when it
// fails or prints none); that line in *line.
double run_peer(const std::string& cmd, std::string* line) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return 0;
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  int rc = pclose(p);
  if (rc != 0 || out.find('{') == std::string::npos) return 0;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  *line = out.substr(out.rfind('{'));
  size_t at = line->find("\"step_s\":");
  return at == std::string::npos ? 0 : std::atof(line->c_str() + at + 9);
}

// PyTorch's median step in seconds (0 when unavailable); its JSON line in *line.
double pytorch(const std::string& args, int threads, bool cpu, std::string* line) {
  std::string env = "OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=" + std::to_string(threads) + " ";
#if defined(__x86_64__)
  if (cpu && cpu::detected_isa() >= cpu::Isa::avx512) env += "OPENBLAS_CORETYPE=SkylakeX ";
#endif
  // The python3 on PATH (a venv with PyTorch, as on a GPU box), else Debian's
  // interpreter, where python3-torch installs (a pyenv python3 here lacks it).
  const std::string script = " " SGRT_SOURCE_DIR "/scripts/" + args + " 2>/dev/null";
  return run_peer("{ " + env + "python3" + script + " || " + env + "/usr/bin/python3" + script + "; }", line);
}

// The venv scripts/setup_ort.sh makes for ONNX Runtime training.
std::string ort_python() {
  const char* cache = std::getenv("SGRT_CACHE");
  const char* home = std::getenv("HOME");
  return (cache ? std::string(cache) : std::string(home ? home : "") + "/.cache/sgrt") + "/ort-venv/bin/python";
}

// ONNX Runtime training's median step in seconds (0 when unavailable); its JSON line in *line.
double onnxruntime(const std::string& args, std::string* line) {
  return run_peer("'" + ort_python() + "' " SGRT_SOURCE_DIR "/scripts/ort_train_bench.py " + args + " 2>/dev/null", line);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3, reps = 0;
  bool torch = true, ort = true, profile = false;
  std::string backend = "cpu", threads_arg, models_arg = "gpt,mlp", recipes_arg = "fp32,fp8,fp8-static,fp8-row,fp8-block,mxfp8,fp4,nvfp4,nvfp4-train,O1,O2,O3,fp8+O1,fp8+O2,fp8+O3";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads_arg = argv[++i];
    else if (!std::strcmp(argv[i], "--models") && i + 1 < argc) models_arg = argv[++i];
    else if (!std::strcmp(argv[i], "--recipes") && i + 1 < argc) recipes_arg = argv[++i];
    else if (!std::strcmp(argv[i], "--no-pytorch")) torch = false;
    else if (!std::strcmp(argv[i], "--no-onnxruntime")) ort = false;
    else if (!std::strcmp(argv[i], "--profile")) profile = true;
    else die(std::string("unknown argument ") + argv[i] +
             " (--backend B, --threads T[,T], --reps R, --steps N, --models gpt,mlp,lora,qlora, --recipes R[,R],"
             " --no-pytorch, --no-onnxruntime, --profile)");
  }
  // The CPU figures are medians of 3 interleaved repetitions on 1 and 2 threads; a
  // GPU backend has no thread count and a steadier clock: one repetition.
  if (threads_arg.empty()) threads_arg = backend == "cpu" ? "1,2" : "2";
  if (reps == 0) reps = backend == "cpu" ? 3 : 1;
  if (steps < 1 || reps < 1) die("--steps and --reps must be at least 1");
  std::vector<Variant> variants;
  for (const std::string& r : split(recipes_arg)) variants.push_back({r});
  if (variants.empty() || variants[0].name != "fp32") variants.insert(variants.begin(), {"fp32"});  // the ratios' base
  // models/smollm2_lora.lua's settings on models/llama.lua's SmolLM2-135M defaults.
  const std::map<std::string, std::string> lora = {{"lora_rank", "8"}, {"block", "64"}, {"batch", "4"}, {"lr", "2e-3"}};
  std::map<std::string, std::string> qlora = lora;
  qlora.insert({{"lora_base", "q4_1"}, {"lora_base_embd", "q8_0"}});
  const std::vector<Workload> all = {
      {"gpt", "models/gpt.lua", {{"n_layer", "4"}, {"n_head", "4"}, {"n_embd", "256"}, {"block", "128"}, {"batch", "16"}},
       {{"tokens", 256}, {"targets", 256}}, 16 * 128, "tokens_per_s", steps,
       "make_gpt_reference.py --bench gpt --n_layer 4 --n_head 4 --n_embd 256 --block 128 --batch 16",
       "--model gpt --n_layer 4 --n_head 4 --n_embd 256 --block 128 --batch 16"},
      {"mlp", "models/fashion_mlp.lua", {{"batch", "1000"}, {"hidden", "500"}}, {{"image", 0}, {"label", 10}}, 1000,
       "samples_per_s", steps * 10, "make_gpt_reference.py --bench mlp --batch 1000 --hidden 500", "--batch 1000 --hidden 500"},
      {"lora", "models/llama.lua", lora, {{"tokens", 49152}, {"targets", 49152}}, 4 * 64, "tokens_per_s", steps,
       "llama_lora_torch.py", ""},
      {"qlora", "models/llama.lua", qlora, {{"tokens", 49152}, {"targets", 49152}}, 4 * 64, "tokens_per_s", steps, "", ""},
  };
  std::printf("{\"load_average_before\":\"%s\"}\n", load_average().c_str());
  const std::string dev = backend == "cpu" ? "cpu" : "cuda";
  for (const std::string& mname : split(models_arg)) {
    auto w = std::find_if(all.begin(), all.end(), [&](const Workload& x) { return x.name == mname; });
    if (w == all.end()) die("unknown model " + mname + " (gpt, mlp, lora, qlora)");
    std::vector<std::shared_ptr<const Model>> models;
    for (const Variant& v : variants) {
      models.emplace_back();
      check(bench::compile_script(w->model, w->set, v.recipe(), false, &models.back(), v.opt_state()));
      std::vector<std::string> missing;
      check(missing_ops(backend, *models.back(), &missing));
      if (missing.empty()) continue;
      std::string ops;
      for (const std::string& op : missing) ops += (ops.empty() ? "" : " ") + op;
      std::printf("{\"framework\":\"sgrt\",\"backend\":\"%s\",\"model\":\"%s\",\"recipe\":\"%s\",\"note\":\"no kernel for: %s\"}\n",
                  backend.c_str(), w->model.c_str(), v.name.c_str(), ops.c_str());
      models.back() = nullptr;
    }
    for (const std::string& targ : split(threads_arg)) {
      const int threads = std::atoi(targ.c_str());
      cpu::set_num_threads(threads);
      std::vector<std::vector<double>> t(variants.size());
      std::vector<uint64_t> device(variants.size(), 0);
      std::vector<double> torch_t, ort_t;
      std::string torch_line, ort_line;
      // ONNX Runtime training: on the CPU, where scripts/setup_ort.sh installed it.
      const bool with_ort = ort && backend == "cpu" && !w->ort_args.empty();
      for (int r = 0; r < reps; ++r) {
        if (torch && !w->torch_args.empty()) {
          const double s = pytorch(w->torch_args + " --threads " + targ + " --steps " + std::to_string(w->steps) +
                                       " --device " + dev,
                                   threads, backend == "cpu", &torch_line);
          if (s > 0) torch_t.push_back(s);
        }
        if (with_ort) {
          const double s = onnxruntime(w->ort_args + " --threads " + targ + " --steps " + std::to_string(w->steps), &ort_line);
          if (s > 0) ort_t.push_back(s);
        }
        for (size_t v = 0; v < variants.size(); ++v) {
          if (!models[v]) continue;
          double s = 0;
          const Status st = time_steps(*w, models[v], backend, false, &s, &device[v]);
          if (st.ok()) {
            t[v].push_back(s);
            continue;
          }
          std::printf("{\"framework\":\"sgrt\",\"backend\":\"%s\",\"model\":\"%s\",\"workload\":\"%s\",\"recipe\":\"%s\",\"note\":%s}\n",
                      backend.c_str(), w->model.c_str(), w->name.c_str(), variants[v].name.c_str(), tool::json_str(st.message()).c_str());
          models[v] = nullptr;
        }
      }
      // Profiling waits on every op: its session comes after the timed ones, untimed.
      for (size_t v = 0; profile && v < variants.size(); ++v) {
        if (!models[v]) continue;
        double s;
        uint64_t bytes;
        std::fprintf(stderr, "bench_train --profile: %s, recipe %s\n", w->name.c_str(), variants[v].name.c_str());
        check(time_steps(*w, models[v], backend, true, &s, &bytes));
      }
      const double ref = median(torch_t), ort_ref = median(ort_t), base = median(t[0]);
      if (ref > 0) std::printf("%s\n", torch_line.c_str());
      else std::printf("{\"framework\":\"pytorch\",\"model\":\"%s\",\"workload\":\"%s\",\"note\":\"%s\"}\n", w->model.c_str(), w->name.c_str(),
                       w->torch_args.empty() ? "no PyTorch peer (it has no 4-bit GGUF blocks)"
                       : torch               ? "PyTorch unavailable (apt-get install python3-torch)"
                                             : "skipped (--no-pytorch)");
      if (ref > 0)
        std::printf("{\"framework\":\"pytorch\",\"model\":\"%s\",\"workload\":\"%s\",\"threads\":%d,\"step_s\":%.5f,\"%s\":%.1f,\"reps\":%zu}\n",
                    w->model.c_str(), w->name.c_str(), threads, ref, w->unit, w->items_per_step / ref, torch_t.size());
      if (ort_ref > 0)
        std::printf("%s\n{\"framework\":\"onnxruntime\",\"model\":\"%s\",\"threads\":%d,\"step_s\":%.5f,\"%s\":%.1f,\"reps\":%zu}\n",
                    ort_line.c_str(), w->model.c_str(), threads, ort_ref, w->unit, w->items_per_step / ort_ref, ort_t.size());
      else if (with_ort)
        std::printf("{\"framework\":\"onnxruntime\",\"model\":\"%s\",\"note\":\"ONNX Runtime training unavailable (scripts/setup_ort.sh)\"}\n",
                    w->model.c_str());
      for (size_t v = 0; v < variants.size(); ++v) {
        if (!models[v]) continue;
        const double s = median(t[v]);
        std::printf("{\"framework\":\"sgrt\",\"backend\":\"%s\",\"model\":\"%s\",\"workload\":\"%s\",\"recipe\":\"%s\","
                    "\"threads\":%d,\"step_s\":%.5f,\"%s\":%.1f,\"reps\":%d,\"steps\":%d,\"arena_bytes\":%llu,\"vs_fp32\":%.3f",
                    backend.c_str(), w->model.c_str(), w->name.c_str(), variants[v].name.c_str(), threads, s, w->unit,
                    w->items_per_step / s, reps, w->steps,
                    static_cast<unsigned long long>(models[v]->arena_alloc_bytes()), base > 0 ? s / base : 0.0);
        if (ref > 0) std::printf(",\"vs_pytorch\":%.3f", ref / s);
        if (ort_ref > 0) std::printf(",\"vs_onnxruntime\":%.3f", ort_ref / s);
        if (device[v] > 0) std::printf(",\"device_peak_mib\":%.1f", static_cast<double>(device[v]) / (1 << 20));
        std::printf("}\n");
      }
      std::fflush(stdout);
    }
  }
  std::printf("{\"load_average_after\":\"%s\"}\n", load_average().c_str());
  return 0;
}
