// Every op on Vulkan against the CPU reference: the same compiled graphs, the
// same inputs and initial weights, one train_step then eval on each backend,
// then every tensor of the arena compared. Shapes are odd (tiles and
// workgroups end partway) and large enough to span several GEMM tiles.
//
// Bound: max|vk - cpu| / max(1, max|cpu|) <= 1e-5 for f32. Both sides round
// each op in f32; sums run in different orders (GEMM tiling, the loss's tree
// reduction) and GLSL's exp/log/tanh differ from libm by a few ulps, so each op
// is off by about K * 2^-24 relative for a K-term sum (K <= 130 here: ~1e-6),
// a little more after the chain of a training step; 1e-5 leaves headroom while
// still catching any indexing or semantic error, which shows up as O(1).
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "../runtime/src/vulkan/kernels.h"
#include "harness.h"
#include "test_vulkan_support.h"

using namespace sgrt;

namespace {

constexpr double kBound = 1e-5;

// Model A: an MLP with every activation, a transposed matmul, softmax and
// log-softmax along axis 0, reduce_max and reduce_mean, cross-entropy and
// accuracy; AdamW with warmup and cosine decay, weight decay.
const char* kModelA = R"(
  local sg = require "sg"
  local cfg = sg.config{ n = 7, d = 13, h = 11, c = 5 }
  local x = sg.input("x", {cfg.n, cfg.d})
  local y = sg.input("y", {cfg.n}, "i32")
  local w1 = sg.param("w1", {cfg.d, cfg.h}, {"normal", 0, 0.3})
  local b1 = sg.param("b1", {cfg.h}, {"uniform", -0.1, 0.1})
  local h = x:matmul(w1) + b1
  local a = h:relu() + h:gelu() * h:tanh() - h:sigmoid()
  local w2 = sg.param("w2", {cfg.c, cfg.h}, {"normal", 0, 0.3})
  local logits = sg.matmul(a, w2, { trans_b = true })
  local aux = sg.sum(sg.mean(sg.softmax(logits, 0) * sg.log_softmax(logits, 0), 0))
  local mx = sg.sum(sg.max(h, 1))
  sg.loss(sg.softmax_cross_entropy(logits, y) + aux * 0.1 + mx * 0.01)
  sg.metric("accuracy", sg.accuracy(logits, y))
  sg.output("logits", logits)
  sg.optimizer.adamw{ lr = 1e-2, weight_decay = 0.01, schedule = sg.schedule.cosine{ warmup = 2 } }
)";

// Model B: reshape, transposes of rank 3, all four matmul transpositions,
// broadcasting div (sum_to over a leading axis in its gradient), exp, log, neg;
// SGD with momentum.
const char* kModelB = R"(
  local sg = require "sg"
  local x = sg.input("x", {6, 4, 3})
  local p = sg.param("p", {3, 5}, {"normal", 0, 0.5})
  local q = sg.param("q", {4, 3}, {"uniform", 0.5, 1.5})
  local r = sg.reshape(x, {24, 3})
  local t = sg.reshape(sg.transpose(x, {2, 0, 1}), {3, 24})
  local u = sg.matmul(r, p) + sg.matmul(t, p, { trans_a = true })
  local v = sg.matmul(r, u, { trans_a = true }) - sg.matmul(r, sg.transpose(u), { trans_a = true, trans_b = true })
  local z = sg.exp(sg.neg(x / q)) + sg.log(q * q)
  sg.loss(sg.sum(sg.sum(u * u)) * 0.01 + sg.sum(sg.sum(v)) + sg.sum(sg.sum(sg.sum(z))))
  sg.optimizer.sgd{ lr = 0.05, momentum = 0.9, weight_decay = 0.001 }
)";

double normalized_error(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(ref[i]) || std::isnan(a[i])) { if (std::isnan(ref[i]) != std::isnan(a[i])) return INFINITY; continue; }
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - ref[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
  }
  return diff / scale;
}

// Random inputs (labels in [0, 5)) written alike to both sessions.
void write_inputs(Session& cpu, Session& gpu) {
  std::mt19937 rng(42);
  const std::vector<TensorInfo>& ts = cpu.model().tensors();
  for (size_t id = 0; id < ts.size(); ++id) {
    const TensorInfo& t = ts[id];
    if (t.role != Role::input) continue;
    std::vector<uint32_t> v(static_cast<size_t>(numel(t.type.shape)));
    for (uint32_t& e : v) {
      float f = std::uniform_real_distribution<float>(-2.f, 2.f)(rng);
      if (t.type.dtype == DType::i32) e = rng() % 5;
      else std::memcpy(&e, &f, 4);
    }
    for (Session* s : {&cpu, &gpu}) REQUIRE(s->write(static_cast<int>(id), v.data(), v.size() * 4).ok());
  }
}

// Every tensor of both arenas: f32 within kBound, i32 equal.
void compare_all(const Session& cpu, const Session& gpu, const std::string& when) {
  const std::vector<TensorInfo>& ts = cpu.model().tensors();
  for (size_t id = 0; id < ts.size(); ++id) {
    const TensorInfo& t = ts[id];
    if (t.bytes == 0) continue;
    std::vector<float> a(t.bytes / 4), b(t.bytes / 4);
    REQUIRE(cpu.read(static_cast<int>(id), a.data(), t.bytes).ok());
    REQUIRE(gpu.read(static_cast<int>(id), b.data(), t.bytes).ok());
    INFO(when << ": tensor " << t.name << " " << type_str(t.type));
    if (t.type.dtype == DType::i32) CHECK(std::memcmp(a.data(), b.data(), t.bytes) == 0);
    else CHECK(normalized_error(b, a) <= kBound);
  }
}

std::set<OpCode> g_covered;

void cross_check(const char* lua, const std::map<std::string, std::string>& set = {}) {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(lua, &m, set);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto cpu = test::open_session(m, "cpu", 3);
  auto gpu = test::open_session(m, "vulkan", 3);
  write_inputs(*cpu, *gpu);
  compare_all(*cpu, *gpu, "after init");
  for (const ProgramInfo& p : m->programs()) {
    for (const OpInfoLoaded& op : p.ops) g_covered.insert(op.code);
    for (int rep = 0; rep < 2; ++rep) {  // twice: the replayed command buffer, the optimizer's second step
      test::run(*cpu, p.name);
      test::run(*gpu, p.name);
      compare_all(*cpu, *gpu, p.name + " #" + std::to_string(rep + 1));
    }
  }
}

}  // namespace

TEST_CASE("vulkan agrees with the cpu on every op (small odd shapes)") {
  if (!test::vulkan_device_present()) return;
  cross_check(kModelA);
  cross_check(kModelB);
}

TEST_CASE("vulkan agrees with the cpu across several GEMM tiles and workgroups") {
  if (!test::vulkan_device_present()) return;
  cross_check(kModelA, {{"n", "130"}, {"d", "70"}, {"h", "67"}, {"c", "9"}});
}

TEST_CASE("the cross-check covers every op the vulkan backend has") {
  if (!test::vulkan_device_present()) return;
  REQUIRE_FALSE(g_covered.empty());  // runs after the cases above (doctest keeps file order)
  for (int c = 0; c < kNumOps; ++c) {
    OpCode code = static_cast<OpCode>(c);
    bool lowp = code == OpCode::Quantize || code == OpCode::QMatMul || code == OpCode::DgeGrad ||
                code == OpCode::ClampOutliers || code == OpCode::Dequantize || code == OpCode::QuantizeGrad;
    if (!vk::has_kernel(code) || lowp) continue;  // lowp: test_vulkan_lowp.cpp covers them
    INFO("op " << op_info(code).name);
    CHECK(g_covered.count(code) == 1);
  }
}
