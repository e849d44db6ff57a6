// Per-op timing (Backend::request_profile, sgrt train --profile) on every
// backend present:
//  - asked for after prepare() it is refused; not asked for, there is none;
//  - the first run is left out, each program counts its own runs, and every
//    op has a time (>= 0) in its program's order;
//  - the op times fit inside the host's wall clock around the same runs (on
//    the CPU they are most of it), and the products, which do nearly all of
//    this model's arithmetic, take the largest share (the CPU runs on one
//    thread: a busy machine then delays ops in proportion to their length,
//    not to how often the thread pool waits for a descheduled worker);
//  - on the CPU an add fused into its product reads exactly 0.
// And `sgrt train --profile` prints each program's tables.
#include <chrono>
#include <numeric>
#include <sstream>

#include "cpu/parallel.h"
#include "harness.h"
#include "test_cuda_support.h"
#include "test_vulkan_support.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

// y = x @ w + b, x [m, k], w [k, k]: the forward product, the weight
// gradient's product and the bias gradient's sum; the rest is elementwise.
const char* kModel = R"(
local sg = require "sg"
local c = sg.config{ m = 256, k = 512 }
local x = sg.input("x", {c.m, c.k})
local w = sg.param("w", {c.k, c.k}, { "uniform", -0.1, 0.1 })
local b = sg.param("b", {c.k}, { "uniform", -0.1, 0.1 })
local y = sg.matmul(x, w) + b
sg.loss(sg.mean(sg.mean(y)))
sg.optimizer.sgd{ lr = 0.01 }
)";

struct Timed {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Session> session;
  int train = -1;
  double wall = 0;  // seconds of the measured runs, host clock around them
};

// Four train steps (the first is left out of the profile and of `wall`).
void run_profiled(const std::string& backend, const std::map<std::string, std::string>& set, Timed* t) {
  Status st = test::compile_lua(kModel, &t->model, set);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Backend> be;
  REQUIRE(make_backend(backend, &be).ok());
  REQUIRE(be->request_profile().ok());
  REQUIRE(Session::create(t->model, std::move(be), &t->session).ok());
  REQUIRE(t->session->init(1, 10).ok());
  REQUIRE(t->session->find_program("train_step", &t->train).ok());
  REQUIRE(t->session->run(t->train).ok());
  REQUIRE(t->session->backend().sync().ok());
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) REQUIRE(t->session->run(t->train).ok());
  REQUIRE(t->session->backend().sync().ok());
  t->wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The properties every backend's profile has; returns the sum of the op times.
double check_profile(const Timed& t) {
  const std::vector<ProgramProfile>& prof = t.session->backend().profile();
  REQUIRE(prof.size() == t.model->programs().size());
  for (size_t p = 0; p < prof.size(); ++p) {
    CAPTURE(t.model->programs()[p].name);
    CHECK(prof[p].runs == (static_cast<int>(p) == t.train ? 3 : 0));
    CHECK(prof[p].ran == (static_cast<int>(p) == t.train));
    REQUIRE(prof[p].op_seconds.size() == t.model->programs()[p].ops.size());
  }
  const ProgramProfile& train = prof[t.train];
  const ProgramInfo& info = t.model->programs()[t.train];
  double total = 0, products = 0;
  for (size_t i = 0; i < info.ops.size(); ++i) {
    CHECK(train.op_seconds[i] >= 0);
    total += train.op_seconds[i];
    if (info.ops[i].code == OpCode::MatMul) products += train.op_seconds[i];
  }
  CHECK(total > 0);
  // Device clocks may tick a little off the host's: 2% and 100 us of slack.
  CHECK(total <= t.wall * 1.02 + 1e-4);
  CHECK(products > 0.4 * total);  // a profile that put times on the wrong ops: ~10% (2 of ~20 ops)
  MESSAGE(std::string(t.session->backend().name()) << ": ops " << total * 1e3 << " ms of " << t.wall * 1e3 << " ms wall, products "
                                      << 100 * products / total << "%");
  return total;
}

}  // namespace

TEST_CASE("profiling is asked for before prepare, and there is none unless asked") {
  std::shared_ptr<const Model> m;
  REQUIRE(test::compile_lua(kModel, &m).ok());
  std::unique_ptr<Backend> be;
  REQUIRE(make_backend("cpu", &be).ok());
  Backend* raw = be.get();
  std::unique_ptr<Session> s;
  REQUIRE(Session::create(m, std::move(be), &s).ok());
  Status late = raw->request_profile();
  CHECK_FALSE(late.ok());
  CHECK(late.message().find("before prepare") != std::string::npos);
  REQUIRE(s->init(1, 10).ok());
  int train;
  REQUIRE(s->find_program("train_step", &train).ok());
  REQUIRE(s->run(train).ok());
  CHECK(raw->profile().empty());
}

TEST_CASE("cpu: op times fill the steps, products lead, fused adds read zero") {
  cpu::set_num_threads(1);
  Timed t;
  run_profiled("cpu", {}, &t);
  cpu::set_num_threads(0);
  double total = check_profile(t);
  CHECK(total >= 0.5 * t.wall);  // nothing but the ops runs between the clock reads
  const ProgramInfo& info = t.model->programs()[t.train];
  const std::vector<double>& s = t.session->backend().profile()[t.train].op_seconds;
  int folded = 0;
  for (size_t i = 0; i < info.ops.size(); ++i)
    if (info.ops[i].code == OpCode::Add && i > 0 && info.ops[i - 1].code == OpCode::BroadcastTo) {
      CHECK(s[i] == 0.0);  // the bias add runs inside the product (product_fusion.h)
      CHECK(s[i - 1] == 0.0);
      ++folded;
    }
  CHECK(folded == 1);
}

TEST_CASE("vulkan: op times from timestamps fit the steps, products lead") {
  if (!test::vulkan_device_present()) return;
  Timed t;
  // Large enough that a GPU's products outlast its dispatches (on the H200 at m 256,
  // k 512 they were 34% of the step), small enough for lavapipe in CI.
  run_profiled("vulkan", {{"m", "1024"}, {"k", "1024"}}, &t);
  check_profile(t);
}

TEST_CASE("cuda: op times from events fit the steps, products lead") {
  if (!test::cuda_device_present()) return;
  Timed t;
  run_profiled("cuda", {{"m", "4096"}, {"k", "4096"}}, &t);  // products long beside the launches
  check_profile(t);
}

namespace {

// The ops column of the first table row of the products by shape ending in `key`; -1: none.
int product_ops(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() < key.size() + 2 || line.compare(line.size() - key.size() - 2, std::string::npos, "  " + key)) continue;
    double ms = 0;
    int ops = -1;
    std::istringstream(line) >> ms >> ops;
    return ops;
  }
  return -1;
}

}  // namespace

TEST_CASE("sgrt train --profile prints each program's ops by kind and the slowest") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  test::TempFile corpus(".txt", text);
  test::ToolResult r = test::run_tool({"train", "models/gpt.lua", "--set", "n_layer=1", "--set", "n_embd=16", "--set",
                                       "n_head=2", "--set", "block=8", "--set", "batch=4", "--steps", "3", "--data",
                                       corpus.path, "--quiet", "--profile"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.err.find("profile of train_step on cpu: 2 runs after the first") != std::string::npos);
  CHECK(r.err.find("profile of eval on cpu") != std::string::npos);
  CHECK(r.err.find("by op:") != std::string::npos);
  CHECK(r.err.find("slowest ops:") != std::string::npos);
  CHECK(r.err.find(" attention_grad ") != std::string::npos);
  CHECK(r.err.find("models/gpt.lua:") != std::string::npos);
  // One block of 16 wide: q, k, v and the projection are 16x16 products over
  // 4 x 8 rows, forward (x W), input gradient (dy W^T) and weight gradient
  // (x^T dy); the head is tied (x wte^T, 256 tokens). All 12 shapes are listed,
  // and their ops add up to the 21 matmuls of the by-op table.
  CHECK(r.err.find("products by shape (M x N x K; 12 of 12 shapes):") != std::string::npos);
  CHECK(product_ops(r.err, "matmul 32x16x16") == 4);
  CHECK(product_ops(r.err, "matmul 32x16x16 b^T") == 4);
  CHECK(product_ops(r.err, "matmul 16x16x32 a^T") == 4);
  CHECK(product_ops(r.err, "matmul 32x256x16 b^T") == 1);
  CHECK(r.err.find("%    21  matmul\n") != std::string::npos);
  CHECK(r.out.find("test loss") != std::string::npos);

  r = test::run_tool({"train", "models/gpt.lua", "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2", "--set",
                      "block=8", "--set", "batch=4", "--steps", "1", "--data", corpus.path, "--quiet", "--profile"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.err.find("profile of train_step on cpu: it ran once, and the first run is left out") != std::string::npos);
}
