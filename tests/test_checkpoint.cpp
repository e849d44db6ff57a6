// Checkpoints continue a run exactly, and survive being killed mid-write.
//  - `sgrt train --stop-after k` then `--resume` gives the same --log lines, bit
//    for bit (every field but the wall-clock samples_per_s), as one
//    uninterrupted run: FP32, under fp8-delayed (whose amax histories must come
//    back) and at state level O2; stopping mid-epoch and at an epoch's end.
//    Batches of 6000 make an epoch 10 steps, so a short run crosses epochs.
//  - A recipe switch (`--final-recipe R --final-steps N`, take_run_state) to the
//    run's own recipe gives the same log, bit for bit, as one run (FP32, fp8 at
//    O2); nvfp4-train -> fp32 logs nvfp4-train's own first steps and then
//    steps with no quantized tensors; a mismatched model is refused, nothing
//    written.
//  - A child process saving a large checkpoint over and over is SIGKILLed at
//    random moments; the checkpoint then loads and is one complete version.
#include <signal.h>
#include <sys/stat.h>

#include <random>
#include <regex>
#include <sstream>

#include "harness.h"
#include "sgrt/checkpoint.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

const std::string kMlp = SGRT_SOURCE_DIR "/models/fashion_mlp.lua";
constexpr int kSteps = 30;

std::vector<std::string> train_args(const std::string& log, const std::vector<std::string>& extra) {
  std::vector<std::string> a{"train", kMlp, "--set", "hidden=16", "--set", "batch=6000", "--steps", std::to_string(kSteps),
                             "--log-every", "1", "--quiet", "--log", log};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The log's lines without the one field that measures time.
std::vector<std::string> log_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(test::slurp(path));
  static const std::regex speed(",\"samples_per_s\":[^,}]*");
  for (std::string l; std::getline(in, l);) lines.push_back(std::regex_replace(l, speed, ""));
  return lines;
}

void check_resume_is_exact(const std::vector<std::string>& extra, int stop) {
  test::TempDir dir;
  std::string full = dir.path + "/full.jsonl", part = dir.path + "/part.jsonl", ck = dir.path + "/ck";
  test::ToolResult r = test::run_tool(train_args(full, extra));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::vector<std::string> first = train_args(part, extra);
  first.insert(first.end(), {"--checkpoint", ck, "--stop-after", std::to_string(stop)});
  r = test::run_tool(first);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::vector<std::string> interrupted = log_lines(part);
  CHECK(interrupted.size() >= static_cast<size_t>(stop));  // steps 1..stop (and evals)
  CHECK(interrupted.back().find("\"step\":" + std::to_string(stop)) != std::string::npos);
  std::vector<std::string> second = train_args(part, extra);
  second.insert(second.end(), {"--checkpoint", ck, "--resume"});
  r = test::run_tool(second);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::vector<std::string> a = log_lines(full), b = log_lines(part);
  REQUIRE(a.size() == static_cast<size_t>(kSteps + kSteps / 10));  // a line per step, an eval per epoch
  CHECK(a.size() == b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    CAPTURE(i);
    CHECK(a[i] == b[i]);
  }
}

}  // namespace

TEST_CASE("a run stopped and resumed logs the same curve as an uninterrupted one, bit for bit") {
  SUBCASE("fp32, stopped mid-epoch") { check_resume_is_exact({}, 13); }
  SUBCASE("fp32, stopped at an epoch's end") { check_resume_is_exact({}, 20); }
  SUBCASE("fp8-delayed: amax histories restored") { check_resume_is_exact({"--recipe", "fp8-delayed"}, 17); }
  SUBCASE("state level O2 under fp8") { check_resume_is_exact({"--opt-level", "O2", "--recipe", "fp8"}, 11); }
}

TEST_CASE("resuming with another --steps than the run was planned for is refused") {
  test::TempDir dir;
  std::string ck = dir.path + "/ck";
  std::vector<std::string> args = train_args(dir.path + "/log", {"--checkpoint", ck, "--stop-after", "3"});
  REQUIRE(test::run_tool(args).code == 0);
  std::string before = test::slurp(ck + "/checkpoint.sgck");
  args = train_args(dir.path + "/log", {"--checkpoint", ck, "--resume"});
  args[7] = std::to_string(kSteps + 10);  // --steps
  test::ToolResult r = test::run_tool(args);
  CHECK(r.code == 2);
  CHECK(r.err.find("planned for 30 steps") != std::string::npos);
  CHECK(test::slurp(ck + "/checkpoint.sgck") == before);
}

TEST_CASE("a switch to the same recipe logs the same curve as one run, bit for bit") {
  for (std::vector<std::string> recipe : {std::vector<std::string>{"--recipe", "fp32"},
                                          std::vector<std::string>{"--recipe", "fp8", "--opt-level", "O2"}}) {
    CAPTURE(recipe[1]);
    test::TempDir dir;
    std::string one = dir.path + "/one.jsonl", two = dir.path + "/two.jsonl";
    test::ToolResult r = test::run_tool(train_args(one, recipe));
    REQUIRE_MESSAGE(r.code == 0, r.err);
    std::vector<std::string> switched = recipe;
    switched.insert(switched.end(), {"--final-recipe", recipe[1], "--final-steps", "13"});
    r = test::run_tool(train_args(two, switched));
    REQUIRE_MESSAGE(r.code == 0, r.err);
    std::vector<std::string> a = log_lines(one), b = log_lines(two);
    REQUIRE(a.size() == static_cast<size_t>(kSteps + kSteps / 10));
    CHECK(a == b);
  }
}

TEST_CASE("nvfp4-train then fp32: nvfp4-train's first steps, then steps that quantize nothing") {
  constexpr int kFinal = 8;
  test::TempDir dir;
  std::string plain = dir.path + "/plain.jsonl", switched = dir.path + "/switched.jsonl";
  test::ToolResult r = test::run_tool(train_args(plain, {"--recipe", "nvfp4-train"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  r = test::run_tool(train_args(switched, {"--recipe", "nvfp4-train", "--final-recipe", "fp32", "--final-steps",
                                           std::to_string(kFinal)}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::vector<std::string> a = log_lines(plain), b = log_lines(switched);
  REQUIRE(a.size() == b.size());
  size_t steps = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    CAPTURE(b[i]);
    if (b[i].find("\"event\"") != std::string::npos) continue;  // evaluations
    bool first_part = ++steps <= static_cast<size_t>(kSteps - kFinal);
    CHECK((b[i].find("flushed_share") != std::string::npos) == first_part);
    if (first_part) CHECK(a[i] == b[i]);
  }
  CHECK(steps == static_cast<size_t>(kSteps));
  CHECK(a.back() != b.back());  // the final evaluations: fp32 weights' last steps differ
}

TEST_CASE("take_run_state refuses a model whose tensors differ and writes nothing") {
  auto model = [](const char* second) {
    std::shared_ptr<const Model> m;
    Status st = test::compile_lua(std::string(R"(
local sg = require "sg"
local x = sg.input("x", {2, 4})
local a = sg.param("a", {4, 4})
local b = sg.param("b", {4, )") + second + R"(})
sg.loss(sg.mean(sg.mean(sg.matmul(sg.matmul(x, a), b))))
sg.optimizer.adamw{ lr = 1e-3 }
)", &m);
    REQUIRE_MESSAGE(st.ok(), st.message());
    return m;
  };
  auto from = test::open_session(model("3")), to = test::open_session(model("5"));
  int a_to = test::tensor_id(*to, "a");
  std::vector<float> before(16), after(16), source(16);
  for (int i = 0; i < 16; ++i) source[i] = 100.0f + static_cast<float>(i);  // a copy of it would show
  REQUIRE(from->write(test::tensor_id(*from, "a"), source.data(), 64).ok());
  REQUIRE(to->read(a_to, before.data(), 64).ok());
  Status st = take_run_state(*from, *to);
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message().find("tensor 'b' is f32[4, 5]") != std::string::npos);
  CHECK(st.message().find("f32[4, 3]") != std::string::npos);
  REQUIRE(to->read(a_to, after.data(), 64).ok());
  CHECK(after == before);
}

TEST_CASE("a process killed while writing a checkpoint leaves the previous one loadable") {
  // 1024 x 1024 weights with AdamW state: a 12 MiB file per save.
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
local sg = require "sg"
local x = sg.input("x", {2, 1024})
local w = sg.param("w", {1024, 1024})
sg.loss(sg.mean(sg.mean(sg.matmul(x, w))))
sg.optimizer.adamw{ lr = 1e-3 }
)", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  test::TempDir dir;
  std::string ck = dir.path + "/ck";
  auto session = test::open_session(m);
  int w = test::tensor_id(*session, "w"), mom = test::tensor_id(*session, "w.adam_m");
  std::vector<float> fill(1024 * 1024);
  // Version k: every element of w and of m is k, and the saved step is k.
  auto save = [&](int64_t k) {
    std::fill(fill.begin(), fill.end(), static_cast<float>(k));
    if (!session->write(w, fill.data(), fill.size() * 4).ok() || !session->write(mom, fill.data(), fill.size() * 4).ok())
      return false;
    return save_checkpoint(*session, ck, k).ok();
  };
  REQUIRE(save(1));
  std::mt19937 rng(12345);
  int64_t version = 1;
  for (int round = 0; round < 8; ++round) {
    int64_t first = version + 1;
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // no kernels run here: the session's thread pool is not needed
      for (int64_t k = first;; ++k)
        if (!save(k)) _exit(3);
    }
    usleep(std::uniform_int_distribution<int>(2000, 150000)(rng));
    REQUIRE(kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));
    auto check = test::open_session(m, "cpu", 7);
    int64_t step = -1;
    Status loaded = load_checkpoint(*check, ck, &step);
    REQUIRE_MESSAGE(loaded.ok(), loaded.message());
    CHECK(step >= version);  // this round's saves, or the last complete one before them
    std::vector<float> got_w = test::read_f32(*check, "w"), got_m = test::read_f32(*check, "w.adam_m");
    bool whole = true;
    for (size_t i = 0; i < got_w.size(); ++i) whole = whole && got_w[i] == step && got_m[i] == step;
    CHECK_MESSAGE(whole, "round " << round << ": checkpoint of step " << step << " mixes versions");
    version = std::max(version, step);
    std::remove((ck + "/checkpoint.sgck.tmp." + std::to_string(pid)).c_str());  // a killed writer's temporary
  }
}

namespace {

// Eight 4 MiB weights trained by AdamW (so a checkpoint holds state an
// inference-only compilation does not keep); infer_only: without its step.
std::shared_ptr<const Model> weights_model(int count, bool infer_only) {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
local sg = require "sg"
local x = sg.input("x", {2, 1024})
local y = x
for i = 0, sg.config{ count = 8 }.count - 1 do
  y = sg.matmul(y, sg.param("w" .. i, {1024, 1024}, {"normal", 0, 0.02}), {trans_b = true})
end
sg.output("y", y)
sg.loss(sg.sum(sg.reshape(y, {2 * 1024})))
sg.optimizer.adamw{ lr = 0.1 }
)", &m, {{"count", std::to_string(count)}}, infer_only);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}

std::shared_ptr<const Model> eight_weights(bool infer_only) { return weights_model(8, infer_only); }

}  // namespace

TEST_CASE("a checkpoint is written and read a tensor at a time, never whole in memory beside the session") {
  auto s = test::open_session(eight_weights(false), "cpu", 3);
  test::TempDir dir;
  const int64_t weights_kib = 8 * 4096;  // the file: weights, and AdamW's two moments as much again each
#if defined(__SANITIZE_ADDRESS__)
  const bool peak_known = false;  // ASan keeps freed memory in quarantine, resident
#else
  const bool peak_known = test::reset_peak_rss();
#endif
  int64_t at_start = test::rss_kib();
  Status st = save_checkpoint(*s, dir.path, 1);
  REQUIRE_MESSAGE(st.ok(), st.message());
  // One tensor's buffer (4 MiB) where a whole file (96 MiB) was assembled before.
  if (peak_known) CHECK(test::peak_rss_kib() - at_start < weights_kib / 2);
  auto back = test::open_session(eight_weights(false), "cpu", 4);
  CHECK(test::read_f32(*back, "w5") != test::read_f32(*s, "w5"));
  at_start = test::rss_kib();
  if (peak_known) REQUIRE(test::reset_peak_rss());
  int64_t step = 0;
  st = load_checkpoint(*back, dir.path, &step);
  REQUIRE_MESSAGE(st.ok(), st.message());
  // The mapped file's pages dropped as the checksum and each tensor pass them.
  if (peak_known) CHECK(test::peak_rss_kib() - at_start < weights_kib / 2);
  else MESSAGE("under ASan, or /proc/self/clear_refs not writable: the peaks are not checked");
  CHECK(test::rss_kib() - at_start < weights_kib / 4);
  for (int i = 0; i < 8; ++i) CHECK(test::read_f32(*back, "w" + std::to_string(i)) == test::read_f32(*s, "w" + std::to_string(i)));
}

TEST_CASE("an inference-only session takes the training checkpoint's weights through the model it was trained as") {
  auto trained = eight_weights(false);
  auto s = test::open_session(trained, "cpu", 3);
  test::TempDir dir;
  REQUIRE(save_checkpoint(*s, dir.path, 2).ok());
  auto infer = test::open_session(eight_weights(true), "cpu", 4);
  CheckpointMeta meta;
  // Checked against itself, it is another model: no moments, no train state.
  Status st = load_checkpoint(*infer, dir.path, &meta);
  CHECK(st.message().find("checkpoint belongs to another model") != std::string::npos);
  st = load_checkpoint(*infer, dir.path, *trained, &meta);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(meta.step == 2);
  for (int i = 0; i < 8; ++i) CHECK(test::read_f32(*infer, "w" + std::to_string(i)) == test::read_f32(*s, "w" + std::to_string(i)));
  // Another model named as the trained one is refused before anything is written.
  auto fresh = test::open_session(eight_weights(true), "cpu", 4);
  const std::vector<float> before = test::read_f32(*fresh, "w0");
  st = load_checkpoint(*fresh, dir.path, *weights_model(7, false), &meta);
  CHECK(st.message().find("checkpoint belongs to another model") != std::string::npos);
  // A session keeping a tensor that the checkpoint's model has not (w8): named.
  st = load_checkpoint(*test::open_session(weights_model(9, true), "cpu", 4), dir.path, *trained, &meta);
  CHECK_MESSAGE(st.message().find("holds no tensor 'w8'") != std::string::npos, st.message());
  CHECK(test::read_f32(*fresh, "w0") == before);
}
