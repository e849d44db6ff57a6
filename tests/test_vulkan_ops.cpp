// Every op on Vulkan against the CPU reference: the same compiled graphs, the
// same inputs and initial weights, one train_step then eval on each backend,
// then every tensor of the arena compared. Shapes are odd (tiles and
// workgroups end partway) and large enough to span several GEMM tiles.
//
// Bound: max|vk - cpu| / max(1, max|cpu|) <= 1e-5 for f32 (kF32Bound). Both sides round
// each op in f32; sums run in different orders (GEMM tiling, the loss's tree
// reduction) and GLSL's exp/log/tanh differ from libm by a few ulps, so each op
// is off by about K * 2^-24 relative for a K-term sum (K <= 130 here: ~1e-6),
// a little more after the chain of a training step; 1e-5 leaves headroom while
// still catching any indexing or semantic error, which shows up as O(1).
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "vulkan/table.h"
#include "backend_compare.h"
#include "test_vulkan_support.h"

using namespace sgrt;

namespace {

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
  local z = sg.exp(sg.neg(x / q)) + sg.log(q * q) + sg.sqrt(q)
  sg.loss(sg.sum(sg.sum(u * u)) * 0.01 + sg.sum(sg.sum(v)) + sg.sum(sg.sum(sg.sum(z))))
  sg.optimizer.sgd{ lr = 0.05, momentum = 0.9, weight_decay = 0.001 }
)";

std::set<OpCode> g_covered;

// Every tensor of both arenas after each run: f32 within kF32Bound, i32 equal.
void cross_check(const char* lua, const std::map<std::string, std::string>& set = {}) {
  test::cross_check("vulkan", lua, set, &g_covered);
}

}  // namespace

TEST_CASE("vulkan agrees with the cpu on every op (small odd shapes)") {
  if (!test::vulkan_device_present()) return;
  cross_check(kModelA);
  cross_check(kModelB);
  cross_check(test::kTransformerModel);  // backend_compare.h
  cross_check(test::kWindowModel);       // slice, pad, concat
  cross_check(test::kConvModel);         // backend_compare.h: im2col, col2im, running_stat
}

TEST_CASE("vulkan agrees with the cpu across several GEMM tiles and workgroups") {
  if (!test::vulkan_device_present()) return;
  cross_check(kModelA, {{"n", "130"}, {"d", "70"}, {"h", "67"}, {"c", "9"}});
  cross_check(test::kTransformerModel, {{"b", "2"}, {"t", "5"}, {"h", "5"}, {"dh", "30"}, {"v", "7"}});
  // 1056 columns: the norms' rows on 128 invocations each (32 up to 1024).
  cross_check(test::kTransformerModel, {{"b", "2"}, {"t", "5"}, {"h", "4"}, {"dh", "264"}, {"v", "7"}});
  cross_check(test::kConvModel, {{"n", "16"}, {"h", "28"}, {"w", "28"}, {"c", "3"}});  // im2col: several workgroups
}

TEST_CASE("vulkan attention agrees with the cpu: GQA, odd lengths, head sizes 16, 64 and 128") {
  if (!test::vulkan_device_present()) return;
  cross_check(test::kAttentionModel);  // T = 5: one partial tile
  // T = 37: three tiles, the last partial; one kv head for 4 query heads; plain multi-head.
  cross_check(test::kAttentionModel, {{"t", "37"}, {"dh", "64"}, {"kv", "1"}});
  cross_check(test::kAttentionModel, {{"t", "37"}, {"h", "2"}, {"kv", "2"}});
  cross_check(test::kAttentionModel, {{"b", "1"}, {"t", "18"}, {"h", "2"}, {"kv", "1"}, {"dh", "128"}});
}

TEST_CASE("vulkan rope_at and kv_attention agree with the cpu: chunks and single tokens, both rope pairings") {
  if (!test::vulkan_device_present()) return;
  cross_check(test::kKvCacheModel);  // GQA: 4 query heads on 2 kv heads
  // t = 18: two query tiles; a cache of 40 rows (three key tiles), one kv head.
  cross_check(test::kKvCacheModel, {{"interleaved", "true"}, {"t", "18"}, {"tmax", "40"}, {"kv", "1"}, {"dh", "64"}});
}

// Sums over a leading axis add their terms in order on both backends (the
// CPU's strided reduce_sum is serial; reduce_axes.comp loads eight at a time
// and adds them in order), and sum_to's column sums in sgrt/column_sums.h's
// chunks on both, so they agree to the bit; terms of mixed magnitude make any
// other order round differently. The mean's division is correctly rounded on
// both (NVIDIA's driver divides within Vulkan's 2.5 ulp: reduce_axes.comp
// corrects it). 301 rows: a partial batch, a partial chunk.
TEST_CASE("vulkan sums and maxima over a leading axis equal the cpu's bit for bit") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.input("x", {3, 301, 37})
    local b = sg.param("b", {37}, "zeros")
    local c = sg.param("c", {3, 1, 37}, "zeros")
    sg.output("sum", sg.sum(x, 1))
    sg.output("max", sg.max(x, 1))
    sg.output("mean", sg.mean(x, 0))
    sg.loss(sg.mean(sg.mean(sg.mean((x + b) * x + c * x))))
    sg.optimizer.sgd{ lr = 0.1 }
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<float> x(3 * 301 * 37);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (float& v : x) v = std::ldexp(normal(rng), static_cast<int>(rng() % 21) - 10);
  auto cpu = test::open_session(m, "cpu"), gpu = test::open_session(m, "vulkan");
  for (auto* s : {cpu.get(), gpu.get()}) {
    test::write_vec(*s, "x", x);
    // b's gradient: x's columns summed over 903 rows (leading axes); c's over
    // each of 3 blocks of 301 rows (a middle axis)
    test::run(*s, "train_step");
    test::run(*s, "infer");
  }
  for (const std::string name : {"sum", "max", "mean"}) {
    CAPTURE(name);
    std::vector<float> want = test::read_output(*cpu, name), got = test::read_output(*gpu, name);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
  }
  CHECK(test::read_f32(*cpu, "b") == test::read_f32(*gpu, "b"));
  CHECK(test::read_f32(*cpu, "c") == test::read_f32(*gpu, "c"));
}

TEST_CASE("vulkan's classifier rows at every width: loss, gradient, first argmax, bad labels") {
  if (!test::vulkan_device_present()) return;
  test::check_classifier_rows("vulkan", &g_covered);
}

TEST_CASE("the cross-check covers every op the vulkan backend has") {
  if (!test::vulkan_device_present()) return;
  REQUIRE_FALSE(g_covered.empty());  // runs after the cases above (doctest keeps file order)
  for (int c = 0; c < kNumOps; ++c) {
    OpCode code = static_cast<OpCode>(c);
    bool lowp = code == OpCode::Quantize || code == OpCode::QMatMul || code == OpCode::DgeGrad ||
                code == OpCode::ClampOutliers || code == OpCode::Dequantize || code == OpCode::QuantizeGrad;
    if (!table_has_op(vk::kernel_table(), code) || lowp) continue;  // lowp: test_vulkan_lowp.cpp covers them
    if (code == OpCode::DequantMatMul) continue;  // a block-format base: test_dequant_matmul_gpu.cpp covers it
    INFO("op " << op_info(code).name);
    CHECK(g_covered.count(code) == 1);
  }
}
