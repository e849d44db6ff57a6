// What the CUDA backend decides at prepare must not change results beyond what
// it promises (docs/cuda.md, "Prepare-time tuning"):
// - a layer/RMS norm followed by the per-tensor quantize of its output computes
//   the quantize's amax in the norm's pass (SGRT_CUDA_FUSE=0 turns it off): the
//   amax is a maximum, exact in any order, so every byte of the arena after
//   training steps must equal the unfused run's, and both agree with the CPU
//   within test_cuda_ops.cpp's bounds;
// - GEMMs run the fastest of cuBLASLt's heuristic candidates (SGRT_CUDA_AUTOTUNE=0:
//   the first): another algorithm sums in another order, so tuned results agree
//   with the CPU within those bounds too;
// - each program's launches are captured into a CUDA graph that run() replays
//   (SGRT_CUDA_GRAPH=0: launched op by op): the same kernels on the same
//   addresses, so every arena byte must equal the op-by-op run's, also after new
//   inputs are written between runs (the graph reads the arena as it is then).
// The model checks need no GPU; the rest skips with one line without a device.
#include <cstdlib>
#include <set>
#include <string>

#include "backend_compare.h"
#include "scoped_env.h"
#include "test_cuda_support.h"

using namespace sgrt;

namespace {

// Two norms whose outputs feed quantized matmuls (d a multiple of 16: the FP8
// tensor-core path), trained by SGD under `recipe` (AdamW would turn a gradient's
// last-bit noise near zero into +-lr: conditioning, not a kernel fault).
const char* kNormModel = R"(
  local sg = require "sg"
  local cfg = sg.config{ n = 96, d = 64, recipe = "fp8" }
  local x = sg.input("x", {cfg.n, cfg.d})
  local y = sg.input("y", {cfg.n}, "i32")
  local g1 = sg.param("g1", {cfg.d}, {"uniform", 0.5, 1.5})
  local b1 = sg.param("b1", {cfg.d}, {"uniform", -0.1, 0.1})
  local w1 = sg.param("w1", {cfg.d, cfg.d}, {"normal", 0, 0.2})
  local h = sg.layer_norm(x, g1, b1):matmul(w1)
  local g2 = sg.param("g2", {cfg.d}, {"uniform", 0.5, 1.5})
  local w2 = sg.param("w2", {cfg.d, 16}, {"normal", 0, 0.3})
  local logits = sg.rms_norm(h, g2):matmul(w2)
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.optimizer.sgd{ lr = 0.05, momentum = 0.9 }
  sg.recipe(cfg.recipe)
)";

// The recipes whose norms feed a quantize with one scale per tensor: current
// amax (fp8), amax history (fp8-delayed), NVFP4's tensor-level scale.
const char* const kFusedRecipes[] = {"fp8", "fp8-delayed", "nvfp4"};

// How many norms in `m` are followed at once by the per-tensor quantize of their
// y: what the backend fuses (cuda_backend.cpp, norm_feeds_quantize).
int fusable_pairs(const Model& m) {
  int pairs = 0;
  for (const ProgramInfo& p : m.programs())
    for (size_t i = 0; i + 1 < p.ops.size(); ++i) {
      const OpInfoLoaded &norm = p.ops[i], &q = p.ops[i + 1];
      const bool is_norm = norm.code == OpCode::LayerNorm || norm.code == OpCode::RmsNorm;
      const QuantGranularity g = q.quant[0].granularity;
      pairs += is_norm && q.code == OpCode::Quantize && q.in[0] == norm.out[0] &&
               (g == QuantGranularity::tensor || g == QuantGranularity::nvfp4);
    }
  return pairs;
}

// The same inputs to both sessions, then each program twice on both.
void run_all(const std::shared_ptr<const Model>& m, Session& a, Session& b) {
  test::write_inputs(a, b, 42);
  for (const ProgramInfo& p : m->programs())
    for (int rep = 0; rep < 2; ++rep) {
      test::run(a, p.name);
      test::run(b, p.name);
    }
}

// How many tensors hold different bytes in `a` and `b` (each one named).
int differing_tensors(const Model& m, const Session& a, const Session& b, const std::string& what) {
  int differing = 0;
  for (size_t id = 0; id < m.tensors().size(); ++id) {
    if (m.tensors()[id].bytes == 0) continue;
    if (test::bytes_of(a, static_cast<int>(id)) != test::bytes_of(b, static_cast<int>(id))) {
      ++differing;
      MESSAGE("tensor " << m.tensors()[id].name << " differs between the " << what << " runs");
    }
  }
  return differing;
}

}  // namespace

TEST_CASE("the norm-quantize fusion test model has fusable pairs under each recipe") {
  for (const char* r : kFusedRecipes) {
    INFO("recipe " << std::string(r));
    std::shared_ptr<const Model> m;
    Status st = test::compile_lua(kNormModel, &m, {{"recipe", r}});
    REQUIRE_MESSAGE(st.ok(), st.message());
    // The layer_norm in train_step and eval; the rms_norm too, except under NVFP4
    // (whose recipe keeps the last matmul, the head, in f32).
    CHECK(fusable_pairs(*m) == (std::string(r) == "nvfp4" ? 2 : 4));
  }
}

TEST_CASE("cuda norm fused with its quantize: every arena byte as unfused, and the cpu's within bounds") {
  if (!test::cuda_device_present()) return;
  for (const char* r : kFusedRecipes) {
    INFO("recipe " << std::string(r));
    std::shared_ptr<const Model> m;
    Status st = test::compile_lua(kNormModel, &m, {{"recipe", r}});
    REQUIRE_MESSAGE(st.ok(), st.message());
    std::unique_ptr<Session> unfused;
    {
      test::ScopedEnv off("SGRT_CUDA_FUSE", "0");
      unfused = test::open_session(m, "cuda", 3);
    }
    auto fused = test::open_session(m, "cuda", 3);
    run_all(m, *fused, *unfused);
    CHECK(differing_tensors(*m, *fused, *unfused, "fused and unfused") == 0);
    std::set<OpCode> covered;
    test::cross_check("cuda", kNormModel, {{"recipe", r}}, &covered);  // fused (the default) vs the cpu
  }
}

TEST_CASE("cuda GEMMs on tuned algorithms agree with the cpu (f32, bf16, fp8; several shapes)") {
  if (!test::cuda_device_present()) return;
  // Shapes large enough that cuBLASLt offers several candidates (split-K among them).
  for (const char* r : {"fp32", "bf16", "fp8"}) {
    INFO("recipe " << std::string(r));
    std::set<OpCode> covered;
    test::cross_check("cuda", kNormModel, {{"recipe", r}, {"n", "256"}, {"d", "512"}}, &covered);
    test::cross_check("cuda", kNormModel, {{"recipe", r}, {"n", "1024"}, {"d", "128"}}, &covered);
  }
}

TEST_CASE("cuda programs replayed as graphs: every arena byte as launched op by op") {
  if (!test::cuda_device_present()) return;
  // cuBLASLt's first heuristic choice in both sessions, so the GEMMs are the same
  // algorithms (and the graph captures a GEMM's first call, with no tuning run before).
  test::ScopedEnv first("SGRT_CUDA_AUTOTUNE", "0");
  const std::pair<std::string, std::map<std::string, std::string>> models[] = {
      {kNormModel, {{"recipe", "fp8"}}},
      {test::llama_text_lua(), test::tiny_lora_llama()},  // the LoRA step: embedding, attention, rope, frozen base
  };
  for (const auto& [lua, set] : models) {
    std::shared_ptr<const Model> m;
    Status st = test::compile_lua(lua.c_str(), &m, set);
    REQUIRE_MESSAGE(st.ok(), st.message());
    INFO("model with " << m->programs().front().ops.size() << " ops in " << m->programs().front().name);
    std::unique_ptr<Session> launched;
    {
      test::ScopedEnv off("SGRT_CUDA_GRAPH", "0");
      launched = test::open_session(m, "cuda", 3);
    }
    auto graphed = test::open_session(m, "cuda", 3);
    run_all(m, *graphed, *launched);
    test::write_inputs(*graphed, *launched, 43);  // new inputs: a graph that kept the old ones would differ
    test::run(*graphed, "train_step");
    test::run(*launched, "train_step");
    CHECK(differing_tensors(*m, *graphed, *launched, "graph and op-by-op") == 0);
  }
}
