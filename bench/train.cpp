// Training-step throughput: the GPT of models/gpt.lua (n_layer 4, n_head 4,
// n_embd 256, block 128, batch 16) under fp32, bf16, fp8 and fp4, and the
// Fashion-MNIST MLP (models/fashion_mlp.lua) in fp32, each next to the same
// model in PyTorch (scripts/make_gpt_reference.py --bench; skipped with a note
// when PyTorch is missing): on the CPU with the same thread count, or on the
// CUDA device for the GPU backends. One JSON line per measurement: medians over
// the timed steps (each step ends by reading the loss, so a GPU step is timed to
// completion), the arena bytes, on a GPU the device memory the backend holds
// (device_peak_mib: arena + kernel workspace, allocated once at prepare, so also
// its peak), and the ratio to PyTorch (> 1: sgrt is faster).
// A model whose ops the backend lacks gets a line naming them instead.
//
//   bench_train [--backend cpu|vulkan|cuda] [--steps N] [--threads T] [--no-pytorch]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compile_script.h"
#include "cpu/parallel.h"
#include "sgrt/session.h"

using namespace sgrt;

namespace {

struct Bench {
  std::string model, recipe;
  std::map<std::string, std::string> set;
  std::vector<std::pair<std::string, int>> inputs;  // i32 input -> value range (0: f32 in [0, 1))
  int64_t items_per_step;                           // tokens or samples
  const char* unit;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_train: %s\n", what.c_str());
  std::exit(1);
}

void check(const Status& st) {
  if (!st.ok()) die(st.message());
}

struct Timing {
  double step_s;
  uint64_t arena_bytes;
  uint64_t device_bytes;  // what the backend allocated on the device (its peak), 0 on the CPU
};

std::shared_ptr<const Model> compile_bench(const Bench& b) {
  std::shared_ptr<const Model> m;
  check(bench::compile_script(b.model, b.set, b.recipe, false, &m));
  return m;
}

// Median seconds per train_step (read to completion) after one untimed step.
Timing time_steps(const Bench& b, const std::shared_ptr<const Model>& model, const std::string& backend, int steps) {
  std::unique_ptr<Backend> be;
  check(make_backend(backend, &be));
  Timing timing{0, model->arena_alloc_bytes(), 0};
  std::unique_ptr<Session> s;
  check(Session::create(model, std::move(be), &s));
  check(s->init(1, 1000));
  std::mt19937 rng(7);
  for (auto& [name, range] : b.inputs) {
    int id = model->find_tensor(name);
    if (id < 0) die(b.model + " has no input " + name);
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
  for (int i = 0; i <= steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    check(s->run(prog));
    float loss;
    check(s->read_scalar(model->loss(), &loss));
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) t.push_back(dt);
  }
  std::sort(t.begin(), t.end());
  timing.step_s = t[t.size() / 2];
  timing.device_bytes = s->backend().device_bytes();
  return timing;
}

// Runs the PyTorch bench; returns its JSON line (empty when unavailable).
std::string pytorch(const std::string& args) {
  std::string cmd = "OMP_WAIT_POLICY=passive python3 " SGRT_SOURCE_DIR "/scripts/make_gpt_reference.py " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  int rc = pclose(p);
  if (rc != 0 || out.find('{') == std::string::npos) return "";
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out.substr(out.rfind('{'));
}

double json_number(const std::string& j, const std::string& key) {
  size_t at = j.find("\"" + key + "\":");
  return at == std::string::npos ? 0 : std::atof(j.c_str() + at + key.size() + 3);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5, threads = 2;
  bool torch = true;
  std::string backend = "cpu";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-pytorch")) torch = false;
    else die(std::string("unknown argument ") + argv[i] + " (--backend B, --steps N, --threads T, --no-pytorch)");
  }
  cpu::set_num_threads(threads);
  const std::map<std::string, std::string> gpt = {{"n_layer", "4"}, {"n_head", "4"}, {"n_embd", "256"},
                                                   {"block", "128"}, {"batch", "16"}};
  // PyTorch runs where sgrt runs: the GPU backends are compared with PyTorch on CUDA.
  const std::string t = std::to_string(threads), n = std::to_string(steps),
                    dev = " --device " + std::string(backend == "cpu" ? "cpu" : "cuda");
  struct Group {
    std::vector<Bench> runs;
    std::string torch_args;
  };
  std::vector<Group> groups = {
      {{{"models/gpt.lua", "fp32", gpt, {{"tokens", 256}, {"targets", 256}}, 16 * 128, "tokens_per_s"},
        {"models/gpt.lua", "bf16", gpt, {{"tokens", 256}, {"targets", 256}}, 16 * 128, "tokens_per_s"},
        {"models/gpt.lua", "fp8", gpt, {{"tokens", 256}, {"targets", 256}}, 16 * 128, "tokens_per_s"},
        {"models/gpt.lua", "fp4", gpt, {{"tokens", 256}, {"targets", 256}}, 16 * 128, "tokens_per_s"}},
       "--bench gpt --n_layer 4 --n_head 4 --n_embd 256 --block 128 --batch 16 --threads " + t + " --steps " + n + dev},
      {{{"models/fashion_mlp.lua", "fp32", {{"batch", "100"}, {"hidden", "500"}}, {{"image", 0}, {"label", 10}}, 100,
         "samples_per_s"}},
       "--bench mlp --batch 100 --hidden 500 --threads " + t + " --steps " + std::to_string(steps * 10) + dev},
  };
  for (Group& grp : groups) {
    std::string ref = torch ? pytorch(grp.torch_args) : "";
    const char* unit = grp.runs[0].unit;
    double ref_rate = json_number(ref, unit);
    if (!ref.empty()) std::printf("%s\n", ref.c_str());
    else std::printf("{\"framework\":\"pytorch\",\"model\":\"%s\",\"note\":\"%s\"}\n", grp.runs[0].model.c_str(),
                     torch ? "PyTorch unavailable (apt-get install python3-torch)" : "skipped (--no-pytorch)");
    for (const Bench& b : grp.runs) {
      std::shared_ptr<const Model> model = compile_bench(b);
      std::vector<std::string> missing;
      check(missing_ops(backend, *model, &missing));
      if (!missing.empty()) {
        std::string ops;
        for (const std::string& op : missing) ops += (ops.empty() ? "" : " ") + op;
        std::printf("{\"framework\":\"sgrt\",\"backend\":\"%s\",\"model\":\"%s\",\"recipe\":\"%s\",\"note\":\"no kernel for: %s\"}\n",
                    backend.c_str(), b.model.c_str(), b.recipe.c_str(), ops.c_str());
        continue;
      }
      int k = b.unit == std::string("samples_per_s") ? steps * 10 : steps;
      Timing tm = time_steps(b, model, backend, k);
      double rate = b.items_per_step / tm.step_s;
      std::printf("{\"framework\":\"sgrt\",\"backend\":\"%s\",\"model\":\"%s\",\"recipe\":\"%s\",\"%s\":%.1f,"
                  "\"step_s\":%.5f,\"steps\":%d,\"threads\":%d,\"arena_bytes\":%llu",
                  backend.c_str(), b.model.c_str(), b.recipe.c_str(), unit, rate, tm.step_s, k, threads,
                  static_cast<unsigned long long>(tm.arena_bytes));
      if (tm.device_bytes) std::printf(",\"device_peak_mib\":%.1f", tm.device_bytes / 1048576.0);
      if (ref_rate > 0) std::printf(",\"vs_pytorch\":%.3f", rate / ref_rate);
      std::printf("}\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
