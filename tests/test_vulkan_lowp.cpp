// The low-precision ops on Vulkan (quantize, qmatmul, dge_grad, clamp_outliers)
// against the CPU, for every recipe, on odd shapes (partial MX / NVFP4 blocks,
// E2M1 bytes and words straddling rows, several GEMM tiles):
// - op by op: every program split into one program per op, and before each op
//   the Vulkan arena gets the CPU's bytes, so both run the op on the same input.
//   quantize (codes, scales, state: counters, history, tensor scale) and
//   clamp_outliers must be bit-identical; f32 outputs within kF32Bound (qmatmul sums
//   the same decoded values in another order; dge_grad uses GLSL's pow).
// - whole programs: bit-identical to the same ops run one by one on Vulkan
//   (barriers, replay); losses track the CPU's.
// - Fashion-MNIST: sgrt train models/fashion_mlp.lua --recipe fp8 --set
//   hidden=128 --steps 300 reaches the CPU's accuracy on Vulkan.
// - split-K (gemm_tiled.glsl's SPLIT and REDUCE, forced on): the same checks
//   on products whose K spans two pieces, under fp32, fp8, fp8-block, nvfp4.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "vulkan/lowering.h"
#include "vulkan/table.h"
#include "backend_compare.h"
#include "scoped_env.h"
#include "fashion.h"
#include "test_vulkan_support.h"

using namespace sgrt;

namespace {

const char* kRecipes[] = {"bf16", "fp8", "fp8-delayed", "mxfp8", "fp8-row", "fp8-block", "fp8-static", "fp4", "nvfp4"};

// Three layers (the first two quantized under every recipe; fp4 and nvfp4 keep
// the last in f32), a transposed weight, gelu and relu activations; `opt` is
// the optimizer call (its state level).
const char* kAdamW = "adamw{ lr = 1e-2, weight_decay = 0.01 }";
std::string model(const std::string& recipe, const std::string& opt = kAdamW) {
  return R"(
  local sg = require "sg"
  local cfg = sg.config{ n = 7, d = 13, h = 11, c = 5 }
  local x = sg.input("x", {cfg.n, cfg.d})
  local y = sg.input("y", {cfg.n}, "i32")
  local w1 = sg.param("w1", {cfg.d, cfg.h}, {"normal", 0, 0.3})
  local b1 = sg.param("b1", {cfg.h}, {"uniform", -0.1, 0.1})
  local h = (x:matmul(w1) + b1):gelu()
  local w2 = sg.param("w2", {cfg.h, cfg.h}, {"normal", 0, 0.3})
  local g = sg.matmul(h, w2, { trans_b = true }):relu()
  local w3 = sg.param("w3", {cfg.h, cfg.c}, {"normal", 0, 0.3})
  local logits = g:matmul(w3)
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.metric("accuracy", sg.accuracy(logits, y))
  sg.output("logits", logits)
  sg.recipe ")" + recipe + "\"\n  sg.optimizer." + opt + "\n";
}
const std::map<std::string, std::string> kSmall = {};
const std::map<std::string, std::string> kLarge = {{"n", "130"}, {"d", "70"}, {"h", "67"}, {"c", "5"}};

std::vector<float> floats_of(const std::vector<uint8_t>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

// Largest distance, in steps of the format, between two arrays of 16-bit codes
// (sign-magnitude mapped onto a line, so -0 and +0 are 0 apart).
int max_code_steps16(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  auto line = [](const std::vector<uint8_t>& v, size_t i) {
    uint16_t c;
    std::memcpy(&c, v.data() + 2 * i, 2);
    return (c & 0x8000u) ? -static_cast<int>(c & 0x7FFFu) : static_cast<int>(c);
  };
  int worst = 0;
  for (size_t i = 0; i < a.size() / 2; ++i) worst = std::max(worst, std::abs(line(a, i) - line(b, i)));
  return worst;
}

std::set<OpCode> g_covered;

// Runs `program` (split) op by op on both sessions from the CPU's bytes and
// compares each op's outputs (only quantize's when `quantize_only`: NaN inputs
// make the f32 ones incomparable).
void check_ops(Session& cpu, Session& gpu, const std::string& program, size_t count, const std::string& recipe,
               bool quantize_only = false) {
  for (size_t i = 0; i < count; ++i) {
    std::string name = program + "#" + std::to_string(i);
    const OpInfoLoaded& op = cpu.model().programs()[cpu.model().find_program(name)].ops[0];
    g_covered.insert(op.code);
    test::copy_arena(cpu, gpu);
    test::run(cpu, name);
    test::run(gpu, name);
    // Quantizing is exact arithmetic: the same codes. An optimizer update computes
    // in f32, and the shader's b^t (repeated squaring; the CPU calls pow) and the
    // driver's division and square root (2.5 ulp allowed by Vulkan) may differ in
    // the last f32 bit, which now and then moves a 16-bit master or moment one
    // step (seen on an NVIDIA H200; never on lavapipe).
    bool exact = op.code == OpCode::Quantize || op.code == OpCode::ClampOutliers;
    if (quantize_only && op.code != OpCode::Quantize) continue;
    for (int id : op.out) {
      const TensorInfo& t = cpu.model().tensors()[id];
      INFO(recipe << " " << name << " " << op_info(op.code).name << " (" << op.loc << "): " << t.name << " " << type_str(t.type));
      std::vector<uint8_t> a = test::bytes_of(cpu, id), b = test::bytes_of(gpu, id);
      if (!exact && dtype_bits(t.type.dtype) == 16) CHECK(max_code_steps16(a, b) <= 1);
      else if (exact || t.type.dtype != DType::f32) CHECK(a == b);
      else CHECK(test::normalized_error(floats_of(b), floats_of(a)) <= test::kF32Bound);
    }
  }
}

// Inputs no random draw gives: a zero first weight (NVFP4's tensor scale with
// no previous one) and, in x, a NaN, an infinity and an all-zero row (MX's NaN
// and zero block scales, fp8-row's kept row scales, fp8-block's NaN and zero tile scales).
void special_inputs(Session& s) {
  test::write_vec(s, "w1", std::vector<float>(test::read_f32(s, "w1").size(), 0.f));
  std::vector<float> x = test::read_f32(s, "x");
  const size_t d = x.size() / 7;  // kSmall: x [7, d]
  x[2] = NAN;
  x[2 * d + 5] = INFINITY;
  std::fill(x.begin() + 4 * d, x.begin() + 5 * d, 0.f);
  test::write_vec(s, "x", x);
}

void op_by_op(const std::string& recipe, const std::map<std::string, std::string>& set, int warm_steps,
              const std::string& opt = kAdamW, void (*edit)(Session&) = nullptr) {
  compiler::Graph g;
  Status st = test::compile_graph(model(recipe, opt), &g, set);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<std::pair<std::string, size_t>> programs = test::split_programs(&g);
  std::shared_ptr<const Model> m = test::load_graph(g);
  auto cpu = test::open_session(m, "cpu", 3);
  auto gpu = test::open_session(m, "vulkan", 3);
  test::write_inputs(*cpu, *gpu, 7);
  if (edit) edit(*cpu);  // check_ops copies the CPU's bytes to the GPU
  auto count = [&](const std::string& p) {
    for (auto& [n, c] : programs) if (n == p) return c;
    FAIL("no program " << p);
    return size_t{0};
  };
  // Fills delayed scaling's amax history (16 steps) on the CPU alone.
  for (int s = 0; s < warm_steps; ++s)
    for (size_t i = 0; i < count("train_step"); ++i) test::run(*cpu, "train_step#" + std::to_string(i));
  for (int rep = 0; rep < 2; ++rep) check_ops(*cpu, *gpu, "train_step", count("train_step"), recipe, edit);
  check_ops(*cpu, *gpu, "eval", count("eval"), recipe, edit);
}

// Whole programs on Vulkan against the same ops run one program each on Vulkan:
// every tensor that holds its own value after the program bit-identical (the
// barriers between dependent dispatches, replayed command buffers; a whole
// program folds scales and adds into products, which single ops cannot); and
// the loss against the CPU's (a last-bit GEMM difference can move a later code
// by a step, so whole steps only track).
void whole_programs(const std::string& recipe, const std::map<std::string, std::string>& set,
                    const std::string& opt = kAdamW) {
  compiler::Graph g;
  Status st = test::compile_graph(model(recipe, opt), &g, set);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<compiler::Program> whole = g.programs;
  std::vector<std::pair<std::string, size_t>> programs = test::split_programs(&g);
  g.programs.insert(g.programs.begin(), whole.begin(), whole.end());
  std::shared_ptr<const Model> m = test::load_graph(g);
  auto cpu = test::open_session(m, "cpu", 3);
  auto gpu = test::open_session(m, "vulkan", 3);
  auto ops = test::open_session(m, "vulkan", 3);
  test::write_inputs(*cpu, *gpu, 7);
  test::copy_arena(*gpu, *ops);
  for (std::string p : {"train_step", "train_step", "train_step", "eval"}) {
    float loss[2];
    loss[0] = test::loss_of(*cpu, p);
    loss[1] = test::loss_of(*gpu, p);
    for (auto& [name, count] : programs)
      if (name == p)
        for (size_t i = 0; i < count; ++i) test::run(*ops, p + "#" + std::to_string(i));
    INFO(recipe << " after " << p << ": loss cpu " << loss[0] << ", vulkan " << loss[1]);
    CHECK(loss[1] == doctest::Approx(loss[0]).epsilon(1e-2));
    const std::vector<bool> intact = test::intact_after(*m, m->programs()[m->find_program(p)]);
    for (size_t id = 0; id < m->tensors().size(); ++id) {
      if (m->tensors()[id].bytes == 0 || !intact[id]) continue;
      INFO(m->tensors()[id].name);
      CHECK(test::bytes_of(*gpu, static_cast<int>(id)) == test::bytes_of(*ops, static_cast<int>(id)));
    }
  }
}

}  // namespace

TEST_CASE("vulkan low-precision ops agree with the cpu op by op, every recipe") {
  if (!test::vulkan_device_present()) return;
  for (const char* r : kRecipes) {
    op_by_op(r, kSmall, 0);
    op_by_op(r, kLarge, std::string(r) == "fp8-delayed" ? 16 : 0);
  }
}

TEST_CASE("vulkan quantize agrees with the cpu on a zero weight and on NaN, inf and zero blocks") {
  if (!test::vulkan_device_present()) return;
  for (const char* r : {"mxfp8", "fp8-row", "fp8-block", "nvfp4"}) op_by_op(r, kSmall, 0, kAdamW, special_inputs);
}

TEST_CASE("vulkan optimizer state levels O1-O3 agree with the cpu op by op") {
  if (!test::vulkan_device_present()) return;
  for (const char* level : {"O1", "O2", "O3"}) {
    std::string l = std::string("state = \"") + level + "\", clip = 1.0 }";
    op_by_op("fp8", kLarge, 0, "adamw{ lr = 1e-2, weight_decay = 0.01, " + l);
    op_by_op("fp8", kSmall, 0, "sgd{ lr = 0.05, momentum = 0.9, weight_decay = 0.001, " + l);
  }
}

TEST_CASE("vulkan low-precision training steps track the cpu, every recipe") {
  if (!test::vulkan_device_present()) return;
  for (const char* r : kRecipes) whole_programs(r, kLarge);
  whole_programs("fp8", kLarge, "adamw{ lr = 1e-2, state = \"O3\", clip = 1.0 }");
  whole_programs("fp8", kLarge, "sgd{ lr = 0.05, state = \"O2\" }");
}

namespace {

// 600 rows: the weight gradients' K (600) spans two split-K pieces.
const std::map<std::string, std::string> kLongK = {{"n", "600"}, {"d", "70"}, {"h", "67"}, {"c", "5"}};

// Every dispatch of the recipe's programs as lowered with `opts` (no device needed).
std::vector<vk::Dispatch> lowered(const std::string& recipe, const std::map<std::string, std::string>& dims,
                                  const vk::KernelOptions& opts) {
  compiler::Graph g;
  REQUIRE(test::compile_graph(model(recipe), &g, dims).ok());
  std::shared_ptr<const Model> m = test::load_graph(g);
  vk::Scratch scratch;
  std::vector<vk::Dispatch> ds;
  for (const ProgramInfo& p : m->programs())
    for (size_t i = 0; i < p.ops.size(); ++i)
      REQUIRE(vk::lower_op(p.ops[i], m->tensors(), static_cast<uint32_t>(i), opts, &scratch, &ds).ok());
  return ds;
}

// The products of the recipe's training step that a GPU's lowering splits.
int split_products(const std::string& recipe) {
  vk::KernelOptions opts;
  opts.split_k_grid = 256;
  int n = 0;
  for (const vk::Dispatch& d : lowered(recipe, kLongK, opts)) n += (d.op & vk::kSplitSums) != 0;
  return n;
}

}  // namespace

// Decode-first, when asked: every qmatmul off cooperative matrices (on 64x64
// or 128x128 tiles, or gemm_thin: the classifier's products) decodes each code
// operand into scratch first (gemm_decode), and its GEMM reads it there
// (gemm_operands.glsl's DEC_A / DEC_B); by default none does.
TEST_CASE("vulkan qmatmuls decode their operands first only when asked") {
  struct Count { int decodes = 0, products = 0, reading_decoded = 0; };
  auto count = [](uint32_t small_grid, bool decode_first) {
    vk::KernelOptions opts;
    opts.gemm_small_grid = small_grid;
    opts.decode_first = decode_first;
    Count c;
    for (const vk::Dispatch& d : lowered("fp8", kLarge, opts)) {
      c.decodes += d.shader == "gemm_decode";
      const bool gemm = d.shader.rfind("gemm_tiled", 0) == 0 || d.shader == "gemm_thin";
      const bool qmatmul = gemm && ((d.op >> 2) & 7u) != 0;  // A's dtype not f32
      c.products += qmatmul;
      c.reading_decoded += qmatmul && (d.op >> 16 & 3u) == 3u;
    }
    return c;
  };
  const Count small = count(UINT32_MAX, true);
  CHECK(small.products >= 8);  // train_step's 3 forward, 2 data and 3 weight gradients (and eval's, infer's)
  CHECK(small.decodes == 2 * small.products);  // both operands are E4M3 / E5M2 codes
  CHECK(small.reading_decoded == small.products);
  const Count large = count(0, true);
  CHECK(large.products == small.products);
  CHECK(large.decodes == small.decodes);
  CHECK(large.reading_decoded == large.products);
  for (uint32_t grid : {0u, UINT32_MAX}) {
    const Count plain = count(grid, vk::KernelOptions{}.decode_first);  // the default
    CHECK(plain.products == small.products);
    CHECK(plain.decodes == 0);
    CHECK(plain.reading_decoded == 0);
  }
}

// Both with the operands decoded in the GEMM's loads and decoded first into
// the scratch region (SGRT_VULKAN_DECODE_FIRST=1), the partial sums after them.
TEST_CASE("vulkan split-K products agree with the cpu op by op and as whole steps") {
  if (!test::vulkan_device_present()) return;
  test::ScopedEnv on("SGRT_VULKAN_SPLIT_K", "1");  // on by default on GPUs only
  for (const std::string decode : {"0", "1"}) {
    CAPTURE(decode);
    test::ScopedEnv decoding("SGRT_VULKAN_DECODE_FIRST", decode.c_str());
    for (const char* r : {"fp32", "fp8", "fp8-block", "nvfp4"}) {  // matmul; qmatmul's codes, chunks, block scales
      CAPTURE(r);
      CHECK(split_products(r) >= 2);  // the two weight gradients with a long K
      op_by_op(r, kLongK, 0);
    }
    whole_programs("fp8-block", kLongK);
  }
}

namespace {

// The qmatmul dispatches of the recipe's programs as lowered with
// SGRT_VULKAN_COOP=codes (no device needed): on gemm_coop and on the tiled
// shader; `mismatched` counts those where that choice does not follow the
// operands (OP bits: dtypes 2-4, 5-7; scale kinds 8-10, 11-13): cooperative
// exactly when both are E4M3 / E2M1 codes with no scale, a tensor, an outer or
// an NVFP4 block scale.
struct CoopSplit {
  int coop = 0, tiled = 0, mismatched = 0;
};
CoopSplit coop_products(const std::string& recipe) {
  compiler::Graph g;
  REQUIRE(test::compile_graph(model(recipe), &g, kLarge).ok());
  std::shared_ptr<const Model> m = test::load_graph(g);
  vk::KernelOptions opts;
  opts.coop_codes = true;
  opts.coop_threads = 128;
  vk::Scratch scratch;
  auto exact = [](uint32_t dt, uint32_t sk) {
    return (dt == static_cast<uint32_t>(DType::e4m3) || dt == static_cast<uint32_t>(DType::e2m1)) &&
           (sk == 0 || sk == 1 || sk == 2 || sk == 5);  // gemm_operands.glsl's SK_TENSOR, SK_OUTER, SK_NVFP4
  };
  CoopSplit split;
  for (const ProgramInfo& p : m->programs())
    for (size_t i = 0; i < p.ops.size(); ++i) {
      std::vector<vk::Dispatch> ds;
      REQUIRE(vk::lower_op(p.ops[i], m->tensors(), static_cast<uint32_t>(i), opts, &scratch, &ds).ok());
      for (const vk::Dispatch& d : ds) {
        const bool coop = d.shader == "gemm_coop";
        if (p.ops[i].code != OpCode::QMatMul) {
          CHECK_FALSE(coop);  // f32 matmuls stay tiled under =codes
          continue;
        }
        if (!coop && d.shader.rfind("gemm_tiled", 0) != 0) continue;  // split-K's sums etc.
        (coop ? split.coop : split.tiled) += 1;
        split.mismatched += coop != (exact((d.op >> 2) & 7u, (d.op >> 8) & 7u) && exact((d.op >> 5) & 7u, (d.op >> 11) & 7u));
      }
    }
  return split;
}

}  // namespace

// SGRT_VULKAN_COOP=codes sends a qmatmul to cooperative matrices exactly where
// every operand element is an FP16 normal (products as exact as the tiled
// shader's): fp8's E4M3 forward products, fp4's and nvfp4's E2M1 codes (with
// E4M3 block scales); not E5M2 gradients, BF16, MX's E8M0 scales or
// fp8-block's chunks. Where the device has cooperative matrices the recipes' ops then
// agree with the CPU op by op as with the tiled shader; where not (lavapipe),
// the switch is refused at prepare.
TEST_CASE("SGRT_VULKAN_COOP=codes: which qmatmuls run on cooperative matrices, and their results where a device has them") {
  for (const char* r : {"fp8", "nvfp4", "fp4", "bf16", "mxfp8", "fp8-block"}) {
    CAPTURE(r);
    const CoopSplit split = coop_products(r);
    CHECK(split.mismatched == 0);
    const std::string recipe = r;
    if (recipe == "fp8" || recipe == "nvfp4" || recipe == "fp4") CHECK(split.coop > 0);
    else CHECK(split.coop == 0);
    if (recipe == "fp8") CHECK(split.tiled > 0);  // the backward's E5M2 gradients
  }

  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  REQUIRE(test::compile_lua(model("fp8"), &m).ok());
  std::unique_ptr<Session> s;
  Status st = test::vulkan_session_with("SGRT_VULKAN_COOP", "codes", m, &s);
  if (!st.ok()) {
    CHECK(st.message().find("SGRT_VULKAN_COOP=codes, but") != std::string::npos);
    MESSAGE("skipping the cooperative-matrix qmatmuls: " << st.message());
    return;
  }
  test::ScopedEnv codes("SGRT_VULKAN_COOP", "codes");  // for op_by_op's sessions
  for (const char* r : {"fp8", "nvfp4"}) {
    CAPTURE(r);
    op_by_op(r, kLarge, 0);
  }
}

TEST_CASE("the low-precision checks cover every low-precision op") {
  if (!test::vulkan_device_present()) return;
  for (OpCode c : {OpCode::Quantize, OpCode::QMatMul, OpCode::DgeGrad, OpCode::ClampOutliers, OpCode::Dequantize,
                   OpCode::QuantizeGrad}) {
    INFO(op_info(c).name);
    CHECK(table_has_op(vk::kernel_table(), c));
    CHECK(g_covered.count(c) == 1);
  }
}

TEST_CASE("fashion MLP, fp8: 300 steps on vulkan reach the cpu's accuracy") {
  if (!test::vulkan_device_present()) return;
  std::unique_ptr<Dataset> data;
  if (!open_fashion_mnist(kFashionMnistDir, &data).ok()) {
    MESSAGE("skipping: no Fashion-MNIST under " << kFashionMnistDir);
    return;
  }
  std::string lua = test::fashion_mlp_lua() + "\nsg.recipe \"fp8\"\n";  // as --recipe fp8
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(lua, &m, {{"hidden", "128"}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  TrainOptions o;
  o.steps = 300;
  o.seed = 1;
  o.log_every = 100;
  TrainResult res[2];
  test::train_on_both(m, "vulkan", *data, o, res);
  test::check_losses_track(res, 1e-2);
  auto accuracy = [](const EvalReport& e) {
    for (auto& [name, v] : e.metrics) if (name == "accuracy") return v;
    return -1.f;
  };
  float acc[2] = {accuracy(res[0].final_eval), accuracy(res[1].final_eval)};
  MESSAGE("fp8 test accuracy cpu " << acc[0] << ", vulkan " << acc[1] << "; loss cpu " << res[0].final_eval.loss
                                   << ", vulkan " << res[1].final_eval.loss);
  CHECK(acc[0] > 0.7f);
  CHECK(std::fabs(acc[1] - acc[0]) <= 0.005f);
  CHECK(res[1].final_eval.loss == doctest::Approx(res[0].final_eval.loss).epsilon(1e-2));
}
